"""Rate limits (flask_authflow._throttle): per address, per network, per account and recipient,
the failure-rate guard, and the login steps that ask before any Argon2 runs."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from limits.storage import MemoryStorage

from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import Authenticated, FactorCredential, InvalidCredential, Locked
from flask_authflow._throttle import (
    DEFAULT_LIMITS,
    Throttle,
    ThrottleSettings,
    address_key,
    digest,
    network_key,
    parse_limits,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import ConfigurationError, StoreUnavailable, Throttled
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user

RIGHT = "correct horse battery staple"


def throttle(**overrides: str | None) -> Throttle:
    return Throttle(parse_limits("test", {k.replace("__", "."): v for k, v in overrides.items()}))


class CountingHasher(PasswordHasher):
    """The cheapest Argon2id, counting every verification (a throttled request must cost none)."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1, max_concurrent=64)
        self.verifies = 0
        self._count = threading.Lock()

    def _verify(self, hash: str, data: bytes) -> bool:
        with self._count:
            self.verifies += 1
        return super()._verify(hash, data)


def ctx(ip: str | None) -> AuditContext:
    return AuditContext(client_ip=ip, ip_source="peer", user_agent="t", request_id="r")


def attempt(
    service: AuthnService, clock: MockClock, ip: str | None, password: str, user: str = "alice"
) -> Any:
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    handle = service.with_audit_context(ctx(ip))
    begun = handle.begin_login(user, "acme", session)
    if isinstance(begun, Locked):  # the (account, address) pair's lock refuses at the start
        return begun
    with FactorCredential.password(password) as credential:
        return handle.verify_factor(credential, session)


# --- keys ----------------------------------------------------------------------------------------


def test_network_of_ipv4_is_its_24_and_of_ipv6_its_56() -> None:
    assert network_key("203.0.113.77") == "203.0.113.0/24"
    assert network_key("2001:db8:abcd:12ff:1::1") == "2001:db8:abcd:1200::/56"
    assert network_key("::ffff:203.0.113.9") == "203.0.113.0/24"  # mapped: counted as IPv4


@pytest.mark.parametrize(
    "bad", [None, "", "not an ip", "1.2.3.4.5", "203.0.113.7/24", "x" * 5000, "1.2.3.4\x00"]
)
def test_malformed_addresses_share_one_unknown_bucket(bad: str | None) -> None:
    assert address_key(bad) == "unknown"
    assert network_key(bad) == "unknown"


def test_accounts_and_recipients_are_hashed_case_insensitively() -> None:
    assert digest("Alice@Example.com") == digest("alice@example.com ")
    assert "alice" not in digest("alice@example.com")
    assert digest("acme", "u1") != digest("acme", "u2")


# --- settings ------------------------------------------------------------------------------------


def settings(**config: Any) -> ThrottleSettings:
    return ThrottleSettings.from_config(config)


def test_defaults_are_on_in_memory_with_every_limit() -> None:
    s = settings()
    assert s.enabled is True
    assert s.storage() == "memory://"
    assert set(s.limits()) == set(DEFAULT_LIMITS)
    assert all(s.limits()[name] for name in DEFAULT_LIMITS)


def test_redis_sessions_put_the_counts_in_the_same_redis() -> None:
    s = settings(AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_REDIS_URL="redis://127.0.0.1:6379/3")
    assert s.storage() == "redis://127.0.0.1:6379/3"
    explicit = settings(AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_THROTTLE_STORAGE_URL="memory://")
    assert explicit.storage() == "memory://"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"AUTHFLOW_THROTTLE_LIMITS": {"login.adress": "5/minute"}}, "unknown limits"),
        ({"AUTHFLOW_THROTTLE_LIMITS": {"login.address": "five per minute"}}, "is not a limit"),
        ({"AUTHFLOW_THROTTLE_LIMITS": {"login.address": 5}}, "must be a limit"),
        ({"AUTHFLOW_THROTTLE_LIMITS": ["login.address"]}, "must be a mapping"),
        ({"AUTHFLOW_THROTTLE_STORAGE_URL": "mongodb://x"}, "memory:// or a redis://"),
    ],
)
def test_bad_configuration_is_refused_at_start_up(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings(**config)


def test_a_limit_set_to_none_is_switched_off() -> None:
    t = throttle(login__address=None, login__network=None)
    for _ in range(50):
        t.hit("login", address="203.0.113.7")


# --- the limiter ---------------------------------------------------------------------------------


def test_per_address_limit_refuses_with_retry_after_and_other_addresses_pass() -> None:
    t = throttle(login__address="3/minute")
    for _ in range(3):
        t.hit("login", address="203.0.113.7")
    with pytest.raises(Throttled) as refused:
        t.hit("login", address="203.0.113.7")
    assert refused.value.status == 429
    assert 1 <= refused.value.retry_after <= 60
    assert refused.value.scope == "login.address"
    t.hit("login", address="198.51.100.1")  # another address has its own budget


def test_per_network_limit_catches_rotating_addresses_of_one_24() -> None:
    t = throttle(login__address="100/minute", login__network="4/minute")
    for host in range(1, 5):
        t.hit("login", address=f"203.0.113.{host}")
    with pytest.raises(Throttled) as refused:
        t.hit("login", address="203.0.113.200")
    assert refused.value.scope == "login.network"
    t.hit("login", address="203.0.114.1")  # the next /24 is another network


def test_ipv6_addresses_of_one_56_are_one_network() -> None:
    t = throttle(factor__address="100/minute", factor__network="2/minute")
    t.hit("factor", address="2001:db8:0:1::1")
    t.hit("factor", address="2001:db8:0:ff::2")
    with pytest.raises(Throttled):
        t.hit("factor", address="2001:db8:0:42::3")
    t.hit("factor", address="2001:db8:0:100::1")  # another /56


def test_a_refused_request_counts_against_nothing() -> None:
    t = throttle(mail__recipient="1/hour", mail__address="3/hour")
    t.hit("mail", address="203.0.113.7", recipient="victim@example.com")
    with pytest.raises(Throttled):
        t.hit("mail", address="203.0.113.7", recipient="victim@example.com")
    # The refusal did not use up the address's budget: two more mails to others go out.
    t.hit("mail", address="203.0.113.7", recipient="a@example.com")
    t.hit("mail", address="203.0.113.7", recipient="b@example.com")
    with pytest.raises(Throttled):
        t.hit("mail", address="203.0.113.7", recipient="c@example.com")


def test_mails_are_limited_per_recipient_and_per_account_across_addresses() -> None:
    t = throttle(mail__recipient="2/hour", mail__account="3/hour")
    t.hit("mail", address="203.0.113.1", recipient="Foreign@Example.com", account=("acme", "u1"))
    t.hit("mail", address="198.51.100.2", recipient="foreign@example.com", account=("acme", "u2"))
    with pytest.raises(Throttled) as by_recipient:  # a third session, another address: same inbox
        t.hit("mail", address="192.0.2.3", recipient="foreign@example.com", account=("acme", "u3"))
    assert by_recipient.value.scope == "mail.recipient"
    t.hit("mail", address="192.0.2.4", recipient="x@example.com", account=("acme", "u1"))
    t.hit("mail", address="192.0.2.5", recipient="y@example.com", account=("acme", "u1"))
    with pytest.raises(Throttled) as by_account:
        t.hit("mail", address="192.0.2.6", recipient="z@example.com", account=("acme", "u1"))
    assert by_account.value.scope == "mail.account"


def test_failure_spike_slows_every_address_on_login() -> None:
    t = throttle(failures__global="3/minute", login__spike="1/minute")
    t.hit("login", address="192.0.2.1")
    t.hit("login", address="192.0.2.1")  # no spike yet: the ordinary limit applies
    assert not t.spiking()
    for _ in range(3):
        t.failure()
    assert t.spiking()
    t.hit("login", address="198.51.100.9")
    with pytest.raises(Throttled) as refused:
        t.hit("login", address="198.51.100.9")
    assert refused.value.scope == "login.spike"
    t.hit("factor", address="198.51.100.9")  # the spike limit is the login's only


def test_disabled_throttle_counts_nothing() -> None:
    t = Throttle(parse_limits("t", {"login.address": "1/minute"}), enabled=False)
    for _ in range(5):
        t.hit("login", address="203.0.113.7")
        t.failure()
    assert not t.spiking()


def test_unknown_scope_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown throttle scope"):
        throttle().hit("logon", address="203.0.113.7")


class BrokenStorage(MemoryStorage):
    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        raise ConnectionError("redis is down")


def test_a_failing_storage_refuses_the_request_fail_closed() -> None:
    t = Throttle(parse_limits("t", {}), BrokenStorage())
    with pytest.raises(StoreUnavailable):
        t.hit("login", address="203.0.113.7")
    t.failure()  # the guard is advisory: reporting a failure never raises


# --- the login steps -----------------------------------------------------------------------------


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


def service_with(
    clock: MockClock, limits: dict[str, str | None]
) -> tuple[AuthnService, InMemoryBackend, CountingHasher]:
    hasher = CountingHasher()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
    service = AuthnService(
        backend,
        backend,
        hasher=hasher,
        clock=clock,
        throttle=Throttle(parse_limits("t", limits)),
        account_tokens=backend,
    )
    return service, backend, hasher


def test_a_throttled_password_step_runs_no_argon2_and_is_audited(clock: MockClock) -> None:
    service, backend, hasher = service_with(clock, {"factor.address": "2/minute"})
    for _ in range(2):
        assert isinstance(attempt(service, clock, "203.0.113.7", "wrong password 1"), InvalidCredential)
    before = hasher.verifies
    with pytest.raises(Throttled) as refused:
        attempt(service, clock, "203.0.113.7", RIGHT)
    assert hasher.verifies == before  # not one Argon2 run for the throttled request
    assert refused.value.retry_after >= 1
    rows = [r for r in backend.audit_rows if r.status == "throttled"]
    assert [(r.event, r.reason, r.client_ip) for r in rows] == [
        ("factor_verify", "factor.address", "203.0.113.7")
    ]
    # The owner, from another address, is not slowed by the attacker's address.
    assert isinstance(attempt(service, clock, "198.51.100.20", RIGHT), Authenticated)


def test_a_throttled_login_start_changes_no_session(clock: MockClock) -> None:
    service, backend, hasher = service_with(clock, {"login.address": "1/minute"})
    session = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    handle = service.with_audit_context(ctx("203.0.113.7"))
    handle.begin_login("alice", "acme", session)
    fresh = AuthSession(new_guest_record(clock.now()), new=True, request_fingerprint="fp")
    before = fresh.record
    with pytest.raises(Throttled):
        handle.begin_login("alice", "acme", fresh)
    assert fresh.record == before
    assert any(r.event == "login_begin" and r.status == "throttled" for r in backend.audit_rows)
    assert hasher.verifies == 0


def test_failed_checks_feed_the_spike_guard(clock: MockClock) -> None:
    service, _, _ = service_with(clock, {"failures.global": "3/minute", "login.spike": "1/minute"})
    for n in range(3):
        attempt(service, clock, f"192.0.2.{n + 1}", "wrong password 1")
    assert service.throttle.spiking()
    assert isinstance(attempt(service, clock, "198.51.100.5", RIGHT), Authenticated)
    with pytest.raises(Throttled):
        attempt(service, clock, "198.51.100.5", RIGHT)


def test_a_service_built_without_a_throttle_limits_nothing(clock: MockClock) -> None:
    hasher = CountingHasher()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=hasher)
    service = AuthnService(backend, backend, hasher=hasher, clock=clock, account_tokens=backend)
    assert not service.throttle.enabled
    for _ in range(30):
        assert isinstance(attempt(service, clock, None, RIGHT), Authenticated)
