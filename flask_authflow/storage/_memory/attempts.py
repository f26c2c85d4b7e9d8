"""Attempt counters, reservations, locks and the attempt log in memory."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from flask_authflow._core.ports import (
    PAIR_SEPARATOR,
    RESERVATION_TTL,
    AttemptKey,
    AttemptLevel,
    FailureCount,
    HolderUnusable,
    Reservation,
    level_token,
)
from flask_authflow.errors import StoreUnavailable
from flask_authflow.storage._memory.state import AttemptLogEntry, LockState, MemoryState

__all__ = ["MemoryAttempts", "count_failure"]


def count_failure(
    state: LockState, *, now: datetime, window: timedelta, max_failures: int, lock_duration: timedelta
) -> tuple[LockState, FailureCount]:
    """The lockout arithmetic: count in the current window, lock (and restart counting) at the threshold."""
    if state.window_start is None or state.window_start <= now - window:
        failures, start = 1, now
    else:
        failures, start = state.failures + 1, state.window_start
    if failures >= max_failures:
        until = now + lock_duration
        return LockState(0, None, until), FailureCount(failures, until)
    return LockState(failures, start, state.locked_until), FailureCount(failures, None)


class MemoryAttempts(MemoryState):
    """The attempt store of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def _check_available(self) -> None:
        if self.attempts_unavailable:
            raise StoreUnavailable("the attempt store is unavailable")

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        with self._lock:
            self._check_available()
            return self._active_lock(tenant, subject, now)

    def locked_until_any(self, tenant: str, subjects: Sequence[str], now: datetime) -> datetime | None:
        with self._lock:
            self._check_available()
            ends = [self._active_lock(tenant, subject, now) for subject in subjects]
            return max((end for end in ends if end is not None), default=None)

    def _active_lock(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        # Caller holds the lock.
        ends = [
            state.locked_until
            for key, state in self._locks.items()
            if key.tenant == tenant
            and key.subject == subject
            and state.locked_until is not None
            and state.locked_until > now
        ]
        return max(ends) if ends else None

    def reserve_attempt(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
    ) -> Reservation:
        with self._lock:
            self._check_available()
            refused = self._refusal(key, now, window, max_failures, lock_duration)
            if refused is not None:
                return refused
            token = uuid.uuid4().hex
            self._hold(key, token, now)
            return Reservation(token)

    def reserve_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> Reservation:
        with self._lock:
            self._check_available()
            for level in levels:
                refused = self._refusal(level.key, now, window, level.max_failures, lock_duration)
                if refused is not None:
                    return refused
            token = uuid.uuid4().hex[:31]
            for index, level in enumerate(levels):
                self._hold(level.key, level_token(token, index), now)
            return Reservation(token)

    def admit_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> datetime | None:
        """Decided as :meth:`reserve_attempts` decides, nothing held; the open unit of work
        holds the store's lock to its end, so the failure counted next in it is atomic."""
        with self._lock:
            self._check_available()
            for level in levels:
                refused = self._refusal(level.key, now, window, level.max_failures, lock_duration)
                if refused is not None:
                    return refused.locked_until
            return None

    def _refusal(
        self, key: AttemptKey, now: datetime, window: timedelta, max_failures: int, lock_duration: timedelta
    ) -> Reservation | None:
        """Why ``key`` has no room for one more check, or ``None`` (caller holds the lock)."""
        until = self._active_lock(key.tenant, key.subject, now)
        if until is not None:
            return Reservation(None, until)
        live = [at for at in self._reservations.get(key, {}).values() if at > now - RESERVATION_TTL]
        state = self._locks.get(key, LockState())
        opened = state.window_start
        in_window = state.failures if opened is not None and opened > now - window else 0
        if in_window + len(live) >= max_failures:
            return Reservation(None, now + lock_duration)
        return None

    def _hold(self, key: AttemptKey, token: str, now: datetime) -> None:
        """Add a reservation of ``key``, dropping its stale ones (caller holds the lock)."""
        live = {t: at for t, at in self._reservations.get(key, {}).items() if at > now - RESERVATION_TTL}
        live[token] = now
        self._put(self._reservations, key, live)

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        with self._lock:
            self._check_available()
            for index, key in enumerate(keys):
                self._settle(key, level_token(token, index))

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
        holder: tuple[str, str] | None = None,
    ) -> datetime | None:
        with self._lock:
            self._check_available()
            ends = [self._active_lock(key.tenant, key.subject, now) for key in keys]
            until = max((end for end in ends if end is not None), default=None)
            usable = until is not None or holder is None or self._may_sign_in(*holder)
            for index, key in enumerate(keys):
                token = level_token(reservation, index) if reservation is not None else None
                if until is not None or not usable:
                    self._settle(key, token)
                else:
                    self.register_success(key, now=now, client_ip=client_ip, reservation=token)
        if not usable:
            raise HolderUnusable()
        return until

    def _may_sign_in(self, tenant: str, user_id: str) -> bool:
        """The user is there and not disabled (caller holds the lock, as a disable does)."""
        user = self._users_by_id.get(user_id)
        return user is not None and user.tenant == tenant and not user.disabled

    def _settle(self, key: AttemptKey, token: str | None) -> None:
        # Caller holds the lock.
        if token is not None:
            pending = self._reservations.get(key)
            if pending is not None:
                self._remove(pending, token)
                if not pending:
                    self._remove(self._reservations, key)

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        with self._lock:
            self._check_available()
            self._settle(key, token)

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
        with self._lock:
            self._check_available()
            self._settle(key, reservation)
            state, result = count_failure(
                self._locks.get(key, LockState()),
                now=now,
                window=window,
                max_failures=max_failures,
                lock_duration=lock_duration,
            )
            self._put(self._locks, key, state)
            self._append(
                self._attempts, AttemptLogEntry(now, key.tenant, key.subject, key.factor, False, client_ip)
            )
            return result

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        with self._lock:
            self._check_available()
            self._settle(key, reservation)
            state = self._locks.get(key)
            if state is not None:
                self._put(self._locks, key, LockState(0, None, state.locked_until))
            self._append(
                self._attempts, AttemptLogEntry(now, key.tenant, key.subject, key.factor, True, client_ip)
            )

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        with self._lock:
            self._check_available()
            until = self._active_lock(key.tenant, key.subject, now)
            if until is not None:
                self._settle(key, reservation)
                return until
            self.register_success(key, now=now, client_ip=client_ip, reservation=reservation)
            return None

    def set_lock(self, key: AttemptKey, until: datetime) -> None:
        with self._lock:
            self._check_available()
            self._put(self._locks, key, replace(self._locks.get(key, LockState()), locked_until=until))

    def clear_lock(self, tenant: str, subject: str) -> None:
        with self._lock:
            self._check_available()
            self._forget_attempts(tenant, subject)

    def _forget_attempts(self, tenant: str, subject: str) -> None:
        """Drop the counters and reservations of ``subject`` and of its (subject, address)
        pairs (caller holds the lock)."""
        pairs = subject + PAIR_SEPARATOR

        def of_subject(key: AttemptKey) -> bool:
            return key.tenant == tenant and (key.subject == subject or key.subject.startswith(pairs))

        for key in [k for k in self._locks if of_subject(k)]:
            self._remove(self._locks, key)
        for key in [k for k in self._reservations if of_subject(k)]:
            self._remove(self._reservations, key)

    def failure_count(self, key: AttemptKey) -> int:
        """Failures counted in the current window (for tests and operators)."""
        with self._lock:
            self._check_available()
            return self._locks.get(key, LockState()).failures

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        """Counts the key's failures in the attempt log (bounded by ``max_attempt_log``) after
        ``since`` and after its latest success (in time, as the SQL store's counter keeps it:
        the order the rows came in does not matter)."""
        with self._lock:
            self._check_available()
            wanted = (key.tenant, key.subject, key.factor)
            rows = [row for row in self._attempts if (row.tenant, row.subject, row.factor) == wanted]
            last = max((row.at for row in rows if row.success), default=None)
            after = since if last is None else max(since, last)
            return sum(1 for row in rows if not row.success and row.at > after)

    @property
    def attempt_log(self) -> list[AttemptLogEntry]:
        with self._lock:
            return list(self._attempts)
