"""What only the in-memory backend has: its test switches, its lock held by a unit, its attempt
log (the store contract runs on it in tests/test_store_contracts.py)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey
from flask_authflow.errors import AuditWriteError, StoreUnavailable, UserNotFound
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.store_contract import T0, WINDOW, AuditRecord


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def backend(clock: MockClock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


def test_add_user_stores_a_hash_never_the_password(backend: InMemoryBackend) -> None:
    # A long password: a 2-character one can occur by chance in the base64 of the hash.
    secret = "plaintext-password-7f3a9c"
    add_user(backend, "t", "a", secret)
    add_user(backend, "t", "b", secret)
    user = backend.find_user("t", "a")
    assert user is not None
    stored = backend.get_password_hash("t", user.user_id)
    assert stored is not None and stored.startswith("$argon2id$") and secret not in stored
    assert secret not in repr(backend)


def test_switches(backend: InMemoryBackend) -> None:
    key = AttemptKey("t", "a", "password")
    backend.attempts_unavailable = True
    for call in (
        lambda: backend.locked_until("t", "a", T0),
        lambda: backend.register_failure(key, now=T0, **WINDOW),
        lambda: backend.register_success(key, now=T0),
        lambda: backend.set_lock(key, T0),
        lambda: backend.clear_lock("t", "a"),
    ):
        with pytest.raises(StoreUnavailable):
            call()
    backend.attempts_unavailable = False
    backend.fail_next_write()
    row = AuditRecord(time=T0, event="logout", status="success")
    with pytest.raises(AuditWriteError):
        backend.write(row)
    backend.write(row)
    assert backend.audit_rows == [row]


def test_a_unit_holds_other_threads_back_until_it_ends(backend: InMemoryBackend) -> None:
    """Like SQLite's write lock: another thread's write waits for the open unit, so it can
    never be undone by that unit's rollback, nor see its writes before they are kept."""
    key = AttemptKey("t", "a", "password")
    unit = backend.begin_unit()
    backend.register_failure(key, now=T0, **WINDOW)
    other = threading.Thread(target=lambda: backend.register_failure(key, now=T0, **WINDOW))
    other.start()
    other.join(0.2)
    assert other.is_alive()  # waiting for the unit
    unit.rollback()
    other.join(5)
    assert not other.is_alive()
    assert [e.success for e in backend.attempt_log] == [False]  # the other thread's failure only


def test_a_rolled_back_unit_restores_a_full_attempt_log(clock: MockClock) -> None:
    backend = InMemoryBackend(clock=clock, max_attempt_log=2)
    key = AttemptKey("t", "a", "password")
    backend.register_failure(key, now=T0, client_ip="192.0.2.1", **WINDOW)
    backend.register_success(key, now=T0, client_ip="192.0.2.2")
    unit = backend.begin_unit()
    backend.register_success(key, now=T0, client_ip="192.0.2.3")  # pushes the oldest entry out
    unit.rollback()
    assert [e.client_ip for e in backend.attempt_log] == ["192.0.2.1", "192.0.2.2"]


def test_a_rolled_back_unit_restores_users_and_factors(backend: InMemoryBackend) -> None:
    alice = add_user(backend, "t", "alice", "pw")
    unit = backend.begin_unit()
    backend.create_user("t", "bob")
    backend.delete_user("t", "alice")
    unit.rollback()
    assert backend.find_user("t", "bob") is None
    assert backend.find_user("t", "alice") == alice
    assert backend.get_password_hash("t", alice.user_id) is not None


def test_attempt_log(backend: InMemoryBackend) -> None:
    key = AttemptKey("t", "a", "password")
    backend.register_failure(key, now=T0, client_ip="203.0.113.1", **WINDOW)
    backend.register_success(key, now=T0 + timedelta(seconds=1))
    log = backend.attempt_log
    assert [(e.success, e.client_ip) for e in log] == [(False, "203.0.113.1"), (True, None)]


def test_disable_unknown_user(backend: InMemoryBackend) -> None:
    with pytest.raises(UserNotFound):
        backend.set_disabled("t", "nobody")


def test_failure_counting_is_atomic_under_threads(backend: InMemoryBackend) -> None:
    key = AttemptKey("t", "a", "password")
    locks: list[object] = []
    policy = {"window": timedelta(hours=1), "max_failures": 7, "lock_duration": timedelta(minutes=1)}

    def hammer() -> None:
        for _ in range(50):
            if backend.register_failure(key, now=T0, **policy).locked_until is not None:
                locks.append(1)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(locks) == 400 // 7
    assert len(backend.attempt_log) == 400
