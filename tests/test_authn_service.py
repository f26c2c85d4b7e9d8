"""The login service on the in-memory backend: flows, equal answers, lockout, audit, fail closed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._clock import MockClock
from flask_authflow._core.factors import Accepted, FactorContext, Rejected
from flask_authflow._core.ports import AttemptKey
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
    StepUpRequired,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord, MemoryAuditSink
from flask_authflow.errors import (
    AuditWriteError,
    ConfigurationError,
    InvalidInput,
    LoginNotStarted,
    PasswordTooLong,
    StoreUnavailable,
)
from flask_authflow.login._service import PHANTOM_PREFIX, AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, fast_hasher, memory_service, new_session
from tests.store_contract import WINDOW

PW = FactorCredential.password


@pytest.fixture
def env() -> tuple[AuthnService, InMemoryBackend, MockClock]:
    return memory_service()


def login(service: AuthnService, session: AuthSession, who: str, tenant: str, password: str) -> Any:
    handle = service.with_audit_context(CTX)
    first = handle.begin_login(who, tenant, session)
    if not isinstance(first, FactorRequired):
        return first
    return handle.verify_factor(PW(password), session)


def state_of(session: AuthSession) -> tuple[Any, ...]:
    return (session.record, list(session.dead_sids), dict(session), session.modified)


# --- the happy path -------------------------------------------------------------------------


def test_password_login(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    guest_sid = session.sid

    assert handle.begin_login("alice", "acme", session) == FactorRequired(FactorKind.PASSWORD)
    assert session.state is AuthState.AUTHENTICATING and not session.is_authenticated
    authenticating_sid = session.sid
    assert authenticating_sid != guest_sid and guest_sid in session.dead_sids

    user = backend.find_user("acme", "alice")
    assert user is not None
    outcome = handle.verify_factor(PW("correct horse"), session)
    assert outcome == Authenticated(user.user_id, "acme")
    assert session.is_authenticated and session.user_id == user.user_id and session.tenant == "acme"
    assert session.sid != authenticating_sid
    assert session.flow is None
    assert session.record.fingerprint == "fp"
    assert [(r.event, r.status) for r in backend.audit_rows] == [
        ("login_begin", "started"),
        ("factor_verify", "success"),
    ]


def test_identifier_is_normalised(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, _, clock = env
    assert isinstance(login(service, new_session(clock), "  ALICE ", "acme", "correct horse"), Authenticated)
    assert isinstance(
        login(service, new_session(clock), "\uff21lice", "acme", "correct horse"), Authenticated
    )


def test_logout(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    session["cart"] = 3
    sid = session.sid
    service.with_audit_context(CTX).logout(session)
    assert session.is_guest and session.user_id is None and dict(session) == {}
    assert session.sid != sid and sid in session.dead_sids
    row = backend.audit_rows[-1]
    assert (row.event, row.status, row.tenant) == ("logout", "success", "acme")
    assert row.user_id == backend.find_user("acme", "alice").user_id  # type: ignore[union-attr]


def test_begin_login_on_authenticated_session_logs_out_first(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    alice_sid = session.sid
    revoked: list[dict[str, Any]] = []

    def on_revoked(sender: Any, **kw: Any) -> None:
        revoked.append(kw)

    with signals.session_revoked.connected_to(on_revoked):
        outcome = service.with_audit_context(CTX).begin_login("bob", "globex", session)
    assert outcome == FactorRequired(FactorKind.PASSWORD)
    assert session.is_authenticating and session.tenant == "globex"
    assert alice_sid in session.dead_sids
    assert [(r.event, r.reason) for r in backend.audit_rows[-2:]] == [
        ("logout", "new_login"),
        ("login_begin", None),
    ]
    assert revoked and revoked[0]["reason"] == "new_login"
    assert isinstance(service.with_audit_context(CTX).verify_factor(PW("hunter2"), session), Authenticated)


# --- no account oracle ----------------------------------------------------------------------


SCENARIOS = {
    "wrong password": ("alice", "acme", "not it"),
    "unknown user": ("mallory", "acme", "correct horse"),
    "wrong tenant": ("alice", "globex", "correct horse"),
    "disabled user": ("carol", "acme", "carol-pw"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_failures_look_identical(scenario: str, env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    add_user(backend, "acme", "carol", "carol-pw")
    backend.set_disabled("acme", "carol")
    who, tenant, password = SCENARIOS[scenario]
    handle = service.with_audit_context(CTX)
    session = new_session(clock)

    first = handle.begin_login(who, tenant, session)
    assert first == FactorRequired(FactorKind.PASSWORD)
    assert session.state is AuthState.AUTHENTICATING
    second = handle.verify_factor(PW(password), session)
    assert second == InvalidCredential()
    assert session.is_guest and session.user_id is None
    rows = backend.audit_rows
    assert [(r.event, r.status, r.factor) for r in rows] == [
        ("login_begin", "started", "password"),
        ("factor_verify", "failure", "password"),
    ]
    for row in rows:
        assert row.user_id is None or not row.user_id.startswith(PHANTOM_PREFIX)
    if scenario in ("unknown user", "wrong tenant"):
        assert all(r.user_id is None for r in rows)


def test_phantom_never_authenticates_and_costs_one_verify(
    env: tuple[AuthnService, InMemoryBackend, MockClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    service, _, clock = env
    calls: list[str] = []
    hasher = service.hasher
    real_verify, real_dummy = hasher.verify, hasher.dummy_verify
    monkeypatch.setattr(hasher, "verify", lambda h, p: calls.append("verify") or real_verify(h, p))
    monkeypatch.setattr(hasher, "dummy_verify", lambda p: calls.append("dummy") or real_dummy(p))

    assert login(service, new_session(clock), "alice", "acme", "wrong") == InvalidCredential()
    assert calls == ["verify"]
    calls.clear()
    # Even the real user's own password does not open a phantom login in another tenant.
    assert login(service, new_session(clock), "alice", "globex", "correct horse") == InvalidCredential()
    assert calls == ["dummy"]


def test_phantom_ids_do_not_collide_with_real_ones(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    service.with_audit_context(CTX).begin_login("mallory", "acme", session)
    assert session.user_id is not None and session.user_id.startswith(PHANTOM_PREFIX)
    assert all(":" not in u.user_id for u in backend.list_users())
    assert service.phantom_user_id("acme", "mallory") == session.user_id
    assert service.phantom_user_id("globex", "mallory") != session.user_id


# --- lockout --------------------------------------------------------------------------------


def fail_times(service: AuthnService, clock: MockClock, who: str, tenant: str, n: int) -> list[Any]:
    return [login(service, new_session(clock), who, tenant, "bad guess") for _ in range(n)]


def test_lockout_after_five_failures_and_unlock_after_15_minutes(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    start = clock.now()
    outcomes = fail_times(service, clock, "alice", "acme", 5)
    until = start + timedelta(minutes=15)
    assert outcomes == [InvalidCredential()] * 4 + [Locked(until)]
    assert backend.audit_rows[-1].status == "locked"
    assert service.counters.snapshot()["lockouts"] == 1

    # While locked, even the right password gets Locked, from begin_login...
    session = new_session(clock)
    assert service.with_audit_context(CTX).begin_login("alice", "acme", session) == Locked(until)
    assert session.is_guest
    clock.advance(timedelta(minutes=14, seconds=59))
    assert login(service, new_session(clock), "alice", "acme", "correct horse") == Locked(until)

    clock.advance(timedelta(seconds=1))
    assert isinstance(login(service, new_session(clock), "alice", "acme", "correct horse"), Authenticated)


def test_lock_during_verify_factor(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, _, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    assert handle.begin_login("alice", "acme", session) == FactorRequired(FactorKind.PASSWORD)
    fail_times(service, clock, "alice", "acme", 5)  # locked meanwhile, from elsewhere
    outcome = handle.verify_factor(PW("correct horse"), session)
    assert isinstance(outcome, Locked)
    assert session.is_guest


def test_failures_outside_the_window_do_not_add_up(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, _, clock = env
    assert fail_times(service, clock, "alice", "acme", 4) == [InvalidCredential()] * 4
    clock.advance(timedelta(hours=1, seconds=1))
    assert fail_times(service, clock, "alice", "acme", 4) == [InvalidCredential()] * 4
    assert isinstance(fail_times(service, clock, "alice", "acme", 1)[0], Locked)


def test_success_resets_the_counter(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, _, clock = env
    fail_times(service, clock, "alice", "acme", 4)
    assert isinstance(login(service, new_session(clock), "alice", "acme", "correct horse"), Authenticated)
    assert fail_times(service, clock, "alice", "acme", 4) == [InvalidCredential()] * 4


def test_unknown_identifiers_lock_identically(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    known = fail_times(service, clock, "alice", "acme", 6)
    unknown = fail_times(service, clock, "mallory", "acme", 6)
    assert known == unknown
    assert isinstance(known[4], Locked) and isinstance(known[5], Locked)
    known_rows = [(r.event, r.status) for r in backend.audit_rows if r.identifier == "alice"]
    unknown_rows = [(r.event, r.status) for r in backend.audit_rows if r.identifier == "mallory"]
    assert known_rows == unknown_rows


def test_case_variants_count_against_one_identifier(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, _, clock = env
    outcomes = [
        login(service, new_session(clock), who, "acme", "x") for who in ("Alice", "ALICE", "alice", "aLiCe")
    ]
    assert outcomes == [InvalidCredential()] * 4
    assert isinstance(login(service, new_session(clock), "\uff41lice", "acme", "x"), Locked)


def test_lockout_is_per_tenant(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    add_user(backend, "acme", "bob", "acme-bob")
    fail_times(service, clock, "bob", "globex", 5)
    assert isinstance(login(service, new_session(clock), "bob", "acme", "acme-bob"), Authenticated)


def test_custom_policy() -> None:
    from flask_authflow.login._lockout import LockoutPolicy

    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "t", "a", "pw")
    policy = LockoutPolicy(max_failures=2, lock_duration=timedelta(minutes=1))
    service = AuthnService(
        backend, backend, hasher=FAST_HASHER, lockout=policy, clock=clock, account_tokens=backend
    )
    assert fail_times(service, clock, "a", "t", 2) == [
        InvalidCredential(),
        Locked(clock.now() + timedelta(minutes=1)),
    ]
    with pytest.raises(ConfigurationError):
        LockoutPolicy(max_failures=0)
    with pytest.raises(ConfigurationError):
        LockoutPolicy(window=timedelta(0))


# --- fail closed ----------------------------------------------------------------------------


def test_begin_login_refused_when_attempt_store_down(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    before = state_of(session)
    backend.attempts_unavailable = True
    with pytest.raises(StoreUnavailable):
        service.with_audit_context(CTX).begin_login("alice", "acme", session)
    assert state_of(session) == before
    assert backend.audit_rows[-1].status == "error"


def test_verify_refused_when_attempt_store_down(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    before = state_of(session)
    backend.attempts_unavailable = True
    for password in ("correct horse", "wrong"):
        with pytest.raises(StoreUnavailable):
            handle.verify_factor(PW(password), session)
        assert state_of(session) == before
        assert not session.is_authenticated
    backend.attempts_unavailable = False
    assert isinstance(handle.verify_factor(PW("correct horse"), session), Authenticated)


def test_relogin_refused_when_store_down_keeps_the_old_login(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    before = state_of(session)
    backend.attempts_unavailable = True
    with pytest.raises(StoreUnavailable):
        service.with_audit_context(CTX).begin_login("bob", "globex", session)
    assert state_of(session) == before and session.is_authenticated


class BrokenIdentities(InMemoryBackend):
    def login_facts(self, tenant: str, identifier: str, now: Any) -> Any:
        raise RuntimeError("connection reset")


def test_any_store_exception_fails_closed() -> None:
    clock = MockClock()
    backend = BrokenIdentities(clock=clock)
    service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
    session = new_session(clock)
    with pytest.raises(StoreUnavailable):
        service.with_audit_context(CTX).begin_login("alice", "acme", session)
    assert session.is_guest


# --- audit ----------------------------------------------------------------------------------


def test_audit_failure_fails_begin_login_and_keeps_session(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    sid = session.sid
    before = state_of(session)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        service.with_audit_context(CTX).begin_login("alice", "acme", session)
    assert state_of(session) == before and session.sid == sid and session.is_guest
    assert backend.audit_rows == []


def test_audit_failure_fails_the_login_and_keeps_session(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    before = state_of(session)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        handle.verify_factor(PW("correct horse"), session)
    assert state_of(session) == before
    assert session.is_authenticating and not session.is_authenticated
    assert service.counters.snapshot()["login_successes"] == 0


def test_a_passed_step_whose_audit_fails_keeps_nothing_of_its_unit(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    """The success settlement ran in the step's unit; the failed audit write rolls it back,
    reservation included, so the attempt log and the lockout are as before the step."""
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    log_before = backend.attempt_log
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        handle.verify_factor(PW("correct horse"), session)
    assert backend.attempt_log == log_before
    assert isinstance(handle.verify_factor(PW("correct horse"), session), Authenticated)
    assert [e.success for e in backend.attempt_log if e.subject == "alice"] == [True]


def test_a_wrong_password_whose_audit_fails_is_still_counted_once(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    """The unit that counted the failure is rolled back with its audit row; the failure is
    then counted again on its own: a broken commit never buys a free guess."""
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        handle.verify_factor(PW("wrong"), session)
    assert [e.success for e in backend.attempt_log if e.subject == "alice"] == [False]
    assert session.is_authenticating  # the session is as before the step
    key = AttemptKey("acme", "alice", "password")
    granted = [backend.reserve_attempt(key, now=clock.now(), **WINDOW).granted for _ in range(5)]
    assert granted == [True, True, True, True, False]  # one failure counted, no reservation left


def test_audit_failure_on_logout_still_logs_out(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    """Logging out is the safe direction: a failed audit write never keeps the login."""
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    session["k"] = "v"
    backend.fail_next_write()
    service.with_audit_context(CTX).logout(session)  # no fallback configured: logged and counted
    assert session.is_guest and "k" not in session
    assert service.counters.snapshot()["audit_lost_writes"] == 1


def test_audit_failure_of_a_relogin_keeps_the_old_login(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    before = state_of(session)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        service.with_audit_context(CTX).begin_login("bob", "globex", session)
    assert state_of(session) == before and session.is_authenticated


def test_separate_audit_sink() -> None:
    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "t", "a", "pw")
    sink = MemoryAuditSink()
    service = AuthnService(
        backend, backend, audit_sink=sink, hasher=FAST_HASHER, clock=clock, account_tokens=backend
    )
    session = new_session(clock)
    sink.broken = True
    with pytest.raises(AuditWriteError):
        service.with_audit_context(CTX).begin_login("a", "t", session)
    assert session.is_guest
    sink.broken = False
    assert isinstance(login(service, session, "a", "t", "pw"), Authenticated)
    assert len(sink.records) == 2 and backend.audit_rows == []


def test_audit_rows_carry_every_field(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("Alice", "acme", session)
    first_sid = session.sid
    handle.verify_factor(PW("correct horse"), session)
    user = backend.find_user("acme", "alice")
    assert user is not None
    begin, verify = backend.audit_rows
    for row, sid in ((begin, first_sid), (verify, session.sid)):
        assert isinstance(row, AuditRecord)
        assert row.time == clock.now()
        assert row.tenant == "acme" and row.user_id == user.user_id and row.identifier == "alice"
        assert row.session_id == hashlib.sha256(sid.encode()).hexdigest()
        assert sid not in repr(row)
        assert row.factor == "password"
        assert (row.client_ip, row.ip_source, row.user_agent, row.request_id) == (
            "203.0.113.7",
            "forwarded",
            "pytest-agent",
            "req-1",
        )
    assert set(begin.to_dict()) == {
        "time",
        "device_id",
        "event",
        "status",
        "tenant",
        "user_id",
        "identifier",
        "session_id",
        "factor",
        "client_ip",
        "ip_source",
        "user_agent",
        "request_id",
        "reason",
        "seq",  # the audit chain's (None: the chain is off)
        "mac",
        "key_id",
    }
    login(service, new_session(clock), "alice", "acme", "wrong")
    assert backend.audit_rows[-1].reason == "invalid_credential"
    login(service, new_session(clock), "nobody", "acme", "wrong")
    assert backend.audit_rows[-1].reason == "unknown_identifier"


def test_unknown_context_gives_unknown_ip_source(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    service.with_audit_context(None).begin_login("alice", "acme", new_session(clock))
    row = backend.audit_rows[-1]
    assert row.ip_source == "unknown" and row.client_ip is None and row.request_id


# --- odd requests ---------------------------------------------------------------------------


def test_verify_without_login_is_invalid_credential(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    sid = session.sid
    assert service.with_audit_context(CTX).verify_factor(PW("correct horse"), session) == InvalidCredential()
    assert session.is_guest and session.sid == sid
    row = backend.audit_rows[-1]
    assert (row.event, row.status, row.reason) == ("factor_verify", "failure", "no_login_in_progress")


def test_verify_on_authenticated_session_without_step_up(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, _, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    at = session.authenticated_at
    clock.advance(60)
    assert service.with_audit_context(CTX).verify_factor(PW("correct horse"), session) == InvalidCredential()
    assert session.is_authenticated and session.authenticated_at == at


def test_invalid_identifier_raises_and_is_audited(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    with pytest.raises(InvalidInput):
        service.with_audit_context(CTX).begin_login("ali\x00ce", "acme", session)
    with pytest.raises(InvalidInput):
        service.with_audit_context(CTX).begin_login("alice", "", session)
    assert session.is_guest
    assert [(r.status, r.reason, r.identifier) for r in backend.audit_rows] == [
        ("error", "invalid_input", None),
        ("error", "invalid_input", None),
    ]


def test_too_long_password_is_refused_without_counting(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    before = state_of(session)
    for _ in range(6):
        with pytest.raises(PasswordTooLong):
            handle.verify_factor(PW("x" * 1025), session)
    assert state_of(session) == before
    assert backend.audit_rows[-1].reason == "password_too_long"
    assert isinstance(handle.verify_factor(PW("correct horse"), session), Authenticated)


# --- step-up --------------------------------------------------------------------------------


def test_step_up(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    first_at = session.authenticated_at
    clock.advance(timedelta(minutes=30))

    assert handle.begin_step_up(session) == StepUpRequired((FactorKind.PASSWORD,))
    assert session.is_authenticated
    sid = session.sid
    assert handle.verify_factor(PW("wrong"), session) == InvalidCredential()
    assert session.is_authenticated and session.authenticated_at == first_at and session.flow is None

    handle.begin_step_up(session)
    outcome = handle.verify_factor(PW("correct horse"), session)
    assert isinstance(outcome, Authenticated)
    assert session.is_authenticated and session.authenticated_at == clock.now() != first_at
    assert session.sid != sid and session.flow is None
    assert [r.event for r in backend.audit_rows[-2:]] == ["step_up_begin", "factor_verify"]
    assert backend.audit_rows[-1].reason == "step_up"


def test_step_up_needs_a_login(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    with pytest.raises(LoginNotStarted):
        service.with_audit_context(CTX).begin_step_up(new_session(clock))
    assert backend.audit_rows[-1].event == "step_up_begin"


def test_step_up_failures_count_towards_lockout(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, _, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    outcomes = []
    for _ in range(5):
        handle.begin_step_up(session)
        outcomes.append(handle.verify_factor(PW("wrong"), session))
    assert outcomes[:4] == [InvalidCredential()] * 4 and isinstance(outcomes[4], Locked)
    assert session.is_authenticated  # the existing login stays


# --- factor chain ---------------------------------------------------------------------------


class FakeTotp:
    """Stands in for the TOTP verifier of a later issue."""

    kind = FactorKind.TOTP
    expensive = False
    challenge_on_request = False
    digits = 6

    def __init__(self) -> None:
        self.seen: list[str] = []

    def check_input(self, credential: FactorCredential) -> None:
        if len(credential) != 6:
            raise InvalidInput("six digits")

    def challenge(self, ctx: FactorContext) -> None:
        return None

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> Accepted | Rejected:
        self.seen.append(ctx.user_id)
        return Accepted() if credential.secret_bytes() == b"123456" else Rejected()


def test_factor_chain(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    user = backend.find_user("acme", "alice")
    assert user is not None
    clock.advance(1)
    backend.enroll_factor("acme", user.user_id, FactorKind.TOTP, "JBSWY3DPEHPK3PXP")
    assert backend.required_factors("acme", user.user_id) == [FactorKind.PASSWORD, FactorKind.TOTP]
    totp = FakeTotp()
    service.register_factor(totp)
    handle = service.with_audit_context(CTX)
    session = new_session(clock)

    assert handle.begin_login("alice", "acme", session) == FactorRequired(FactorKind.PASSWORD)
    assert handle.verify_factor(PW("correct horse"), session) == FactorRequired(FactorKind.TOTP)
    assert session.is_authenticating and not session.is_authenticated
    # The password cannot be presented twice in place of the second factor: refused, and
    # the login still waits for the second factor (a later step may be retried).
    assert handle.verify_factor(PW("correct horse"), session) == InvalidCredential()
    assert backend.audit_rows[-1].reason == "unexpected_factor"
    assert session.is_authenticating and session.record.next_step == ("totp",)
    assert (
        handle.verify_factor(FactorCredential.code(FactorKind.TOTP, "000000"), session) == InvalidCredential()
    )
    assert session.is_authenticating and not session.is_authenticated
    outcome = handle.verify_factor(FactorCredential.code(FactorKind.TOTP, "123456"), session)
    assert outcome == Authenticated(user.user_id, "acme")
    assert session.record.factors_passed == ("password", "totp")
    assert totp.seen == [user.user_id, user.user_id]


def test_second_factor_without_verifier_fails_closed(
    env: tuple[AuthnService, InMemoryBackend, MockClock],
) -> None:
    service, backend, clock = env
    user = backend.find_user("acme", "alice")
    assert user is not None
    clock.advance(1)
    backend.enroll_factor("acme", user.user_id, FactorKind.WEBAUTHN, "{}")
    session = new_session(clock)
    handle = service.with_audit_context(CTX)
    handle.begin_login("alice", "acme", session)
    assert handle.verify_factor(PW("correct horse"), session) == FactorRequired(FactorKind.WEBAUTHN)
    cred = FactorCredential.code(FactorKind.WEBAUTHN, "anything")
    assert handle.verify_factor(cred, session) == InvalidCredential()
    assert not session.is_authenticated
    assert backend.audit_rows[-1].reason == "unsupported_factor"


def test_user_without_password_is_a_phantom(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, backend, clock = env
    backend.create_user("acme", "fed-user")  # federated only: no password
    session = new_session(clock)
    assert login(service, session, "fed-user", "acme", "") == InvalidCredential()
    assert backend.audit_rows[-2].reason == "no_password"


# --- counters, signals, cost ----------------------------------------------------------------


def test_counters(env: tuple[AuthnService, InMemoryBackend, MockClock]) -> None:
    service, _, clock = env
    login(service, new_session(clock), "alice", "acme", "correct horse")
    fail_times(service, clock, "bob", "globex", 5)
    snap = service.counters.snapshot()
    assert snap["login_attempts"] == 6
    assert snap["login_successes"] == 1
    assert snap["login_failures"] == 5
    assert snap["lockouts"] == 1
    text = service.counters.render_prometheus()
    assert "authflow_login_attempts_total 6\n" in text
    assert "# TYPE authflow_lockouts_total counter\n" in text


@pytest.fixture
def received() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    got: list[tuple[str, dict[str, Any]]] = []
    names = ("login_succeeded", "login_failed", "factor_verified", "session_revoked")
    receivers = {}
    for name in names:

        def receiver(sender: Any, _name: str = name, **kw: Any) -> None:
            got.append((_name, kw))

        receivers[name] = receiver
        getattr(signals, name).connect(receiver)
    yield got
    for name in names:
        getattr(signals, name).disconnect(receivers[name])


def test_signals(
    env: tuple[AuthnService, InMemoryBackend, MockClock], received: list[tuple[str, dict[str, Any]]]
) -> None:
    service, backend, clock = env
    session = new_session(clock)
    login(service, session, "alice", "acme", "correct horse")
    user_id = backend.find_user("acme", "alice").user_id  # type: ignore[union-attr]
    service.with_audit_context(CTX).logout(session)
    login(service, new_session(clock), "alice", "acme", "nope")
    assert [name for name, _ in received] == [
        "factor_verified",
        "login_succeeded",
        "session_revoked",
        "login_failed",
    ]
    assert received[1][1] == {"user_id": user_id, "tenant": "acme", "step_up": False}
    assert received[3][1] == {"tenant": "acme", "identifier": "alice", "reason": "invalid_credential"}
    assert all("password" not in str(kw).replace("'factor': 'password'", "") for _, kw in received)


def test_no_signal_or_counter_when_audit_fails(
    env: tuple[AuthnService, InMemoryBackend, MockClock], received: list[tuple[str, dict[str, Any]]]
) -> None:
    service, backend, clock = env
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        handle.verify_factor(PW("correct horse"), session)
    assert received == []
    assert service.counters.snapshot()["login_successes"] == 0


def test_service_runs_on_one_login_store() -> None:
    # What a store is is checked by the type checker (AuthnService takes LoginStores); at
    # run time only the one-store rule is: three different stores would split a login.
    backend = InMemoryBackend()
    with pytest.raises(ConfigurationError, match="one LoginStore"):
        AuthnService(backend, InMemoryBackend())
    hasher = fast_hasher()
    service = AuthnService(backend, backend, hasher=hasher, account_tokens=backend)
    assert service.hasher is hasher  # passed by the wiring, never read off the store
    assert service.store is service.attempt_store is backend and service.audit_sink is backend
    assert "correct" not in repr(service)


def test_the_default_hasher_is_argon2id_of_its_own() -> None:
    backend = InMemoryBackend()
    service = AuthnService(backend, backend, account_tokens=backend)
    assert service.hasher.parameters.memory_cost == 64 * 1024 and service.hasher.parameters.time_cost == 3


def test_audit_context_is_required_shape() -> None:
    ctx = AuditContext.unknown()
    assert ctx.ip_source == "unknown" and len(ctx.request_id) == 32
