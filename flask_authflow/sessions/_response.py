"""What the session interface does to a response, and the custom data's size cap on a save.

Private to the session interface.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from flask import Response

from flask_authflow._core.ports import SessionStore
from flask_authflow._core.session import AuthState
from flask_authflow._responses import error_response
from flask_authflow.errors import SessionDataTooLarge, StoreUnavailable
from flask_authflow.sessions._request import RequestSession

__all__ = ["enforce_size", "mark_response", "refuse"]

log = logging.getLogger("flask_authflow.sessions")


def mark_response(session: RequestSession, response: Response, used: bool) -> None:
    """``Vary: Cookie`` when the session was read; no caching of an authenticated answer."""
    headers = response.headers
    # One pass over the few headers a response has: Werkzeug's ``in`` and ``setdefault``
    # raise and catch a ``KeyError`` for each absent name, the usual case here.
    present = {name.lower() for name, _ in headers}
    if session.accessed:
        if "vary" in present:
            response.vary.add("Cookie")
        else:  # the usual case: no header to parse and merge, none to replace
            headers.add("Vary", "Cookie")
    if used and "cache-control" not in present and session.state_unread is not AuthState.GUEST:
        headers.add("Cache-Control", "private, no-store")


def refuse(response: Response, error: SessionDataTooLarge) -> None:
    """Turn ``response`` into the 413 of ``error`` (the view's body is replaced)."""
    refused = error_response(error)
    response.status_code = refused.status_code
    response.set_data(refused.get_data())
    response.content_type = refused.content_type
    response.headers["Cache-Control"] = refused.headers["Cache-Control"]


def enforce_size(session: RequestSession, store: SessionStore) -> SessionDataTooLarge | None:
    """Keep oversized custom data out of the store.

    Assignments are checked when they happen; this catches nested mutation
    (``session["cart"].append(...)``). The authentication state is still saved (a
    logout must not be lost), but the custom data falls back to what is stored for
    this session, or to nothing if the id rotated in this request, so data from
    before a logout can never come back, and a warning is logged.
    """
    try:
        session.check_size()
    except SessionDataTooLarge as exc:
        refused = exc
        log.warning(
            "custom session data is %d bytes, over the %d-byte limit; changes to it discarded",
            exc.size,
            exc.limit,
        )
        fallback: Mapping[str, Any] = {}
        if not session.dead_sids and session.loaded_sid is not None:
            try:
                stored = store.load(session.loaded_sid)
            except StoreUnavailable:
                stored = None
            if stored is not None:
                fallback = stored.custom
        dict.clear(session)
        dict.update(session, copy.deepcopy(dict(fallback)))
        try:
            session.check_size()
        except SessionDataTooLarge:
            dict.clear(session)
        return refused
    return None
