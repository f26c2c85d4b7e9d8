"""TOTP, HOTP and recovery codes through the real login service: enrollment, login steps with
alternatives, single use, every malformed code, sealed secrets, lockout, and races."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyotp
import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.errors import EnrollmentError, FactorSecretError, InvalidInput, StepUpNeeded
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._otp import hotp_value, totp_step
from flask_authflow.mfa._recovery import RECOVERY_CODE_COUNT, RecoveryCodeFactor
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.mfa._totp import HotpFactor, TotpFactor
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.parts import child_processes

PASSWORD = "correct horse"
KEY = bytes(range(32, 64))  # the same in every process (spawned workers re-import this module)

TOTP = FactorKind.TOTP
HOTP = FactorKind.HOTP
RECOVERY = FactorKind.RECOVERY_CODE


def code(kind: FactorKind, value: str) -> FactorCredential:
    return FactorCredential.code(kind, value)


class Env:
    """A service with the OTP factors on one backend, and helpers to log in and enroll."""

    def __init__(self, backend: Any, clock: MockClock, sealer: FactorSealer | None = None) -> None:
        self.backend = backend
        self.clock = clock
        self.sealer = sealer or FactorSealer.from_key(KEY)
        self.service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
        for factor in (TotpFactor(self.sealer), HotpFactor(self.sealer), RecoveryCodeFactor(self.sealer)):
            self.service.register_factor(factor)
        self.handle = self.service.with_audit_context(CTX)
        self.revoked: list[tuple[str, str, str | None, str]] = []

        def revoke(tenant: str, user_id: str, keep: str | None, reason: str) -> int:
            self.revoked.append((tenant, user_id, keep, reason))
            return 1

        self.service.revoke_sessions = revoke
        user = backend.find_user("acme", "alice")
        assert user is not None
        self.user_id = user.user_id

    def signed_in(self) -> AuthSession:
        """A fresh session that passed every step (password, then the first OTP kind enrolled)."""
        session = new_session(self.clock)
        outcome = self.password(session)
        assert isinstance(outcome, Authenticated), outcome
        return session

    def password(self, session: AuthSession) -> Any:
        assert self.handle.begin_login("alice", "acme", session) == FactorRequired(FactorKind.PASSWORD)
        return self.handle.verify_factor(FactorCredential.password(PASSWORD), session)

    def enroll_totp(self) -> str:
        """Enroll a TOTP key for alice through the service; returns its base32 key."""
        session = self.signed_in() if not self.has_second_factor() else self.signed_in_with_totp()
        start = self.handle.begin_enrollment(session, TOTP)
        key = str(start.public["secret"])
        now_code = pyotp.TOTP(key).at(self.clock.now())
        self.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, now_code))
        self.clock.advance(90)  # well past the proving code's step (used), so ±2 steps are all unused
        return key

    def has_second_factor(self) -> bool:
        return any(f.kind is not FactorKind.PASSWORD for f in self.backend.list_factors("acme", self.user_id))

    def signed_in_with_totp(self) -> AuthSession:
        raise AssertionError("enroll TOTP once per test")

    def totp_now(self, key: str, offset: int = 0) -> str:
        return hotp_value(key, totp_step(self.clock.now()) + offset)


def _backend(kind: str, tmp_path: Path, clock: MockClock, url: str | None = None) -> Any:
    if kind == "memory":
        backend: Any = InMemoryBackend(clock=clock)
    else:
        url = url or f"sqlite:///{tmp_path / 'otp.db'}"
        backend = SqlAlchemyBackend(url, clock=clock)
    add_user(backend, "acme", "alice", PASSWORD)
    add_user(backend, "acme", "bob", "hunter2 hunter2")
    return backend


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    clock = MockClock()
    url = request.getfixturevalue("postgres_server").new_database() if request.param == "postgresql" else None
    backend = _backend(request.param, tmp_path, clock, url)
    yield Env(backend, clock)
    close = getattr(backend, "close", None)
    if close is not None:
        close()


# --- TOTP enrollment -------------------------------------------------------------------------


def test_totp_enrollment_gives_uri_qr_and_a_sealed_key(env: Env) -> None:
    session = env.signed_in()
    start = env.handle.begin_enrollment(session, TOTP)
    key = str(start.public["secret"])
    assert len(base64.b32decode(key)) * 8 >= 160
    uri = str(start.public["otpauth_uri"])
    assert uri.startswith("otpauth://totp/") and f"secret={key}" in uri
    assert str(start.public["qr_svg"]).startswith("<svg") and "<script" not in str(start.public["qr_svg"])
    pending = env.backend.get_factor("acme", env.user_id, start.factor_id)
    assert pending is not None and not pending.confirmed
    assert pending.secret.startswith("sealed:v1:") and key not in pending.secret
    assert env.sealer.open(start.factor_id, pending.secret).decode() == key
    with pytest.raises(FactorSecretError):  # the sealed key does not open under another factor's id
        env.sealer.open("another-factor", pending.secret)
    # Pending: a login still needs only the password.
    assert isinstance(env.password(new_session(env.clock)), Authenticated)


def test_totp_enrollment_needs_proof_and_a_fresh_login(env: Env) -> None:
    session = env.signed_in()
    start = env.handle.begin_enrollment(session, TOTP)
    key = str(start.public["secret"])
    wrong = hotp_value(key, totp_step(env.clock.now()) + 5)
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, wrong))
    assert not env.has_second_factor()
    with pytest.raises(EnrollmentError):  # an unknown pending factor
        env.handle.confirm_enrollment(session, TOTP, "no-such-factor", code(TOTP, env.totp_now(key)))
    env.clock.advance(timedelta(minutes=11))  # past AUTHFLOW_FRESHNESS (10 min)
    with pytest.raises(StepUpNeeded):
        env.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, env.totp_now(key)))
    with pytest.raises(StepUpNeeded):
        env.handle.begin_enrollment(session, TOTP)
    with pytest.raises(StepUpNeeded):  # a guest cannot enroll
        env.handle.begin_enrollment(new_session(env.clock), TOTP)


def test_confirming_revokes_other_sessions_and_rotates_the_id(env: Env) -> None:
    session = env.signed_in()
    start = env.handle.begin_enrollment(session, TOTP)
    sid = session.sid
    key = str(start.public["secret"])
    config = env.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, env.totp_now(key)))
    assert config.confirmed and config.kind is TOTP
    assert session.sid != sid and sid in session.dead_sids
    # Every other session ends; this one is kept (under its old id, which the save retires).
    assert env.revoked == [("acme", env.user_id, sid, "factor_enrolled")]
    rows = [(r.event, r.status, r.factor) for r in env.backend.audit_rows[-2:]]
    assert rows == [("factor_enroll", "started", "totp"), ("factor_enrolled", "success", "totp")]


def test_an_expired_enrollment_is_refused(env: Env) -> None:
    session = env.signed_in()
    start = env.handle.begin_enrollment(session, TOTP)
    key = str(start.public["secret"])
    env.clock.advance(timedelta(minutes=9))
    session = env.signed_in()  # a fresh login: only the pending factor's age matters now
    env.clock.advance(timedelta(minutes=2))  # the pending factor is now 11 min old
    with pytest.raises(EnrollmentError):
        env.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, env.totp_now(key)))
    assert env.backend.get_factor("acme", env.user_id, start.factor_id) is None


def test_reenrolling_replaces_the_old_key_once_confirmed(env: Env) -> None:
    first = env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(first)), session), Authenticated)
    start = env.handle.begin_enrollment(session, TOTP)
    second = str(start.public["secret"])
    env.clock.advance(30)
    # Not confirmed yet: the old key still works, the new one does not.
    probe = new_session(env.clock)
    env.password(probe)
    assert env.handle.verify_factor(code(TOTP, env.totp_now(second)), probe) == InvalidCredential()
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(first)), probe), Authenticated)
    env.clock.advance(30)
    session = new_session(env.clock)
    env.password(session)
    env.handle.verify_factor(code(TOTP, env.totp_now(first)), session)
    env.handle.confirm_enrollment(session, TOTP, start.factor_id, code(TOTP, env.totp_now(second)))
    totps = [f for f in env.backend.list_factors("acme", env.user_id) if f.kind is TOTP]
    assert [f.factor_id for f in totps] == [start.factor_id]
    env.clock.advance(30)
    after = new_session(env.clock)
    env.password(after)
    assert env.handle.verify_factor(code(TOTP, env.totp_now(first)), after) == InvalidCredential()
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(second)), after), Authenticated)


# --- TOTP login ----------------------------------------------------------------------------


def test_password_then_totp(env: Env) -> None:
    key = env.enroll_totp()
    session = new_session(env.clock)
    outcome = env.password(session)
    assert outcome == FactorRequired(TOTP)
    assert session.is_authenticating and not session.is_authenticated
    sid = session.sid
    done = env.handle.verify_factor(code(TOTP, env.totp_now(key)), session)
    assert done == Authenticated(env.user_id, "acme")
    assert session.record.factors_passed == ("password", "totp") and session.sid != sid


@pytest.mark.parametrize("offset", [-1, 1])
def test_one_step_of_drift_either_way_is_accepted(env: Env, offset: int) -> None:
    key = env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(key, offset)), session), Authenticated)


@pytest.mark.parametrize("offset", [-2, 2])
def test_codes_two_steps_away_are_refused(env: Env, offset: int) -> None:
    key = env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    assert env.handle.verify_factor(code(TOTP, env.totp_now(key, offset)), session) == InvalidCredential()
    assert env.backend.audit_rows[-1].reason == "invalid_credential"
    assert session.is_authenticating  # a later step: the user may try again


def test_a_totp_code_is_accepted_once_also_in_a_new_login(env: Env) -> None:
    key = env.enroll_totp()
    value = env.totp_now(key)
    first = new_session(env.clock)
    env.password(first)
    assert isinstance(env.handle.verify_factor(code(TOTP, value), first), Authenticated)
    second = new_session(env.clock)
    env.password(second)
    assert env.handle.verify_factor(code(TOTP, value), second) == InvalidCredential()
    assert env.backend.audit_rows[-1].reason == "replayed"
    # An older step than the one used is refused too (the counter only moves forward).
    assert env.handle.verify_factor(code(TOTP, env.totp_now(key, -1)), second) == InvalidCredential()
    env.clock.advance(30)
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(key)), second), Authenticated)


@pytest.mark.parametrize(
    "bad",
    [
        "12345",
        "1234567",
        "12a456",
        " 123456",
        "123456 ",
        "\uff11\uff12\uff13\uff14\uff15\uff16",
        "٠١٢٣٤٥",
        "+12345",
        "",
    ],
)
def test_malformed_totp_codes_are_invalid_input(env: Env, bad: str) -> None:
    env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    with pytest.raises(InvalidInput):
        env.handle.verify_factor(code(TOTP, bad), session)
    assert session.is_authenticating
    assert env.backend.audit_rows[-1].reason == "invalid_input"


def test_five_wrong_totp_codes_lock_like_five_wrong_passwords(env: Env) -> None:
    key = env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    wrong = hotp_value(key, totp_step(env.clock.now()) + 7)
    outcomes = [env.handle.verify_factor(code(TOTP, wrong), session) for _ in range(5)]
    assert outcomes[:4] == [InvalidCredential()] * 4 and isinstance(outcomes[4], Locked)
    assert session.is_guest  # a lock ends the login
    # The lock covers the account: even the password is refused now.
    fresh = new_session(env.clock)
    assert isinstance(env.handle.begin_login("alice", "acme", fresh), Locked)


def test_a_password_only_session_is_not_authenticated(env: Env) -> None:
    env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    assert session.state is AuthState.AUTHENTICATING and not session.is_authenticated
    assert session.record.next_step == ("totp",)


def test_an_unreadable_key_fails_closed(tmp_path: Path) -> None:
    clock = MockClock()
    backend = _backend("memory", tmp_path, clock)
    env = Env(backend, clock)
    key = env.enroll_totp()
    rotated = Env(backend, clock, FactorSealer.from_key(os.urandom(32)))  # the old key is gone
    session = new_session(clock)
    rotated.password(session)
    assert rotated.handle.verify_factor(code(TOTP, env.totp_now(key)), session) == InvalidCredential()
    # With the old key kept as a previous key, the sealed secret opens again.
    kept = Env(backend, clock, FactorSealer.from_key(os.urandom(32), (KEY,)))
    session = new_session(clock)
    kept.password(session)
    assert isinstance(kept.handle.verify_factor(code(TOTP, env.totp_now(key)), session), Authenticated)


def test_disabling_a_factor_needs_a_fresh_login_and_revokes_other_sessions(env: Env) -> None:
    key = env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    env.handle.verify_factor(code(TOTP, env.totp_now(key)), session)
    factor_id = next(f.factor_id for f in env.backend.list_factors("acme", env.user_id) if f.kind is TOTP)
    env.clock.advance(timedelta(minutes=11))
    with pytest.raises(StepUpNeeded):
        env.handle.disable_factor(session, factor_id)
    env.clock.advance(30)
    session = new_session(env.clock)
    env.password(session)
    env.handle.verify_factor(code(TOTP, env.totp_now(key)), session)
    password_id = next(
        f.factor_id for f in env.backend.list_factors("acme", env.user_id) if f.kind is FactorKind.PASSWORD
    )
    assert env.handle.disable_factor(session, password_id) is False
    env.revoked.clear()
    sid = session.sid
    assert env.handle.disable_factor(session, factor_id) is True
    assert env.revoked == [("acme", env.user_id, sid, "factor_disabled")] and session.sid != sid
    assert isinstance(env.password(new_session(env.clock)), Authenticated)  # password only again


# --- alternatives and recovery codes -------------------------------------------------------


def _recovery_codes(env: Env, session: AuthSession) -> list[str]:
    start = env.handle.begin_enrollment(session, RECOVERY)
    codes = [str(c) for c in start.public["codes"]]
    env.handle.confirm_enrollment(session, RECOVERY, start.factor_id, code(RECOVERY, codes[0]))
    return codes


def _session_after_totp(env: Env, key: str) -> AuthSession:
    env.clock.advance(30)
    session = new_session(env.clock)
    env.password(session)
    assert isinstance(env.handle.verify_factor(code(TOTP, env.totp_now(key)), session), Authenticated)
    return session


def test_a_recovery_code_stands_in_for_totp_once(env: Env) -> None:
    key = env.enroll_totp()
    codes = _recovery_codes(env, _session_after_totp(env, key))
    assert len(codes) == RECOVERY_CODE_COUNT == len(set(codes))
    session = new_session(env.clock)
    step = env.password(session)
    assert isinstance(step, FactorRequired) and step.kinds == (TOTP, RECOVERY)
    assert isinstance(env.handle.verify_factor(code(RECOVERY, codes[3].upper()), session), Authenticated)
    assert session.record.factors_passed == ("password", "recovery_code")
    again = new_session(env.clock)
    env.password(again)
    assert env.handle.verify_factor(code(RECOVERY, codes[3]), again) == InvalidCredential()
    # Another code of the set still works (without the hyphen, too).
    assert isinstance(
        env.handle.verify_factor(code(RECOVERY, codes[4].replace("-", "")), again), Authenticated
    )
    stored = next(f for f in env.backend.list_factors("acme", env.user_id) if f.kind is RECOVERY)
    assert RecoveryCodeFactor(env.sealer).remaining(stored) == RECOVERY_CODE_COUNT - 2
    assert all(c.replace("-", "") not in stored.secret for c in codes)  # digests only


def test_a_kind_outside_the_step_is_refused_never_a_skip(env: Env) -> None:
    env.enroll_totp()
    session = new_session(env.clock)
    env.password(session)
    assert env.handle.verify_factor(code(HOTP, "123456"), session) == InvalidCredential()
    assert env.backend.audit_rows[-1].reason == "unexpected_factor"
    assert session.is_authenticating and not session.is_authenticated


def test_recovery_codes_alone_are_not_a_second_step(env: Env) -> None:
    session = env.signed_in()
    _recovery_codes(env, session)
    assert isinstance(env.password(new_session(env.clock)), Authenticated)


def test_regenerating_recovery_codes_kills_the_old_set(env: Env) -> None:
    key = env.enroll_totp()
    old = _recovery_codes(env, _session_after_totp(env, key))
    new = _recovery_codes(env, _session_after_totp(env, key))
    assert set(old).isdisjoint(new)
    session = new_session(env.clock)
    env.password(session)
    assert env.handle.verify_factor(code(RECOVERY, old[1]), session) == InvalidCredential()
    assert isinstance(env.handle.verify_factor(code(RECOVERY, new[1]), session), Authenticated)


@pytest.mark.parametrize(
    "bad", ["abcde-fghj", "abcde-fghjkm", "abcde fghjk", "abcde_fghjk", "\uff41bcde-fghjk", ""]
)
def test_malformed_recovery_codes_are_invalid_input(env: Env, bad: str) -> None:
    key = env.enroll_totp()
    _recovery_codes(env, _session_after_totp(env, key))
    session = new_session(env.clock)
    env.password(session)
    with pytest.raises(InvalidInput):
        env.handle.verify_factor(code(RECOVERY, bad), session)


# --- HOTP ----------------------------------------------------------------------------------


def _enroll_hotp(env: Env) -> str:
    session = env.signed_in()
    start = env.handle.begin_enrollment(session, HOTP)
    key = str(start.public["secret"])
    assert str(start.public["otpauth_uri"]).startswith("otpauth://hotp/")
    env.handle.confirm_enrollment(session, HOTP, start.factor_id, code(HOTP, hotp_value(key, 0)))
    return key


def test_hotp_look_ahead_reuse_and_window(env: Env) -> None:
    key = _enroll_hotp(env)  # counter 0 proved the key: the next code is counter 1

    def attempt(counter: int) -> Any:
        session = new_session(env.clock)
        env.password(session)
        return env.handle.verify_factor(code(HOTP, hotp_value(key, counter)), session)

    assert attempt(0) == InvalidCredential()  # the proving code is used
    assert env.backend.audit_rows[-1].reason == "replayed"
    assert isinstance(attempt(3), Authenticated)  # within the look-ahead of 10
    assert attempt(3) == InvalidCredential()  # reuse
    assert attempt(2) == InvalidCredential()  # behind the counter
    assert attempt(4 + 10) == InvalidCredential()  # beyond the window (next is 4; 4..13 pass)
    assert env.backend.audit_rows[-1].reason == "invalid_credential"
    assert isinstance(attempt(13), Authenticated)


# --- races ----------------------------------------------------------------------------------


def _race(n: int, attempt: Callable[[], Any]) -> list[Any]:
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(index: int) -> None:
        barrier.wait()
        results[index] = attempt()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_parallel_submissions_of_one_totp_code_one_wins(env: Env) -> None:
    key = env.enroll_totp()
    value = env.totp_now(key)
    sessions = [new_session(env.clock) for _ in range(4)]
    for session in sessions:
        env.password(session)
    it = iter(sessions)
    lock = threading.Lock()

    def attempt() -> Any:
        with lock:
            session = next(it)
        return env.handle.verify_factor(code(TOTP, value), session)

    results = _race(4, attempt)
    assert sum(isinstance(r, Authenticated) for r in results) == 1
    assert sum(r == InvalidCredential() for r in results) == 3


def test_two_parallel_submissions_of_one_recovery_code_one_wins(env: Env) -> None:
    key = env.enroll_totp()
    codes = _recovery_codes(env, _session_after_totp(env, key))
    sessions = [new_session(env.clock) for _ in range(4)]
    for session in sessions:
        env.password(session)
    it = iter(sessions)
    lock = threading.Lock()

    def attempt() -> Any:
        with lock:
            session = next(it)
        return env.handle.verify_factor(code(RECOVERY, codes[5]), session)

    results = _race(4, attempt)
    assert sum(isinstance(r, Authenticated) for r in results) == 1
    stored = next(f for f in env.backend.list_factors("acme", env.user_id) if f.kind is RECOVERY)
    assert RecoveryCodeFactor(env.sealer).remaining(stored) == RECOVERY_CODE_COUNT - 1


def test_different_recovery_codes_in_parallel_all_win(env: Env) -> None:
    key = env.enroll_totp()
    codes = _recovery_codes(env, _session_after_totp(env, key))
    sessions = [new_session(env.clock) for _ in range(4)]
    for session in sessions:
        env.password(session)
    pairs = iter(zip(sessions, codes[1:5], strict=True))
    lock = threading.Lock()

    def attempt() -> Any:
        with lock:
            session, value = next(pairs)
        return env.handle.verify_factor(code(RECOVERY, value), session)

    results = _race(4, attempt)
    assert all(isinstance(r, Authenticated) for r in results)  # the compare-and-set retries


# --- several processes on PostgreSQL -----------------------------------------------------------

SPAWN = child_processes()
PROCESSES = 3


def _submitter(url: str, kind: str, value: str, at: datetime, barrier: Any, out: Any) -> None:
    """One worker process: its own service on the shared database, a login up to the second
    step, then (all processes at once) the same code."""
    clock = MockClock(at)
    backend = SqlAlchemyBackend(url, clock=clock)
    env = Env(backend, clock)
    session = new_session(clock)
    env.password(session)
    barrier.wait()
    outcome = env.handle.verify_factor(code(FactorKind(kind), value), session)
    backend.close()
    out.put(type(outcome).__name__)


def _race_processes(url: str, kind: FactorKind, value: str, at: datetime) -> list[str]:
    barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_submitter, args=(url, kind.value, value, at, barrier, out))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    return results


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_one_totp_code_from_several_processes_one_wins(postgres_server: Any, tmp_path: Path) -> None:
    clock = MockClock()
    env = Env(_backend("sqlite", tmp_path, clock, postgres_server.new_database()), clock)
    key = env.enroll_totp()
    url = env.backend.engine.url.render_as_string(hide_password=False)
    env.backend.close()  # the workers alone use the database during the race
    results = _race_processes(url, TOTP, env.totp_now(key), clock.now())
    assert sorted(results) == ["Authenticated"] + ["InvalidCredential"] * (PROCESSES - 1)


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_one_recovery_code_from_several_processes_one_wins(postgres_server: Any, tmp_path: Path) -> None:
    clock = MockClock()
    env = Env(_backend("sqlite", tmp_path, clock, postgres_server.new_database()), clock)
    key = env.enroll_totp()
    codes = _recovery_codes(env, _session_after_totp(env, key))
    url = env.backend.engine.url.render_as_string(hide_password=False)
    env.backend.close()  # the workers alone use the database during the race
    results = _race_processes(url, RECOVERY, codes[2], clock.now())
    after = SqlAlchemyBackend(url, clock=clock)
    try:
        stored = next(f for f in after.list_factors("acme", env.user_id) if f.kind is RECOVERY)
    finally:
        after.close()
    assert sorted(results) == ["Authenticated"] + ["InvalidCredential"] * (PROCESSES - 1)
    assert RecoveryCodeFactor(env.sealer).remaining(stored) == RECOVERY_CODE_COUNT - 1
