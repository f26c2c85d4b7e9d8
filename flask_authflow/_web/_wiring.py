"""What ``init_app`` builds an app's parts with (private to :mod:`flask_authflow._web.extension`):
the default SQL backend and its schema, the session store and interface, the hasher, the
login service, the mail sender, the issuer, and the installation of the finished state
on the app. Moved out of ``extension.py`` unchanged, so that the extension module keeps
the ``AuthFlow`` class: its wiring entry point, its hooks and its services.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from flask import Flask

from flask_authflow._clock import Clock
from flask_authflow._core.ports import MaintainedSessionStore, SessionStore, StorePorts
from flask_authflow._i18n import app_template_context
from flask_authflow._mail import MailSender, SmtpSender
from flask_authflow._throttle import Throttle
from flask_authflow._web.api_auth import install_api_tokens
from flask_authflow._web.config import AuthFlowConfig
from flask_authflow._web.csrf import template_helpers
from flask_authflow._web.current_user import current_user
from flask_authflow._web.decorators import denial_response
from flask_authflow._web.devices import install_devices
from flask_authflow._web.loopback import loopback_only
from flask_authflow._web.mail_budgets import install_mail_budgets
from flask_authflow._web.state import (
    EXTENSION_KEY,
    Adapters,
    AuthFlowState,
    account_admin,
    current_session,
)
from flask_authflow.audit._context import audit_source
from flask_authflow.audit._sinks import AuthCounters
from flask_authflow.audit._spool import SpoolAuditSink
from flask_authflow.errors import (
    AuthFlowError,
    ConfigurationError,
    PermissionDenied,
    StepUpNeeded,
    Unauthenticated,
)
from flask_authflow.login._legacy_hashes import LegacyHashes
from flask_authflow.login._lockout import LockoutPolicy
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._service import AuthnService, SessionWriter
from flask_authflow.login._settings import HashingSettings
from flask_authflow.sessions._interface import AuthFlowSessionInterface
from flask_authflow.sessions._settings import SessionSettings
from flask_authflow.sessions._stores import MemorySessionStore

if TYPE_CHECKING:
    from flask_authflow.issuer._idp import LocalIdp
    from flask_authflow.issuer._settings import IssuerSettings


def _database(app: Flask, config: AuthFlowConfig) -> Callable[[], str]:
    """The URL of the default SQL stores, looked up when one is built: ``AUTHFLOW_DATABASE_URL``,
    else ``authflow.db`` in the instance folder (created then, not before)."""

    def url() -> str:
        if config.web.database_url:
            return str(config.web.database_url)
        instance = Path(app.instance_path)
        instance.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{instance / 'authflow.db'}"

    return url


def _ensure_schema(app: Flask, engine: Any) -> bool:
    """The default store's tables at the shipped head revision: SQLite (embedded, one
    machine) upgrades itself; on PostgreSQL a schema that is behind is refused with a
    message naming ``flask authflow db upgrade`` (unless the Flask CLI is loading the app
    for a command, see :func:`~flask_authflow._cli.defer_schema_refusal`). Returns whether
    the refusal waits for the command."""
    from flask_authflow.storage._sql.migrations import ensure_schema

    try:
        ensure_schema(engine)  # SQLite upgrades itself; a shared database is migrated by the operator
    except ConfigurationError as error:
        from flask_authflow._cli import defer_schema_refusal

        if not defer_schema_refusal(app, error):
            raise
        return True
    return False


def _refuse_for_cli(app: Flask, error: BaseException) -> None:
    """Loaded by ``flask ...``: a database that cannot be opened is one line, not a traceback."""
    from flask_authflow._cli import store_refusal

    refusal = store_refusal(app, error) if isinstance(error, Exception) else None
    if refusal is not None:
        raise refusal from None


def _open_backend(app: Flask, backend: Any, database: Callable[[], str], clock: Clock) -> tuple[Any, bool]:
    """The app's backend and whether its schema is behind (left to ``flask authflow db``).

    ``None`` builds the default ``SqlAlchemyBackend`` on ``database()``, whose tables follow
    the shipped migrations; a backend on a Flask-SQLAlchemy ``db`` gets a copy bound to this
    app's engine; a backend built without a clock adopts the app's."""
    schema_behind = False
    if backend is None:
        from flask_authflow.storage._sql.backend import SqlAlchemyBackend

        try:
            backend = SqlAlchemyBackend(database(), clock=clock, create_tables=False)
        except Exception as error:
            _refuse_for_cli(app, error)
            raise
        try:
            schema_behind = _ensure_schema(app, backend.engine)
        except BaseException as error:
            backend.close()  # its pooled connections, before the refusal propagates
            _refuse_for_cli(app, error)
            raise
    backend = backend.bind_app(app)
    backend.adopt_clock(clock)
    return backend, schema_behind


def _declared_ports(backend: Any, config: AuthFlowConfig, *, federation: bool) -> StorePorts:
    """The ports ``backend`` declares (its ``store_ports()``), checked against what the
    configuration turns on: a feature whose port the backend lacks is refused now, with
    what to set, instead of failing on its first request."""
    ports: StorePorts = backend.store_ports()
    accounts = config.accounts
    if ports.account_tokens is None and (accounts.registration or accounts.password_reset):
        raise ConfigurationError(
            f"{type(backend).__name__} keeps no account tokens (its store_ports() has "
            "account_tokens=None): set AUTHFLOW_REGISTRATION = False and AUTHFLOW_PASSWORD_RESET = "
            "False, or declare an AccountTokenStore"
        )
    wants_links = federation or bool(config.federation.providers or config.federation.ssf_transmitters)
    if ports.identity_links is None and wants_links:
        raise ConfigurationError(
            f"{type(backend).__name__} cannot store identity links (its store_ports() has "
            "identity_links=None): federated login needs a FederationStore; remove "
            "AUTHFLOW_OAUTH_PROVIDERS or declare one"
        )
    return ports


def _chain_audit(backend: Any, config: AuthFlowConfig) -> None:
    """With ``AUTHFLOW_AUDIT_CHAIN`` on, the backend MACs its audit rows into the chain."""
    chain = config.audit.audit_chain()
    if chain is None:
        return
    if chain.knows(chain.id_of(config.session.signing_key)):
        raise ConfigurationError(
            "AUTHFLOW_AUDIT_CHAIN_KEY (or a previous one) is the signing key: "
            "give the audit chain a key of its own"
        )
    backend.use_audit_chain(chain)


def _session_store(
    settings: SessionSettings, sql_source: Callable[[], Any], clock: Clock, *, create_tables: bool
) -> MaintainedSessionStore:
    """The store ``AUTHFLOW_SESSION_STORE`` names, records encrypted at rest."""
    if settings.store == "memory":
        return MemorySessionStore(clock=clock)
    if settings.store == "redis":
        from flask_authflow.storage._redis_sessions import RedisSessionStore

        assert settings.redis_url is not None  # SessionSettings refuses "redis" without a URL
        return RedisSessionStore(settings.redis_url, crypto=settings.at_rest_crypto(), clock=clock)
    from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore

    return SqlAlchemySessionStore(
        sql_source(), crypto=settings.at_rest_crypto(), clock=clock, create_tables=create_tables
    )


def _session_interface(
    settings: SessionSettings, store: SessionStore, clock: Clock
) -> AuthFlowSessionInterface:
    return AuthFlowSessionInterface(
        store,
        settings.signing_key,
        previous_signing_keys=settings.previous_signing_keys,
        ttl=settings.ttl,
        idle_timeout=settings.idle_timeout,
        cookie_name=settings.cookie_name,
        secure=settings.cookie_secure,
        samesite=settings.cookie_samesite,
        cookie_domain=settings.cookie_domain,
        cookie_path=settings.cookie_path,
        clock=clock,
        custom_limit=settings.custom_data_limit,
        remember_ttl=settings.remember_ttl,
        remember_idle_timeout=settings.remember_idle_timeout,
    )


def _hasher(settings: HashingSettings) -> PasswordHasher:
    """The Argon2id hasher the ``AUTHFLOW_ARGON2_*`` keys describe."""
    return PasswordHasher(
        time_cost=settings.time_cost,
        memory_cost=settings.memory_cost,
        parallelism=settings.parallelism,
        max_concurrent=settings.max_concurrent,
        max_time_cost=settings.max_time_cost,
        max_memory_cost=settings.max_memory_cost,
        max_parallelism=settings.max_parallelism,
    )


def _login_service(
    app: Flask,
    config: AuthFlowConfig,
    ports: StorePorts,
    hasher: PasswordHasher,
    clock: Clock,
    spool: SpoolAuditSink,
    session_writer: SessionWriter | None,
) -> AuthnService:
    """The login service on ``backend``, with the lockout, freshness and passkey settings.
    ``session_writer`` writes a login step's session in the step's own transaction."""

    def revoke_sessions(tenant: str, user_id: str, keep_sid: str | None, reason: str) -> int:
        return account_admin(app).revoke_sessions(tenant, user_id, keep_sid=keep_sid, reason=reason)

    lockout = config.lockout
    backend: Any = ports.login  # the app's backend (its login port is itself)
    return AuthnService(
        backend,
        backend,
        hasher=hasher,
        lockout=LockoutPolicy(
            max_failures=lockout.max_failures,
            window=lockout.window,
            lock_duration=lockout.duration,
            account_max_failures=lockout.account_max_failures,
            max_lock_duration=lockout.max_duration,
            failure_cap=lockout.failure_cap,
        ),
        clock=clock,
        counters=AuthCounters(),
        audit_fallback=spool,
        freshness=config.login.freshness,
        site_name=config.login.site_name or "flask-authflow",
        passkey_login_allowed=config.factors.passkey_login_allowed,
        revoke_sessions=revoke_sessions,  # a factor change ends the user's other sessions
        session_writer=session_writer,
        legacy_hashes=_legacy_hashes(config.hashing, hasher),
        throttle=Throttle.from_settings(config.throttle),
        api_token_store=backend,  # a reset, a password change and log-out-everywhere end them
        account_tokens=ports.account_tokens,
    )


def _legacy_hashes(settings: HashingSettings, hasher: PasswordHasher) -> LegacyHashes | None:
    """The legacy schemes ``AUTHFLOW_LEGACY_PASSWORD_*`` enable, under the hasher's ceilings."""
    if not settings.legacy_schemes:
        return None
    return LegacyHashes(
        settings.legacy_schemes,
        salt=settings.legacy_salt,
        argon2_over_ceiling=hasher.over_ceiling,
        slot=hasher.slot,
    )


def _session_writer(
    given: Adapters,
    config: AuthFlowConfig,
    backend: Any,
    store: SessionStore,
    interface: AuthFlowSessionInterface,
) -> SessionWriter | None:
    """One transaction for a login step and its session, when the SQL session store that
    ``init_app`` built shares the backend's database (memory and Redis stores cannot)."""
    if given.session_store is not None or config.session.store != "sql":
        return None
    from flask_authflow.storage._sql.backend import session_writer
    from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore

    # init_app built this store from ``AUTHFLOW_SESSION_STORE = "sql"``: its class is known;
    # the backend joins it only when it declares the store's engine as its own (its SQL units).
    return session_writer(backend, cast(SqlAlchemySessionStore, store), interface)


def _mail_sender(given: Adapters, config: AuthFlowConfig) -> MailSender | None:
    """The application's own sender, else SMTP when ``AUTHFLOW_SMTP_HOST`` is set."""
    if given.mail_sender is not None:  # ``is not None``: a test's outbox is falsy while empty
        return given.mail_sender
    return SmtpSender(config.mail) if config.mail is not None else None


def _build_issuer(settings: IssuerSettings, sql_source: Callable[[], Any], clock: Clock) -> LocalIdp:
    """The app's local issuer (imported here: an app without one never loads the JOSE layer)."""
    from flask_authflow._web.issuer_wiring import build_issuer

    return build_issuer(settings, sql_source, clock)


def _install(app: Flask, state: AuthFlowState) -> None:
    """Put the state on the app and hook devices, API tokens, sessions, error handlers and the
    CLI into it."""
    install_api_tokens(app, state)  # first: its settings may still be refused
    install_devices(app, state)  # the device cookie, device records, trusted devices
    install_mail_budgets(app, state)  # the networks each account signs in from
    app.extensions[EXTENSION_KEY] = state
    audit_source(app).trusted_proxies = state.trusted_proxies  # the audit context receives them
    interface = state.session_interface
    app.session_interface = interface
    for error in (AuthFlowError, Unauthenticated, StepUpNeeded, PermissionDenied):
        app.register_error_handler(error, denial_response)
    app.context_processor(_template_context)
    interface.on_binding_mismatch = lambda: state.counters.binding_mismatch()
    settings = state.config.session
    if not settings.cookie_secure and settings.allow_insecure_loopback:
        # Decided once from the configuration: every other app has no before_request hook.
        app.before_request(loopback_only)
    app.after_request(lambda response: interface.save_early(app, response))
    from flask_authflow._cli import authflow_cli

    app.cli.add_command(authflow_cli)
    if state.issuer is not None:
        app.register_blueprint(state.issuer.blueprint(url_prefix=state.config.issuer.url_prefix or None))


def _template_context() -> dict[str, Any]:
    return {
        **app_template_context(),  # the ready pages' _ for the app's pages that extend them
        "current_user": current_user,
        "current_session": current_session,
        **template_helpers(),
    }
