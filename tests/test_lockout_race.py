"""Lockout holds under parallel requests: an attempt is reserved before Argon2 runs.

Before the fix the lock was checked before the verify and the failure counted after it,
so a burst of N guesses got N verifications (50 parallel attempts at threshold 5: the
correct password was accepted after 37 recorded failures). Now at most ``max_failures``
credential checks can be in flight or counted in the window, on every store, across
threads and across processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from flask_authflow.audit.context import AuditContext
from flask_authflow.clock import MockClock
from flask_authflow.core.session import AuthSession, new_guest_record
from flask_authflow.errors import StoreBusy
from flask_authflow.login.password import PasswordHasher
from flask_authflow.login.service import AuthnService
from flask_authflow.outcomes import Authenticated, FactorCredential, InvalidCredential, Locked
from flask_authflow.storage.memory import InMemoryBackend
from flask_authflow.storage.sql.backend import SqlAlchemyBackend
from tests.parts import child_processes

CTX = AuditContext(client_ip="203.0.113.7", ip_source="peer", user_agent="race", request_id="race")
RIGHT = "correct horse battery staple"
ATTEMPTS = 50
THRESHOLD = 5


class CountingHasher(PasswordHasher):
    """A cheap Argon2id hasher that counts every verification and can hold it in flight."""

    def __init__(self, hold: float = 0.0) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1, max_concurrent=64)
        self.hold = hold
        self.gate: threading.Event | None = None
        self.started = 0
        self._count_lock = threading.Lock()

    def _verify(self, hash: str, data: bytes) -> bool:
        with self._count_lock:
            self.started += 1
        if self.gate is not None:
            self.gate.wait(10)
        elif self.hold:
            time.sleep(self.hold)
        return super()._verify(hash, data)


def attempt(service: AuthnService, clock: MockClock, password: str) -> Any:
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    handle = service.with_audit_context(CTX)
    begun = handle.begin_login("alice", "acme", session)
    if isinstance(begun, Locked):
        return begun
    with FactorCredential.password(password) as credential:
        return handle.verify_factor(credential, session)


def make_backend(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, hasher: PasswordHasher, clock: MockClock
) -> Any:
    """A backend of ``kind``: memory, SQLite, or PostgreSQL (whose reservation and
    success settlement are single statements of their own)."""
    if kind == "memory":
        return InMemoryBackend(hasher=hasher, clock=clock)
    if kind == "sqlite":
        return SqlAlchemyBackend(f"sqlite:///{tmp_path / 'race.db'}", hasher=hasher, clock=clock)
    url = request.getfixturevalue("postgres_server").new_database()
    return SqlAlchemyBackend(url, hasher=hasher, clock=clock)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend_and_hasher(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Any, CountingHasher]]:
    clock = MockClock()
    hasher = CountingHasher()
    backend = make_backend(request.param, request, tmp_path, hasher, clock)
    backend.create_user("acme", "alice", RIGHT)
    hasher.started = 0
    yield backend, hasher
    if request.param != "memory":
        backend.close()


def _service(backend: Any, hasher: PasswordHasher) -> tuple[AuthnService, MockClock]:
    from flask_authflow.login.lockout import LockoutPolicy

    clock = backend._clock if hasattr(backend, "_clock") else MockClock()
    return AuthnService(
        backend, backend, hasher=hasher, lockout=LockoutPolicy(max_failures=THRESHOLD), clock=clock
    ), clock


def test_attempts_in_flight_hold_back_the_rest(backend_and_hasher: tuple[Any, CountingHasher]) -> None:
    """Five guesses are held inside Argon2; every other attempt, the correct one too, is refused at once."""
    backend, hasher = backend_and_hasher
    service, clock = _service(backend, hasher)
    hasher.gate = threading.Event()
    with ThreadPoolExecutor(max_workers=THRESHOLD) as pool:
        held = [pool.submit(attempt, service, clock, f"wrong-{i}") for i in range(THRESHOLD)]
        deadline = time.monotonic() + 10
        while hasher.started < THRESHOLD and time.monotonic() < deadline:
            time.sleep(0.005)
        assert hasher.started == THRESHOLD
        # The rest arrive while five checks are in flight: refused without running Argon2.
        correct_during = attempt(service, clock, RIGHT)
        others = [attempt(service, clock, f"late-{i}") for i in range(ATTEMPTS - THRESHOLD - 1)]
        assert isinstance(correct_during, Locked)
        assert all(isinstance(outcome, Locked) for outcome in others)
        assert hasher.started == THRESHOLD
        hasher.gate.set()
        results = [future.result(timeout=20) for future in held]
    # The five held guesses fail; the last one reaching the threshold sets the lock.
    assert sum(isinstance(r, Locked) for r in results) == 1
    assert sum(isinstance(r, InvalidCredential) for r in results) == THRESHOLD - 1
    hasher.gate = None
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == THRESHOLD  # the correct password never reached Argon2 while locked


def test_fifty_parallel_guesses_run_at_most_five_verifications(
    backend_and_hasher: tuple[Any, CountingHasher],
) -> None:
    backend, hasher = backend_and_hasher
    service, clock = _service(backend, hasher)
    hasher.hold = 0.02
    barrier = threading.Barrier(ATTEMPTS)

    def one(i: int) -> Any:
        barrier.wait(10)
        return attempt(service, clock, f"wrong-{i}")

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        outcomes = list(pool.map(one, range(ATTEMPTS)))
    assert hasher.started <= THRESHOLD
    assert sum(not isinstance(o, Locked) for o in outcomes) <= THRESHOLD
    hasher.hold = 0.0
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started <= THRESHOLD


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_lock_set_while_the_correct_password_is_checked_wins(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The lock is re-checked before a success becomes Authenticated (on the SQL stores,
    while the success is settled): no success is logged, the counter is not reset, and
    the reservation is given back."""
    from datetime import timedelta

    from flask_authflow.core.ports import AttemptKey

    clock = MockClock()
    hasher = CountingHasher()
    backend = make_backend(kind, request, tmp_path, hasher, clock)
    backend.create_user("acme", "alice", RIGHT)
    if kind != "memory":
        backend.register_failure(
            AttemptKey("acme", "alice", "password"),
            now=clock.now(),
            window=timedelta(hours=1),
            max_failures=THRESHOLD,
            lock_duration=timedelta(minutes=15),
        )
    service, clock = _service(backend, hasher)
    hasher.gate = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        correct = pool.submit(attempt, service, clock, RIGHT)
        deadline = time.monotonic() + 10
        while hasher.started < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        # While Argon2 runs, the account is locked (a parallel failure on another
        # factor, another process, or an operator).
        backend.set_lock(AttemptKey("acme", "alice", "totp"), clock.now() + timedelta(minutes=15))
        hasher.gate.set()
        outcome = correct.result(timeout=20)
    assert isinstance(outcome, Locked)
    assert any(r.reason == "locked_during_check" for r in backend.audit_rows)
    if kind != "memory":
        assert backend.attempt_count("acme", "alice", success=True) == 0
        assert backend.failure_count(AttemptKey("acme", "alice", "password")) == 1
        assert reservations_held(backend) == 0
        backend.close()


def reservations_held(backend: SqlAlchemyBackend) -> int:
    from sqlalchemy import func, select

    from flask_authflow.storage.sql.backend import reservations_table

    with backend.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(reservations_table)).scalar_one())


def test_a_reservation_is_given_back_when_the_check_fails_with_an_error() -> None:
    clock = MockClock()
    hasher = CountingHasher()
    backend = InMemoryBackend(hasher=hasher, clock=clock)
    backend.create_user("acme", "alice", RIGHT)
    service, clock = _service(backend, hasher)

    class Boom(Exception):
        pass

    def explode(*args: Any, **kwargs: Any) -> bool:
        raise Boom

    real = hasher._verify
    hasher._verify = explode  # type: ignore[method-assign]
    for _ in range(THRESHOLD * 2):
        with pytest.raises(Exception):  # noqa: B017 - StoreUnavailable from the guarded verify
            attempt(service, clock, RIGHT)
    hasher._verify = real  # type: ignore[method-assign]
    # No slot leaked: the correct password still gets its check.
    assert isinstance(attempt(service, clock, RIGHT), Authenticated)


def _process_burst(url: str, count: int, start: Any, verifications: Any) -> None:
    clock = MockClock()
    hasher = CountingHasher(hold=0.02)
    backend = SqlAlchemyBackend(url, hasher=hasher, clock=clock)
    service, _ = _service(backend, hasher)
    start.wait(20)
    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(lambda i: attempt(service, clock, f"wrong-{i}"), range(count)))
    with verifications.get_lock():
        verifications.value += hasher.started
    backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_several_processes_on_postgresql_run_at_most_five_verifications(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    clock = MockClock()
    setup = SqlAlchemyBackend(url, hasher=CountingHasher(), clock=clock)
    setup.create_user("acme", "alice", RIGHT)
    context = child_processes()
    start = context.Event()
    verifications = context.Value("i", 0)
    processes = [
        context.Process(target=_process_burst, args=(url, 10, start, verifications)) for _ in range(5)
    ]
    for process in processes:
        process.start()
    time.sleep(1.5)  # let every process import and connect before the burst
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert 1 <= verifications.value <= THRESHOLD
    hasher = CountingHasher()
    checker = SqlAlchemyBackend(url, hasher=hasher, clock=clock)
    service, clock = _service(checker, hasher)
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == 0
    checker.close()
    setup.close()


def test_fifty_parallel_with_the_correct_password_among_them(
    backend_and_hasher: tuple[Any, CountingHasher],
) -> None:
    """The correct password is one of the 50: it succeeds only if it was among the five checked."""
    backend, hasher = backend_and_hasher
    service, clock = _service(backend, hasher)
    hasher.hold = 0.02
    barrier = threading.Barrier(ATTEMPTS)
    passwords = [RIGHT if i == ATTEMPTS // 2 else f"wrong-{i}" for i in range(ATTEMPTS)]

    def one(password: str) -> Any:
        barrier.wait(10)
        try:
            return attempt(service, clock, password)
        except StoreBusy as busy:  # a lock wait gave up on a loaded machine: "try again", a refusal
            return busy

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        outcomes = list(pool.map(one, passwords))
    assert sum(isinstance(o, Authenticated) for o in outcomes) <= 1
    if isinstance(outcomes[ATTEMPTS // 2], Authenticated):
        # A real login resets the failure count, so guesses arriving after it may be
        # checked again; until it, at most five checks ran together.
        return
    assert hasher.started <= THRESHOLD
    if not isinstance(outcomes[ATTEMPTS // 2], Authenticated):
        # Refused because five wrong guesses held every slot (or locked it while it ran):
        # those five were counted, so the account is locked and stays locked.
        assert isinstance(outcomes[ATTEMPTS // 2], (Locked, StoreBusy))
        if isinstance(outcomes[ATTEMPTS // 2], StoreBusy):
            return  # refused before its check: nothing more to say about it
        hasher.hold = 0.0
        before = hasher.started
        assert isinstance(attempt(service, clock, RIGHT), Locked)
        assert hasher.started == before


def test_an_unknown_identifier_is_reserved_and_locked_the_same_way(
    backend_and_hasher: tuple[Any, CountingHasher],
) -> None:
    """No oracle: parallel guesses on an identifier with no account run the same bounded checks."""
    backend, hasher = backend_and_hasher
    service, clock = _service(backend, hasher)
    hasher.hold = 0.02
    barrier = threading.Barrier(ATTEMPTS)

    def one(i: int) -> Any:
        barrier.wait(10)
        session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
        handle = service.with_audit_context(CTX)
        begun = handle.begin_login("mallory", "acme", session)
        if isinstance(begun, Locked):
            return begun
        with FactorCredential.password(f"guess-{i}") as credential:
            return handle.verify_factor(credential, session)

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        outcomes = list(pool.map(one, range(ATTEMPTS)))
    assert 1 <= hasher.started <= THRESHOLD  # the dummy hash is verified, as for a real account
    assert sum(isinstance(o, Locked) for o in outcomes) >= ATTEMPTS - THRESHOLD
    assert not any(isinstance(o, Authenticated) for o in outcomes)


def test_the_store_down_at_reservation_refuses_without_argon2() -> None:
    from flask_authflow.errors import StoreUnavailable

    clock = MockClock()
    hasher = CountingHasher()
    backend = InMemoryBackend(hasher=hasher, clock=clock)
    backend.create_user("acme", "alice", RIGHT)
    hasher.started = 0
    service, clock = _service(backend, hasher)
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    handle = service.with_audit_context(CTX)
    handle.begin_login("alice", "acme", session)
    backend.attempts_unavailable = True
    with FactorCredential.password(RIGHT) as credential, pytest.raises(StoreUnavailable):
        handle.verify_factor(credential, session)
    assert hasher.started == 0
    assert not session.is_authenticated


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_crashed_processs_reservations_expire(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Reservations never settled (the process died mid-check) stop counting after
    RESERVATION_TTL, and the SQL stores delete them at the next reservation."""
    from datetime import timedelta

    from flask_authflow.core.ports import RESERVATION_TTL, AttemptKey

    clock = MockClock()
    backend = make_backend(kind, request, tmp_path, CountingHasher(), clock)
    key = AttemptKey("acme", "alice", "password")
    policy = {"window": timedelta(hours=1), "max_failures": THRESHOLD, "lock_duration": timedelta(minutes=15)}
    granted = [backend.reserve_attempt(key, now=clock.now(), **policy) for _ in range(THRESHOLD)]
    assert all(r.granted for r in granted)
    assert not backend.reserve_attempt(key, now=clock.now(), **policy).granted
    clock.advance(RESERVATION_TTL - timedelta(seconds=1))
    assert not backend.reserve_attempt(key, now=clock.now(), **policy).granted
    clock.advance(timedelta(seconds=2))
    assert backend.reserve_attempt(key, now=clock.now(), **policy).granted
    if kind != "memory":
        assert reservations_held(backend) == 1  # the stale ones went; the new one is held
        backend.close()
