"""Credential stuffing in parallel: guesses from 50 addresses against one account, and from
one address against 50 accounts, on memory, SQLite and PostgreSQL (threads), and on
PostgreSQL from several processes. The owner, from a fresh address, still logs in; the
hammering address is throttled; a throttled request runs no Argon2 (counted)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._outcomes import Authenticated
from flask_authflow._throttle import Throttle, parse_limits
from flask_authflow.errors import StoreBusy, Throttled
from flask_authflow.login._lockout import pair_subject
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.parts import child_processes
from tests.test_throttle import RIGHT, CountingHasher, attempt

WRONG = "wrong password 1"
HAMMER = "203.0.113.66"


def make_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    clock = MockClock()
    if kind == "memory":
        return InMemoryBackend(clock=clock)
    if kind == "sqlite":
        backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'race.db'}", clock=clock)
    else:
        url = request.getfixturevalue("postgres_server").new_database()
        backend = SqlAlchemyBackend(url, clock=clock)
    request.addfinalizer(backend.close)  # also when an assertion failed
    return backend


def make_service(
    backend: Any, hasher: CountingHasher, limits: dict[str, str]
) -> tuple[AuthnService, MockClock]:
    clock = MockClock()
    throttle = Throttle(parse_limits("race", limits))
    return AuthnService(
        backend, backend, hasher=hasher, clock=clock, throttle=throttle, account_tokens=backend
    ), clock


def guess(service: AuthnService, clock: MockClock, ip: str, user: str = "alice") -> str:
    """``throttled``, ``busy`` or the outcome's class name."""
    try:
        return type(attempt(service, clock, ip, WRONG, user=user)).__name__
    except Throttled:
        return "throttled"
    except StoreBusy:
        # Dozens of settlements queued on the account's counter row after their Argon2: the
        # ones that waited past the lock timeout are refused, unanswered (failing closed).
        return "busy"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_fifty_addresses_against_one_account(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    hasher = CountingHasher()
    backend = make_backend(kind, request, tmp_path)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
    service, clock = make_service(backend, hasher, {"factor.address": "3/minute", "factor.network": None})
    # One address in each of 50 networks (the hosts of one network lock together at 20).
    addresses = [f"198.51.{n + 1}.7" for n in range(50)] + [HAMMER] * 12
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda ip: (ip, guess(service, clock, ip)), addresses))
    hammer = [outcome for ip, outcome in results if ip == HAMMER]
    spread = [outcome for ip, outcome in results if ip != HAMMER]
    assert hammer.count("throttled") == 12 - 3  # the hammering address is throttled ...
    assert set(spread) == {"InvalidCredential"}  # ... while one guess per address is only wrong
    # Every request that was not throttled ran exactly one Argon2 verify; none of the rest did.
    assert hasher.verifies == len(results) - hammer.count("throttled")
    before = hasher.verifies
    assert isinstance(
        attempt(service, clock, "192.0.2.200", RIGHT), Authenticated
    )  # the owner, fresh address
    assert hasher.verifies == before + 1


def test_one_address_against_fifty_accounts(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    hasher = CountingHasher()
    backend = make_backend(kind, request, tmp_path)
    for n in range(50):
        add_user(backend, "acme", f"user{n}", RIGHT, hasher=hasher)
    service, clock = make_service(backend, hasher, {"login.address": "10/minute", "login.network": None})
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda n: guess(service, clock, HAMMER, user=f"user{n}"), range(50)))
    assert results.count("throttled") == 40  # one password tried on each account is slowed
    assert hasher.verifies == 50 - results.count("throttled")
    assert isinstance(attempt(service, clock, "192.0.2.201", RIGHT, user="user7"), Authenticated)


def _process_stuffing(url: str, process: int, start: Any, verifies: Any, throttled: Any, locked: Any) -> None:
    hasher = CountingHasher()
    backend = SqlAlchemyBackend(url, clock=MockClock())
    service, clock = make_service(backend, hasher, {"factor.address": "2/minute", "factor.network": None})
    addresses = [f"198.51.{100 + process}.{n + 1}" for n in range(10)] + [HAMMER] * 5
    start.wait(20)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda ip: guess(service, clock, ip), addresses))
    with verifies.get_lock():
        verifies.value += hasher.verifies
    with throttled.get_lock():
        throttled.value += results.count("throttled")
    with locked.get_lock():
        locked.value += results.count("Locked") + results.count("busy")
    backend.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_several_processes_on_postgresql(postgres_server: Any, request: pytest.FixtureRequest) -> None:
    url = postgres_server.new_database()
    setup = SqlAlchemyBackend(url, clock=MockClock())
    request.addfinalizer(setup.close)
    add_user(setup, "acme", "alice", RIGHT, hasher=CountingHasher())
    context = child_processes()
    start = context.Event()
    verifies, throttled, locked = context.Value("i", 0), context.Value("i", 0), context.Value("i", 0)
    processes = [
        context.Process(target=_process_stuffing, args=(url, n, start, verifies, throttled, locked))
        for n in range(5)
    ]
    for process in processes:
        process.start()
    time.sleep(1.5)  # let every process import and connect before the burst
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    # Memory counts are per process: each throttles the hammer after two of its five guesses,
    # unless the (account, address) lock in the shared store, set by then in another
    # process, refuses a guess first (at begin_login, before the factor step's throttle).
    # Either way at most five of the hammer's 25 guesses were answered, across all processes
    # (a guess refused as busy, its settlement having waited too long, counts as locked: it
    # was not answered either).
    assert 0 < throttled.value <= 5 * 3
    assert throttled.value + locked.value >= 25 - 5
    # Every request that was not throttled or refused at begin_login by the lock ran its
    # Argon2 verify (verify first, count after): one per spread address, and the hammer's
    # that passed the begin before its pair was locked ...
    assert 5 * 15 - throttled.value - locked.value <= verifies.value <= 5 * 15 - throttled.value
    assert verifies.value > 50
    # ... of which at most five were counted, and so answered, across all processes: the
    # others were answered "locked" whatever they were.
    assert setup.attempt_count("acme", pair_subject("alice", HAMMER), success=False) <= 5
    hasher = CountingHasher()
    checker = SqlAlchemyBackend(url, clock=MockClock())
    request.addfinalizer(checker.close)
    service, clock = make_service(checker, hasher, {})
    assert isinstance(attempt(service, clock, "192.0.2.202", RIGHT), Authenticated)
