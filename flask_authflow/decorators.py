"""View decorators: ``login_required`` and ``fresh_login_required``.

Both work on sync and async views (through ``current_app.ensure_sync``). An
unauthenticated JSON request gets a 401 with a JSON error body; an HTML request is
redirected to ``AUTHFLOW_LOGIN_VIEW`` with a ``next`` parameter that only ever holds a
same-site relative path (see :func:`safe_next`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from flask import Response, current_app, redirect, request, url_for

from .errors import AuthnError, StepUpNeeded, Unauthenticated
from .responses import error_response
from .state import current_auth_session, get_state

__all__ = ["fresh_login_required", "login_required", "safe_next"]

F = TypeVar("F", bound=Callable[..., Any])


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


def _wants_html() -> bool:
    """Only a client that names ``text/html`` (a browser) is redirected; ``*/*`` (curl) gets 401."""
    if request.is_json:
        return False
    return any(value == "text/html" and quality > 0 for value, quality in request.accept_mimetypes)


def _deny(error: AuthnError) -> Response:
    login_view = get_state().config.login_view
    if login_view and _wants_html():
        return cast(Response, redirect(url_for(login_view, next=request.full_path.rstrip("?"))))
    return error_response(error)


def login_required(view: F) -> F:
    """Let the view run only for an Authenticated session (all factors passed)."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not current_auth_session().is_authenticated:
            return _deny(Unauthenticated())
        return current_app.ensure_sync(view)(*args, **kwargs)

    return cast(F, wrapper)


def fresh_login_required(max_age: timedelta | None = None) -> Callable[[F], F]:
    """Like :func:`login_required`, and the authentication must be younger than ``max_age``
    (default ``AUTHFLOW_FRESHNESS``); otherwise 401 ``step_up_required``.
    """

    def decorator(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            session = current_auth_session()
            if not session.is_authenticated:
                return _deny(Unauthenticated())
            state = get_state()
            limit = max_age if max_age is not None else state.config.freshness
            authenticated_at = session.authenticated_at
            if authenticated_at is None or state.clock.now() - authenticated_at > limit:
                return error_response(StepUpNeeded())
            return current_app.ensure_sync(view)(*args, **kwargs)

        return cast(F, wrapper)

    return decorator
