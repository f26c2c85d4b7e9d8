"""Where a ``next`` parameter (or a configured destination) may send the browser: a path
on this site, never another site's address."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["safe_next"]


def safe_next(target: str | None) -> str | None:
    """``target`` if it is a same-site relative path (``/a/b?c``), else ``None``.

    Refused: absolute URLs, scheme-relative ``//host``, backslash tricks (``/\\host``,
    which browsers treat as ``//host``), control characters and anything not starting
    with a single ``/``.
    """
    if not target or len(target) > 2048:
        return None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target) or "\\" in target:
        return None
    if not target.startswith("/") or target.startswith("//"):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    return target
