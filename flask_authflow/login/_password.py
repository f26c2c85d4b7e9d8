"""Argon2id password hashing with a bound on concurrent work.

Defaults are argon2-cffi's RFC 9106 low-memory profile (t=3, m=64 MiB, p=4). Each hash
or verify holds one slot of a :class:`threading.BoundedSemaphore`, so a flood of logins
queues instead of allocating 64 MiB per request until the process runs out of memory.

Passwords are hashed in Unicode normal form NFKC (NIST SP 800-63B-4), so the NFC and NFD
spellings of ``café`` are one password. A hash made before normalisation (of the password
as typed) still verifies: when the NFKC form differs from what was typed and does not
match, the password as typed is tried too (an ASCII password never differs, so it never
costs a second Argon2), and the login then rehashes it in NFKC.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import secrets
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import argon2
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.profiles import RFC_9106_LOW_MEMORY

from flask_authflow._core.factors import Accepted, FactorCheck, FactorContext, Rejected, RejectReason
from flask_authflow._core.ports import FactorStore
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import ConfigurationError, InvalidInput, PasswordTooLong
from flask_authflow.login._password_policy import MAX_PASSWORD_BYTES, normalise_password

if TYPE_CHECKING:
    from flask_authflow.login._legacy_hashes import LegacyHashes

__all__ = ["MAX_PASSWORD_BYTES", "PasswordFactor", "PasswordHasher", "PasswordMatch"]

log = logging.getLogger("flask_authflow.login")

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


def _forms(password: Secret) -> tuple[bytes, bytes]:
    """``(NFKC form, form as typed)`` in UTF-8; the same bytes twice when they do not differ
    (ASCII, already NFKC, or bytes that are not UTF-8 text)."""
    typed = _encode(password)
    if typed.isascii():
        return typed, typed
    try:
        text = typed.decode("utf-8")
    except UnicodeDecodeError:
        return typed, typed
    if unicodedata.is_normalized("NFKC", text):
        return typed, typed
    return normalise_password(text).encode("utf-8"), typed


class PasswordMatch(enum.Enum):
    """Which form of a password matched a hash (:meth:`PasswordHasher.match`)."""

    #: The NFKC form: every hash made by :meth:`PasswordHasher.hash`.
    NORMALISED = "normalised"
    #: Only the form as typed: a hash made before passwords were normalised (rehash it).
    AS_TYPED = "as_typed"


def _attempts(password: Secret) -> list[tuple[PasswordMatch, bytes]]:
    """What a verification compares, in order: the NFKC form (unless normalising took it over
    the limit: no hash can have been made of it), then the form as typed when it differs."""
    normalised, typed = _forms(password)
    attempts = [(PasswordMatch.NORMALISED, normalised)] if len(normalised) <= MAX_PASSWORD_BYTES else []
    if typed != normalised:
        attempts.append((PasswordMatch.AS_TYPED, typed))
    return attempts


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

    def slot(self) -> contextlib.AbstractContextManager[None]:
        """Hold one of the ``max_concurrent`` slots (legacy hashes are verified in one too)."""
        return self._slot()

    def hash(self, password: Secret) -> str:
        """Hash the NFKC form of ``password`` (refused with :class:`PasswordTooLong` over 1 KiB,
        as typed or once normalised)."""
        data, _ = _forms(password)
        if len(data) > MAX_PASSWORD_BYTES:
            raise PasswordTooLong(f"passwords are limited to {MAX_PASSWORD_BYTES} bytes")
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
        return self.match(hash, password) is not None

    def match(self, hash: str, password: Secret) -> PasswordMatch | None:
        """Which form of ``password`` matches ``hash`` (its NFKC form, or only the form as
        typed: a hash made before normalisation), or ``None`` as :meth:`verify` is False."""
        attempts = _attempts(password)
        if not isinstance(hash, str) or not hash.startswith("$argon2id$"):
            # Still spend the time, so a broken row is not distinguishable by timing.
            self._dummy(attempts)
            return None
        if self.over_ceiling(hash):
            log.warning("stored Argon2 hash exceeds the configured ceilings; refused without computing it")
            return None
        for form, data in attempts:
            if self._verify(hash, data):
                return form
        return None

    def normalises(self, password: Secret) -> bool:
        """True if the NFKC form of ``password`` differs from it: only then can a hash made
        before normalisation need the form as typed (never for ASCII)."""
        normalised, typed = _forms(password)
        return normalised != typed

    def dummy_verify(self, password: Secret) -> None:
        """Spend the work of a failed :meth:`verify` of ``password`` on a hash nobody can match
        (as many Argon2 computations: one, or two for a password whose NFKC form differs)."""
        self._dummy(_attempts(password))

    def _dummy(self, attempts: list[tuple[PasswordMatch, bytes]]) -> None:
        for _, data in attempts:
            self._verify(self._dummy_hash, data)

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


class PasswordFactor:
    """The ``password`` factor: Argon2id verify, rehash when the parameters changed.

    With ``legacy`` (:class:`~flask_authflow.login._legacy_hashes.LegacyHashes`), a stored
    hash of an enabled legacy scheme is verified by it and, when it matches, replaced by
    an Argon2id hash in the same unit of work."""

    __slots__ = ("hasher", "legacy", "store")
    #: An Argon2 verify: it runs before the step's unit of work opens, so no lock is held.
    expensive = True
    challenge_on_request = False
    digits = None

    def __init__(
        self, hasher: PasswordHasher, store: FactorStore, legacy: LegacyHashes | None = None
    ) -> None:
        self.hasher = hasher
        self.store = store
        self.legacy = legacy

    @property
    def kind(self) -> FactorKind:
        return FactorKind.PASSWORD

    def check_input(self, credential: FactorCredential) -> None:
        if len(credential) > MAX_PASSWORD_BYTES:
            raise PasswordTooLong(f"passwords are limited to {MAX_PASSWORD_BYTES} bytes")

    def challenge(self, ctx: FactorContext) -> None:
        return None

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        secret = credential.secret_bytes()
        # A phantom login (unknown user) asks the store too and finds nothing: same round
        # trips, same Argon2 work; the service never lets a phantom pass.
        tenant, user_id = ctx.tenant, ctx.user_id
        known = ctx.known_secret  # read with the user by this request's begin_login (a phantom's: none)
        stored = known.value if known is not None else self.store.get_password_hash(tenant, user_id)
        legacy = self.legacy
        if stored is None:
            self.hasher.dummy_verify(secret)
            if legacy is not None:  # as a known user's legacy (or second, HMAC) verification
                legacy.dummy_verify(secret)
            return Rejected(RejectReason.NOT_ENROLLED)
        if self.hasher.over_ceiling(stored):
            # Never computed: a planted hash must not cost gigabytes or minutes per login.
            log.warning("stored Argon2 hash exceeds the configured ceilings; refused without computing it")
            return Rejected("hash_over_ceiling")
        if legacy is not None and legacy.claims(stored):
            return self._verify_legacy(legacy, ctx, stored, secret)
        if self.hasher.normalises(secret):
            matched = self.hasher.match(stored, secret)  # a hash made before NFKC is rehashed
        else:
            matched = PasswordMatch.NORMALISED if self.hasher.verify(stored, secret) else None
        if matched is None and legacy is not None and legacy.hmac_argon2:
            # Flask-Security-Too's default: Argon2id of the HMAC of the password.
            return self._verify_legacy(legacy, ctx, stored, secret, hmac_only=True)
        if matched is None:
            if legacy is not None:  # as a legacy user's or an unknown user's work
                legacy.dummy_verify(secret)
            return Rejected(RejectReason.INVALID)
        if matched is PasswordMatch.AS_TYPED or self.hasher.needs_rehash(stored):
            return self._rehash(ctx, secret)
        return Accepted()

    def _verify_legacy(
        self, legacy: LegacyHashes, ctx: FactorContext, stored: str, secret: bytes, *, hmac_only: bool = False
    ) -> FactorCheck:
        from flask_authflow.login._legacy_hashes import LegacyResult

        result = legacy.verify(stored, secret, hmac_only=hmac_only)
        if result is LegacyResult.MATCH:
            return self._rehash(ctx, secret)
        if result is LegacyResult.OVER_CEILING:
            log.warning("stored legacy password hash exceeds the cost ceilings; refused without computing it")
            return Rejected("hash_over_ceiling")
        if hmac_only:  # a native hash: its Argon2id verification ran already
            return Rejected(RejectReason.INVALID)
        self.hasher.dummy_verify(secret)  # as a native user's or an unknown user's Argon2id
        if result is LegacyResult.MALFORMED:
            legacy.dummy_verify(secret)  # a broken row is not told apart by its timing
        return Rejected(RejectReason.INVALID)

    def _rehash(self, ctx: FactorContext, secret: bytes) -> FactorCheck:
        """Accept, replacing the stored hash by an Argon2id hash of the current parameters."""
        try:
            rehashed = self.hasher.hash(secret)
        except PasswordTooLong:  # over 1 KiB once normalised: the stored hash stays
            return Accepted()
        self.store.set_password_hash(ctx.tenant, ctx.user_id, rehashed)
        return Accepted()
