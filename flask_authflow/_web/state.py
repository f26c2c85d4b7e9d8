"""The per-app state of flask-authflow and the request-time accessors built on it.

``AuthFlow.init_app`` builds one :class:`AuthFlowState` per app and keeps it in
``app.extensions["authflow"]``; everything that runs inside a request or a CLI command
(decorators, views, the CLI, test fixtures) reads it through :func:`get_state`.
This module sits between the parts (sessions, login, issuer, stores) and the modules
that wire or use them (``extension``, ``decorators``, ``cli``), so none of those needs
to import another to find the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from flask import Flask, current_app
from flask import session as flask_session
from werkzeug.local import LocalProxy

from flask_authflow._clock import Clock
from flask_authflow._core.app_users import AppUserHooks, UserCreatedHook, UserDeletedHook
from flask_authflow._core.ports import (
    ApiTokenStore,
    AttemptStore,
    AuditSink,
    BackendMaintenance,
    DeviceStore,
    FactorStore,
    IdentityStore,
    MaintainedSessionStore,
    RoleStore,
    StorePorts,
    UserRecord,
)
from flask_authflow._core.session import AuthSession
from flask_authflow._mail import MailSender
from flask_authflow._web.app_transaction import app_transaction
from flask_authflow._web.config import AuthFlowConfig
from flask_authflow.audit._chain import ChainedAuditStore
from flask_authflow.audit._client_ip import TrustedProxies
from flask_authflow.audit._sinks import AuthCounters
from flask_authflow.audit._spool import SpoolAuditSink
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.sessions._interface import AuthFlowSessionInterface

if TYPE_CHECKING:
    from flask_authflow.federation._login import FederationService
    from flask_authflow.issuer._idp import LocalIdp

__all__ = [
    "EXTENSION_KEY",
    "Adapters",
    "AuthBackend",
    "AuthFlowHooks",
    "AuthFlowState",
    "account_admin",
    "app_user_hooks",
    "current_auth_session",
    "current_session",
    "get_state",
]

#: Key of the state in ``app.extensions``.
EXTENSION_KEY = "authflow"


class AuthBackend(
    IdentityStore,
    FactorStore,
    AttemptStore,
    AuditSink,
    BackendMaintenance,
    ChainedAuditStore,
    RoleStore,
    ApiTokenStore,
    DeviceStore,
    Protocol,
):
    """One store for users, factors, attempts, audit rows, roles, API tokens and devices, plus account
    administration and the maintenance the wiring and the command line call.

    :class:`~flask_authflow.storage._memory.InMemoryBackend` and
    :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` implement it.
    """

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord: ...


#: ``user_loader(tenant, user_id)`` returns the application's user object or ``None``.
UserLoader = Callable[[str, str], Any]
#: A denial handler returns the response to send (``unauthorized_handler``, ``step_up_handler``).
DenialHandler = Callable[[], Any]


@dataclass(eq=False)
class AuthFlowHooks:
    """The application's callbacks, registered on :class:`~flask_authflow.AuthFlow` with its
    decorators (``@authflow.user_loader`` ...). One object is shared by every app the
    extension serves, so a hook registered after ``init_app`` still applies."""

    user_loader: UserLoader | None = None
    unauthorized_handler: DenialHandler | None = None
    step_up_handler: DenialHandler | None = None
    #: ``claims_mapper(identity)`` maps a federated identity to a local user (see :doc:`/federation`).
    claims_mapper: Callable[[Any], Any] | None = None
    #: ``provision_user(identity, tenant)`` creates the app's user at a first federated sign-in.
    provision_user: Callable[[Any, str], Any] | None = None
    #: ``request_loader(request)`` returns the user of a request without a session (API views).
    request_loader: Callable[[Any], Any] | None = None
    #: ``device_place(request)``: an approximate place of the client ("Berlin, DE") for the
    #: device list, or ``None`` (see :doc:`/devices`).
    device_place: Callable[[Any], str | None] | None = None
    #: ``user_created(new)`` creates the app's row for a new account (see :doc:`/users`).
    user_created: UserCreatedHook | None = None
    #: ``user_deleted(account)`` deletes the app's row of an account being deleted.
    user_deleted: UserDeletedHook | None = None


@dataclass(eq=False)
class AuthFlowState:
    """Everything flask-authflow built for one app (``app.extensions["authflow"]``)."""

    config: AuthFlowConfig
    clock: Clock
    session_store: MaintainedSessionStore
    session_interface: AuthFlowSessionInterface
    backend: AuthBackend
    #: The aggregates the backend declared (its ``store_ports()``), checked by ``init_app``.
    ports: StorePorts
    service: AuthnService
    trusted_proxies: TrustedProxies
    counters: AuthCounters
    hasher: PasswordHasher
    #: The app's local token issuer, when ``AUTHFLOW_ISSUER`` is set.
    issuer: LocalIdp | None = None
    #: Where e-mail (one-time codes) goes: SMTP when ``AUTHFLOW_SMTP_HOST`` is set; an
    #: application (or a test's outbox) may put its own :class:`MailSender` here.
    mail_sender: MailSender | None = None
    #: Seals factor secrets at rest and hashes one-time codes (``AUTHFLOW_FACTOR_ENCRYPTION_KEY``).
    sealer: FactorSealer | None = None
    #: The application's callbacks (user loader, denial handlers).
    hooks: AuthFlowHooks = field(default_factory=AuthFlowHooks)
    #: Federated login (a ``FederationService``) when OpenID providers are configured.
    federation: FederationService | None = None
    #: Where audit rows go when the audit store refuses them (the login service's fallback);
    #: ``flask authflow audit replay-spool`` moves them into the store.
    audit_spool: SpoolAuditSink | None = None
    #: The policy new passwords must pass (``init_app`` builds it from ``AUTHFLOW_PASSWORD_*``;
    #: ``None`` builds it from the config on each use).
    password_policy: PasswordPolicy | None = None
    #: The devices of users (a :class:`~flask_authflow._web.devices.DeviceWiring`).
    devices: Any = None

    def __repr__(self) -> str:
        return (
            f"<AuthFlowState store={type(self.session_store).__name__} backend={type(self.backend).__name__}>"
        )


@dataclass(frozen=True, eq=False)
class Adapters:
    """What an app's flask-authflow runs on instead of what its configuration would build.

    ``AuthFlow(...)`` keeps the ones given to it (``authflow.adapters``); ``init_app`` takes
    its keyword arguments over those. A ``None`` field is built from the app's configuration:
    the system clock, the Argon2id hasher of ``AUTHFLOW_ARGON2_*``, the SQL backend on
    ``AUTHFLOW_DATABASE_URL``, the session store of ``AUTHFLOW_SESSION_STORE``, an HTTP client
    on ``requests`` (see :doc:`/testing` for a test's own), the SMTP sender of
    ``AUTHFLOW_SMTP_*`` (see :doc:`/mail` for one of your own).
    """

    clock: Clock | None = None
    hasher: PasswordHasher | None = None
    backend: Any = None
    session_store: MaintainedSessionStore | None = None
    http_client: Any = None
    mail_sender: MailSender | None = None

    def over(self, defaults: Adapters) -> Adapters:
        """These adapters, with ``defaults``' where these are ``None``."""
        return Adapters(
            **{
                name: mine if mine is not None else getattr(defaults, name)
                for name, mine in vars(self).items()
            }
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
    """The :class:`AccountAdmin` of ``app`` (default: the current app), checking new passwords
    against the app's password policy (``state.password_policy``, or the one its config describes)
    and changing second factors through the app's login service (its factors, store and clock)."""
    target = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
    state = get_state(target)
    policy = state.password_policy or PasswordPolicy.from_settings(state.config.passwords)
    return AccountAdmin(
        state.backend,
        state.session_store,
        sender=target,
        policy=policy,
        service=state.service,
        app_users=app_user_hooks(target),
        hasher=state.hasher,
    )


def app_user_hooks(app: Flask) -> AppUserHooks:
    """The application-user hook pair of ``app`` (``@authflow.user_created`` /
    ``@authflow.user_deleted``), run in its Flask-SQLAlchemy transaction when it has one."""
    hooks = get_state(app).hooks
    return AppUserHooks(
        created=lambda: hooks.user_created,
        deleted=lambda: hooks.user_deleted,
        transaction=app_transaction,
        sender=app,
    )


def current_auth_session() -> AuthSession:
    """The current request's :class:`AuthSession` (``flask.session`` under flask-authflow)."""
    obj = flask_session._get_current_object()  # type: ignore[attr-defined]
    if not isinstance(obj, AuthSession):
        raise RuntimeError(
            "the session is not a flask-authflow session: is AuthFlow initialised on this app?"
        )
    return obj


#: The current request's :class:`AuthSession`, typed (like ``flask_login.current_user``).
current_session: AuthSession = LocalProxy(current_auth_session)  # type: ignore[assignment]
