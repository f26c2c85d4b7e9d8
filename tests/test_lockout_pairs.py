"""The lockout an attacker cannot use against the owner: (account, address) pairs lock
first, the account-wide lock needs many addresses, locks escalate, and the cap holds."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import Authenticated, FactorRequired, InvalidCredential, Locked
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._lockout import LockoutPolicy, pair_subject
from flask_authflow.login._service import AuthnService
from flask_authflow.login._settings import LockoutSettings
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import FAST_HASHER
from tests.test_throttle import RIGHT, CountingHasher, attempt, ctx

WRONG = "wrong password 1"


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    hasher = CountingHasher()
    if request.param == "memory":
        store: Any = InMemoryBackend(clock=MockClock())
    else:
        store = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'lock.db'}", clock=MockClock())
    add_user(store, "acme", "alice", RIGHT, hasher=hasher)
    yield store
    if request.param == "sqlite":
        store.close()


def service(backend: Any, clock: MockClock, **policy: Any) -> AuthnService:
    return AuthnService(
        backend,
        backend,
        hasher=FAST_HASHER,
        clock=clock,
        lockout=LockoutPolicy(**policy),
        account_tokens=backend,
    )


def test_failures_from_one_address_lock_that_address_only(backend: Any) -> None:
    clock = MockClock()
    svc = service(backend, clock)
    outcomes = [attempt(svc, clock, "203.0.113.66", WRONG) for _ in range(5)]
    assert outcomes[:4] == [InvalidCredential()] * 4
    assert outcomes[4] == Locked(clock.now() + timedelta(minutes=15))
    # The next try from that address is refused before any Argon2, already at the start.
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    assert isinstance(
        svc.with_audit_context(ctx("203.0.113.66")).begin_login("alice", "acme", session), Locked
    )
    # The owner, elsewhere, still logs in; the account itself is not locked.
    assert backend.locked_until("acme", "alice", clock.now()) is None
    assert attempt(svc, clock, "198.51.100.7", RIGHT) == Authenticated(
        backend.find_user("acme", "alice").user_id, "acme"
    )


def test_the_account_wide_lock_needs_failures_from_many_networks(backend: Any) -> None:
    clock = MockClock()
    svc = service(backend, clock, max_failures=2)  # account-wide: 40
    for n in range(19):  # 19 networks at their pair limit: 38 failures
        for _ in range(2):
            attempt(svc, clock, f"203.0.{n + 1}.9", WRONG)
    assert backend.locked_until("acme", "alice", clock.now()) is None
    assert isinstance(attempt(svc, clock, "198.51.100.7", RIGHT), Authenticated)
    # The owner's success started the account's count afresh: 40 more, one per network.
    for n in range(20, 60):
        attempt(svc, clock, f"203.0.{n + 1}.9", WRONG)
    assert backend.locked_until("acme", "alice", clock.now()) is not None
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    assert isinstance(
        svc.with_audit_context(ctx("198.51.100.8")).begin_login("alice", "acme", session), Locked
    )


def test_locks_escalate_instead_of_starting_over(backend: Any) -> None:
    clock = MockClock()
    svc = service(
        backend,
        clock,
        max_failures=3,
        lock_duration=timedelta(minutes=1),
        max_lock_duration=timedelta(minutes=5),
    )
    ends = []
    for _ in range(5):
        results = [attempt(svc, clock, "203.0.113.66", WRONG) for _ in range(3)]
        assert isinstance(results[-1], Locked)
        ends.append(results[-1].until - clock.now())
        clock.advance(int(ends[-1].total_seconds()) + 1)
    minutes = [int(end.total_seconds() // 60) for end in ends]
    assert minutes == [1, 2, 4, 5, 5]  # doubling, up to the ceiling


def test_a_success_resets_the_escalation(backend: Any) -> None:
    clock = MockClock()
    svc = service(backend, clock, max_failures=2, lock_duration=timedelta(minutes=1))
    for _ in range(2):
        for _ in range(2):
            last = attempt(svc, clock, "203.0.113.66", WRONG)
        clock.advance(int((last.until - clock.now()).total_seconds()) + 1)
    assert isinstance(attempt(svc, clock, "203.0.113.66", RIGHT), Authenticated)
    attempt(svc, clock, "203.0.113.66", WRONG)
    again = attempt(svc, clock, "203.0.113.66", WRONG)
    assert again == Locked(clock.now() + timedelta(minutes=1))


def test_past_the_failure_cap_every_lock_is_the_longest(backend: Any) -> None:
    clock = MockClock()
    svc = service(
        backend, clock, max_failures=2, lock_duration=timedelta(seconds=1),
        max_lock_duration=timedelta(hours=24), failure_cap=4,
    )  # fmt: skip
    ends = []
    for _ in range(3):
        for _ in range(2):
            last = attempt(svc, clock, "203.0.113.66", WRONG)
        ends.append(last.until - clock.now())
        clock.advance(int(ends[-1].total_seconds()) + 1)
    assert ends == [timedelta(seconds=1), timedelta(seconds=2), timedelta(hours=24)]


def test_unlock_clears_the_pairs_too(backend: Any) -> None:
    clock = MockClock()
    svc = service(backend, clock)
    for _ in range(5):
        attempt(svc, clock, "203.0.113.66", WRONG)
    assert backend.locked_until("acme", pair_subject("alice", "203.0.113.66"), clock.now()) is not None
    backend.clear_lock("acme", "alice")
    assert backend.locked_until("acme", pair_subject("alice", "203.0.113.66"), clock.now()) is None
    assert isinstance(attempt(svc, clock, "203.0.113.66", RIGHT), Authenticated)


def test_an_unknown_identifier_is_locked_like_a_real_one(backend: Any) -> None:
    clock = MockClock()
    svc = service(backend, clock)
    for who in ("alice", "nobody"):
        outcomes = [attempt(svc, clock, "203.0.113.66", WRONG, user=who) for _ in range(5)]
        assert isinstance(outcomes[-1], Locked), who
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    begun = svc.with_audit_context(ctx("203.0.113.67")).begin_login("nobody", "acme", session)
    assert isinstance(begun, FactorRequired)  # another address: no lock, as for a real account


def test_malformed_addresses_share_one_pair() -> None:
    assert pair_subject("alice", "garbage") == pair_subject("alice", None) == "alice\x1f@unknown"
    assert pair_subject("alice", "::ffff:203.0.113.5") == pair_subject("alice", "203.0.113.5")
    long = pair_subject("x" * 299, "2001:db8::1")
    assert long.startswith("sha256:") and len(long) <= 300


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"max_failures": 5, "account_max_failures": 4}, "may not be below the per-address"),
        ({"lock_duration": timedelta(hours=2), "max_lock_duration": timedelta(hours=1)}, "shorter"),
        ({"failure_cap": 0}, "failure_cap"),
    ],
)
def test_unsafe_policies_are_refused(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LockoutPolicy(**policy)


def test_settings_name_the_keys_and_derive_the_account_threshold() -> None:
    settings = LockoutSettings.from_config({})
    assert (settings.max_failures, settings.account_max_failures, settings.failure_cap) == (5, None, 100)
    assert settings.max_duration == timedelta(hours=24)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES"):
        LockoutSettings.from_config({"AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES": 3})
    with pytest.raises(ConfigurationError, match="AUTHFLOW_LOCKOUT_MAX_DURATION"):
        LockoutSettings.from_config({"AUTHFLOW_LOCKOUT_MAX_DURATION": 60})
    assert LockoutPolicy().account_threshold == 100
