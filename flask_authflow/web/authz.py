"""Cedar policies in a Flask app: ``authflow.authorize(...)`` and the ``@authorize`` decorator.

``init_app`` calls :func:`install`, which loads ``AUTHFLOW_AUTHZ_POLICIES`` (checked against
``AUTHFLOW_AUTHZ_SCHEMA``) once, at start-up. A decision's principal is the current user
(:func:`current_principal`): the session's user id and tenant, the roles of the
``roles_loader`` hook (none without one), the attributes of the ``principal_attributes``
hook, and the session's authentication time and factors passed. Hooks are registered per
extension object, like the user loader::

    hooks = authz_hooks(authflow)

    @hooks.roles_loader
    def roles(user):
        return user.roles

A denial is :class:`~flask_authflow.errors.PermissionDenied` (403): a browser gets an HTML
page in the ready views' style, an API client ``{"error": "permission_denied", ...}``; an
application's ``@app.errorhandler(403)`` (or one for ``PermissionDenied``) answers instead.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from flask import Flask, Response, current_app, request
from jinja2 import Environment, FileSystemLoader, select_autoescape

from flask_authflow.authz import AuthzSettings, Decision, Evaluator, Principal, load_policies
from flask_authflow.authz.evaluator import log
from flask_authflow.errors import PermissionDenied
from flask_authflow.responses import wants_json
from flask_authflow.web.current_user import ANONYMOUS_USER, load_current_user
from flask_authflow.web.decorators import denial_response, login_required
from flask_authflow.web.state import current_auth_session, get_state

__all__ = [
    "AUTHZ_KEY",
    "AuthzHooks",
    "authorize",
    "authz_hooks",
    "current_principal",
    "decide",
    "install",
    "is_authorized",
]

#: Where the app's evaluator and hooks are kept in ``app.extensions``.
AUTHZ_KEY = "authflow_authz"
F = TypeVar("F", bound=Callable[..., Any])
#: ``roles_loader(user)``: the names of the current user's roles.
RolesLoader = Callable[[Any], Iterable[str]]
#: ``principal_attributes(user)``: more attributes of the principal (``principal.<name>``).
AttributesLoader = Callable[[Any], Mapping[str, Any]]

_DENIED_PAGE = """{% extends "authflow/base.html" %}
{% block title %}Not allowed{% endblock %}
{% block content %}<h1>Not allowed</h1>
<p class="error" role="alert">{{ message }}</p>
<p><a href="/">Back to the start page</a></p>{% endblock %}"""


#: The ready views' templates, read without the views' blueprint (an app may not register it).
_PAGES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape(default=True)
)


@dataclass(eq=False)
class AuthzHooks:
    """The application's authorization callbacks, shared by every app of one extension."""

    roles: RolesLoader | None = None
    attributes: AttributesLoader | None = None

    def roles_loader(self, loader: RolesLoader) -> RolesLoader:
        """Register ``loader(user)`` returning the names of the user's roles (default: none)."""
        self.roles = loader
        return loader

    def principal_attributes(self, loader: AttributesLoader) -> AttributesLoader:
        """Register ``loader(user)`` returning attributes the policies read as ``principal.<name>``
        (strings, booleans, integers, sets, records; ``id``, ``tenant``, ``roles`` and
        ``session`` are the library's)."""
        self.attributes = loader
        return loader


_HOOKS: weakref.WeakKeyDictionary[Any, AuthzHooks] = weakref.WeakKeyDictionary()


def authz_hooks(authflow: Any) -> AuthzHooks:
    """The authorization hooks of the extension object ``authflow`` (made on first use)."""
    hooks = _HOOKS.get(authflow)
    if hooks is None:
        hooks = _HOOKS[authflow] = AuthzHooks()
    return hooks


@dataclass(frozen=True, eq=False)
class _AppAuthz:
    evaluator: Evaluator
    hooks: AuthzHooks


def install(app: Flask, authflow: Any) -> None:
    """Load the app's policies (a refused setting raises before anything is installed) and
    keep the evaluator in ``app.extensions``.

    :raises ConfigurationError: a policy file cannot be read, does not parse or does not
        match the schema (``file:line`` in the message).
    """
    policies = load_policies(AuthzSettings.from_config(app.config))
    app.extensions[AUTHZ_KEY] = _AppAuthz(Evaluator(policies), authz_hooks(authflow))


def _app_authz() -> _AppAuthz:
    found = current_app.extensions.get(AUTHZ_KEY)
    if not isinstance(found, _AppAuthz):
        raise RuntimeError("flask-authflow's authorization is not initialised on this app: call init_app")
    return found


def current_principal() -> Principal | None:
    """The current user as a :class:`~flask_authflow.authz.Principal` (``None`` for a guest)."""
    session = current_auth_session()
    if not session.is_authenticated or session.tenant is None or session.user_id is None:
        return None
    hooks = _app_authz().hooks
    roles: frozenset[str] = frozenset()
    attributes: dict[str, Any] = {}
    if hooks.roles is not None or hooks.attributes is not None:
        user = load_current_user()
        if user is ANONYMOUS_USER:  # the user loader no longer finds this user: no principal
            return None
        roles = frozenset(hooks.roles(user)) if hooks.roles is not None else roles
        attributes = dict(hooks.attributes(user)) if hooks.attributes is not None else attributes
    return Principal(
        id=session.user_id,
        tenant=session.tenant,
        roles=roles,
        attributes=attributes,
        authenticated_at=session.authenticated_at,
        factors=tuple(session.record.factors_passed),
        device_trusted=False,
    )


def decide(action: Any, resource: Any, context: Mapping[str, Any] | None = None) -> Decision:
    """The :class:`~flask_authflow.authz.Decision` for the current user (a guest is denied)."""
    authz = _app_authz()
    principal = current_principal()
    if principal is None:
        log.info("authz deny: no signed-in user, action=%.200r", action)
        return Decision(False, (), ("no signed-in user",))
    return authz.evaluator.decide(principal, action, resource, context, now=get_state().clock.now())


def is_authorized(action: Any, resource: Any, context: Mapping[str, Any] | None = None) -> bool:
    """Whether the current user may do ``action`` on ``resource`` (``authflow.authorize``)."""
    return decide(action, resource, context).allowed


def _app_answers_403() -> bool:
    """Flask would hand ``PermissionDenied`` to the application's own code: a 403 handler (the
    extension's handler defers to one), or a class handler Flask finds before the extension's."""
    blueprints = (*request.blueprints, None)
    specs = [current_app.error_handler_spec.get(name, {}) for name in blueprints]
    if any(spec.get(403) for spec in specs):
        return True
    for spec in specs:
        by_class = spec.get(None, {})
        for cls in PermissionDenied.__mro__:
            handler = by_class.get(cls)
            if handler is not None:
                return handler is not denial_response
    return False


def _denied(error: PermissionDenied) -> Any:
    """The answer to a policy denial: the application's handler, else HTML for a browser,
    else the JSON or text error."""
    browser = any(value == "text/html" and quality > 0 for value, quality in request.accept_mimetypes)
    if _app_answers_403() or wants_json() or not browser:
        raise error
    body = _PAGES.from_string(_DENIED_PAGE).render(message=error.message)
    response = Response(body, status=error.status, mimetype="text/html")
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    return response


def _value(given: Any, view_kwargs: Mapping[str, Any]) -> Any:
    """``given``, or what it returns when it is a function of the view's arguments."""
    if callable(given) and not isinstance(given, type) and not hasattr(given, "policy_entity"):
        return given(**view_kwargs)
    return given


def authorize(action: str, resource: Any, *, context: Any = None) -> Callable[[F], F]:
    """Let the view run only when the policies allow ``action`` on ``resource`` for the
    current user; a guest is asked to log in (as :func:`~flask_authflow.login_required`), a
    denied user gets 403.

    ``resource`` and ``context`` are values, or functions called with the view's keyword
    arguments (``resource=lambda doc_id: Document.get(doc_id)``).
    """

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            target = _value(resource, kwargs)
            facts = _value(context, kwargs)
            if not decide(action, target, facts).allowed:
                return _denied(PermissionDenied())
            return current_app.ensure_sync(view)(*args, **kwargs)

        return login_required(cast(F, wrapper))

    if not isinstance(action, str) or not action:  # a programming error, found at import time
        raise TypeError(f"@authorize needs the action's name as a string, got {action!r}")
    return decorate
