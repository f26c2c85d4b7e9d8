"""Argon2id password hashing with a bound on concurrent work.

Defaults are argon2-cffi's RFC 9106 low-memory profile (t=3, m=64 MiB, p=4). Each hash
or verify holds one slot of a :class:`threading.BoundedSemaphore`, so a flood of logins
queues instead of allocating 64 MiB per request until the process runs out of memory.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import argon2
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.profiles import RFC_9106_LOW_MEMORY

from ...errors import ConfigurationError, InvalidInput, PasswordTooLong
from ..outcomes import FactorCredential, FactorKind
from ..stores import FactorStore
from .base import Refused

__all__ = ["MAX_PASSWORD_BYTES", "PasswordHasher", "PasswordVerifier"]

log = logging.getLogger("flask_authflow.authn")

#: Longest password accepted, in UTF-8 bytes. Refused before any hashing so a huge
#: body cannot be used to burn CPU.
MAX_PASSWORD_BYTES = 1024

Secret = str | bytes | bytearray


def _encode(password: Secret) -> bytes:
    if isinstance(password, str):
        try:
            data = password.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: not text a user can type
            raise InvalidInput("the password is not valid Unicode text") from None
    elif isinstance(password, bytes | bytearray):
        data = bytes(password)
    else:
        raise TypeError("a password must be str or bytes")
    if len(data) > MAX_PASSWORD_BYTES:
        raise PasswordTooLong(f"passwords are limited to {MAX_PASSWORD_BYTES} bytes")
    return data


class PasswordHasher:
    """Hash and verify passwords with Argon2id.

    :param time_cost, memory_cost, parallelism, hash_len, salt_len: Argon2 parameters
        (``memory_cost`` in KiB).
    :param max_concurrent: how many hashes may run at once (default 2 x CPU count).
    :param max_time_cost, max_memory_cost, max_parallelism: ceilings for a *stored* hash
        (defaults t=10, 256 MiB, p=16). A hash asking for more (a planted or corrupted
        row) is refused without being computed: verifying it would let one row pin
        gigabytes of memory or minutes of CPU per login attempt.
    """

    def __init__(
        self,
        *,
        time_cost: int = RFC_9106_LOW_MEMORY.time_cost,
        memory_cost: int = RFC_9106_LOW_MEMORY.memory_cost,
        parallelism: int = RFC_9106_LOW_MEMORY.parallelism,
        hash_len: int = RFC_9106_LOW_MEMORY.hash_len,
        salt_len: int = RFC_9106_LOW_MEMORY.salt_len,
        max_concurrent: int | None = None,
        max_time_cost: int = 10,
        max_memory_cost: int = 256 * 1024,
        max_parallelism: int = 16,
    ) -> None:
        if time_cost > max_time_cost or memory_cost > max_memory_cost or parallelism > max_parallelism:
            raise ConfigurationError("the Argon2 parameters exceed the ceilings for stored hashes")
        self.max_time_cost = max_time_cost
        self.max_memory_cost = max_memory_cost
        self.max_parallelism = max_parallelism
        if max_concurrent is None:
            max_concurrent = 2 * (os.cpu_count() or 1)
        if max_concurrent < 1:
            raise ConfigurationError("max_concurrent must be at least 1")
        if time_cost < 1 or parallelism < 1 or memory_cost < 8 * parallelism:
            raise ConfigurationError("invalid Argon2 parameters")
        if salt_len < 16 or hash_len < 16:
            raise ConfigurationError("Argon2 salt and hash must be at least 16 bytes")
        self._argon = argon2.PasswordHasher(
            time_cost=time_cost,
            memory_cost=memory_cost,
            parallelism=parallelism,
            hash_len=hash_len,
            salt_len=salt_len,
            type=argon2.Type.ID,
        )
        self.max_concurrent = max_concurrent
        self._slots = threading.BoundedSemaphore(max_concurrent)
        # Hashed with the same parameters as real hashes, so verifying against it costs
        # the same: an unknown user takes as long as a known one.
        self._dummy_hash = self._argon.hash(secrets.token_bytes(32))

    @classmethod
    def fast_for_tests(cls, *, max_concurrent: int | None = None) -> PasswordHasher:
        """The cheapest valid Argon2id parameters (t=1, m=8 KiB, p=1). Never use in production."""
        return cls(
            time_cost=1, memory_cost=8, parallelism=1, hash_len=16, salt_len=16, max_concurrent=max_concurrent
        )

    @property
    def parameters(self) -> argon2.Parameters:
        """The Argon2 parameters new hashes are made with."""
        return argon2.extract_parameters(self._dummy_hash)

    @contextmanager
    def _slot(self) -> Iterator[None]:
        with self._slots:
            yield

    def hash(self, password: Secret) -> str:
        """Hash ``password`` (refused with :class:`PasswordTooLong` over 1 KiB)."""
        data = _encode(password)
        with self._slot():
            return self._argon.hash(data)

    def over_ceiling(self, hash: str) -> bool:
        """True if ``hash`` asks for more time, memory or parallelism than the ceilings allow."""
        try:
            params = argon2.extract_parameters(hash)
        except (InvalidHashError, ValueError):
            return False  # not a parsable hash: verify() treats it as broken
        return (
            params.time_cost > self.max_time_cost
            or params.memory_cost > self.max_memory_cost
            or params.parallelism > self.max_parallelism
        )

    def verify(self, hash: str, password: Secret) -> bool:
        """True if ``password`` matches ``hash``; False on mismatch, a malformed hash, or a
        hash over the ceilings (refused without computing it, and logged)."""
        data = _encode(password)
        if not isinstance(hash, str) or not hash.startswith("$argon2id$"):
            # Still spend the time, so a broken row is not distinguishable by timing.
            self._verify(self._dummy_hash, data)
            return False
        if self.over_ceiling(hash):
            log.warning("stored Argon2 hash exceeds the configured ceilings; refused without computing it")
            return False
        return self._verify(hash, data)

    def dummy_verify(self, password: Secret) -> None:
        """Spend one verification's worth of work on a hash nobody can match."""
        self._verify(self._dummy_hash, _encode(password))

    def _verify(self, hash: str, data: bytes) -> bool:
        with self._slot():
            try:
                return self._argon.verify(hash, data)
            except (VerificationError, InvalidHashError):
                return False

    def needs_rehash(self, hash: str) -> bool:
        """True if ``hash`` was made with other parameters (or is not an Argon2id hash)."""
        try:
            return self._argon.check_needs_rehash(hash)
        except (InvalidHashError, ValueError):
            return True

    def __repr__(self) -> str:
        p = self._argon
        return (
            f"PasswordHasher(time_cost={p.time_cost}, memory_cost={p.memory_cost}, "
            f"parallelism={p.parallelism}, max_concurrent={self.max_concurrent})"
        )


class PasswordVerifier:
    """The ``password`` factor: Argon2id verify, rehash when the parameters changed."""

    def __init__(self, hasher: PasswordHasher, store: FactorStore) -> None:
        self.hasher = hasher
        self.store = store

    @property
    def kind(self) -> FactorKind:
        return FactorKind.PASSWORD

    def check_input(self, credential: FactorCredential) -> None:
        if len(credential) > MAX_PASSWORD_BYTES:
            raise PasswordTooLong(f"passwords are limited to {MAX_PASSWORD_BYTES} bytes")

    def verify(
        self, tenant: str, user_id: str, credential: FactorCredential, now: datetime
    ) -> bool | Refused:
        stored = self.store.get_password_hash(tenant, user_id)
        secret = credential.secret_bytes()
        if stored is None:
            self.hasher.dummy_verify(secret)
            return False
        if self.hasher.over_ceiling(stored):
            # Never computed: a planted hash must not cost gigabytes or minutes per login.
            log.warning("stored Argon2 hash exceeds the configured ceilings; refused without computing it")
            return Refused("hash_over_ceiling")
        if not self.hasher.verify(stored, secret):
            return False
        if self.hasher.needs_rehash(stored):
            self.store.set_password_hash(tenant, user_id, self.hasher.hash(secret))
        return True

    def verify_unknown(self, credential: FactorCredential) -> None:
        self.hasher.dummy_verify(credential.secret_bytes())
