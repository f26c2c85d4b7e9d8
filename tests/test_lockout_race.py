"""Lockout holds under parallel requests: verify first, then one conditional count.

Before the first fix the lock was checked before the verify and the failure counted after
it, so a burst of N guesses got N verifications (50 parallel attempts at threshold 5: the
correct password was accepted after 37 recorded failures). Then each attempt was reserved
in a transaction of its own before Argon2 ran (three commits a login). Now Argon2 runs
with no lock held and the settlement decides under the counters' locks, in the step's one
transaction: a wrong guess is counted and answered only while every level has room, a
right one only while no level is locked. However many run in parallel, at most
``max_failures`` guesses are answered in the window, on every store, across threads and
across processes; the others are answered ``Locked`` whatever they were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import Authenticated, FactorCredential, InvalidCredential, Locked
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import StoreBusy
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend, lockouts_table
from flask_authflow.testing._users import add_user
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
        #: Holds the checks of one password (its bytes) until set.
        self.gates: dict[bytes, threading.Event] = {}
        self.started = 0
        self._count_lock = threading.Lock()

    def _verify(self, hash: str, data: bytes) -> bool:
        with self._count_lock:
            self.started += 1
        if data in self.gates:
            self.gates[data].wait(10)
        elif self.gate is not None:
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


def make_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path, clock: MockClock) -> Any:
    """A backend of ``kind``: memory, SQLite, or PostgreSQL (whose reservation and
    success settlement are single statements of their own)."""
    if kind == "memory":
        return InMemoryBackend(clock=clock)
    if kind == "sqlite":
        return SqlAlchemyBackend(f"sqlite:///{tmp_path / 'race.db'}", clock=clock)
    url = request.getfixturevalue("postgres_server").new_database()
    return SqlAlchemyBackend(url, clock=clock)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend_and_hasher(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Any, CountingHasher]]:
    clock = MockClock()
    hasher = CountingHasher()
    backend = make_backend(request.param, request, tmp_path, clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
    hasher.started = 0
    yield backend, hasher
    if request.param != "memory":
        backend.close()


def _service(backend: Any, hasher: PasswordHasher) -> tuple[AuthnService, MockClock]:
    from flask_authflow.login._lockout import LockoutPolicy

    clock = backend._clock if hasattr(backend, "_clock") else MockClock()
    return AuthnService(
        backend,
        backend,
        hasher=hasher,
        lockout=LockoutPolicy(max_failures=THRESHOLD),
        clock=clock,
        account_tokens=backend,
    ), clock


def _logged(backend: Any, subject: str) -> int:
    """Failures logged on the account ``subject`` (its own level, not its pairs)."""
    if isinstance(backend, InMemoryBackend):
        return sum(1 for row in backend.attempt_log if (row.subject, row.success) == (subject, False))
    return int(backend.attempt_count("acme", subject, success=False))


def _succeeded(backend: Any) -> bool:
    """Whether a success was settled on alice's account (SQL: its counter's latest success)."""
    if isinstance(backend, InMemoryBackend):
        return any(row.subject == "alice" and row.success for row in backend.attempt_log)
    t = lockouts_table.c
    query = select(t.last_success_at).where(t.tenant == "acme", t.subject == "alice", t.factor == "password")
    with backend.engine.connect() as conn:
        return conn.execute(query).scalar() is not None


def _counted(backend: Any) -> int:
    """Wrong guesses counted (and so answered) on the account."""
    return _logged(backend, "alice")


def test_guesses_checked_together_are_answered_only_within_the_limit(
    backend_and_hasher: tuple[Any, CountingHasher],
) -> None:
    """Ten wrong guesses and the right one all run Argon2 together (no lock is held while
    they do); the wrong ones settle first: four are answered "invalid", the fifth sets the
    lock, the rest are answered "locked" uncounted, and the right one, settled last, too."""
    backend, hasher = backend_and_hasher
    service, clock = _service(backend, hasher)
    wrong = threading.Event()
    right = threading.Event()
    hasher.gates = {f"wrong-{i}".encode(): wrong for i in range(10)}
    hasher.gates[RIGHT.encode()] = right
    with ThreadPoolExecutor(max_workers=11) as pool:
        guesses = [pool.submit(attempt, service, clock, f"wrong-{i}") for i in range(10)]
        correct = pool.submit(attempt, service, clock, RIGHT)
        deadline = time.monotonic() + 10
        while hasher.started < 11 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert hasher.started == 11  # nothing held any of them back before Argon2
        wrong.set()
        results = [future.result(timeout=20) for future in guesses]
        right.set()
        outcome = correct.result(timeout=20)
    assert sum(isinstance(r, InvalidCredential) for r in results) == THRESHOLD - 1
    assert sum(isinstance(r, Locked) for r in results) == 10 - (THRESHOLD - 1)
    assert _counted(backend) == THRESHOLD
    assert isinstance(outcome, Locked)  # the lock set while it ran wins
    assert not _succeeded(backend)
    hasher.gates = {}
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == 11  # the correct password never reached Argon2 while locked


def test_fifty_parallel_guesses_are_answered_at_most_five_times(
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
    assert sum(isinstance(o, InvalidCredential) for o in outcomes) == THRESHOLD - 1
    assert sum(isinstance(o, Locked) for o in outcomes) == ATTEMPTS - THRESHOLD + 1
    assert _counted(backend) == THRESHOLD
    hasher.hold = 0.0
    before = hasher.started
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == before


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_lock_set_while_the_correct_password_is_checked_wins(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The lock is re-checked before a success becomes Authenticated (on the SQL stores,
    while the success is settled): no success is logged, the counter is not reset, and
    the reservation is given back."""
    clock = MockClock()
    hasher = CountingHasher()
    backend = make_backend(kind, request, tmp_path, clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
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
        assert not _succeeded(backend)
        assert backend.failure_count(AttemptKey("acme", "alice", "password")) == 1
        assert reservations_held(backend) == 0
        backend.close()


def reservations_held(backend: SqlAlchemyBackend) -> int:
    from sqlalchemy import func, select

    from flask_authflow.storage._sql.backend import reservations_table

    with backend.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(reservations_table)).scalar_one())


def test_a_reservation_is_given_back_when_the_check_fails_with_an_error() -> None:
    clock = MockClock()
    hasher = CountingHasher()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
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
    backend = SqlAlchemyBackend(url, clock=clock)
    service, _ = _service(backend, hasher)
    start.wait(20)
    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(lambda i: attempt(service, clock, f"wrong-{i}"), range(count)))
    with verifications.get_lock():
        verifications.value += hasher.started
    backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_several_processes_on_postgresql_count_exactly_five_guesses(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    clock = MockClock()
    setup = SqlAlchemyBackend(url, clock=clock)
    add_user(setup, "acme", "alice", RIGHT, hasher=CountingHasher())
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
    assert verifications.value >= THRESHOLD
    assert _counted(setup) == THRESHOLD  # of fifty guesses from five processes
    hasher = CountingHasher()
    checker = SqlAlchemyBackend(url, clock=clock)
    service, clock = _service(checker, hasher)
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == 0
    checker.close()
    setup.close()


LEVELS = [AttemptKey("acme", "alice\x1f@192.0.2.1", "password"), AttemptKey("acme", "alice", "password")]


def _process_successes(url: str, index: int, start: Any) -> None:
    """Settle five successes of alice's (pair, account) levels, at this process's moments."""
    backend = SqlAlchemyBackend(url, clock=MockClock())
    start.wait(20)
    for j in range(5):
        now = MockClock().now() + timedelta(minutes=index + 4 * j)  # interleaved in time
        assert backend.settle_success(LEVELS, now=now) is None
    backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_successes_settled_by_several_processes_leave_the_latest(postgres_server: Any) -> None:
    """Four processes settle successes of levels whose counters do not exist yet, each with
    its own moments: every settlement succeeds (none trips over another's new row) and each
    counter remembers the latest success, whatever order they committed in."""
    url = postgres_server.new_database()
    setup = SqlAlchemyBackend(url, clock=MockClock())
    context = child_processes()
    start = context.Event()
    processes = [context.Process(target=_process_successes, args=(url, i, start)) for i in range(4)]
    for process in processes:
        process.start()
    time.sleep(1.0)  # let every process import and connect first
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    t = lockouts_table.c
    with setup.engine.connect() as conn:
        remembered = conn.execute(select(t.subject, t.last_success_at).where(t.tenant == "acme")).all()
    latest = MockClock().now() + timedelta(minutes=3 + 4 * 4)
    assert sorted(remembered) == sorted((key.subject, latest) for key in LEVELS)
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
        # Settled before the fifth counted failure: one of the five answered guesses. A
        # real login resets the failure count, so guesses settled after it count again.
        assert _succeeded(backend)
        return
    # Settled after the fifth wrong guess locked the account (or refused by a busy store):
    # exactly five were counted, and the account stays locked.
    assert isinstance(outcomes[ATTEMPTS // 2], (Locked, StoreBusy))
    assert sum(isinstance(o, InvalidCredential) for o in outcomes) == THRESHOLD - 1
    assert _counted(backend) == THRESHOLD
    hasher.hold = 0.0
    before = hasher.started
    assert isinstance(attempt(service, clock, RIGHT), Locked)
    assert hasher.started == before


def test_an_unknown_identifier_is_counted_and_locked_the_same_way(
    backend_and_hasher: tuple[Any, CountingHasher],
) -> None:
    """No oracle: parallel guesses on an identifier with no account are counted and answered
    exactly as on a real one."""
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
    assert hasher.started >= THRESHOLD  # the dummy hash is verified, as for a real account
    assert sum(isinstance(o, InvalidCredential) for o in outcomes) == THRESHOLD - 1
    assert sum(isinstance(o, Locked) for o in outcomes) == ATTEMPTS - THRESHOLD + 1
    assert _logged(backend, "mallory") == THRESHOLD


def test_the_store_down_at_reservation_refuses_without_argon2() -> None:
    from flask_authflow.errors import StoreUnavailable

    clock = MockClock()
    hasher = CountingHasher()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
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
    from flask_authflow._core.ports import RESERVATION_TTL, AttemptKey

    clock = MockClock()
    backend = make_backend(kind, request, tmp_path, clock)
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
