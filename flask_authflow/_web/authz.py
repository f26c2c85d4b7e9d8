"""Cedar policies in a Flask app: :func:`is_authorized` (a check) and the ``@authorize`` decorator.

``init_app`` calls :func:`install`, which loads ``AUTHFLOW_AUTHZ_POLICIES`` (checked against
``AUTHFLOW_AUTHZ_SCHEMA``) once, at start-up. A decision's principal is the current user
(:func:`current_principal`): the session's user id and tenant, its stored roles (or those
of the ``roles_loader`` hook, when one is registered), the attributes of the
``principal_attributes`` hook, and the session's authentication time and factors passed.
Hooks are registered per extension object, like the user loader::

    hooks = authz_hooks(authflow)

    @hooks.roles_loader
    def roles(user):
        return user.roles

A denial is :class:`~flask_authflow.errors.PermissionDenied` (403), answered like every
other denial (by the error handler ``init_app`` registers): a browser gets the
``authflow/forbidden.html`` page, an API client ``{"error": "permission_denied", ...}``; an
application's ``@app.errorhandler(403)`` (or one for ``PermissionDenied``) answers instead.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from flask import Flask, current_app, g

from flask_authflow._web.current_user import ANONYMOUS_USER, current_roles, load_current_user
from flask_authflow._web.decorators import login_required
from flask_authflow._web.devices import current_device_trusted
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.authz import AuthzSettings, Decision, Evaluator, Principal, load_policies
from flask_authflow.authz._entities import BadRequest
from flask_authflow.authz._evaluator import PreparedPrincipal, log
from flask_authflow.errors import PermissionDenied

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
#: Where a request keeps its prepared principal (``flask.g``: never shared between requests).
_G_PRINCIPAL = "_authflow_authz_principal"
F = TypeVar("F", bound=Callable[..., Any])
#: ``roles_loader(user)``: the names of the current user's roles.
RolesLoader = Callable[[Any], Iterable[str]]
#: ``principal_attributes(user)``: more attributes of the principal (``principal.<name>``).
AttributesLoader = Callable[[Any], Mapping[str, Any]]


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
    user = load_current_user()
    if user is ANONYMOUS_USER:  # the user loader no longer finds this user: no principal
        return None
    roles = frozenset(hooks.roles(user)) if hooks.roles is not None else current_roles()
    attributes = dict(hooks.attributes(user)) if hooks.attributes is not None else {}
    return Principal(
        id=session.user_id,
        tenant=session.tenant,
        roles=roles,
        attributes=attributes,
        authenticated_at=session.authenticated_at,
        factors=tuple(session.record.factors_passed),
        device_trusted=current_device_trusted(session.tenant, session.user_id),
    )


def _prepared(authz: _AppAuthz) -> PreparedPrincipal | Decision | None:
    """The current user's principal with its Cedar entities, built once per request and
    session state (a login, logout or step-up in the request builds it again); ``None`` for
    a guest, a denial when the principal cannot be put to the policies."""
    session = current_auth_session()
    # Every change of authentication state (login, each factor, step-up, logout) rotates the
    # session id: with the state and authentication time it names what the principal reads.
    key = (session.sid, session.state, session.authenticated_at)
    cached = g.get(_G_PRINCIPAL)
    # Kept with this request's session object, compared by identity: an app context pushed
    # around several requests shares one ``g`` between them (a role granted in between).
    if cached is not None and cached[0] is session and cached[1] == key:
        return cast("PreparedPrincipal | None", cached[2])
    principal = current_principal()
    if principal is None:
        prepared = None
    else:
        try:
            prepared = authz.evaluator.prepare(principal, get_state().clock.now())
        except BadRequest as exc:
            return Decision(False, (), (str(exc),))
    setattr(g, _G_PRINCIPAL, (session, key, prepared))
    return prepared


def decide(action: Any, resource: Any, context: Mapping[str, Any] | None = None) -> Decision:
    """The :class:`~flask_authflow.authz.Decision` for the current user (a guest is denied)."""
    authz = _app_authz()
    prepared = _prepared(authz)
    if prepared is None:
        log.info("authz deny: no signed-in user, action=%.200r", action)
        return Decision(False, (), ("no signed-in user",))
    if isinstance(prepared, Decision):
        log.warning("authz deny: action=%.200r errors=%s", action, "; ".join(prepared.errors))
        return prepared
    return authz.evaluator.decide_prepared(prepared, action, resource, context)


def is_authorized(action: Any, resource: Any, context: Mapping[str, Any] | None = None) -> bool:
    """Whether the current user may do ``action`` on ``resource`` (``authflow.authorize`` before 0.8)."""
    return decide(action, resource, context).allowed


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
                raise PermissionDenied()  # answered by the extension's denial handler
            return current_app.ensure_sync(view)(*args, **kwargs)

        return login_required(cast(F, wrapper))

    if not isinstance(action, str) or not action:  # a programming error, found at import time
        raise TypeError(f"@authorize needs the action's name as a string, got {action!r}")
    return decorate
