"""Values kept for one request on ``flask.g``.

An app context pushed around several requests (``with app.app_context():`` in a test, or a
worker that keeps one) shares one ``g`` between them; what one request keeps there (its
user, roles, API principal, device cookie reading, parsed JSON body) is stored with that
request's object and read back only by the same request (compared with ``is``).
"""

from __future__ import annotations

from typing import Any

from flask import g, request

__all__ = ["keep_for_request", "request_kept"]


def request_kept(name: str) -> Any:
    """What this request kept under ``name`` on ``g`` (``None``: nothing, or another request's)."""
    found = g.get(name)
    if found is None or found[0] is not request._get_current_object():  # type: ignore[attr-defined]
        return None
    return found[1]


def keep_for_request(name: str, value: Any) -> None:
    """Keep ``value`` on ``g`` under ``name`` for this request only (see :func:`request_kept`)."""
    setattr(g, name, (request._get_current_object(), value))  # type: ignore[attr-defined]
