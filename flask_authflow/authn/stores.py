"""What the login service needs from storage, as protocols.

One object may implement all four (``InMemoryBackend`` and ``SqlAlchemyBackend`` do);
the service then uses it for everything. Every method that a security decision
depends on raises :class:`~flask_authflow.errors.StoreUnavailable` when the store
cannot answer, and the service refuses the attempt (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from ..audit.sinks import AuditRecord, AuditSink
from .outcomes import FactorKind

__all__ = [
    "RESERVATION_TTL",
    "AttemptKey",
    "AttemptStore",
    "AuditRecord",
    "AuditSink",
    "FactorConfig",
    "FactorStore",
    "FailureCount",
    "IdentityStore",
    "Reservation",
    "UserRecord",
]


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A local account. ``identifier`` is normalised; ``user_id`` never changes."""

    user_id: str
    tenant: str
    identifier: str
    created_at: datetime
    disabled: bool = False

    # What Flask-Login's UserMixin answers, so ``current_user`` works the same without a
    # user loader (then ``current_user`` is this record).
    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_active(self) -> bool:
        return not self.disabled

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return self.user_id


@dataclass(frozen=True, slots=True)
class FactorConfig:
    """An enrolled factor. ``secret`` (a hash or key) is kept out of ``repr``."""

    user_id: str
    kind: FactorKind
    created_at: datetime
    secret: str = field(repr=False, default="")


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """What failures are counted against: (tenant, normalised identifier, factor name)."""

    tenant: str
    subject: str
    factor: str


@dataclass(frozen=True, slots=True)
class FailureCount:
    """The result of counting one failure: failures in the window, and the lock it caused."""

    failures: int
    locked_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to :meth:`AttemptStore.reserve_attempt`.

    ``token`` is set when the attempt may run (settle it with ``register_failure`` or
    ``register_success``, or give it back with ``release_attempt``); otherwise
    ``locked_until`` says until when the subject is refused.
    """

    token: str | None
    locked_until: datetime | None = None

    @property
    def granted(self) -> bool:
        return self.token is not None


#: A reservation older than this no longer counts (its process died mid-attempt).
RESERVATION_TTL = timedelta(minutes=1)


@runtime_checkable
class IdentityStore(Protocol):
    """Users, looked up by (tenant, normalised identifier)."""

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None: ...

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None: ...

    def create_user(self, tenant: str, identifier: str, password: str | None = None) -> UserRecord: ...

    def list_users(self, tenant: str | None = None) -> list[UserRecord]: ...


@runtime_checkable
class FactorStore(Protocol):
    """Enrolled factors and password hashes."""

    def get_password_hash(self, tenant: str, user_id: str) -> str | None: ...

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None: ...

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        """Factors a login must pass, in order: password first, then enrolled second factors."""
        ...

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]: ...


@runtime_checkable
class AttemptStore(Protocol):
    """Attempt log and lockout counters; every update is atomic across threads and processes."""

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        """The latest active lock on any factor of ``subject``, or ``None``."""
        ...

    def reserve_attempt(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
    ) -> Reservation:
        """Reserve one attempt before the credential is checked, atomically (one statement or a row lock).

        Granted only while no lock is active on the subject and the failures counted in
        the window plus the reservations in flight (younger than :data:`RESERVATION_TTL`)
        stay below ``max_failures``; otherwise refused with the end of the lock (or, while
        attempts are in flight, ``now + lock_duration``). So N parallel guesses run at most
        ``max_failures`` credential checks, across threads and processes.
        """
        ...

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        """Give a reservation back without counting anything (the attempt did not happen)."""
        ...

    def register_failure(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> FailureCount:
        """Log the failure and count it (settling ``reservation`` in the same step); the failure
        that reaches ``max_failures`` sets the lock."""
        ...

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        """Log the success, reset the failure counter of ``key`` and settle ``reservation``."""
        ...

    def set_lock(self, key: AttemptKey, until: datetime) -> None: ...

    def clear_lock(self, tenant: str, subject: str) -> None: ...
