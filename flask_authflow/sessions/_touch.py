"""The last-seen touch's settings and due times (private to the session interface)."""

from __future__ import annotations

import zlib
from datetime import timedelta

from flask_authflow.errors import ConfigurationError

__all__ = ["due_after", "touch_settings"]


def touch_settings(
    idle_timeout: timedelta, interval: timedelta | None, jitter: timedelta | None
) -> tuple[timedelta, timedelta]:
    """The touch interval (default: a tenth of the idle timeout) and jitter (default: half
    the interval), checked."""
    if interval is None:
        interval = idle_timeout / 10
    if not isinstance(interval, timedelta) or not timedelta(0) <= interval < idle_timeout:
        raise ConfigurationError("touch_interval must be at least 0 and shorter than the idle timeout")
    if jitter is None:
        jitter = interval / 2
    if not isinstance(jitter, timedelta) or not timedelta(0) <= jitter <= interval:
        raise ConfigurationError("touch_jitter must be at least 0 and at most the touch interval")
    return interval, jitter


def due_after(interval: timedelta, jitter: timedelta, sid: str) -> timedelta:
    """How long after its last-seen time session ``sid`` is touched: ``interval`` less a
    share of ``jitter`` fixed by the id (ids are random, so the shares are spread evenly;
    the same session always gets the same one)."""
    return interval - jitter * (zlib.crc32(sid.encode("ascii")) / 0x1_0000_0000)
