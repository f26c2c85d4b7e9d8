"""The lockout pairs IPv6 per /64 and counts distinct networks toward the account lock
(issue 28, point 4): the addresses of one /64 are one guesser, the hosts of one network add
up to at most the network's limit, and the account-wide lock needs many networks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import Authenticated, FactorRequired, InvalidCredential, Locked
from flask_authflow._throttle.keys import host_key
from flask_authflow.login._lockout import LockoutPolicy, network_subject, pair_subject
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.parts import child_processes
from tests.test_lockout_race import CountingHasher, make_backend
from tests.test_throttle import RIGHT, attempt, ctx

WRONG = "wrong password 1"
OWNER = "198.51.100.7"  # the owner's own network, never used by the attackers
ALICE = AttemptKey("acme", "alice", "password")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, hasher: CountingHasher) -> Iterator[Any]:
    store = make_backend(request.param, request, tmp_path, MockClock())
    add_user(store, "acme", "alice", RIGHT, hasher=hasher)
    hasher.started = 0
    yield store
    if request.param != "memory":
        store.close()


@pytest.fixture
def hasher() -> CountingHasher:
    """The hasher of the tests' service, counting the Argon2 checks it starts."""
    return CountingHasher()


def _service(backend: Any, hasher: CountingHasher, clock: MockClock) -> AuthnService:
    return AuthnService(
        backend, backend, hasher=hasher, clock=clock, lockout=LockoutPolicy(), account_tokens=backend
    )


def _begin(svc: AuthnService, clock: MockClock, ip: str) -> Any:
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    return svc.with_audit_context(ctx(ip)).begin_login("alice", "acme", session)


def test_an_ipv6_host_is_its_64_and_an_ipv4_host_its_address() -> None:
    assert host_key("2001:db8:1:2::1") == host_key("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64"
    assert host_key("2001:db8:1:3::1") != host_key("2001:db8:1:2::1")
    assert host_key("203.0.113.5") == host_key("::ffff:203.0.113.5") == "203.0.113.5"
    assert host_key("203.0.113.6") != host_key("203.0.113.5")
    assert host_key("not an address") == host_key(None) == "unknown"
    assert pair_subject("alice", "2001:db8:1:2::1") == pair_subject("alice", "2001:db8:1:2::99")
    assert network_subject("alice", "2001:db8:1:2::1") == network_subject("alice", "2001:db8:1:ff::1")
    assert network_subject("alice", "203.0.113.5") == network_subject("alice", "203.0.113.200")
    assert network_subject("alice", "203.0.113.5") != pair_subject("alice", "203.0.113.5")


def test_twenty_addresses_of_one_64_with_five_guesses_each_leave_the_owner_in(
    backend: Any, hasher: CountingHasher
) -> None:
    """The issue's attack: 100 guesses from 20 addresses of one /64."""
    clock = MockClock()
    svc = _service(backend, hasher, clock)
    outcomes = [attempt(svc, clock, f"2001:db8:1:2::{n + 1:x}", WRONG) for n in range(20) for _ in range(5)]
    assert outcomes[:4] == [InvalidCredential()] * 4
    assert all(isinstance(outcome, Locked) for outcome in outcomes[4:])
    assert hasher.started == 5  # one host: five checks, the rest refused before Argon2
    assert backend.locked_until("acme", "alice", clock.now()) is None
    assert isinstance(_begin(svc, clock, "2001:db8:1:3::1"), FactorRequired)  # the next /64 is another host
    owner = backend.find_user("acme", "alice").user_id
    assert attempt(svc, clock, OWNER, RIGHT) == Authenticated(owner, "acme")


def test_a_network_rotating_through_its_hosts_stops_at_the_network_limit(
    backend: Any, hasher: CountingHasher
) -> None:
    clock = MockClock()
    svc = _service(backend, hasher, clock)
    for n in range(30):  # 30 hosts of one /24 at their pair limit would be 150 checks
        for _ in range(5):
            attempt(svc, clock, f"203.0.113.{n + 1}", WRONG)
    assert hasher.started == LockoutPolicy().network_threshold  # 20
    assert backend.locked_until("acme", network_subject("alice", "203.0.113.1"), clock.now()) is not None
    # The network counted its five toward the account, no more: the account is open.
    assert backend.locked_until("acme", "alice", clock.now()) is None
    assert isinstance(_begin(svc, clock, "203.0.113.250"), Locked)  # a fresh host of that network
    assert isinstance(attempt(svc, clock, OWNER, RIGHT), Authenticated)


def test_a_distributed_attack_from_many_networks_reaches_the_account_lock(
    backend: Any, hasher: CountingHasher
) -> None:
    clock = MockClock()
    svc = _service(backend, hasher, clock)
    for n in range(19):  # 19 networks, 5 each: 95 counted
        for _ in range(5):
            attempt(svc, clock, f"2001:db8:{n + 1:x}::1", WRONG)
    assert backend.locked_until("acme", "alice", clock.now()) is None
    for _ in range(5):  # the twentieth network
        last = attempt(svc, clock, "192.0.2.1", WRONG)
    assert isinstance(last, Locked)
    assert backend.locked_until("acme", "alice", clock.now()) is not None
    assert isinstance(attempt(svc, clock, OWNER, RIGHT), Locked)


def test_a_success_resets_the_hosts_network_too(backend: Any, hasher: CountingHasher) -> None:
    clock = MockClock()
    svc = _service(backend, hasher, clock)
    for n in range(3):  # 3 hosts of one network, 4 failures each: 12 on the network
        for _ in range(4):
            attempt(svc, clock, f"203.0.113.{n + 1}", WRONG)
    assert isinstance(attempt(svc, clock, "203.0.113.99", RIGHT), Authenticated)
    network = AttemptKey("acme", network_subject("alice", "203.0.113.1"), "password")
    assert backend.failure_count(network) == 0


# --- parallel requests ---------------------------------------------------------------------------


def _burst(svc: AuthnService, clock: MockClock, addresses: list[str]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(addresses)) as pool:
        return list(pool.map(lambda ip: attempt(svc, clock, ip, WRONG), addresses))


def test_parallel_guesses_from_one_64_are_answered_at_most_five_times(
    backend: Any, hasher: CountingHasher
) -> None:
    clock = MockClock()
    hasher.hold = 0.02
    svc = _service(backend, hasher, clock)
    outcomes = _burst(svc, clock, [f"2001:db8:1:2::{n + 1:x}" for n in range(30)])
    assert all(isinstance(o, InvalidCredential | Locked) for o in outcomes)
    assert sum(isinstance(o, InvalidCredential) for o in outcomes) == 4  # the fifth locks the /64
    assert backend.failure_count(ALICE) == 5
    assert backend.locked_until("acme", "alice", clock.now()) is None
    hasher.hold = 0.0
    assert isinstance(attempt(svc, clock, OWNER, RIGHT), Authenticated)


def test_parallel_guesses_from_one_network_count_five_on_the_account(
    backend: Any, hasher: CountingHasher
) -> None:
    clock = MockClock()
    hasher.hold = 0.02
    svc = _service(backend, hasher, clock)
    outcomes = _burst(svc, clock, [f"203.0.113.{n + 1}" for n in range(40)])
    answered = sum(isinstance(o, InvalidCredential) for o in outcomes)
    assert answered == LockoutPolicy().network_threshold - 1  # the twentieth locks the network
    assert backend.failure_count(ALICE) == 5  # the network's share, whatever the interleaving
    assert backend.locked_until("acme", "alice", clock.now()) is None


# --- several processes on PostgreSQL ------------------------------------------------------------


def _network_burst(url: str, first: int, start: Any, checks: Any) -> None:
    clock = MockClock()
    hasher = CountingHasher(hold=0.02)
    store = SqlAlchemyBackend(url, clock=clock)
    svc = _service(store, hasher, clock)
    start.wait(20)
    _burst(svc, clock, [f"203.0.113.{first + n}" for n in range(10)])
    with checks.get_lock():
        checks.value += hasher.started
    store.close()


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_several_processes_guessing_from_one_network_count_five_on_the_account(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    clock = MockClock()
    setup = SqlAlchemyBackend(url, clock=clock)
    add_user(setup, "acme", "alice", RIGHT, hasher=CountingHasher())
    context = child_processes()
    start, checks = context.Event(), context.Value("i", 0)
    processes = [
        context.Process(target=_network_burst, args=(url, 1 + 10 * n, start, checks)) for n in range(4)
    ]
    for process in processes:
        process.start()
    time.sleep(1.5)  # let every process import and connect before the burst
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    try:
        assert checks.value >= LockoutPolicy().network_threshold  # each counted guess ran Argon2
        assert setup.failure_count(ALICE) == 5
        assert setup.locked_until("acme", "alice", clock.now()) is None
        svc = _service(setup, CountingHasher(), clock)
        assert isinstance(attempt(svc, clock, OWNER, RIGHT), Authenticated)
    finally:
        setup.close()
