"""The login state machine (pure transitions) and the request-time AuthSession."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from markupsafe import Markup

from flask_authflow._core.session import (
    CUSTOM_DATA_LIMIT,
    AuthSession,
    AuthState,
    InvalidTransition,
    SessionRecord,
    begin_flow,
    clear_flow,
    complete_login,
    custom_serializer,
    fail_login,
    new_guest_record,
    pass_factor,
    reset_to_guest,
    start_login,
    step_up,
)
from flask_authflow.errors import SessionDataTooLarge
from flask_authflow.sessions._stores import deserialize_record, serialize_record

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)


def guest() -> SessionRecord:
    return new_guest_record(T0, sid="guest-sid")


def authenticating(*factors: str) -> SessionRecord:
    return start_login(guest(), tenant="acme", user_id="alice", factors=factors or ("password",), now=T0)


def authenticated() -> SessionRecord:
    return pass_factor(authenticating("password"), "password", now=T1)


# --- pure transitions, one by one -----------------------------------------------------------------


def test_new_guest_record() -> None:
    record = new_guest_record(T0)
    assert record.state is AuthState.GUEST
    assert record.user_id is None and record.tenant is None
    assert record.created_at == record.last_seen_at == T0
    assert len(record.sid) == 43
    assert new_guest_record(T0).sid != record.sid


def test_start_login_from_guest() -> None:
    record = start_login(guest(), tenant="acme", user_id="alice", factors=["password", "totp"], now=T1)
    assert record.state is AuthState.AUTHENTICATING
    assert (record.tenant, record.user_id) == ("acme", "alice")
    assert record.factors_pending == ("password", "totp")
    assert record.factors_passed == ()
    assert record.next_factor == "password"
    assert record.login_started_at == T1
    assert record.authenticated_at is None


def test_start_login_restarts_a_login_in_progress() -> None:
    first = pass_factor(authenticating("password", "totp"), "password", now=T1)
    again = start_login(first, tenant="acme", user_id="bob", factors=["password"], now=T1)
    assert again.user_id == "bob"
    assert again.factors_passed == ()
    assert again.factors_pending == ("password",)


def test_start_login_needs_a_factor() -> None:
    with pytest.raises(InvalidTransition):
        start_login(guest(), tenant="acme", user_id="alice", factors=[], now=T0)


@pytest.mark.parametrize(
    "source",
    [
        authenticated,
        lambda: complete_login(
            guest(), tenant="a", user_id="u", method="oidc", now=T0, pending_workflow=True
        ),
    ],
)
def test_start_login_refused_when_logged_in(source: object) -> None:
    assert callable(source)
    with pytest.raises(InvalidTransition):
        start_login(source(), tenant="acme", user_id="mallory", factors=["password"], now=T1)


def test_pass_factor_advances_in_order() -> None:
    record = authenticating("password", "totp")
    record = pass_factor(record, "password", now=T1)
    assert record.state is AuthState.AUTHENTICATING
    assert record.factors_pending == ("totp",)
    assert record.factors_passed == ("password",)
    record = pass_factor(record, "totp", now=T1)
    assert record.state is AuthState.AUTHENTICATED
    assert record.factors_pending == ()
    assert record.factors_passed == ("password", "totp")
    assert record.authenticated_at == T1


def test_pass_factor_out_of_order_refused() -> None:
    with pytest.raises(InvalidTransition):
        pass_factor(authenticating("password", "totp"), "totp", now=T1)


def test_pass_factor_unknown_factor_refused() -> None:
    with pytest.raises(InvalidTransition):
        pass_factor(authenticating("password"), "webauthn", now=T1)


def test_pass_factor_from_guest_refused() -> None:
    with pytest.raises(InvalidTransition):
        pass_factor(guest(), "password", now=T1)


def test_pass_factor_on_authenticated_without_step_up_refused() -> None:
    with pytest.raises(InvalidTransition):
        pass_factor(authenticated(), "password", now=T1)


def test_pass_factor_completes_requested_step_up() -> None:
    record = begin_flow(authenticated(), {"step_up": "totp"})
    later = T1 + timedelta(hours=1)
    record = pass_factor(record, "totp", now=later)
    assert record.state is AuthState.AUTHENTICATED
    assert record.authenticated_at == later
    assert record.flow is None
    assert record.factors_passed[-1] == "totp"


def test_fail_login_returns_to_guest_keeping_custom_data_and_binding() -> None:
    start = replace(guest(), custom={"lang": "fr"}, fingerprint="fp")
    record = start_login(start, tenant="acme", user_id="alice", factors=["password"], now=T1)
    failed = fail_login(record, now=T1)
    assert failed.state is AuthState.GUEST
    assert failed.user_id is None and failed.tenant is None
    assert failed.factors_pending == ()
    assert failed.custom == {"lang": "fr"}
    assert failed.fingerprint == "fp"
    assert failed.created_at == T0


def test_fail_login_leaves_an_authenticated_session_alone() -> None:
    record = authenticated()
    assert fail_login(record, now=T1) is record


def test_complete_login() -> None:
    record = complete_login(guest(), tenant="acme", user_id="alice", method="oidc:google", now=T1)
    assert record.state is AuthState.AUTHENTICATED
    assert record.factors_passed == ("oidc:google",)
    assert record.auth_method == "oidc:google"
    assert record.authenticated_at == T1


def test_complete_login_pending_workflow() -> None:
    record = complete_login(
        begin_flow(guest(), {"state": "s"}),
        tenant="a",
        user_id="u",
        method="oidc",
        now=T1,
        pending_workflow=True,
    )
    assert record.state is AuthState.PENDING_WORKFLOW
    assert record.flow is None


def test_complete_login_refused_when_authenticated() -> None:
    with pytest.raises(InvalidTransition):
        complete_login(authenticated(), tenant="acme", user_id="mallory", method="oidc", now=T1)


def test_begin_and_clear_flow() -> None:
    flow = {"verifier": "v", "state": "s", "nonce": "n"}
    record = begin_flow(guest(), flow)
    assert record.flow == flow
    flow["state"] = "changed"  # the record keeps its own copy
    assert record.flow["state"] == "s"
    assert clear_flow(record).flow is None


def test_step_up() -> None:
    later = T1 + timedelta(minutes=30)
    record = step_up(authenticated(), "totp", now=later)
    assert record.authenticated_at == later
    assert record.factors_passed == ("password", "totp")


@pytest.mark.parametrize("source", [guest, authenticating])
def test_step_up_needs_authenticated(source: object) -> None:
    assert callable(source)
    with pytest.raises(InvalidTransition):
        step_up(source(), "totp", now=T1)


@pytest.mark.parametrize("source", [guest, authenticating, authenticated])
def test_reset_to_guest_drops_everything(source: object) -> None:
    assert callable(source)
    record = replace(source(), custom={"cart": [1]}, flow={"x": "y"}, fingerprint="fp")
    reset = reset_to_guest(record, now=T1)
    assert reset.state is AuthState.GUEST
    assert reset.user_id is None and reset.custom == {} and reset.flow is None and reset.fingerprint is None
    assert reset.created_at == T1


# --- the invariant ----------------------------------------------------------------------------------


def test_authenticated_record_with_pending_factor_cannot_exist() -> None:
    with pytest.raises(InvalidTransition):
        SessionRecord(
            sid="x",
            state=AuthState.AUTHENTICATED,
            created_at=T0,
            last_seen_at=T0,
            tenant="acme",
            user_id="alice",
            factors_pending=("totp",),
        )


def test_replace_cannot_sneak_a_pending_factor_into_authenticated() -> None:
    with pytest.raises(InvalidTransition):
        replace(authenticated(), factors_pending=("totp",))
    with pytest.raises(InvalidTransition):
        replace(authenticating("password", "totp"), state=AuthState.AUTHENTICATED)


def test_other_record_invariants() -> None:
    with pytest.raises(InvalidTransition):
        replace(guest(), user_id="alice")
    with pytest.raises(InvalidTransition):
        replace(guest(), factors_pending=("password",))
    with pytest.raises(InvalidTransition):
        replace(authenticated(), user_id=None)
    with pytest.raises(InvalidTransition):
        replace(authenticating(), factors_pending=())


def test_is_authenticated_false_until_the_last_factor() -> None:
    session = AuthSession(guest(), new=True)
    session.transition(
        lambda r: start_login(
            r, tenant="acme", user_id="alice", factors=["password", "totp", "webauthn"], now=T0
        )
    )
    for factor in ("password", "totp"):
        assert not session.is_authenticated
        session.transition(lambda r, f=factor: pass_factor(r, f, now=T1))  # type: ignore[misc]
        assert not session.is_authenticated
        assert session.is_authenticating
    with pytest.raises(InvalidTransition):
        session.transition(lambda r: pass_factor(r, "password", now=T1))
    assert not session.is_authenticated
    session.transition(lambda r: pass_factor(r, "webauthn", now=T1))
    assert session.is_authenticated


def test_a_refused_transition_leaves_the_session_unchanged() -> None:
    session = AuthSession(authenticating("password", "totp"), new=False)
    sid = session.sid
    with pytest.raises(InvalidTransition):
        session.transition(lambda r: pass_factor(r, "totp", now=T1))
    assert session.sid == sid
    assert session.dead_sids == []
    assert not session.modified
    assert session.next_factor == "password"


# --- AuthSession: id rotation ---------------------------------------------------------------------


def test_every_state_change_rotates_the_id() -> None:
    session = AuthSession(guest(), new=True, request_fingerprint="fp")
    seen = [session.sid]

    def apply(change: object) -> None:
        assert callable(change)
        session.transition(change)
        assert session.sid not in seen
        assert session.dead_sids[-1] == seen[-1]
        seen.append(session.sid)

    apply(lambda r: start_login(r, tenant="acme", user_id="alice", factors=["password", "totp"], now=T0))
    apply(lambda r: pass_factor(r, "password", now=T1))
    apply(lambda r: pass_factor(r, "totp", now=T1))
    apply(lambda r: step_up(r, "totp", now=T1 + timedelta(minutes=5)))
    apply(lambda r: reset_to_guest(r, now=T1))
    apply(lambda r: complete_login(r, tenant="acme", user_id="alice", method="oidc", now=T1))
    assert session.dead_sids == seen[:-1]
    assert session.modified


def test_failed_login_rotates_the_id() -> None:
    session = AuthSession(authenticating(), new=False)
    before = session.sid
    session.transition(lambda r: fail_login(r, now=T1))
    assert session.is_guest
    assert session.sid != before
    assert session.dead_sids == [before]


def test_flow_changes_do_not_rotate_the_id() -> None:
    session = AuthSession(guest(), new=True)
    before = session.sid
    session.transition(lambda r: begin_flow(r, {"state": "s"}))
    session.transition(clear_flow)
    assert session.sid == before
    assert session.dead_sids == []
    assert session.modified


def test_clear_rotates_the_id_from_any_state() -> None:
    for record in (guest(), authenticating(), authenticated()):
        session = AuthSession(record, new=False)
        session["k"] = "v"
        before = session.sid
        session.clear()
        assert session.sid != before
        assert before in session.dead_sids
        assert session.is_guest
        assert dict(session) == {}
        assert session.modified


def test_clear_on_a_guest_with_data_still_rotates() -> None:
    session = AuthSession(replace(guest(), custom={"cart": [1, 2]}), new=False)
    session.clear()
    assert session.sid != "guest-sid"
    assert session.dead_sids == ["guest-sid"]


def test_fingerprint_bound_at_first_move_out_of_guest() -> None:
    session = AuthSession(guest(), new=True, request_fingerprint="fp-1")
    assert session.record.fingerprint is None
    session.transition(lambda r: start_login(r, tenant="acme", user_id="alice", factors=["password"], now=T0))
    assert session.record.fingerprint == "fp-1"
    session.request_fingerprint = "fp-2"  # later moves do not rebind
    session.transition(lambda r: pass_factor(r, "password", now=T1))
    assert session.record.fingerprint == "fp-1"


def test_transitions_keep_custom_data() -> None:
    session = AuthSession(guest(), new=True)
    session["lang"] = "fr"
    session.transition(lambda r: start_login(r, tenant="acme", user_id="alice", factors=["password"], now=T0))
    session.transition(lambda r: pass_factor(r, "password", now=T1))
    assert session["lang"] == "fr"
    assert session.record.custom == {"lang": "fr"}


# --- AuthSession: custom data --------------------------------------------------------------------


def test_reading_does_not_mark_modified() -> None:
    session = AuthSession(replace(authenticated(), custom={"a": 1}), new=False)
    assert session["a"] == 1
    assert session.get("b") is None
    assert session.is_authenticated
    assert not session.modified


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.__setitem__("k", 1),
        lambda s: s.update(k=1),
        lambda s: s.setdefault("k", 1),
        lambda s: s.pop("a"),
        lambda s: s.__delitem__("a"),
    ],
)
def test_mutation_marks_modified(mutate: object) -> None:
    session = AuthSession(replace(guest(), custom={"a": 1}), new=False)
    assert callable(mutate)
    mutate(session)
    assert session.modified


def big(n: int) -> str:
    return "x" * n


def test_custom_data_limit_on_setitem() -> None:
    session = AuthSession(guest(), new=True)
    session["fits"] = big(CUSTOM_DATA_LIMIT - 100)
    with pytest.raises(SessionDataTooLarge) as info:
        session["more"] = big(200)
    assert info.value.limit == CUSTOM_DATA_LIMIT
    assert info.value.size > CUSTOM_DATA_LIMIT
    assert "more" not in session


def test_custom_data_limit_on_update_and_setdefault() -> None:
    session = AuthSession(guest(), new=True)
    with pytest.raises(SessionDataTooLarge):
        session.update({"a": big(CUSTOM_DATA_LIMIT)})
    with pytest.raises(SessionDataTooLarge):
        session.update(a=big(CUSTOM_DATA_LIMIT // 2), b=big(CUSTOM_DATA_LIMIT // 2))
    with pytest.raises(SessionDataTooLarge):
        session.setdefault("a", big(CUSTOM_DATA_LIMIT + 1))
    assert dict(session) == {}
    assert not session.modified


def test_custom_data_limit_exact_boundary() -> None:
    session = AuthSession(guest(), new=True)
    overhead = len(custom_serializer.dumps({"k": ""}))
    session["k"] = big(CUSTOM_DATA_LIMIT - overhead)  # exactly the limit
    with pytest.raises(SessionDataTooLarge):
        session["k"] = big(CUSTOM_DATA_LIMIT - overhead + 1)


def test_custom_limit_is_configurable() -> None:
    session = AuthSession(guest(), new=True, custom_limit=100)
    with pytest.raises(SessionDataTooLarge):
        session["k"] = big(100)


def test_check_size_catches_nested_growth() -> None:
    session = AuthSession(guest(), new=True)
    session["list"] = []
    session.check_size()
    session["list"].append(big(CUSTOM_DATA_LIMIT))
    with pytest.raises(SessionDataTooLarge):
        session.check_size()


def test_flash_style_values_round_trip() -> None:
    custom = {
        "_flashes": [("message", "Saved"), ("error", Markup("<b>bad</b>"))],
        "tuple": (1, "two"),
        "bytes": b"\x00\xff",
        "when": T0,
        "nested": {"a": [1, {"b": (2, 3)}]},
    }
    assert custom_serializer.loads(custom_serializer.dumps(custom)) == custom
    record = replace(authenticated(), custom=custom, fingerprint="fp", flow={"nonce": "n", "t": (1, 2)})
    back = deserialize_record(serialize_record(record))
    assert back == record
    assert isinstance(back.custom["_flashes"][0], tuple)
    assert isinstance(back.custom["_flashes"][1][1], Markup)


def test_repr_shows_no_values() -> None:
    session = AuthSession(replace(authenticated(), custom={"token": "s3cret-value"}), new=False)
    text = repr(session)
    assert "s3cret-value" not in text
    assert session.sid not in text
    assert "authenticated" in text
