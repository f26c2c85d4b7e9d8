"""``current_user``: the application's user object for the current request.

With ``@authflow.user_loader`` registered, ``current_user`` is what the loader returns
for the session's ``(tenant, user_id)``; without one, it is the library's own
:class:`~flask_authflow._core.ports.UserRecord`. A request without an Authenticated
session (a guest, a login still waiting for a factor), or whose user the loader no
longer finds, gets :data:`ANONYMOUS_USER` (``is_authenticated`` is false). The user is
loaded at most once per request and loaded again only if the session's user changes
within the request (a login or logout in the view). On a view that allows API access,
a request without an Authenticated session gets the user of its bearer token or of the
request loader (:mod:`flask_authflow._web.api_auth`), loaded the same way.

``current_user.has_role(name)`` and ``current_user.has_permission(name)`` answer from
the user's roles in the store (:class:`~flask_authflow._core.ports.RoleStore`), read
once per request (two queries) and cached on the request: a role granted or taken
away applies from the next request, and no session ends. A guest has no role.
"""

from __future__ import annotations

from typing import Any, Final, cast

from werkzeug.local import LocalProxy

from flask_authflow._web.per_request import keep_for_request, request_kept
from flask_authflow._web.state import AuthFlowState, current_auth_session, get_state

__all__ = [
    "ANONYMOUS_USER",
    "AnonymousUser",
    "UserMixin",
    "current_permissions",
    "current_roles",
    "current_user",
    "load_current_user",
    "load_user",
    "set_api_user",
]

# Kept for one request only (flask_authflow._web.per_request): one g may serve several.
_CACHE_KEY = "_authflow_current_user"
_ROLES_KEY = "_authflow_current_roles"
_API_KEY = "_authflow_api_user"


class AnonymousUser:
    """The ``current_user`` of a request that has no authenticated user.

    It answers the attributes Flask-Login's ``AnonymousUserMixin`` answers, so templates
    written for Flask-Login keep working (``{% if current_user.is_authenticated %}``).
    """

    __slots__ = ()

    is_authenticated: Final = False
    is_active: Final = False
    is_anonymous: Final = True
    user_id: Final = None
    tenant: Final = None

    def get_id(self) -> None:
        return None

    def has_role(self, name: str) -> bool:
        """A guest holds no role."""
        return False

    def has_permission(self, name: str) -> bool:
        """A guest has no permission."""
        return False

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<AnonymousUser>"


class UserMixin:
    """Give an application's user class what ``current_user`` users expect (as Flask-Login's
    ``UserMixin``): ``is_authenticated`` (true), ``is_active`` (unless a ``disabled``
    attribute is true), ``is_anonymous`` (false) and ``get_id()`` (``str(self.id)``).

    A class that already defines these (a Flask-Login ``UserMixin`` model) needs nothing.
    """

    __slots__ = ()

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_active(self) -> bool:
        return not getattr(self, "disabled", False)

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return str(getattr(self, "id"))  # noqa: B009 - mixins cannot declare the attribute

    def has_role(self, name: str) -> bool:
        """Whether the current request's user holds the role ``name`` (see the module docstring)."""
        return name in current_roles()

    def has_permission(self, name: str) -> bool:
        """Whether a role of the current request's user grants ``name``."""
        return name in current_permissions()


#: The one anonymous user object.
ANONYMOUS_USER: Final = AnonymousUser()


def load_user(state: AuthFlowState, tenant: str, user_id: str) -> Any:
    """The user object for ``(tenant, user_id)``: the user loader's, else the library's record."""
    loader = state.hooks.user_loader
    if loader is not None:
        return loader(tenant, user_id)
    return state.backend.get_user(tenant, user_id)


def set_api_user(tenant: str | None, user_id: str | None, user: Any) -> None:
    """Make ``user`` the current user of a request without an Authenticated session (a
    bearer token or the request loader on an API view; see :mod:`flask_authflow._web.api_auth`)."""
    keep_for_request(_API_KEY, ((tenant, user_id), user))


def _api_user() -> tuple[tuple[str | None, str | None], Any] | None:
    return cast("tuple[tuple[str | None, str | None], Any] | None", request_kept(_API_KEY))


def load_current_user() -> Any:
    """The current user (see the module docstring); cached on ``flask.g`` for the request."""
    session = current_auth_session()
    if not session.is_authenticated:
        api = _api_user()
        return api[1] if api is not None else ANONYMOUS_USER
    tenant, user_id = session.tenant, session.user_id
    if tenant is None or user_id is None:  # pragma: no cover - an Authenticated record has both
        return ANONYMOUS_USER
    key = (tenant, user_id)
    cached = request_kept(_CACHE_KEY)
    if cached is not None and cached[0] == key:
        return cached[1]
    user = load_user(get_state(), tenant, user_id)
    if user is None:
        user = ANONYMOUS_USER
    keep_for_request(_CACHE_KEY, (key, user))
    return user


def _role_sets() -> tuple[frozenset[str], frozenset[str]]:
    """The current user's (roles, permissions), read once per request and user."""
    session = current_auth_session()
    api = None if session.is_authenticated else _api_user()
    tenant, user_id = api[0] if api is not None else (session.tenant, session.user_id)
    if (not session.is_authenticated and api is None) or tenant is None or user_id is None:
        return frozenset(), frozenset()
    if load_current_user() is ANONYMOUS_USER:  # the user loader no longer finds this user
        return frozenset(), frozenset()
    key = (tenant, user_id)
    cached = request_kept(_ROLES_KEY)
    if cached is not None and cached[0] == key:
        return cast(tuple[frozenset[str], frozenset[str]], cached[1])
    store = get_state().backend
    sets = frozenset(store.roles_of(*key)), frozenset(store.permissions_of(*key))
    keep_for_request(_ROLES_KEY, (key, sets))
    return sets


def current_roles() -> frozenset[str]:
    """The names of the roles the current request's user holds (empty for a guest)."""
    return _role_sets()[0]


def current_permissions() -> frozenset[str]:
    """Every permission the current request's user's roles grant (empty for a guest)."""
    return _role_sets()[1]


class _CurrentUserProxy(LocalProxy[Any]):
    """``current_user``: the user object, plus :meth:`has_role` and :meth:`has_permission`
    on whatever the user object is (the library's record or the application's model)."""

    def has_role(self, name: str) -> bool:
        return name in current_roles()

    def has_permission(self, name: str) -> bool:
        return name in current_permissions()


#: The current request's user: the application's object (``@authflow.user_loader``), the
#: library's :class:`~flask_authflow._core.ports.UserRecord` without a loader, or
#: :data:`ANONYMOUS_USER`; with ``has_role()`` and ``has_permission()`` in every case.
current_user: Any = _CurrentUserProxy(load_current_user)
