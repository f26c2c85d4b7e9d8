"""The per-app state of flask-authflow and the request-time accessors built on it.

``AuthFlow.init_app`` builds one :class:`AuthFlowState` per app and keeps it in
``app.extensions["authflow"]``; everything that runs inside a request or a CLI command
(decorators, views, the CLI, the pytest plugin) reads it through :func:`get_state`.
This module sits between the parts (sessions, login, issuer, stores) and the modules
that wire or use them (``extension``, ``decorators``, ``cli``), so none of those needs
to import another to find the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from flask import Flask, current_app
from werkzeug.local import LocalProxy

from .audit.client_ip import TrustedProxies
from .audit.sinks import AuthCounters
from .authn.accounts import AccountAdmin
from .authn.factors.password import PasswordHasher
from .authn.service import AuthnService
from .authn.stores import AttemptStore, AuditSink, FactorStore, IdentityStore, UserRecord
from .clock import Clock
from .config import AuthFlowConfig
from .mail import MailSender
from .session.interface import AuthFlowSessionInterface
from .session.model import AuthSession
from .session.stores import SessionStore

if TYPE_CHECKING:
    from .issuer.idp import LocalIdp

__all__ = [
    "EXTENSION_KEY",
    "AuthBackend",
    "AuthFlowState",
    "account_admin",
    "current_auth_session",
    "current_session",
    "get_state",
]

#: Key of the state in ``app.extensions``.
EXTENSION_KEY = "authflow"


@runtime_checkable
class AuthBackend(IdentityStore, FactorStore, AttemptStore, AuditSink, Protocol):
    """One store for users, factors, attempts and audit rows, plus account administration.

    :class:`~flask_authflow.stores.memory.InMemoryBackend` and
    :class:`~flask_authflow.stores.sqlalchemy.backend.SqlAlchemyBackend` implement it.
    """

    def set_password(self, tenant: str, identifier: str, password: str) -> None: ...

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord: ...


@dataclass(eq=False)
class AuthFlowState:
    """Everything flask-authflow built for one app (``app.extensions["authflow"]``)."""

    config: AuthFlowConfig
    clock: Clock
    session_store: SessionStore
    session_interface: AuthFlowSessionInterface
    backend: AuthBackend
    service: AuthnService
    trusted_proxies: TrustedProxies
    counters: AuthCounters
    hasher: PasswordHasher
    #: The app's local token issuer, when ``AUTHFLOW_ISSUER`` is set.
    issuer: LocalIdp | None = None
    #: Where e-mail (one-time codes) goes; the pytest plugin's ``mail_outbox`` replaces it.
    mail_sender: MailSender | None = None

    def __repr__(self) -> str:
        return (
            f"<AuthFlowState store={type(self.session_store).__name__} backend={type(self.backend).__name__}>"
        )


def get_state(app: Flask | None = None) -> AuthFlowState:
    """The :class:`AuthFlowState` of ``app`` (default: the current app)."""
    target = app if app is not None else current_app
    try:
        state = target.extensions[EXTENSION_KEY]
    except KeyError:
        raise RuntimeError(
            "flask-authflow is not initialised on this app: call AuthFlow(app) or authflow.init_app(app)"
        ) from None
    assert isinstance(state, AuthFlowState)
    return state


def account_admin(app: Flask | None = None) -> AccountAdmin:
    """The :class:`AccountAdmin` of ``app`` (default: the current app)."""
    target = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
    state = get_state(target)
    return AccountAdmin(state.backend, state.session_store, sender=target)


def current_auth_session() -> AuthSession:
    """The current request's :class:`AuthSession` (``flask.session`` under flask-authflow)."""
    from flask import session

    obj = session._get_current_object()  # type: ignore[attr-defined]
    if not isinstance(obj, AuthSession):
        raise RuntimeError(
            "the session is not a flask-authflow session: is AuthFlow initialised on this app?"
        )
    return obj


#: The current request's :class:`AuthSession`, typed (like ``flask_login.current_user``).
current_session: AuthSession = LocalProxy(current_auth_session)  # type: ignore[assignment]
