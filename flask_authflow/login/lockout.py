"""Account lockout: N failures in a window lock the identifier for a while.

Failures are counted per (tenant, normalised identifier, factor) in the attempt store,
not per account: an identifier that matches no account is counted and locked exactly
like one that does, so the lock cannot be used to learn which accounts exist. Any store
failure propagates as :class:`~flask_authflow.errors.StoreUnavailable` and the attempt
is refused (fail closed): an unreachable counter must not mean unlimited guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from flask_authflow.core.ports import AttemptKey, AttemptStore, FailureCount, Reservation
from flask_authflow.errors import ConfigurationError, StoreUnavailable

__all__ = ["Lockout", "LockoutPolicy"]


@dataclass(frozen=True, slots=True)
class LockoutPolicy:
    """``max_failures`` failures within ``window`` lock for ``lock_duration`` (defaults: 5, 1 h, 15 min)."""

    max_failures: int = 5
    window: timedelta = timedelta(hours=1)
    lock_duration: timedelta = timedelta(minutes=15)

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ConfigurationError("max_failures must be at least 1")
        if self.window <= timedelta(0) or self.lock_duration <= timedelta(0):
            raise ConfigurationError("lockout window and duration must be positive")


def _guard(exc: Exception) -> StoreUnavailable:
    if isinstance(exc, StoreUnavailable):
        return exc
    return StoreUnavailable("the attempt store failed")


class Lockout:
    """Applies a :class:`LockoutPolicy` through an :class:`AttemptStore`."""

    __slots__ = ("policy", "store")

    def __init__(self, policy: LockoutPolicy, store: AttemptStore) -> None:
        self.policy = policy
        self.store = store

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        """The end of an active lock on ``subject``, or ``None``; raises StoreUnavailable."""
        try:
            return self.store.locked_until(tenant, subject, now)
        except Exception as exc:
            raise _guard(exc) from exc

    def reserve(self, tenant: str, subject: str, factor: str, now: datetime) -> Reservation:
        """Reserve one credential check before running it (see :meth:`AttemptStore.reserve_attempt`)."""
        try:
            return self.store.reserve_attempt(
                AttemptKey(tenant, subject, factor),
                now=now,
                window=self.policy.window,
                max_failures=self.policy.max_failures,
                lock_duration=self.policy.lock_duration,
            )
        except Exception as exc:
            raise _guard(exc) from exc

    def release(self, tenant: str, subject: str, factor: str, token: str) -> None:
        """Give a reservation back (the check did not happen, or its result was refused)."""
        try:
            self.store.release_attempt(AttemptKey(tenant, subject, factor), token)
        except Exception as exc:
            raise _guard(exc) from exc

    def failure(
        self,
        tenant: str,
        subject: str,
        factor: str,
        now: datetime,
        client_ip: str | None = None,
        *,
        reservation: str | None = None,
    ) -> FailureCount:
        """Count one failure; ``locked_until`` is set on the result if it reached the threshold."""
        try:
            return self.store.register_failure(
                AttemptKey(tenant, subject, factor),
                now=now,
                window=self.policy.window,
                max_failures=self.policy.max_failures,
                lock_duration=self.policy.lock_duration,
                client_ip=client_ip,
                reservation=reservation,
            )
        except Exception as exc:
            raise _guard(exc) from exc

    def success(
        self,
        tenant: str,
        subject: str,
        factor: str,
        now: datetime,
        client_ip: str | None = None,
        *,
        reservation: str | None = None,
    ) -> None:
        """Log the success and reset the counter of this factor."""
        try:
            self.store.register_success(
                AttemptKey(tenant, subject, factor), now=now, client_ip=client_ip, reservation=reservation
            )
        except Exception as exc:
            raise _guard(exc) from exc

    def success_unless_locked(
        self,
        tenant: str,
        subject: str,
        factor: str,
        now: datetime,
        client_ip: str | None = None,
        *,
        reservation: str | None = None,
    ) -> datetime | None:
        """:meth:`success`, unless a lock on ``subject`` is active (set while the check ran):
        then the reservation is given back and the lock's end returned."""
        try:
            return self.store.register_success_unless_locked(
                AttemptKey(tenant, subject, factor), now=now, client_ip=client_ip, reservation=reservation
            )
        except Exception as exc:
            raise _guard(exc) from exc
