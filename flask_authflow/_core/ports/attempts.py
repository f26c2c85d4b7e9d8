"""Attempts: the counters and locks of the lockout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

__all__ = [
    "PAIR_SEPARATOR",
    "RESERVATION_TTL",
    "AttemptKey",
    "AttemptLevel",
    "AttemptStore",
    "FailureCount",
    "HolderUnusable",
    "Reservation",
    "level_token",
]


#: Joins a lockout subject and a client's host or network into the subject of an (account,
#: host) or (account, network) pair (see :mod:`flask_authflow.login._lockout`).
PAIR_SEPARATOR = "\x1f@"


class HolderUnusable(Exception):
    """A success settled for a user (``holder``) who may no longer sign in: disabled or
    deleted while the check ran. Nothing of the success was written."""


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


@dataclass(frozen=True, slots=True)
class AttemptLevel:
    """One counter a credential check is reserved on: its key and the failures that lock it."""

    key: AttemptKey
    max_failures: int


def level_token(token: str, index: int) -> str:
    """The reservation token of the ``index``-th level of a :meth:`AttemptStore.reserve_attempts`
    reservation (what ``register_failure`` of that level settles)."""
    return f"{token}{index}"


class AttemptStore(Protocol):
    """Attempt log and lockout counters; every update is atomic across threads and processes."""

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        """The latest active lock on any factor of ``subject``, or ``None``."""
        ...

    def locked_until_any(self, tenant: str, subjects: Sequence[str], now: datetime) -> datetime | None:
        """The latest active lock on any factor of any of ``subjects``, or ``None`` (one read)."""
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
        the window plus the reservations in flight (younger than
        :data:`~flask_authflow._core.ports.RESERVATION_TTL`) stay below ``max_failures``;
        otherwise refused with the end of the lock (or, while attempts are in flight,
        ``now + lock_duration``). So N parallel guesses run at most
        ``max_failures`` credential checks, across threads and processes.
        """
        ...

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        """Give a reservation back without counting anything (the attempt did not happen)."""
        ...

    def reserve_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> Reservation:
        """:meth:`reserve_attempt` on every level at once, in one transaction: granted on all
        of them (each level's token is :func:`level_token` of the answer's) or on none; the
        refusal names the end of the first lock met, in the order of ``levels``. The levels
        are those of one check: one tenant and factor, distinct subjects."""
        ...

    def admit_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> datetime | None:
        """Whether a check that ran **without** a reservation (verify first, count after) may
        be counted on every level: ``None`` when each has room, decided as
        :meth:`reserve_attempts` decides (no active lock, fewer counted failures and
        reservations in flight than its ``max_failures``), else the end of the first lock met
        in the order of ``levels``. Nothing is written. In the open unit of work it takes the
        levels' counter locks in their order (SQLite: the database write lock), held to the
        unit's end, so the failure the unit counts next is decided and written atomically."""
        ...

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        """Give back the reservation of :meth:`reserve_attempts` on ``keys`` (its levels, in order)."""
        ...

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
        holder: tuple[str, str] | None = None,
    ) -> datetime | None:
        """A successful check reserved by :meth:`reserve_attempts` on ``keys``, settled in one
        transaction (the open unit of work's): if a lock is active on any key's subject (set
        by a parallel failure while the check ran), only the reservation is given back and
        the lock's end returned; otherwise the counter is reset and the success recorded as
        the last success (see ``failures_since_success``) on every key, and ``None`` returned.

        ``holder`` (tenant, user id): the user whose login the check completes. The success
        is then settled only while that user may sign in (not disabled, still there),
        decided under the lock an operator's disable or delete takes too (the user's row on
        PostgreSQL, the database's on SQLite, the store's in memory): else the reservation
        is given back, nothing else is written, and :class:`HolderUnusable` is raised (an
        active lock is answered first)."""
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
        """Record the success as the last success of ``key``, reset its failure counter and
        settle ``reservation``."""
        ...

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        """How a successful check is settled: if a lock is active on ``key.subject`` (any
        factor, as ``locked_until``; set by a parallel failure while the check ran), give
        ``reservation`` back and return the lock's end, recording and resetting nothing.
        Otherwise do what ``register_success`` does and return ``None``. One atomic step."""
        ...

    def set_lock(self, key: AttemptKey, until: datetime) -> None: ...

    def clear_lock(self, tenant: str, subject: str) -> None:
        """End every lock of ``subject`` and forget its counters, those of its host and
        network pairs included (subjects that start with ``subject`` + ``"\x1f@"``)."""
        ...

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        """Failures of ``key`` logged after ``since`` and after the last success recorded on
        ``key`` (how far a lock escalates, and the failure cap). ``clear_lock`` keeps the last
        success."""
        ...
