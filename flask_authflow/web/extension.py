"""``AuthFlow``: the one object that wires flask-authflow into a Flask app.

Like Flask-SQLAlchemy, the extension object holds no per-app state: ``init_app``
validates the configuration, builds the stores, the session interface and the
login service, and keeps them in ``app.extensions["authflow"]`` (an
:class:`AuthFlowState`), so one ``AuthFlow()`` can serve several apps.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from flask import Flask, Response, current_app, request

from flask_authflow.api_auth import ApiTokenService
from flask_authflow.audit.client_ip import MAX_ADDRESS_CHARS, parse_ip
from flask_authflow.audit.context import AuditContext, audit_context, audit_source
from flask_authflow.audit.sinks import AuthCounters
from flask_authflow.audit.spool import SpoolAuditSink
from flask_authflow.clock import Clock, SystemClock
from flask_authflow.core.app_users import UserCreatedHook, UserDeletedHook
from flask_authflow.core.factors import EnrollmentStart, Factor
from flask_authflow.core.ports import FactorConfig, MaintainedSessionStore, SessionStore, StorePorts
from flask_authflow.core.session import AuthSession, AuthState
from flask_authflow.errors import (
    AuthFlowError,
    ConfigurationError,
    InvalidInput,
    LoopbackOnly,
    PermissionDenied,
    StepUpNeeded,
    Unauthenticated,
)
from flask_authflow.extras import check_extras
from flask_authflow.i18n import app_template_context
from flask_authflow.login import workflow
from flask_authflow.login.accounts import AccountAdmin
from flask_authflow.login.legacy_hashes import LegacyHashes
from flask_authflow.login.lockout import LockoutPolicy
from flask_authflow.login.password import PasswordHasher
from flask_authflow.login.service import AuthnRequest, AuthnService, SessionWriter
from flask_authflow.login.settings import HashingSettings
from flask_authflow.mail import MailSender, SmtpSender
from flask_authflow.mfa.sealing import factor_sealer
from flask_authflow.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    LoginOutcome,
    WorkflowOutcome,
    WorkflowPending,
    WorkflowStarted,
)
from flask_authflow.responses import error_response
from flask_authflow.sessions.interface import AuthFlowSessionInterface
from flask_authflow.sessions.settings import SessionSettings
from flask_authflow.sessions.stores import MemorySessionStore
from flask_authflow.settings import apply_defaults
from flask_authflow.throttle import Throttle
from flask_authflow.web import authz
from flask_authflow.web.api_auth import api_tokens, install_api_tokens
from flask_authflow.web.breach_wiring import password_policy
from flask_authflow.web.config import AuthFlowConfig
from flask_authflow.web.csrf import template_helpers
from flask_authflow.web.current_user import current_user
from flask_authflow.web.decorators import denial_response
from flask_authflow.web.devices import install_devices, remember_session, request_trust
from flask_authflow.web.external_url import check_mail_settings
from flask_authflow.web.factor_wiring import built_in_factors
from flask_authflow.web.headless import register_api
from flask_authflow.web.mail_budgets import install_mail_budgets
from flask_authflow.web.mfa_required import install_mfa_requirement
from flask_authflow.web.state import (
    EXTENSION_KEY,
    Adapters,
    AuthFlowHooks,
    AuthFlowState,
    DenialHandler,
    UserLoader,
    account_admin,
    current_auth_session,
    current_session,
    get_state,
)
from flask_authflow.web.views.logout import register_logout

log = logging.getLogger("flask_authflow")

UserLoaderT = TypeVar("UserLoaderT", bound=UserLoader)
ClaimsMapperT = TypeVar("ClaimsMapperT", bound=Callable[..., Any])
DenialHandlerT = TypeVar("DenialHandlerT", bound=DenialHandler)
RequestLoaderT = TypeVar("RequestLoaderT", bound=Callable[[Any], Any])
UserCreatedT = TypeVar("UserCreatedT", bound=UserCreatedHook)
UserDeletedT = TypeVar("UserDeletedT", bound=UserDeletedHook)

__all__ = ["Adapters", "AuthFlow", "AuthFlowState", "current_auth_session", "current_session", "get_state"]

if TYPE_CHECKING:
    from flask_authflow.issuer.idp import LocalIdp
    from flask_authflow.issuer.settings import IssuerSettings


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
    for a command, see :func:`~flask_authflow.cli.defer_schema_refusal`). Returns whether
    the refusal waits for the command."""
    from flask_authflow.storage.sql.migrations import ensure_schema

    try:
        ensure_schema(engine)  # SQLite upgrades itself; a shared database is migrated by the operator
    except ConfigurationError as error:
        from flask_authflow.cli import defer_schema_refusal

        if not defer_schema_refusal(app, error):
            raise
        return True
    return False


def _refuse_for_cli(app: Flask, error: BaseException) -> None:
    """Loaded by ``flask ...``: a database that cannot be opened is one line, not a traceback."""
    from flask_authflow.cli import store_refusal

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
        from flask_authflow.storage.sql.backend import SqlAlchemyBackend

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
        from flask_authflow.storage.redis_sessions import RedisSessionStore

        assert settings.redis_url is not None  # SessionSettings refuses "redis" without a URL
        return RedisSessionStore(settings.redis_url, crypto=settings.at_rest_crypto(), clock=clock)
    from flask_authflow.storage.sql.session_store import SqlAlchemySessionStore

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
    from flask_authflow.storage.sql.backend import session_writer
    from flask_authflow.storage.sql.session_store import SqlAlchemySessionStore

    # init_app built this store from ``AUTHFLOW_SESSION_STORE = "sql"``: its class is known.
    return session_writer(backend.database_engine(), cast(SqlAlchemySessionStore, store), interface)


def _mail_sender(given: Adapters, config: AuthFlowConfig) -> MailSender | None:
    """The application's own sender, else SMTP when ``AUTHFLOW_SMTP_HOST`` is set."""
    if given.mail_sender is not None:  # ``is not None``: a test's outbox is falsy while empty
        return given.mail_sender
    return SmtpSender(config.mail) if config.mail is not None else None


def _build_issuer(settings: IssuerSettings, sql_source: Callable[[], Any], clock: Clock) -> LocalIdp:
    """The app's local issuer (imported here: an app without one never loads the JOSE layer)."""
    from flask_authflow.web.issuer_wiring import build_issuer

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
        app.before_request(_loopback_only)
    app.after_request(lambda response: interface.save_early(app, response))
    from flask_authflow.cli import authflow_cli

    app.cli.add_command(authflow_cli)
    if state.issuer is not None:
        app.register_blueprint(state.issuer.blueprint(url_prefix=state.config.issuer.url_prefix or None))


class AuthFlow:
    """The flask-authflow extension.

    :param app: the app to initialise now (or call :meth:`init_app` later).
    :param backend: identity/factor/attempt/audit store; default: ``SqlAlchemyBackend``
        on ``AUTHFLOW_DATABASE_URL`` (SQLite in the instance folder when unset).
    :param session_store: where sessions live; default per ``AUTHFLOW_SESSION_STORE``.
    :param clock: the clock every part uses (a ``MockClock`` in tests).
    :param hasher: the Argon2id hasher; default from the ``AUTHFLOW_ARGON2_*`` keys.
    :param http_client: carries the provider traffic of federated login.
    :param mail_sender: sends the app's mail (a :class:`~flask_authflow.mail.MailSender`);
        default: the SMTP sender of ``AUTHFLOW_SMTP_*``.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        backend: Any = None,
        session_store: MaintainedSessionStore | None = None,
        clock: Clock | None = None,
        hasher: PasswordHasher | None = None,
        http_client: Any = None,
        mail_sender: MailSender | None = None,
    ) -> None:
        #: What every app this extension initialises runs on, unless ``init_app`` is given
        #: its own (``None`` fields are built from each app's configuration).
        self.adapters = Adapters(
            clock=clock,
            hasher=hasher,
            backend=backend,
            session_store=session_store,
            http_client=http_client,
            mail_sender=mail_sender,
        )
        #: Providers registered in code (``register_provider``), for every app.
        self._providers: dict[str, Any] = {}
        self._factors: dict[FactorKind, Factor] = {}
        self._apps: weakref.WeakSet[Flask] = weakref.WeakSet()
        self._hooks = AuthFlowHooks()
        #: The ready-made pages (``authflow.views.register(app)``; see :doc:`/views`).
        self.views = ViewsRegistrar()
        if app is not None:
            self.init_app(app)

    # --- wiring --------------------------------------------------------------------------

    def init_app(
        self,
        app: Flask,
        *,
        clock: Clock | None = None,
        hasher: PasswordHasher | None = None,
        backend: Any = None,
        session_store: MaintainedSessionStore | None = None,
        http_client: Any = None,
        mail_sender: MailSender | None = None,
    ) -> None:
        """Validate configuration and install sessions, login, audit and CLI on ``app``.

        The keyword arguments override, for this app, those given to the constructor: an
        application factory passes the test's ``mock_clock`` here
        (``authflow.init_app(app, clock=clock)``). ``http_client`` carries the provider
        traffic of federated login (a :class:`~flask_authflow.federation.http.HttpClient`; tests
        pass one with the test provider's adapters); ``mail_sender`` sends the app's mail
        instead of the SMTP sender of ``AUTHFLOW_SMTP_*``. No application context is needed.
        Nothing is installed on ``app`` until everything was built, so a refused setting
        leaves the app untouched.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(
                "flask-authflow is already initialised on this app; call init_app once per app"
            )
        given = Adapters(
            clock=clock,
            hasher=hasher,
            backend=backend,
            session_store=session_store,
            http_client=http_client,
            mail_sender=mail_sender,
        ).over(self.adapters)
        config = self._checked_config(app, given)
        clock = given.clock if given.clock is not None else SystemClock()
        hasher = given.hasher if given.hasher is not None else _hasher(config.hashing)
        database = _database(app, config)
        backend, schema_behind = _open_backend(app, given.backend, database, clock)
        ports = _declared_ports(backend, config, federation=bool(self._providers))
        _chain_audit(backend, config)

        def sql_source() -> Any:  # the SQL stores share the backend's engine when it has one
            engine = backend.database_engine()
            return engine if engine is not None else database()

        store = given.session_store
        if store is None:  # ``is None``: an empty store is falsy (it has __len__)
            store = _session_store(config.session, sql_source, clock, create_tables=given.backend is not None)
        store.adopt_clock(clock)
        interface = _session_interface(config.session, store, clock)
        spool = SpoolAuditSink(config.audit.spool_file(app.instance_path))  # audit rows the store refused
        writer = _session_writer(given, config, backend, store, interface)
        service = _login_service(app, config, ports, hasher, clock, spool, writer)
        sealer = factor_sealer(config.factors)
        mail = (lambda: get_state(app).mail_sender), service.throttle
        for factor in [*built_in_factors(config.factors, sealer, *mail), *self._factors.values()]:
            service.register_factor(factor)
        # Not on a schema that is behind, which only `flask authflow db` may use.
        issuer_wanted = bool(config.issuer.issuer) and not schema_behind
        state = AuthFlowState(
            config=config,
            clock=clock,
            session_store=store,
            session_interface=interface,
            backend=backend,
            ports=ports,
            service=service,
            audit_spool=spool,
            trusted_proxies=config.audit.proxies(),
            counters=service.counters,
            hasher=hasher,
            issuer=_build_issuer(config.issuer, sql_source, clock) if issuer_wanted else None,
            hooks=self._hooks,
            sealer=sealer,
            mail_sender=_mail_sender(given, config),
            password_policy=password_policy(config.passwords, given.http_client),
        )
        self._install_on(app, state, given.http_client)

    def _install_on(self, app: Flask, state: AuthFlowState, http_client: Any) -> None:
        """Install on ``app`` what :meth:`init_app` built: the policies, the hooks, the logout
        route, federation, the ready views and the headless API."""
        config = state.config
        authz.install(app, self)  # Cedar policies: loaded and checked now, before anything is installed
        install_mfa_requirement(app, state)  # AUTHFLOW_MFA_REQUIRED (a Cedar action: checked against them)
        _install(app, state)
        register_logout(app, config.web.logout_url_prefix)  # POST /auth/logout: the app's one logout route
        if config.federation.providers or self._providers or config.federation.ssf_transmitters:
            self._install_federation(app, state, http_client)
        self._apps.add(app)
        if config.web.views:
            self.views.register(app)
        if config.web.headless_on:
            register_api(app)

    def _checked_config(self, app: Flask, given: Adapters) -> AuthFlowConfig:
        """``app``'s configuration with its defaults, refused (with what to set) where an extra
        is missing or a mail feature has no origin for its links or no sender."""
        check_extras(
            app.config,
            federation=bool(
                app.config.get("AUTHFLOW_OAUTH_PROVIDERS")
                or self._providers
                or app.config.get("AUTHFLOW_SSF_TRANSMITTERS")
            ),
        )
        apply_defaults(app.config)
        config = AuthFlowConfig.from_config(app.config)
        check_mail_settings(app, config, sender_given=given.mail_sender is not None)
        return config

    def _install_federation(self, app: Flask, state: AuthFlowState, http_client: Any) -> None:
        from flask_authflow.web.federation_wiring import build_federation, register_oauth_blueprint

        federation = build_federation(
            app,
            state.config.federation,
            backend=state.backend,
            session_store=state.session_store,
            clock=state.clock,
            hooks=self._hooks,
            definitions=self._providers,
            http_client=http_client,
        )
        try:
            register_oauth_blueprint(app, state.config.federation.url_prefix)
        except AssertionError:  # Flask refuses setup methods once the app served a request
            raise RuntimeError(
                "register_provider after the app served requests: register providers before "
                "the first request (or set AUTHFLOW_OAUTH_PROVIDERS)"
            ) from None
        state.federation = federation
        links = federation.links  # a linked provider identity is a way to sign in
        state.service.linked_identities = lambda tenant, user_id: bool(links.links_of_user(tenant, user_id))
        if state.config.federation.ssf_transmitters:  # the Shared Signals receiver's push endpoint
            from flask_authflow.web.ssf_views import install_receiver

            install_receiver(app, state, federation, http_client, state.config.federation.url_prefix)

    # --- factors ------------------------------------------------------------------------------

    def register_factor(self, factor: Factor) -> None:
        """Register a :class:`~flask_authflow.core.factors.Factor` (an application's own
        kind, after ``FactorKind.register("name")``, or a replacement for a built-in one) on
        every app this extension initialises, before or after ``init_app``."""
        if not isinstance(factor, Factor):
            raise TypeError("a factor needs kind, check_input, challenge and verify (see Factor)")
        self._factors[factor.kind] = factor
        for app in list(self._apps):
            get_state(app).service.register_factor(factor)

    # --- federation ---------------------------------------------------------------------------

    def register_provider(self, name: str, config_or_factory: Any) -> None:
        """Register an OpenID provider under ``name`` (a slug), in code.

        ``config_or_factory`` is an :class:`~flask_authflow.federation.provider.OAuthProviderConfig`,
        a dict of the same keys, a ready ``OAuthProvider``, or a factory called with the
        tenant that returns one of those (per-tenant federation). Discovery happens on first
        use. Apps already initialised get it too, if they have not served a request yet.
        """
        from flask_authflow.federation.provider import check_provider_name

        check_provider_name(name)
        self._providers[name] = config_or_factory
        for app in list(self._apps):
            state = get_state(app)
            if state.federation is None:
                self._install_federation(app, state, self.adapters.http_client)
            else:
                state.federation.registry.register(name, config_or_factory)

    def claims_mapper(self, mapper: ClaimsMapperT) -> ClaimsMapperT:
        """Register ``mapper(identity)``: the local user (id or ``UserRecord``) a federated
        identity logs in as, or ``None`` to refuse (it may create the user on first sign-in).
        Without one, the default mapper is used (see :doc:`/federation`)."""
        self._hooks.claims_mapper = mapper
        return mapper

    def oauth_provider(self, name: str) -> Any:
        """The current app's provider ``name`` (discovered on first use)."""
        return self._federation().registry.get(name)

    def begin_oauth_login(self, session: AuthSession, provider_name: str, options: Any = None) -> str:
        """Start a federated login on ``session``; returns the authorize URL
        (see ``FederationService.begin``)."""
        return str(self._federation().begin(session, provider_name, options))

    def finish_oauth_login(
        self, session: AuthSession, provider_name: str, code: str, state: str, *, iss: str | None = None
    ) -> Any:
        """Complete a federated login from the callback's ``code`` and ``state``
        (see ``FederationService.finish``); raises an ``OAuthError`` variant on failure."""
        handle = get_state().service.with_audit_context(audit_context())
        return self._federation().finish(handle, session, provider_name, code, state, iss=iss)

    def provider_token(self, provider: str, *, scopes: Iterable[str] | None = None) -> Any:
        """A valid access token of ``provider`` for the signed-in user, to call the
        provider's APIs (the provider needs ``store_tokens``); an expired one is refreshed
        first. It is a ``str`` with ``token_type``, ``auth`` (a ``requests`` auth object:
        Bearer, or DPoP proofs for a DPoP-bound token), and ``cert`` and ``verify`` (the
        client certificate and CA of a certificate-bound token; ``None`` and ``True``
        otherwise): ``requests.get(url, auth=t.auth, cert=t.cert, verify=t.verify)``. See
        :doc:`/federation` ("Calling the provider's APIs").

        :raises Unauthenticated: no user is signed in.
        :raises CertificateChanged: the token is bound to a certificate since replaced.
        :raises NoProviderToken, NoRefreshToken, RefreshTokenExpired, InsufficientScope:
            sign in with the provider again (granting ``scopes``).
        :raises ProviderUnreachable, TokenExchange, TokenRefreshBusy: the refresh failed for now.
        """
        federation = self._federation()
        session = current_auth_session()
        if session.state is not AuthState.AUTHENTICATED or session.tenant is None or session.user_id is None:
            raise Unauthenticated("sign in to use the provider's tokens")
        if federation.tokens is None:
            raise ConfigurationError("the backend cannot store provider tokens (see ProviderTokenStore)")
        return federation.tokens.access_token(session.tenant, session.user_id, provider, scopes=scopes)

    @staticmethod
    def _federation() -> Any:
        federation = get_state().federation
        if federation is None:
            raise ConfigurationError(
                "no OpenID provider is configured: set AUTHFLOW_OAUTH_PROVIDERS "
                "or call authflow.register_provider"
            )
        return federation

    # --- the application's callbacks ---------------------------------------------------------

    def user_loader(self, loader: UserLoaderT) -> UserLoaderT:
        """Register ``loader(tenant, user_id)``: the application's user object, or ``None``.

        ``current_user`` is what it returns for the session's user (loaded once per
        request). With a loader, :func:`~flask_authflow.login_required` also refuses a
        session whose user the loader no longer finds.
        """
        self._hooks.user_loader = loader
        return loader

    def request_loader(self, loader: RequestLoaderT) -> RequestLoaderT:
        """Register ``loader(request)``: the user of a request without an Authenticated
        session, or ``None`` (as Flask-Login's ``request_loader``). Consulted only on views
        that allow API access (``login_required(api=True)``), after a personal API token;
        ``current_user`` is what it returns (see :doc:`/api_tokens`)."""
        self._hooks.request_loader = loader
        return loader

    @property
    def api_tokens(self) -> ApiTokenService:
        """The current app's personal API tokens (create, list, revoke; see :doc:`/api_tokens`)."""
        return api_tokens()

    def user_created(self, hook: UserCreatedT) -> UserCreatedT:
        """Register ``hook(new)``: create the application's row for the new account
        ``new.account`` (a :class:`~flask_authflow.core.app_users.NewAccount`, which also
        says what created it). Every path that creates an account runs it (the command
        line, sign-up, a federated first sign-in, the pytest plugin's users), in the
        application's Flask-SQLAlchemy transaction: raising keeps neither the row nor the
        account. See :doc:`/users`."""
        self._hooks.user_created = hook
        return hook

    def user_deleted(self, hook: UserDeletedT) -> UserDeletedT:
        """Register ``hook(account)``: delete the application's row of an account being
        deleted (``flask authflow users delete``, :meth:`AccountAdmin.delete
        <flask_authflow.login.accounts.AccountAdmin.delete>`), in the same transaction as
        the account's removal."""
        self._hooks.user_deleted = hook
        return hook

    def unauthorized_handler(self, handler: DenialHandlerT) -> DenialHandlerT:
        """Register the response to a request that needs a login and has none
        (as Flask-Login's ``unauthorized_handler``). Without one, the denial raises
        :class:`~flask_authflow.errors.Unauthenticated`, which ``@app.errorhandler(Unauthenticated)``
        or ``@app.errorhandler(401)`` can answer (default: a redirect to
        ``AUTHFLOW_LOGIN_VIEW`` for browsers, a 401 JSON or text error otherwise)."""
        self._hooks.unauthorized_handler = handler
        return handler

    def device_place(self, hook: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
        """Register ``hook(request)``: an approximate place of the client ("Berlin, DE") for
        the device list and the new-device mail, or ``None`` (see :doc:`/devices`)."""
        self._hooks.device_place = hook
        return hook

    def step_up_handler(self, handler: DenialHandlerT) -> DenialHandlerT:
        """Register the response to a request whose login is too old for
        :func:`~flask_authflow.fresh_login_required` (Flask-Login's ``needs_refresh_handler``).
        Without one, :class:`~flask_authflow.errors.StepUpNeeded` is raised (default: a
        redirect to the step-up view for browsers, ``{"error": "step_up_required"}`` otherwise)."""
        self._hooks.step_up_handler = handler
        return handler

    # --- request-time helpers on the current app ----------------------------------------------

    @property
    def state(self) -> AuthFlowState:
        """The :class:`AuthFlowState` of the current app."""
        return get_state()

    @property
    def service(self) -> AuthnService:
        """The :class:`AuthnService` of the current app."""
        return get_state().service

    @property
    def accounts(self) -> AccountAdmin:
        """Account administration on the current app: ``disable``, ``enable``, ``delete`` and
        ``set_password`` each revoke the user's sessions (see :class:`AccountAdmin`)."""
        return account_admin()

    def login_with_password(
        self, identifier: str, password: str, *, tenant: str | None = None, remember: bool = False
    ) -> LoginOutcome | FactorOutcome:
        """Begin a login and verify the password in one call, as ``POST /login`` does.

        Returns the ``begin_login`` outcome when it is not ``FactorRequired(PASSWORD)``
        (locked, step-up), else the ``verify_factor`` outcome. With ``remember`` (a JSON
        client's ``"remember": true``), the session of a sign-in completed in this request
        lives ``AUTHFLOW_REMEMBER_ME_TTL`` (see :doc:`/devices`).
        """
        state = get_state()
        session = current_auth_session()
        handle = state.service.with_audit_context(audit_context())
        tenant_name = tenant or state.config.default_tenant
        with FactorCredential.password(password) as credential:
            outcome = handle.login_with_password(identifier, tenant_name, session, credential)
        if remember is True:
            remember_session(session)
        return outcome

    def login_user(
        self,
        user_id: str,
        tenant: str | None = None,
        *,
        method: str = "external",
        skip_factors: bool = False,
    ) -> Authenticated | FactorRequired | WorkflowPending:
        """Log the user in on the current session after the application checked who it is
        (sign-up, a magic link): see :meth:`AuthnRequest.establish
        <flask_authflow.login.service.AuthnRequest.establish>`. A workflow pending on the
        session ends first (audited ``workflow_aborted``, reason ``new_login``).

        Returns ``Authenticated``, or ``FactorRequired`` when the user has enrolled factors
        beyond the password (never skipped unless ``skip_factors=True``, which is audited),
        or ``WorkflowPending`` when the user must set up a second factor first
        (``AUTHFLOW_MFA_REQUIRED``, or a factor an import could not carry).

        :raises UserNotFound: no such user. :raises AccountDisabled: the account is disabled.
        """
        state = get_state()
        handle = state.service.with_audit_context(audit_context())
        return handle.establish(
            current_auth_session(),
            tenant or state.config.default_tenant,
            user_id,
            method=method,
            skip_factors=skip_factors,
        )

    def logout(self) -> None:
        """Log the current session out (audited; id rotated; cookie cleared)."""
        state = get_state()
        state.service.with_audit_context(audit_context()).logout(current_auth_session())

    # --- factor steps and enrollment on the current session ----------------------------------

    def _request_handle(self) -> AuthnRequest:
        return get_state().service.with_audit_context(audit_context())

    def verify_factor(
        self, kind: FactorKind | str, secret: str | bytes, *, trust_device: bool = False
    ) -> FactorOutcome:
        """Present the credential of ``kind`` for the current session's pending step: a code
        (TOTP, HOTP, e-mail, recovery code) or WebAuthn's response JSON. See
        :meth:`AuthnRequest.verify_factor <flask_authflow.login.service.AuthnRequest.verify_factor>`.
        With ``trust_device`` (a JSON client's ``"trust_device": true``), a sign-in this step
        completes trusts the browser's device for ``AUTHFLOW_DEVICE_TRUST_DURATION`` (see
        :doc:`/devices`).

        :raises InvalidInput: an unknown kind or a malformed credential."""
        request_trust(trust_device is True)
        with FactorCredential(_kind(kind), secret) as credential:
            return self._request_handle().verify_factor(credential, current_auth_session())

    def challenge_factor(self, kind: FactorKind | str) -> FactorRequired:
        """(Re)issue the challenge of ``kind`` for the pending step ("e-mail me a code")."""
        return self._request_handle().challenge(_kind(kind), current_auth_session())

    def begin_enrollment(
        self, kind: FactorKind | str, params: Mapping[str, Any] | None = None
    ) -> EnrollmentStart:
        """Start adding a factor for the signed-in user (a fresh login is required)."""
        return self._request_handle().begin_enrollment(current_auth_session(), _kind(kind), params)

    def confirm_enrollment(self, kind: FactorKind | str, factor_id: str, secret: str | bytes) -> FactorConfig:
        """Finish an enrollment with the proof (a code, WebAuthn's attestation JSON); the
        user's other sessions end."""
        with FactorCredential(_kind(kind), secret) as credential:
            return self._request_handle().confirm_enrollment(
                current_auth_session(), _kind(kind), factor_id, credential
            )

    def disable_factor(self, factor_id: str) -> bool:
        """Remove one of the signed-in user's factors (fresh login required; other sessions end)."""
        return self._request_handle().disable_factor(current_auth_session(), factor_id)

    def user_factors(self) -> list[FactorConfig]:
        """The signed-in user's confirmed factors (no secrets are shown by their ``repr``)."""
        return self._request_handle().user_factors(current_auth_session())

    def begin_passkey_login(self, tenant: str | None = None) -> Mapping[str, Any]:
        """WebAuthn request options for a usernameless passkey login (``AUTHFLOW_PASSKEY_LOGIN``)."""
        return self._request_handle().begin_passkey_login(
            tenant or get_state().config.default_tenant, current_auth_session()
        )

    def finish_passkey_login(self, credential_json: str | bytes) -> FactorOutcome:
        """Finish a passkey login with the browser's assertion JSON."""
        with FactorCredential(FactorKind.WEBAUTHN, credential_json) as credential:
            return self._request_handle().finish_passkey_login(credential, current_auth_session())

    def authorize(self, action: str, resource: Any, context: Mapping[str, Any] | None = None) -> bool:
        """Whether the policies let the current user do ``action`` on ``resource`` (:doc:`/authz`)."""
        return authz.is_authorized(action, resource, context)

    # --- workflows (:doc:`/workflows`) ------------------------------------------------------------

    def start_workflow(self, kind: str, data: Any = None, expires_in: Any = None) -> WorkflowStarted:
        """Start a workflow of ``kind`` on the current session; the outcome holds its token."""
        return workflow.start(*_here(), kind, data, expires_in, get_state().config.login.workflow_expiry)

    def complete_workflow(self, token_or_kind: str) -> WorkflowOutcome:
        """Complete the current session's workflow with its token (or a ``WorkflowKind``)."""
        return workflow.complete(*_here(), token_or_kind)

    def abort_workflow(self) -> WorkflowOutcome:
        """End the current session's workflow without completing it."""
        return workflow.abort(*_here())

    # --- federation ----------------------------------------------------------------------------

    def provision_user(self, hook: ClaimsMapperT) -> ClaimsMapperT:
        """Register ``hook(identity, tenant)``: creates the application's user at the first
        federated sign-in of an identity with no link and returns its id (``None`` refuses
        the sign-in); see :doc:`/federation`."""
        self._hooks.provision_user = hook
        return hook


class ViewsRegistrar:
    """``authflow.views``: registers the ready-made pages (the ``authflow_views`` blueprint)."""

    def register(self, app: Flask, *, url_prefix: str | None = None) -> None:
        """Register the ``authflow_views`` blueprint on ``app`` (once; ``AUTHFLOW_VIEWS = True``
        does the same at ``init_app``)."""
        from flask_authflow.web.views import VIEWS_BLUEPRINT, register_views

        if VIEWS_BLUEPRINT in app.blueprints:
            return
        register_views(app, url_prefix=url_prefix)


def _here() -> tuple[AuthnService, AuditContext, AuthSession]:
    """The service, audit context and session of the current request (for the workflow steps)."""
    return get_state().service, audit_context(), current_auth_session()


def _kind(kind: FactorKind | str) -> FactorKind:
    try:
        return FactorKind(kind)
    except ValueError:
        raise InvalidInput(f"unknown factor kind {kind!r}") from None


def _template_context() -> dict[str, Any]:
    return {
        **app_template_context(),  # the ready pages' _ for the app's pages that extend them
        "current_user": current_user,
        "current_session": current_session,
        **template_helpers(),
    }


def _is_loopback(address: str | None) -> bool:
    """The address is on this machine (the audit layer's strict parser: scope ids, IPv4-mapped)."""
    if not address or len(address) > MAX_ADDRESS_CHARS:  # what parse_ip refuses; never cached
        return False
    return _is_loopback_text(address)


@functools.lru_cache(maxsize=512)
def _is_loopback_text(address: str) -> bool:
    """:func:`_is_loopback` of a short string, remembered: every request of a plain-HTTP
    server on this machine asks it about the same peer address."""
    ip = parse_ip(address)
    return ip is not None and ip.is_loopback


def _is_loopback_request(environ: Mapping[str, Any]) -> bool:
    """The TCP peer, every ``X-Forwarded-For`` hop and any ``X-Real-IP`` of the request in
    ``environ`` are loopback addresses.

    A proxy on this machine that forwards a remote client (``X-Forwarded-For:
    203.0.113.9``) does not make that client local; a malformed hop counts as remote.
    """
    if not _is_loopback(environ.get("REMOTE_ADDR")):  # what request.remote_addr reads
        return False
    # WSGI joins repeated header lines into one comma-separated value, and the environ
    # lookup avoids walking every header as ``request.headers.getlist`` does.
    real_ip = environ.get("HTTP_X_REAL_IP")  # a local proxy's word for a remote client, too
    if real_ip is not None and not _is_loopback(real_ip.strip()):
        return False
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    if forwarded is None:
        return True
    return all(_is_loopback(hop.strip()) for hop in forwarded.split(","))


def _loopback_only() -> Response | None:
    """Refuse remote clients of an app whose cookies travel without Secure (installed only
    with ``AUTHFLOW_ALLOW_INSECURE_LOOPBACK`` and ``AUTHFLOW_COOKIE_SECURE=False``)."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    if not (app.debug or app.testing) and not _is_loopback_request(request.environ):
        # Cookies without Secure may only travel on this machine. The client is told no
        # more than that; the operator reads what to set in the log.
        log.warning(
            "refused a non-loopback client: cookies are sent without Secure "
            "(set AUTHFLOW_COOKIE_SECURE=True and serve over HTTPS)"
        )
        return error_response(LoopbackOnly())
    return None
