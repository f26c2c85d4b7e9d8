"""Argon2id hashing: parameters, limits, dummy verify, concurrency bound, rehash on login."""

from __future__ import annotations

import threading
import time
from typing import Any

import argon2
import pytest

from flask_authflow._clock import MockClock
from flask_authflow._outcomes import Authenticated, FactorCredential
from flask_authflow.errors import ConfigurationError, PasswordTooLong
from flask_authflow.login._password import MAX_PASSWORD_BYTES, PasswordHasher
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, fast_hasher, new_session


class _Spy:
    """Wraps argon2's hasher (which has slots) to observe calls."""

    def __init__(self, inner: argon2.PasswordHasher, on_call: Any) -> None:
        self.inner = inner
        self.on_call = on_call

    def hash(self, password: bytes) -> str:
        self.on_call("hash")
        return self.inner.hash(password)

    def verify(self, hash: str, password: bytes) -> bool:
        self.on_call("verify")
        return self.inner.verify(hash, password)

    def check_needs_rehash(self, hash: str) -> bool:
        return self.inner.check_needs_rehash(hash)


def test_default_parameters_are_rfc9106_low_memory() -> None:
    hasher = PasswordHasher(max_concurrent=1)
    params = argon2.extract_parameters(hasher.hash("pw"))
    assert params.type is argon2.Type.ID
    assert (params.time_cost, params.memory_cost, params.parallelism) == (3, 64 * 1024, 4)
    assert params.salt_len == 16 and params.hash_len == 32
    assert hasher.parameters == params


def test_default_max_concurrent_is_twice_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    assert PasswordHasher.fast_for_tests().max_concurrent == 6


def test_fast_hasher_is_minimal_argon2id() -> None:
    params = argon2.extract_parameters(fast_hasher().hash("pw"))
    assert params.type is argon2.Type.ID
    assert (params.time_cost, params.memory_cost, params.parallelism) == (1, 8, 1)


def test_hash_and_verify() -> None:
    hasher = fast_hasher()
    stored = hasher.hash("correct horse")
    assert stored.startswith("$argon2id$")
    assert hasher.verify(stored, "correct horse")
    assert hasher.verify(stored, b"correct horse")
    assert not hasher.verify(stored, "wrong")
    assert hasher.hash("x") != hasher.hash("x")  # salted


@pytest.mark.parametrize(
    "bad_hash",
    [
        "",
        "not a hash",
        "$argon2id$v=19$m=8,t=1,p=1$garbage",
        "$argon2i$v=19$m=8,t=1,p=1$c29tZXNhbHQ$aGFzaA",
        "$2b$12$abcdefghijklmnopqrstuuABCDEFGHIJKLMNOPQRSTUVWXYZabcde",
    ],
)
def test_verify_never_raises_on_bad_hashes(bad_hash: str) -> None:
    assert fast_hasher().verify(bad_hash, "pw") is False


def test_verify_refuses_argon2i_even_if_valid() -> None:
    weaker = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1, type=argon2.Type.I).hash("pw")
    assert fast_hasher().verify(weaker, "pw") is False


def test_too_long_password_refused_before_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    hasher = fast_hasher()
    stored = hasher.hash("pw")
    calls: list[str] = []
    monkeypatch.setattr(hasher, "_argon", _Spy(hasher._argon, calls.append))
    too_long = "a" * (MAX_PASSWORD_BYTES + 1)
    with pytest.raises(PasswordTooLong):
        hasher.hash(too_long)
    with pytest.raises(PasswordTooLong):
        hasher.verify(stored, too_long)
    with pytest.raises(PasswordTooLong):
        hasher.dummy_verify(too_long)
    # 1 KiB is counted in UTF-8 bytes: 342 three-byte characters are over the limit.
    with pytest.raises(PasswordTooLong):
        hasher.hash("€" * 342)
    assert calls == []


def test_password_of_exactly_1kib_is_accepted() -> None:
    hasher = fast_hasher()
    assert hasher.verify(hasher.hash("a" * MAX_PASSWORD_BYTES), "a" * MAX_PASSWORD_BYTES)


def test_needs_rehash() -> None:
    fast = fast_hasher()
    stronger = PasswordHasher(time_cost=2, memory_cost=16, parallelism=1, hash_len=16, salt_len=16)
    old = fast.hash("pw")
    assert not fast.needs_rehash(old)
    assert stronger.needs_rehash(old)
    assert fast.needs_rehash("garbage")


def test_dummy_hash_uses_the_same_parameters() -> None:
    hasher = PasswordHasher(time_cost=2, memory_cost=32, parallelism=2, hash_len=16, salt_len=16)
    assert argon2.extract_parameters(hasher._dummy_hash) == argon2.extract_parameters(hasher.hash("x"))
    hasher.dummy_verify("anything")  # returns nothing, raises nothing


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_concurrent": 0},
        {"time_cost": 0},
        {"memory_cost": 4, "parallelism": 1},
        {"salt_len": 8},
        {"hash_len": 4},
    ],
)
def test_unsafe_parameters_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        PasswordHasher(**kwargs)


def test_concurrency_is_bounded() -> None:
    hasher = PasswordHasher.fast_for_tests(max_concurrent=2)
    stored = hasher.hash("pw")
    active = 0
    peak = 0
    lock = threading.Lock()

    def slow(_name: str) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1

    hasher._argon = _Spy(hasher._argon, slow)  # type: ignore[assignment]
    threads = [threading.Thread(target=hasher.verify, args=(stored, "pw")) for _ in range(12)]
    threads += [threading.Thread(target=hasher.dummy_verify, args=("pw",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2


def test_login_rehashes_when_parameters_changed() -> None:
    clock = MockClock()
    old_hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1, hash_len=16, salt_len=16)
    new_hasher = PasswordHasher()  # the default profile
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", "pw", hasher=old_hasher)
    user = backend.find_user("acme", "alice")
    assert user is not None
    old_hash = backend.get_password_hash("acme", user.user_id)
    assert old_hash is not None and new_hasher.needs_rehash(old_hash)

    service = AuthnService(backend, backend, hasher=new_hasher, clock=clock, account_tokens=backend)
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    assert handle.verify_factor(FactorCredential.password("pw"), session) == Authenticated(
        user.user_id, "acme"
    )

    new_hash = backend.get_password_hash("acme", user.user_id)
    assert new_hash is not None and new_hash != old_hash
    params = argon2.extract_parameters(new_hash)
    assert (params.time_cost, params.memory_cost, params.parallelism) == (3, 65536, 4)
    assert not new_hasher.needs_rehash(new_hash)
    # The next login verifies against the new hash.
    handle.logout(session)
    handle.begin_login("alice", "acme", session)
    assert isinstance(handle.verify_factor(FactorCredential.password("pw"), session), Authenticated)


def test_no_rehash_after_a_failed_login() -> None:
    clock = MockClock()
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", "pw")
    user = backend.find_user("acme", "alice")
    assert user is not None
    old_hash = backend.get_password_hash("acme", user.user_id)
    service = AuthnService(
        backend, backend, hasher=PasswordHasher(max_concurrent=1), clock=clock, account_tokens=backend
    )
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    handle.verify_factor(FactorCredential.password("nope"), session)
    assert backend.get_password_hash("acme", user.user_id) == old_hash
