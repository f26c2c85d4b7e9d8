"""Time as an injected dependency.

Every part of flask-authflow that compares times (session expiry, lockout windows,
token lifetimes, JWKS debounce) asks a :class:`Clock` instead of calling
``datetime.now`` so tests can move time with :class:`MockClock` deterministically.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MockClock", "SystemClock", "utc"]


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken as UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@runtime_checkable
class Clock(Protocol):
    """Source of the current time (always timezone-aware UTC)."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class MockClock:
    """A clock that only moves when told to; thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start) if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by ``delta`` (a timedelta or seconds) and return the new time."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        if step < timedelta(0):
            raise ValueError("MockClock only moves forward; use set() to go back")
        with self._lock:
            self._now = self._now + step
            return self._now

    def set(self, value: datetime) -> None:
        """Jump to ``value`` (may go backwards, to test clock skew)."""
        with self._lock:
            self._now = utc(value)

    def __repr__(self) -> str:
        return f"MockClock({self._now.isoformat()})"
