"""Password reset at the service level: the token's life, the second factor, the race."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._clock import MockClock
from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind, FactorRequired
from flask_authflow.errors import InvalidInput, WeakPassword
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _password_reset as password_reset
from flask_authflow.login._account_tokens import (
    AccountTokenExpired,
    AccountTokenInvalid,
    AccountTokenUsed,
    IssuedToken,
)
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._password_reset import PasswordResetDone
from tests.authn_support import CTX, new_session
from tests.store_contract import race
from tests.test_factors_otp import PASSWORD, Env, _backend

NEW = "a brand new passphrase 9"


@pytest.fixture(params=["memory", "sqlite"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    clock = MockClock()
    backend = _backend(request.param, tmp_path, clock)
    yield Env(backend, clock)
    if request.param != "memory":
        backend.close()


def mail(env: Env, user: str = "alice", **kw: Any) -> IssuedToken:
    """A reset token for ``user`` as the request would mail it."""
    found = env.backend.find_user("acme", user)
    return account_tokens.issue(
        env.backend,
        kind="password_reset",
        tenant="acme",
        user_id=found.user_id,
        now=env.clock.now(),
        ttl=kw.pop("ttl", password_reset.DEFAULT_RESET_TTL),
        **kw,
    )


def reset(env: Env, token: object, password: object = NEW, session: Any = None, **kw: Any) -> Any:
    session = session if session is not None else new_session(env.clock)
    return password_reset.reset_password(env.service, CTX, session, token, password, **kw)


def logs_in(env: Env, password: str) -> bool:
    """Whether alice's password step accepts ``password`` (a second step may follow)."""
    session = new_session(env.clock)
    env.handle.begin_login("alice", "acme", session)
    outcome = env.handle.verify_factor(FactorCredential.password(password), session)
    return isinstance(outcome, Authenticated | FactorRequired)


def reset_rows(env: Env) -> list[Any]:
    return [r for r in env.backend.audit_rows if r.event == "password_reset"]


def test_a_reset_sets_the_password_ends_every_session_and_is_single_use(env: Env) -> None:
    sent: list[dict[str, Any]] = []
    issued = mail(env)

    def received(sender: object, **kw: Any) -> None:
        sent.append(kw)

    with signals.password_reset.connected_to(received):
        done = reset(env, issued.token)
    assert done == PasswordResetDone(env.user_id, "acme", 2)
    assert sent == [{"user_id": env.user_id, "tenant": "acme"}]
    assert env.revoked == [("acme", env.user_id, None, "password_reset")] * 2
    assert logs_in(env, NEW) and not logs_in(env, PASSWORD)
    assert reset_rows(env)[-1].status == "success"
    with pytest.raises(AccountTokenUsed):
        reset(env, issued.token, "yet another passphrase 7")
    assert logs_in(env, NEW)
    assert reset_rows(env)[-1].status == "refused"
    assert reset_rows(env)[-1].reason == "account_token_used"


def test_a_reset_ends_the_session_that_made_it(env: Env) -> None:
    session = env.signed_in()
    reset(env, mail(env).token, session=session)
    assert session.is_guest


def test_a_newer_mail_voids_the_older_token_and_a_password_change_voids_all(env: Env) -> None:
    first, second = mail(env), mail(env)
    with pytest.raises(AccountTokenUsed):
        reset(env, first.token)
    third = mail(env)  # voids the second
    reset(env, third.token)
    with pytest.raises(AccountTokenUsed):
        reset(env, second.token)


def test_an_expired_token_is_refused_and_changes_nothing(env: Env) -> None:
    issued = mail(env)
    env.clock.advance(password_reset.DEFAULT_RESET_TTL.total_seconds())
    with pytest.raises(AccountTokenExpired) as caught:
        reset(env, issued.token)
    assert caught.value.status == 410
    assert logs_in(env, PASSWORD)


@pytest.mark.parametrize(
    "token",
    ["", "short", "x" * 44, "!" * 43, "é" * 43, 42, None, ["a"], "A" * 43 + "\n"],
)
def test_malformed_tokens_are_invalid_input(env: Env, token: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        reset(env, token)
    assert caught.value.status == 400
    assert logs_in(env, PASSWORD)


def test_unknown_tokens_and_tokens_of_another_kind_are_refused(env: Env) -> None:
    with pytest.raises(AccountTokenInvalid) as caught:
        reset(env, "A" * 43)
    assert caught.value.status == 401
    found = env.backend.find_user("acme", "alice")
    other = account_tokens.issue(
        env.backend,
        kind="email_change",
        tenant="acme",
        user_id=found.user_id,
        now=env.clock.now(),
        ttl=timedelta(minutes=5),
    )
    with pytest.raises(AccountTokenInvalid):
        reset(env, other.token)
    # The other kind's token is still usable for what it was made for.
    assert env.backend.live_account_token("acme", found.user_id, "email_change", env.clock.now())


def test_a_token_resets_only_its_own_user(env: Env) -> None:
    bobs = mail(env, "bob")
    reset(env, bobs.token)
    assert logs_in(env, PASSWORD)  # alice is untouched


def test_a_disabled_or_deleted_user_cannot_reset(env: Env) -> None:
    issued = mail(env)
    env.backend.set_disabled("acme", "alice")
    with pytest.raises(AccountTokenInvalid):
        reset(env, issued.token)
    env.backend.set_disabled("acme", "alice", False)
    env.backend.delete_user("acme", "alice")
    with pytest.raises((AccountTokenInvalid, AccountTokenUsed)):
        reset(env, issued.token)


@pytest.mark.parametrize("password", ["", "short", None, 7, "x" * 5000])
def test_the_policy_and_the_shape_of_the_password_are_checked_and_the_token_kept(
    env: Env, password: object
) -> None:
    issued = mail(env)
    with pytest.raises(InvalidInput) as caught:
        reset(env, issued.token, password, policy=PasswordPolicy())
    assert caught.value.status == 400
    if password == "short":
        assert isinstance(caught.value, WeakPassword)
    assert logs_in(env, PASSWORD)
    assert isinstance(reset(env, issued.token, policy=PasswordPolicy()), PasswordResetDone)


def test_a_user_with_a_second_factor_passes_it_before_the_password_changes(env: Env) -> None:
    key = env.enroll_totp()
    issued = mail(env)
    session = new_session(env.clock)
    asked = reset(env, issued.token, session=session)
    assert isinstance(asked, FactorRequired) and FactorKind.TOTP in asked.kinds
    assert logs_in(env, PASSWORD)  # nothing changed yet
    # Calling again before the factor passed asks again, and still changes nothing.
    assert isinstance(reset(env, issued.token, session=session), FactorRequired)
    assert logs_in(env, PASSWORD)
    wrong = env.handle.verify_factor(FactorCredential.code(FactorKind.TOTP, "000000"), session)
    assert not isinstance(wrong, Authenticated)
    assert isinstance(reset(env, issued.token, session=session), FactorRequired)
    passed = env.handle.verify_factor(FactorCredential.code(FactorKind.TOTP, env.totp_now(key)), session)
    assert isinstance(passed, Authenticated)
    assert session.record.auth_method == "password_reset"
    done = reset(env, issued.token, session=session)
    assert isinstance(done, PasswordResetDone)
    assert session.is_guest
    assert not logs_in(env, PASSWORD)


def test_another_session_that_passed_a_factor_does_not_stand_for_the_reset(env: Env) -> None:
    key = env.enroll_totp()
    issued = mail(env)
    session = new_session(env.clock)
    env.password(session)  # a normal login: password, then TOTP
    env.handle.verify_factor(FactorCredential.code(FactorKind.TOTP, env.totp_now(key)), session)
    assert session.is_authenticated
    # Logged in with the password, not with the reset: the reset still asks for the factor.
    assert isinstance(reset(env, issued.token, session=session), FactorRequired)
    assert logs_in(env, PASSWORD)


def test_a_recovery_code_passes_the_reset_too(env: Env) -> None:
    env.enroll_totp()
    admin = AccountAdmin(env.backend, _NoSessions(), service=env.service)  # type: ignore[arg-type]
    codes = admin.regenerate_recovery_codes("acme", "alice")
    issued = mail(env)
    session = new_session(env.clock)
    asked = reset(env, issued.token, session=session)
    assert isinstance(asked, FactorRequired) and FactorKind.RECOVERY_CODE in asked.kinds
    recovered = env.handle.verify_factor(FactorCredential.code(FactorKind.RECOVERY_CODE, codes[0]), session)
    assert isinstance(recovered, Authenticated)
    assert isinstance(reset(env, issued.token, session=session), PasswordResetDone)
    assert logs_in(env, NEW)


class _NoSessions:
    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        return 0

    def list_user_sessions(self, tenant: str, user_id: str) -> list[Any]:
        return []


def test_twenty_threads_one_token_exactly_one_wins(env: Env) -> None:
    issued = mail(env)
    outcomes: list[str] = []

    def attempt(index: int) -> bool:
        try:
            reset(env, issued.token, f"parallel passphrase number {index}")
        except AccountTokenUsed:
            outcomes.append("used")
            return False
        outcomes.append("won")
        return True

    won = race(20, attempt)
    assert won.count(True) == 1 and outcomes.count("used") == 19
    winner = won.index(True)
    assert logs_in(env, f"parallel passphrase number {winner}")
    assert [r.status for r in reset_rows(env)].count("success") == 1


# --- the request ----------------------------------------------------------------------------------


def with_address(env: Env) -> str:
    env.backend.set_email("acme", env.user_id, "alice@example.com", verified_at=env.clock.now())
    return "alice@example.com"


def test_a_request_for_a_real_account_stores_a_token_and_names_the_address(env: Env) -> None:
    address = with_address(env)
    session = new_session(env.clock)
    for how in ({"identifier": "Alice"}, {"email": "alice@EXAMPLE.com"}):
        found = password_reset.request_reset(env.service, CTX, session, "acme", **how)
        assert found.to == address and found.identifier == "alice"
        live = env.backend.live_account_token("acme", env.user_id, "password_reset", env.clock.now())
        assert live is not None and live.token_hash == account_tokens.token_digest(found.issued.token)
        assert found.issued.token not in repr(found) and found.issued.code not in repr(found.issued)
    assert isinstance(reset(env, found.issued.token), PasswordResetDone)
    rows = [r for r in env.backend.audit_rows if r.event == "password_reset_requested"]
    assert [r.status for r in rows] == ["sent", "sent"]


@pytest.mark.parametrize("case", ["unknown", "no_address", "disabled", "other_tenant", "unknown_email"])
def test_a_request_that_matches_no_usable_account_does_the_same_work_and_stores_nothing(
    env: Env, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same calls in the same order as for a real account (a token, its code and both
    digests are made, the same store reads): only the write and the address differ."""
    calls: list[str] = []
    real_issue = account_tokens.issue

    def counting_issue(*args: Any, **kwargs: Any) -> Any:
        calls.append(f"issue persist={kwargs['persist']}")
        return real_issue(*args, **kwargs)

    monkeypatch.setattr(account_tokens, "issue", counting_issue)
    for name in ("find_user", "find_user_by_email", "issue_account_token"):
        original = getattr(env.backend, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(env.backend, name, spy)
    if case != "no_address":
        with_address(env)
    if case == "disabled":
        env.backend.set_disabled("acme", "alice")
    how: dict[str, str] = {"identifier": "nobody" if case == "unknown" else "alice"}
    if case == "unknown_email":
        how = {"email": "nobody@example.com"}
    tenant = "globex" if case == "other_tenant" else "acme"
    found = password_reset.request_reset(env.service, CTX, new_session(env.clock), tenant, **how)
    assert found.to is None and found.identifier is None
    assert len(found.issued.token) == 43 and len(found.issued.code) == 8
    lookup = "find_user_by_email" if case == "unknown_email" else "find_user"
    assert calls == [lookup, "issue persist=False"]
    assert env.backend.live_account_token("acme", env.user_id, "password_reset", env.clock.now()) is None
    with pytest.raises(AccountTokenInvalid):
        reset(env, found.issued.token)
    # A real one: the same lookup and the same issue, plus the write.
    calls.clear()
    with_address(env)
    env.backend.set_disabled("acme", "alice", False)
    password_reset.request_reset(env.service, CTX, new_session(env.clock), "acme", identifier="alice")
    assert calls == ["find_user", "issue persist=True", "issue_account_token"]


@pytest.mark.parametrize(
    "how",
    [
        {},
        {"identifier": "a", "email": "a@example.com"},
        {"identifier": 5},
        {"email": "no-at-sign"},
        {"email": 7},
    ],
)
def test_malformed_requests_are_invalid_input(env: Env, how: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        password_reset.request_reset(env.service, CTX, new_session(env.clock), "acme", **how)
