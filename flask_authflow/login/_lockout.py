"""Account lockout that an attacker cannot turn against the owner cheaply.

Failures are counted in the attempt store at three levels, each per factor:

* **(account, host)**: ``max_failures`` failures (default 5) within ``window`` from one
  host lock that pair. A host is an IPv4 address or an IPv6 **/64** (a device changes
  its address within its /64 at will: twenty addresses of one /64 are one guesser). The
  guesser is stopped, the owner on another host is not.
* **(account, network)**: ``network_threshold`` failures (four times ``max_failures``, 20) from
  one network, its /24 (IPv4) or /56 (IPv6), lock that pair: the hosts of one network
  cannot add up to more guesses than that. Whoever shares the guesser's network is
  refused with it; nobody else is.
* **The account**, from anywhere: ``account_max_failures`` (default twenty times
  ``max_failures``, 100, the most NIST SP 800-63B allows), where **each network counts
  at most** ``max_failures`` **in a window**: a failure from a network that already has
  ``max_failures`` in its window is counted on the host and the network, not on the
  account. The account-wide lock therefore needs failures from at least
  ``account_threshold / max_failures`` (20) distinct networks: a distributed attack
  reaches it, one network (however many addresses it rotates through) never does.
* Locks **escalate**: the n-th lock of a key since its last success lasts
  ``lock_duration * 2**(n-1)``, up to ``max_lock_duration``; the counters are not
  what decides, the failures since the last success are, so a lock ending does not wipe
  the slate.
* Past ``failure_cap`` failures (default 100, NIST SP 800-63B's limit) of one factor
  since its last success (counted over the last 30 days), every lock of the key lasts
  ``max_lock_duration``: the stronger measure is an administrator's (``flask authflow
  users unlock``) or a password reset.

A credential is **verified first and counted after**: the begin's read refuses a locked
subject before any check; the check (Argon2 for a password) runs with no lock held; then
the step's one transaction settles it under the counters' locks, taken in the levels' order
(host, network, account; on SQLite the database write lock): a wrong guess is counted, and
answered, only while every level has room (:meth:`Lockout.admit`, then
:meth:`Lockout.failure`), a right one only while no level is locked
(:meth:`Lockout.success_unless_locked`). A guess past the limit is answered "locked",
whatever it was, so a burst of parallel guesses from one host learns at most
``max_failures`` answers; the extra Argon2 work it causes is the throttle's to bound.
(Reservations, :meth:`Lockout.reserve`, remain for the passkey sign-in.) An identifier
that matches no account is counted and locked exactly like one that does, so the lock
cannot be used to learn which accounts exist. Any store failure propagates as
:class:`~flask_authflow.errors.StoreUnavailable` and the attempt is refused (fail
closed): an unreachable counter must not mean unlimited guesses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from flask_authflow._core.ports import (
    PAIR_SEPARATOR,
    AttemptKey,
    AttemptLevel,
    AttemptStore,
    FailureCount,
    HolderUnusable,
    Reservation,
    level_token,
)
from flask_authflow._throttle.keys import AddressKeys, address_key, host_key, network_key
from flask_authflow.errors import ConfigurationError, StoreUnavailable

__all__ = [
    "ESCALATION_WINDOW",
    "PAIR_SEPARATOR",
    "Lockout",
    "LockoutPolicy",
    "network_subject",
    "pair_subject",
]

#: How far back failures are counted for escalation and the cap.
ESCALATION_WINDOW = timedelta(days=30)
_SUBJECT_CHARS = 300
#: Marks the (account, network) subjects among the pairs (a host key never starts with it).
_NETWORK_MARK = "net:"


def _joined(subject: str, where: str) -> str:
    """``subject`` and a place joined; over 300 characters hashed (so unlocking by the
    identifier, which matches by prefix, misses only such extremes)."""
    combined = f"{subject}{PAIR_SEPARATOR}{where}"
    if len(combined) <= _SUBJECT_CHARS:
        return combined
    return f"sha256:{hashlib.sha256(combined.encode('utf-8', 'replace')).hexdigest()}"


def pair_subject(subject: str, client_ip: str | None) -> str:
    """The lockout subject of (``subject``, the client's host: its IPv4 address or IPv6
    /64); a missing or malformed address is one shared ``unknown`` host."""
    return _joined(subject, host_key(client_ip))


def network_subject(subject: str, client_ip: str | None) -> str:
    """The lockout subject of (``subject``, the client's /24 or /56 network)."""
    return _joined(subject, _NETWORK_MARK + network_key(client_ip))


def _pair_subjects(subject: str, client_ip: str | None) -> tuple[str, str]:
    """:func:`pair_subject` and :func:`network_subject` of one address, parsed once."""
    keys = AddressKeys(client_ip)
    return _joined(subject, keys.host), _joined(subject, _NETWORK_MARK + keys.network)


@dataclass(frozen=True, slots=True)
class LockoutPolicy:
    """The lockout's numbers (see the module docstring).

    :param max_failures: failures from one host that lock the (account, host) pair; also
        the most one network counts toward the account-wide lock in a window.
    :param account_max_failures: counted failures that lock the account (default
        ``20 * max_failures``: failures from at least twenty networks).
    :param max_lock_duration: the longest an escalated lock lasts (default 24 h).
    :param failure_cap: failures of one factor since its last success past which every
        lock lasts ``max_lock_duration`` (default 100).
    """

    max_failures: int = 5
    window: timedelta = timedelta(hours=1)
    lock_duration: timedelta = timedelta(minutes=15)
    account_max_failures: int | None = None
    max_lock_duration: timedelta = timedelta(hours=24)
    failure_cap: int = 100

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ConfigurationError("max_failures must be at least 1")
        if self.window <= timedelta(0) or self.lock_duration <= timedelta(0):
            raise ConfigurationError("lockout window and duration must be positive")
        if self.account_max_failures is not None and self.account_max_failures < self.max_failures:
            raise ConfigurationError(
                "the account-wide lockout threshold may not be below the per-address one: "
                "one address could then lock the owner out"
            )
        if self.max_lock_duration < self.lock_duration:
            raise ConfigurationError("the longest lock may not be shorter than the first one")
        if self.failure_cap < 1:
            raise ConfigurationError("failure_cap must be at least 1")

    @property
    def account_threshold(self) -> int:
        """Counted failures that lock the account."""
        if self.account_max_failures is not None:
            return self.account_max_failures
        return 20 * self.max_failures

    @property
    def network_threshold(self) -> int:
        """Failures from one network that lock the (account, network) pair."""
        return 4 * self.max_failures

    def escalated(self, failures: int, threshold: int) -> timedelta:
        """How long the lock reached after ``failures`` failures since the last success lasts."""
        if failures > self.failure_cap:
            return self.max_lock_duration
        locks = max(1, failures // threshold)
        if locks > 40:  # 2**40 times any lock is past any ceiling
            return self.max_lock_duration
        return min(self.lock_duration * (1 << (locks - 1)), self.max_lock_duration)


def _guard(exc: Exception) -> StoreUnavailable:
    if isinstance(exc, StoreUnavailable):
        return exc
    return StoreUnavailable("the attempt store failed")


@dataclass(frozen=True, slots=True)
class _Held:
    """A reservation made by :meth:`Lockout.reserve`: ``token:address``, the store's token
    of the three levels (hex) and the normalised address it was made for."""

    token: str | None
    address: str | None = None

    @classmethod
    def parse(cls, reservation: str | None) -> _Held:
        if reservation is None:
            return cls(None)
        token, _, address = reservation.partition(":")
        return cls(token, address or None)

    def of(self, level: int) -> str | None:
        """The token of one level (host 0, network 1, account 2)."""
        return level_token(self.token, level) if self.token is not None else None


class Lockout:
    """Applies a :class:`LockoutPolicy` through an :class:`AttemptStore`."""

    __slots__ = ("policy", "store")

    def __init__(self, policy: LockoutPolicy, store: AttemptStore) -> None:
        self.policy = policy
        self.store = store

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        """The end of an active account-wide lock on ``subject``, or ``None``; raises StoreUnavailable."""
        try:
            return self.store.locked_until(tenant, subject, now)
        except Exception as exc:
            raise _guard(exc) from exc

    @staticmethod
    def pairs(subject: str, client_ip: str | None) -> list[str]:
        """The subjects of (``subject``, the client's host) and (``subject``, its network)."""
        return list(_pair_subjects(subject, client_ip))

    def pair_locked_until(
        self, tenant: str, subject: str, client_ip: str | None, now: datetime
    ) -> datetime | None:
        """The end of an active lock on (``subject``, the client's host or network), or ``None``."""
        try:
            return self.store.locked_until_any(tenant, self.pairs(subject, client_ip), now)
        except Exception as exc:
            raise _guard(exc) from exc

    def _levels(self, tenant: str, subject: str, factor: str, client_ip: str | None) -> list[AttemptKey]:
        """The keys a check is counted on: host, network, account."""
        by_host, by_network = _pair_subjects(subject, client_ip)
        return [
            AttemptKey(tenant, by_host, factor),
            AttemptKey(tenant, by_network, factor),
            AttemptKey(tenant, subject, factor),
        ]

    def levels_locked_until(
        self, tenant: str, subject: str, client_ip: str | None, now: datetime
    ) -> datetime | None:
        """The end of an active lock on the account, (account, host) or (account, network), in
        one read (a check that would be refused anyway is not run)."""
        subjects = [*self.pairs(subject, client_ip), subject]
        try:
            return self.store.locked_until_any(tenant, subjects, now)
        except Exception as exc:
            raise _guard(exc) from exc

    def _thresholds(self, keys: list[AttemptKey]) -> list[AttemptLevel]:
        policy = self.policy
        thresholds = (policy.max_failures, policy.network_threshold, policy.account_threshold)
        return [AttemptLevel(key, threshold) for key, threshold in zip(keys, thresholds, strict=True)]

    def admit(
        self, tenant: str, subject: str, factor: str, now: datetime, client_ip: str | None = None
    ) -> datetime | None:
        """Whether a failed check that ran without a reservation may be counted (and so
        revealed): ``None`` when every level has room, else the end of the lock that refuses
        it. Called in the step's unit of work, right before :meth:`failure`, it holds the
        levels' counter locks (host, network, account) until the unit ends (see
        :meth:`AttemptStore.admit_attempts`): however many guesses ran in parallel, only as
        many as the levels have room for are counted and answered; the others are "locked"."""
        levels = self._thresholds(self._levels(tenant, subject, factor, client_ip))
        policy = self.policy
        try:
            return self.store.admit_attempts(
                levels, now=now, window=policy.window, lock_duration=policy.lock_duration
            )
        except Exception as exc:
            raise _guard(exc) from exc

    def reserve(
        self, tenant: str, subject: str, factor: str, now: datetime, client_ip: str | None = None
    ) -> Reservation:
        """Reserve one credential check before running it on the (account, host) pair, the
        (account, network) pair and the account, in one step of the store (see
        :meth:`AttemptStore.reserve_attempts`): refused when any is locked or has no room left."""
        policy = self.policy
        levels = self._thresholds(self._levels(tenant, subject, factor, client_ip))
        try:
            got = self.store.reserve_attempts(
                levels, now=now, window=policy.window, lock_duration=policy.lock_duration
            )
        except Exception as exc:
            raise _guard(exc) from exc
        if got.token is None:
            return got
        return Reservation(f"{got.token}:{address_key(client_ip)}")

    def release(self, tenant: str, subject: str, factor: str, token: str) -> None:
        """Give a reservation back (the check did not happen, or its result was refused)."""
        held = _Held.parse(token)
        if held.token is None:
            return
        try:
            self.store.release_attempts(self._levels(tenant, subject, factor, held.address), held.token)
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
        """Count one failure on (account, host), (account, network) and, while the network
        has counted at most ``max_failures`` in its window, on the account; ``locked_until``
        is set on the result if any reached its threshold (the latest lock)."""
        held = _Held.parse(reservation)
        host, network, account = self._levels(tenant, subject, factor, client_ip)
        policy = self.policy
        try:
            by_host = self._count(host, now, client_ip, held.of(0), policy.max_failures)
            by_network = self._count(network, now, client_ip, held.of(1), policy.network_threshold)
            counted = by_network
            if by_network.failures <= policy.max_failures:
                counted = self._count(account, now, client_ip, held.of(2), policy.account_threshold)
            elif held.token is not None:  # this network has had its say on the account
                self.store.release_attempt(account, level_token(held.token, 2))
        except Exception as exc:
            raise _guard(exc) from exc
        ends = [r.locked_until for r in (by_host, by_network, counted) if r.locked_until is not None]
        return replace(counted, locked_until=max(ends) if ends else None)

    def _count(
        self, key: AttemptKey, now: datetime, client_ip: str | None, token: str | None, threshold: int
    ) -> FailureCount:
        """One failure on ``key``; a lock it reaches is escalated (see :meth:`LockoutPolicy.escalated`)."""
        result = self.store.register_failure(
            key,
            now=now,
            window=self.policy.window,
            max_failures=threshold,
            lock_duration=self.policy.lock_duration,
            client_ip=client_ip,
            reservation=token,
        )
        if result.locked_until is None:
            return result
        failures = self.store.failures_since_success(key, since=now - ESCALATION_WINDOW)
        duration = self.policy.escalated(failures, threshold)
        if duration == self.policy.lock_duration:
            return result
        self.store.set_lock(key, now + duration)
        return replace(result, locked_until=now + duration)

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
        """Record the success and reset the counters of this factor (host, network and account),
        without looking for a lock set meanwhile (the passkey login's settlement; a factor
        step settles with :meth:`success_unless_locked`)."""
        held = _Held.parse(reservation)
        try:
            for i, key in enumerate(self._levels(tenant, subject, factor, client_ip)):
                self.store.register_success(key, now=now, client_ip=client_ip, reservation=held.of(i))
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
        holder: str | None = None,
    ) -> datetime | None:
        """:meth:`success` in one step of the store, unless a lock on any of the three
        subjects is active (set while the check ran): then the reservation is given back
        and the lock's end returned. ``holder``: the id of the user (of ``tenant``) whose
        login the check completes; if they may no longer sign in (disabled or deleted
        meanwhile), nothing but the reservation's return is written and
        :class:`~flask_authflow._core.ports.HolderUnusable` is raised."""
        held = _Held.parse(reservation)
        keys = self._levels(tenant, subject, factor, client_ip)
        who = (tenant, holder) if holder is not None else None
        try:
            return self.store.settle_success(
                keys, now=now, client_ip=client_ip, reservation=held.token, holder=who
            )
        except HolderUnusable:
            raise
        except Exception as exc:
            raise _guard(exc) from exc
