"""Account lockout that an attacker cannot turn against the owner cheaply.

Failures are counted in the attempt store twice: per **(identifier, client address)**
pair and per **identifier** (from any address), each per factor:

* ``max_failures`` failures (default 5) from one address within ``window`` lock that
  (account, address) pair: the guesser is stopped, the owner at another address is not.
* The account-wide lock needs ``account_max_failures`` (default twenty times as many,
  100, the most NIST SP 800-63B allows): failures from at least twenty addresses at
  their pair limit within the window.
* Locks **escalate**: the n-th lock of a key since its last success lasts
  ``lock_duration * 2**(n-1)``, up to ``max_lock_duration``; the counters are not
  what decides, the failures since the last success are, so a lock ending does not wipe
  the slate.
* Past ``failure_cap`` failures (default 100, NIST SP 800-63B's limit) of one factor
  since its last success (counted over the last 30 days), every lock of the key lasts
  ``max_lock_duration``: the stronger measure is an administrator's (``flask authflow
  users unlock``) or a password reset.

Both counters are reserved before a credential is checked (the pair first, then the
account), so a burst of parallel guesses from one address buys at most ``max_failures``
checks. An identifier that matches no account is counted and locked exactly like one that
does, so the lock cannot be used to learn which accounts exist. Any store failure
propagates as :class:`~flask_authflow.errors.StoreUnavailable` and the attempt is refused
(fail closed): an unreachable counter must not mean unlimited guesses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from flask_authflow.core.ports import PAIR_SEPARATOR, AttemptKey, AttemptStore, FailureCount, Reservation
from flask_authflow.errors import ConfigurationError, StoreUnavailable
from flask_authflow.throttle.keys import address_key

__all__ = ["ESCALATION_WINDOW", "PAIR_SEPARATOR", "Lockout", "LockoutPolicy", "pair_subject"]

#: How far back failures are counted for escalation and the cap.
ESCALATION_WINDOW = timedelta(days=30)
_SUBJECT_CHARS = 300


def pair_subject(subject: str, client_ip: str | None) -> str:
    """The lockout subject of (``subject``, client address); a missing or malformed address
    is one shared ``unknown`` address. Over 300 characters the subject is hashed (so
    unlocking by the identifier, which matches by prefix, misses only such extremes)."""
    combined = f"{subject}{PAIR_SEPARATOR}{address_key(client_ip)}"
    if len(combined) <= _SUBJECT_CHARS:
        return combined
    return f"sha256:{hashlib.sha256(combined.encode('utf-8', 'replace')).hexdigest()}"


@dataclass(frozen=True, slots=True)
class LockoutPolicy:
    """The lockout's numbers (see the module docstring).

    :param max_failures: failures from one address that lock the (account, address) pair.
    :param account_max_failures: failures from any address that lock the account
        (default ``20 * max_failures``).
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
        """Failures from any address that lock the account."""
        if self.account_max_failures is not None:
            return self.account_max_failures
        return 20 * self.max_failures

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


def _split(token: str | None) -> tuple[str | None, str | None, str | None]:
    """(account token, pair token, pair subject) of a reservation made by :meth:`Lockout.reserve`."""
    if token is None:
        return None, None, None
    parts = token.split(":", 2)
    if len(parts) != 3:
        return token, None, None
    return parts[0], parts[1], parts[2]


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

    def pair_locked_until(
        self, tenant: str, subject: str, client_ip: str | None, now: datetime
    ) -> datetime | None:
        """The end of an active lock on (``subject``, the client's address), or ``None``."""
        return self.locked_until(tenant, pair_subject(subject, client_ip), now)

    def reserve(
        self, tenant: str, subject: str, factor: str, now: datetime, client_ip: str | None = None
    ) -> Reservation:
        """Reserve one credential check before running it: on the (account, address) pair,
        then on the account (see :meth:`AttemptStore.reserve_attempt`). Refused when either
        is locked or has no room left; the pair's reservation is then given back."""
        pair = pair_subject(subject, client_ip)
        try:
            first = self._reserve(AttemptKey(tenant, pair, factor), now, self.policy.max_failures)
            if first.token is None:
                return first
            second = self._reserve(AttemptKey(tenant, subject, factor), now, self.policy.account_threshold)
            if second.token is None:
                self.store.release_attempt(AttemptKey(tenant, pair, factor), first.token)
                return second
        except Exception as exc:
            raise _guard(exc) from exc
        return Reservation(f"{second.token}:{first.token}:{pair}")

    def _reserve(self, key: AttemptKey, now: datetime, threshold: int) -> Reservation:
        return self.store.reserve_attempt(
            key,
            now=now,
            window=self.policy.window,
            max_failures=threshold,
            lock_duration=self.policy.lock_duration,
        )

    def release(self, tenant: str, subject: str, factor: str, token: str) -> None:
        """Give a reservation back (the check did not happen, or its result was refused)."""
        account, pair_token, pair = _split(token)
        try:
            if pair_token is not None and pair is not None:
                self.store.release_attempt(AttemptKey(tenant, pair, factor), pair_token)
            if account is not None:
                self.store.release_attempt(AttemptKey(tenant, subject, factor), account)
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
        """Count one failure on the account and on (account, address); ``locked_until`` is
        set on the result if either reached its threshold (the later lock of the two)."""
        account, pair_token, _ = _split(reservation)
        pair = pair_subject(subject, client_ip)
        try:
            counted = self._count(AttemptKey(tenant, subject, factor), now, client_ip, account)
            by_pair = self._count(AttemptKey(tenant, pair, factor), now, client_ip, pair_token, pair=True)
        except Exception as exc:
            raise _guard(exc) from exc
        ends = [until for until in (counted.locked_until, by_pair.locked_until) if until is not None]
        return replace(counted, locked_until=max(ends) if ends else None)

    def _count(
        self, key: AttemptKey, now: datetime, client_ip: str | None, token: str | None, *, pair: bool = False
    ) -> FailureCount:
        """One failure on ``key``; a lock it reaches is escalated (see :meth:`LockoutPolicy.escalated`)."""
        threshold = self.policy.max_failures if pair else self.policy.account_threshold
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
        """Log the success and reset the counters of this factor (account and pair)."""
        account, pair_token, pair = _split(reservation)
        try:
            self.store.register_success(
                AttemptKey(tenant, subject, factor), now=now, client_ip=client_ip, reservation=account
            )
            self._pair_success(tenant, factor, now, client_ip, pair, pair_token)
        except Exception as exc:
            raise _guard(exc) from exc

    def _pair_success(
        self,
        tenant: str,
        factor: str,
        now: datetime,
        client_ip: str | None,
        pair: str | None,
        token: str | None,
    ) -> None:
        if pair is not None:
            key = AttemptKey(tenant, pair, factor)
            self.store.register_success(key, now=now, client_ip=client_ip, reservation=token)

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
        then the reservations are given back and the lock's end returned."""
        account, pair_token, pair = _split(reservation)
        try:
            until = self.store.register_success_unless_locked(
                AttemptKey(tenant, subject, factor), now=now, client_ip=client_ip, reservation=account
            )
            if until is not None:
                if pair is not None and pair_token is not None:
                    self.store.release_attempt(AttemptKey(tenant, pair, factor), pair_token)
                return until
            self._pair_success(tenant, factor, now, client_ip, pair, pair_token)
        except Exception as exc:
            raise _guard(exc) from exc
        return None
