"""View decorators: ``login_required``, ``fresh_login_required``, the role and permission
checks, and how denials answer.

Both work on sync and async views (through ``current_app.ensure_sync``), bare or called::

    @login_required                                   # any Authenticated session
    @login_required(lambda user: user.is_admin)       # ... whose current_user passes: else 403
    @login_required(api=True)                         # ... or a bearer token / the request loader
    @api_scopes_required("notes:read")                # ... whose token carries the scope
    @fresh_login_required                             # logged in within AUTHFLOW_FRESHNESS
    @fresh_login_required(within=timedelta(minutes=5))
    @roles_required("admin", "editor")                # holds every role named
    @roles_accepted("admin", "editor")                # holds at least one
    @permissions_required("documents:edit")           # (all) as Flask-Security-Too's
    @permissions_accepted("documents:edit", "documents:review")   # (any)

A denial goes to the application's handler when one is registered
(``@authflow.unauthorized_handler``, ``@authflow.step_up_handler``); otherwise the
decorator raises the typed error (:class:`~flask_authflow.errors.Unauthenticated`,
:class:`~flask_authflow.errors.StepUpNeeded`, :class:`~flask_authflow.errors.PermissionDenied`),
so ``@app.errorhandler(Unauthenticated)`` and ``@app.errorhandler(401)`` answer it. With
neither, :func:`denial_response` answers: browsers are redirected to the login (or
step-up) view with a ``next`` that only ever holds a same-site relative path (see
:func:`safe_next`), other clients get the JSON or text error; a browser denied a page it is signed in for
(:class:`~flask_authflow.errors.PermissionDenied`) gets the ``authflow/forbidden.html``
page (status 403), and one the app has no login or step-up view for gets
``authflow/sign_in_required.html`` or ``authflow/step_up_required.html`` (401).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast, overload

from flask import (
    Response,
    current_app,
    has_request_context,
    make_response,
    redirect,
    render_template,
    request,
    url_for,
)
from jinja2 import Environment, FileSystemLoader, TemplateNotFound, select_autoescape
from werkzeug.exceptions import Forbidden, HTTPException, Unauthorized

from flask_authflow._core.roles import check_name
from flask_authflow._i18n import template_context
from flask_authflow._responses import error_response
from flask_authflow._web.api_auth import api_denial, api_principal, missing_scopes
from flask_authflow._web.current_user import (
    ANONYMOUS_USER,
    current_permissions,
    current_roles,
    load_current_user,
)
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.state import DenialHandler, current_auth_session, get_state
from flask_authflow.api_auth._service import TokenRefused
from flask_authflow.api_auth._tokens import check_scopes
from flask_authflow.errors import (
    AuthFlowError,
    EnrollmentRequired,
    InvalidInput,
    PermissionDenied,
    StepUpNeeded,
    StoreUnavailable,
    Throttled,
    Unauthenticated,
)
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.sessions._interface import RequestSession

__all__ = [
    "api_scopes_required",
    "denial_page",
    "denial_response",
    "fresh_login_required",
    "login_required",
    "permissions_accepted",
    "permissions_required",
    "roles_accepted",
    "roles_required",
]

F = TypeVar("F", bound=Callable[..., Any])
#: A ``login_required`` predicate: called with ``current_user``, true to let the view run.
UserPredicate = Callable[[Any], Any]

#: The endpoints of the ready views, used when the ``*_VIEW`` keys are unset.
_VIEWS_LOGIN = "authflow_views.login"
_VIEWS_STEP_UP = "authflow_views.step_up"
_VIEWS_FACTORS = "authflow_views.factors"
_HTTP_ERRORS: dict[int, type[HTTPException]] = {401: Unauthorized, 403: Forbidden}
#: The ready views' templates, for the 403 page of an app that did not register them.
_TEMPLATES = Environment(
    loader=FileSystemLoader(str(Path(__file__).resolve().parent / "templates")),
    autoescape=select_autoescape(default=True),
)


def _wants_html() -> bool:
    """Only a client that names ``text/html`` (a browser) is redirected; ``*/*`` (curl) gets 401."""
    if request.is_json:
        return False
    return any(value == "text/html" and quality > 0 for value, quality in request.accept_mimetypes)


def _view_endpoint(configured: str | None, ready_view: str) -> str | None:
    if configured:
        return configured
    return ready_view if ready_view.split(".", 1)[0] in current_app.blueprints else None


def _status_handler(status: int) -> Callable[[Any], Any] | None:
    """The application's ``@app.errorhandler(status)`` (or a blueprint's), if it registered one."""
    exc_class = _HTTP_ERRORS.get(status)
    if exc_class is None:
        return None
    for name in (*request.blueprints, None):
        by_class = current_app.error_handler_spec.get(name, {}).get(status)
        if by_class:
            for cls in exc_class.__mro__:
                handler = by_class.get(cls)
                if handler is not None:
                    return handler
    return None


def denial_response(error: AuthFlowError) -> Any:
    """Answer a denial nobody else answered (the error handler ``init_app`` registers).

    In order: the application's handler for the status code (``@app.errorhandler(401)``
    gets a werkzeug ``Unauthorized`` whose ``description`` is the message and whose
    ``authflow_error`` is ``error``); for a browser, a redirect to the login view
    (:class:`Unauthenticated`) or the step-up view (:class:`StepUpNeeded`) with a safe
    ``next``; else the JSON or text error (:func:`~flask_authflow._responses.error_response`).
    """
    if not has_request_context():  # pragma: no cover - Flask calls error handlers in a request
        return error_response(error)
    handler = _status_handler(error.status)
    if handler is not None:
        exc = _HTTP_ERRORS[error.status](description=error.message)
        exc.authflow_error = error  # type: ignore[attr-defined]
        return current_app.ensure_sync(handler)(exc)
    if _wants_html() and isinstance(error, Unauthenticated | StepUpNeeded):
        config = get_state().config.web
        if isinstance(error, StepUpNeeded):
            endpoint = _view_endpoint(config.step_up_view, _VIEWS_STEP_UP)
        else:
            endpoint = _view_endpoint(config.login_view, _VIEWS_LOGIN)
        if endpoint:
            target = safe_next(request.full_path.rstrip("?"))
            return redirect(url_for(endpoint, next=target))
    if (
        _wants_html()
        and isinstance(error, EnrollmentRequired)
        and _VIEWS_FACTORS.split(".")[0] in current_app.blueprints
    ):
        return redirect(url_for(_VIEWS_FACTORS))  # a sign-in held until a factor is set up
    template = _denial_template(error) if _wants_html() else None
    if template is not None:
        return denial_page(template, error.status)
    return error_response(error)


def _denial_template(error: AuthFlowError) -> str | None:
    """The page a browser gets for a denial no view answered (subclasses included)."""
    if isinstance(error, PermissionDenied):
        return "authflow/forbidden.html"
    if isinstance(error, StepUpNeeded):
        return "authflow/step_up_required.html"
    if isinstance(error, Unauthenticated):
        return "authflow/sign_in_required.html"
    return None


def denial_page(template: str, status: int, **context: Any) -> Response:
    """``template`` (the application's own copy first) with ``status``, never cached, never
    framed: the denial pages (``forbidden.html`` 403, ``sign_in_required.html`` and
    ``step_up_required.html`` 401, ``sign_in_failed.html``)."""
    context.setdefault("home_url", (request.script_root if has_request_context() else "") + "/")
    try:
        body = render_template(template, **template_context(), **context)
    except TemplateNotFound:  # the ready views' templates are not registered on this app
        body = _TEMPLATES.get_template(template).render(**template_context(), **context)
    response = Response(body, status=status, mimetype="text/html")
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    return response


def _deny(handler: DenialHandler | None, error: AuthFlowError) -> Any:
    if handler is not None:
        return current_app.ensure_sync(handler)()
    raise error


def _user_denied(predicate: UserPredicate | None) -> AuthFlowError | None:
    """Why the current request may not see a ``login_required`` view (``None``: it may)."""
    session = current_auth_session()
    if not session.is_authenticated:
        if isinstance(session, RequestSession) and session.store_failed:
            # The session store could not be read: an outage, not a guest. A 503 (never a
            # login page that could not log anyone in either); service resumes with the store.
            return StoreUnavailable("the session store is unavailable")
        # A sign-in held until a factor is set up: the session record only, never a store read.
        held = required_enrollment.pending_kinds(session.record, get_state().clock.now())
        return EnrollmentRequired(held) if held else Unauthenticated()
    if predicate is None and get_state().hooks.user_loader is None:
        return None  # the session alone decides: no user lookup on the hot path
    user = load_current_user()
    if user is ANONYMOUS_USER:  # the loader no longer finds this user
        return Unauthenticated()
    if predicate is not None and not predicate(user):
        return PermissionDenied()
    return None


def _runner(view: Callable[..., Any]) -> Callable[..., Any]:
    """How to call ``view``: itself, or through ``current_app.ensure_sync`` when it is a
    coroutine function (decided once, at decoration time, not on every request)."""
    if inspect.iscoroutinefunction(view):
        return lambda *args, **kwargs: current_app.ensure_sync(view)(*args, **kwargs)
    return view


def _api_call(
    run: Callable[..., Any],
    predicate: UserPredicate | None,
    scopes: frozenset[str],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """A view that allows API access: the session first, then a bearer token or the request
    loader (see :mod:`flask_authflow._web.api_auth`); their refusals are JSON challenges."""
    principal = None
    if not current_auth_session().is_authenticated:
        try:
            principal = api_principal()
        except (TokenRefused, Throttled) as refused:
            return api_denial(refused)
    if principal is None:
        denied = _user_denied(predicate)
        if denied is None:
            return run(*args, **kwargs)
        handler = get_state().hooks.unauthorized_handler
        if isinstance(denied, Unauthenticated) and handler is None and not _wants_html():
            return api_denial(denied)
        return _deny(handler if isinstance(denied, Unauthenticated) else None, denied)
    if predicate is not None and not predicate(principal.user):
        raise PermissionDenied()
    missing = missing_scopes(scopes)
    if missing is not None:
        return api_denial(missing, scopes)
    response = make_response(run(*args, **kwargs))
    if "Cache-Control" not in response.headers:  # an answer for one token holder: never shared
        response.headers["Cache-Control"] = "private, no-store"
    response.vary.add("Authorization")
    return response


def _guard(
    view: F, predicate: UserPredicate | None, *, api: bool = False, scopes: frozenset[str] = frozenset()
) -> F:
    run = _runner(view)

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if has_request_context():
            if api:
                return _api_call(run, predicate, scopes, *args, **kwargs)
            denied = _user_denied(predicate)
            if denied is not None:
                hooks = get_state().hooks
                return _deny(
                    hooks.unauthorized_handler if isinstance(denied, Unauthenticated) else None, denied
                )
            return run(*args, **kwargs)
        if predicate is None and len(args) == 1 and not kwargs and callable(args[0]):
            # ``@login_required(lambda user: ...)``: the lambda was taken for a view and
            # this wrapper is now applied to the real view, at import time (no request).
            return _guard(args[0], cast(UserPredicate, view), api=api, scopes=scopes)
        raise RuntimeError("a login_required view was called outside a request")

    return cast(F, wrapper)


@overload
def login_required(view: F) -> F: ...
@overload
def login_required(
    *, predicate: UserPredicate | None = None, api: bool = False, scopes: tuple[str, ...] = ()
) -> Callable[[F], F]: ...


def login_required(
    view: Any = None,
    *,
    predicate: UserPredicate | None = None,
    api: bool = False,
    scopes: tuple[str, ...] = (),
) -> Any:
    """Let the view run only for an Authenticated session (every factor passed).

    With a predicate (``@login_required(lambda user: user.is_admin)`` or
    ``@login_required(predicate=...)``), ``current_user`` must also pass it, else 403
    (:class:`~flask_authflow.errors.PermissionDenied`). With a ``user_loader``, a user the
    loader no longer finds is denied like a guest.

    ``api=True`` lets a request without an Authenticated session in by a personal API
    token (``Authorization: Bearer afp_...``) or the ``@authflow.request_loader``;
    ``scopes`` (implies ``api``) are the scopes such a token must carry (see :doc:`/api_tokens`).
    """
    wanted = frozenset(_scopes(scopes))
    api = api or bool(wanted)
    if view is None:
        return lambda real_view: _guard(real_view, predicate, api=api, scopes=wanted)
    return _guard(view, predicate, api=api, scopes=wanted)


def _scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes a decorator was given, checked when it decorates (a mistake in the code)."""
    try:
        return check_scopes(scopes)
    except InvalidInput as exc:
        raise ValueError(f"scopes {scopes!r}: {exc.message}") from None


def api_scopes_required(*scopes: str) -> Callable[[F], F]:
    """``login_required(api=True, scopes=scopes)``: an API view whose bearer tokens must
    carry every scope named (else 403 ``insufficient_scope``); a session passes."""
    if not scopes:
        raise TypeError("api_scopes_required() needs at least one scope")
    return login_required(api=True, scopes=scopes)


def _too_old(limit: timedelta | None) -> bool:
    session = current_auth_session()
    state = get_state()
    authenticated_at = session.authenticated_at
    maximum = limit if limit is not None else state.config.login.freshness
    return authenticated_at is None or state.clock.now() - authenticated_at > maximum


def _fresh(view: F, within: timedelta | None) -> F:
    run = _runner(view)

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        denied = _user_denied(None)
        hooks = get_state().hooks
        if denied is not None:
            return _deny(hooks.unauthorized_handler if isinstance(denied, Unauthenticated) else None, denied)
        if _too_old(within):
            return _deny(hooks.step_up_handler, StepUpNeeded())
        return run(*args, **kwargs)

    return cast(F, wrapper)


@overload
def fresh_login_required(view: F) -> F: ...
@overload
def fresh_login_required(
    view: timedelta | None = None, *, within: timedelta | None = None, max_age: timedelta | None = None
) -> Callable[[F], F]: ...


def fresh_login_required(view: Any = None, *, within: timedelta | None = None, max_age: Any = None) -> Any:
    """Like :func:`login_required`, and the authentication must be younger than ``within``
    (default ``AUTHFLOW_FRESHNESS``). Otherwise the step-up handler answers, or
    :class:`~flask_authflow.errors.StepUpNeeded` is raised (browsers are redirected to the
    step-up view, others get 401 ``{"error": "step_up_required"}``).

    Bare (``@fresh_login_required``) or called (``@fresh_login_required(within=timedelta(minutes=5))``;
    a positional ``timedelta`` and ``max_age=`` are accepted too).
    """
    if isinstance(view, timedelta):
        within, view = view, None
    if max_age is not None:
        within = max_age
    if within is not None and not isinstance(within, timedelta):
        raise TypeError("fresh_login_required(within=...) takes a datetime.timedelta")
    if view is None:
        return lambda real_view: _fresh(real_view, within)
    return _fresh(view, within)


def _names(names: tuple[object, ...], what: str, decorator: str) -> frozenset[str]:
    """The names a role or permission decorator was given, checked when it decorates."""
    if not names:
        raise TypeError(f"{decorator}() needs at least one {what} name")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"{decorator}() takes {what} names (strings), not {name!r}: call it, as @{decorator}('name')"
            )
        try:
            check_name(name, what)
        except InvalidInput as exc:  # a mistake in the code, found at import time
            raise ValueError(f"{decorator}({name!r}): {exc.message}") from None
    return frozenset(cast(tuple[str, ...], names))


def roles_required(*names: str) -> Callable[[F], F]:
    """Let the view run only for a signed-in user who holds *every* role named.

    A guest is answered as by :func:`login_required` (401, or a redirect to the login
    page); a user lacking a role gets :class:`~flask_authflow.errors.PermissionDenied`
    (403: a page for browsers, ``{"error": "permission_denied", ...}`` for API clients).
    """
    wanted = _names(names, "role", "roles_required")
    return lambda view: _guard(view, lambda _user: wanted <= current_roles())


def roles_accepted(*names: str) -> Callable[[F], F]:
    """Like :func:`roles_required`, but holding *one* of the roles named is enough."""
    wanted = _names(names, "role", "roles_accepted")
    return lambda view: _guard(view, lambda _user: not wanted.isdisjoint(current_roles()))


def permissions_required(*names: str) -> Callable[[F], F]:
    """Let the view run only if the user's roles grant *every* permission named (else 403)."""
    wanted = _names(names, "permission", "permissions_required")
    return lambda view: _guard(view, lambda _user: wanted <= current_permissions())


def permissions_accepted(*names: str) -> Callable[[F], F]:
    """Like :func:`permissions_required`, but *one* of the permissions named is enough."""
    wanted = _names(names, "permission", "permissions_accepted")
    return lambda view: _guard(view, lambda _user: not wanted.isdisjoint(current_permissions()))
