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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from flask import Flask, Response, current_app, g, request

from .audit.client_ip import MAX_ADDRESS_CHARS, TrustedProxies, parse_ip
from .audit.context import audit_context
from .audit.sinks import AuthCounters
from .audit.spool import SpoolAuditSink
from .authn.accounts import AccountAdmin
from .authn.factors.base import EnrollmentStart, Factor
from .authn.factors.password import PasswordHasher
from .authn.factors.wiring import install_factors
from .authn.lockout import LockoutPolicy
from .authn.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    LoginOutcome,
)
from .authn.service import AuthnRequest, AuthnService
from .authn.stores import FactorConfig
from .clock import Clock, SystemClock
from .config import AuthFlowConfig, load_config
from .decorators import denial_response
from .errors import (
    AuthFlowError,
    ConfigurationError,
    InvalidInput,
    LoopbackOnly,
    PermissionDenied,
    StepUpNeeded,
    Unauthenticated,
)
from .issuer.wiring import build_issuer
from .mail import SmtpSender, SmtpSettings
from .responses import error_response
from .session.crypto import SessionCrypto, derive_key
from .session.interface import AuthFlowSessionInterface
from .session.model import AuthSession
from .session.stores import MemorySessionStore, SessionStore
from .state import (
    EXTENSION_KEY,
    AuthFlowHooks,
    AuthFlowState,
    DenialHandler,
    PluginWiring,
    UserLoader,
    account_admin,
    active_plugin_wiring,
    current_auth_session,
    current_session,
    get_state,
)
from .stores.memory import InMemoryBackend
from .users import current_user

log = logging.getLogger("flask_authflow")

UserLoaderT = TypeVar("UserLoaderT", bound=UserLoader)
ClaimsMapperT = TypeVar("ClaimsMapperT", bound=Callable[..., Any])
DenialHandlerT = TypeVar("DenialHandlerT", bound=DenialHandler)

__all__ = ["AuthFlow", "AuthFlowState", "current_auth_session", "current_session", "get_state"]


def _test_database_url(config: AuthFlowConfig, wiring: PluginWiring) -> str | None:
    """The database an app built during a test uses, or ``None`` for the configured one.

    Memory wiring: a private in-memory SQLite (for anything that still wants SQL, such as
    the issuer's key store). SQL wiring: the configured URL, unless it is a SQLite file
    outside the test's temporary folder, which is refused; none configured: a file in it.
    """
    if wiring.stores == "memory":
        return "sqlite://"
    url = config.database_url
    if url is None:
        return f"sqlite:///{wiring.tmp_path / 'authflow.db'}"
    from sqlalchemy.engine import make_url

    path = _sqlite_file_outside(make_url(url), wiring)
    if path is not None:
        raise ConfigurationError(
            f"AUTHFLOW_DATABASE_URL points at {path}, outside this test's temporary folder "
            f"({wiring.tmp_path}): the test would write into that database. Use "
            "f\"sqlite:///{tmp_path}/test.db\" in the test's config, or the plugin's default "
            "in-memory stores (remove the authflow_stores marker)"
        )
    return None


def _sqlite_file_outside(url: Any, wiring: PluginWiring) -> Path | None:
    """The SQLite file ``url`` (a SQLAlchemy URL) names, if it lies outside the test's
    temporary folder; ``None`` for other databases, in-memory ones and files inside it."""
    if url is None or url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    path = Path(str(url.database)).expanduser().resolve()
    return None if path.is_relative_to(wiring.tmp_path.resolve()) else path


def _refuse_database_outside(wiring: PluginWiring, engine: Any) -> None:
    """Under the pytest plugin: an explicit SQL backend on a SQLite file outside the test's
    temporary folder is refused (the test would write into a development database)."""
    path = _sqlite_file_outside(getattr(engine, "url", None), wiring)
    if path is not None:
        raise ConfigurationError(
            f"the backend's database is {path}, outside this test's temporary folder ({wiring.tmp_path}): "
            "the test would write into that database. Configure an in-memory database for tests "
            '(SQLALCHEMY_DATABASE_URI="sqlite://") or one under tmp_path'
        )


def _default_database_url(app: Flask) -> str:
    instance = Path(app.instance_path)
    instance.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{instance / 'authflow.db'}"


def _loading_for_a_cli_command() -> bool:
    """The Flask CLI is loading the app to look up one of the app's commands (such as
    ``flask authflow db upgrade``), rather than to serve it or run a built-in command."""
    import click
    from flask.cli import FlaskGroup

    ctx = click.get_current_context(silent=True)
    return ctx is not None and isinstance(ctx.command, FlaskGroup)


def _ensure_schema(app: Flask, engine: Any) -> bool:
    """The default store's tables at the shipped head revision: SQLite (embedded, one
    machine) upgrades itself; on PostgreSQL a schema that is behind is refused with a
    message naming ``flask authflow db upgrade``. When the Flask CLI loads the app for one
    of its commands, the refusal waits for the command: ``flask authflow db ...`` runs,
    every other ``flask authflow`` command reports it. Returns whether it waits."""
    from .stores.sqlalchemy.migrations import ensure_schema

    try:
        ensure_schema(engine, auto_upgrade=engine.dialect.name == "sqlite")
    except ConfigurationError as error:
        if not _loading_for_a_cli_command():
            raise
        from .cli import SCHEMA_ERROR_KEY

        app.extensions[SCHEMA_ERROR_KEY] = error
        return True
    return False


class AuthFlow:
    """The flask-authflow extension.

    :param app: the app to initialise now (or call :meth:`init_app` later).
    :param backend: identity/factor/attempt/audit store; default: ``SqlAlchemyBackend``
        on ``AUTHFLOW_DATABASE_URL`` (SQLite in the instance folder when unset).
    :param session_store: where sessions live; default per ``AUTHFLOW_SESSION_STORE``.
    :param clock: the clock every part uses (a ``MockClock`` in tests).
    :param hasher: the Argon2id hasher; default from the ``AUTHFLOW_ARGON2_*`` keys.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        backend: Any = None,
        session_store: SessionStore | None = None,
        clock: Clock | None = None,
        hasher: PasswordHasher | None = None,
        http_client: Any = None,
    ) -> None:
        self._backend = backend
        self._http_client = http_client
        #: Providers registered in code (``register_provider``), for every app.
        self._providers: dict[str, Any] = {}
        self._factors: dict[FactorKind, Factor] = {}
        self._apps: weakref.WeakSet[Flask] = weakref.WeakSet()
        self._session_store = session_store
        self._clock = clock
        self._hasher = hasher
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
        session_store: SessionStore | None = None,
        http_client: Any = None,
    ) -> None:
        """Validate configuration and install sessions, login, audit and CLI on ``app``.

        The keyword arguments override, for this app, those given to the constructor: an
        application factory passes the test's ``mock_clock`` here
        (``authflow.init_app(app, clock=clock)``). ``http_client`` carries the provider
        traffic of federated login (a :class:`~flask_authflow.federation.http.HttpClient`; tests
        pass one with the test provider's adapters). No application context is needed.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(
                "flask-authflow is already initialised on this app; call init_app once per app"
            )
        clock = clock if clock is not None else self._clock
        hasher = hasher if hasher is not None else self._hasher
        backend = backend if backend is not None else self._backend
        session_store = session_store if session_store is not None else self._session_store
        config = load_config(app.config, debug=app.debug, testing=app.testing)
        wiring = active_plugin_wiring()
        database_override: str | None = None
        if wiring is not None:
            clock = clock if clock is not None else wiring.clock
            hasher = hasher if hasher is not None else wiring.hasher
            database_override = _test_database_url(config, wiring)
            if wiring.stores == "memory":
                backend = backend if backend is not None else InMemoryBackend(hasher=hasher, clock=clock)
                if session_store is None:
                    session_store = MemorySessionStore(clock=clock)
        clock = clock if clock is not None else SystemClock()
        hasher = (
            hasher
            if hasher is not None
            else PasswordHasher(
                time_cost=config.argon2_time_cost,
                memory_cost=config.argon2_memory_cost,
                parallelism=config.argon2_parallelism,
                max_concurrent=config.max_concurrent_hashes,
                max_time_cost=config.argon2_max_time_cost,
                max_memory_cost=config.argon2_max_memory_cost,
                max_parallelism=config.argon2_max_parallelism,
            )
        )
        try:
            trusted = TrustedProxies(config.trusted_proxies)
        except (ValueError, ConfigurationError) as exc:
            raise ConfigurationError(f"AUTHFLOW_TRUSTED_PROXIES: {exc}") from exc

        database_url = database_override or config.database_url or _default_database_url(app)
        schema_managed = backend is None  # the default store's tables follow the shipped migrations
        schema_behind = False
        if backend is None:
            from .stores.sqlalchemy.backend import SqlAlchemyBackend

            backend = SqlAlchemyBackend(database_url, hasher=hasher, clock=clock, create_tables=False)
            try:
                schema_behind = _ensure_schema(app, backend.engine)
            except BaseException:
                backend.close()  # its pooled connections, before the refusal propagates
                raise
        bind = getattr(backend, "bind_app", None)
        if callable(bind):  # a backend on a Flask-SQLAlchemy db: a copy on this app's engine
            backend = bind(app)
        adopt = getattr(backend, "adopt_defaults", None)
        if callable(adopt):
            adopt(hasher=hasher, clock=clock)
        if wiring is not None:
            _refuse_database_outside(wiring, getattr(backend, "engine", None))
        session_store_built = session_store is None
        session_store = (
            session_store
            if session_store is not None  # an empty store is falsy (it has __len__)
            else self._build_session_store(
                config, database_url, backend, clock, create_tables=not schema_managed
            )
        )

        counters = AuthCounters()
        service = AuthnService(
            backend,
            backend,
            hasher=hasher,
            lockout=LockoutPolicy(
                max_failures=config.lockout_max_failures,
                window=config.lockout_window,
                lock_duration=config.lockout_duration,
            ),
            clock=clock,
            counters=counters,
            audit_fallback=SpoolAuditSink(
                config.audit_spool_path
                or (wiring.tmp_path if wiring is not None else Path(app.instance_path))
                / "authflow-audit-spool.jsonl"
            ),
        )
        sealer = install_factors(service, config, lambda: get_state(app).mail_sender)
        interface = AuthFlowSessionInterface(
            session_store,
            config.signing_key,
            previous_signing_keys=config.previous_signing_keys,
            ttl=config.session_ttl,
            idle_timeout=config.session_idle_timeout,
            cookie_name=config.cookie_name,
            secure=config.cookie_secure,
            samesite=config.cookie_samesite,
            cookie_domain=config.cookie_domain,
            cookie_path=config.cookie_path,
            clock=clock,
            custom_limit=config.custom_data_limit,
        )
        # Built before anything is installed on the app: a refused store spec or a
        # damaged key store leaves the app untouched, so init_app can be retried.
        # (Not on a schema that is behind, which only `flask authflow db` may use: see _ensure_schema.)
        issuer = (
            build_issuer(config.issuer, config, database_url, backend, clock)
            if config.issuer and not schema_behind
            else None
        )
        # Federation is checked (provider entries, a backend that stores links) before the
        # state is installed, like the issuer above.
        state = AuthFlowState(
            config=config,
            clock=clock,
            session_store=session_store,
            session_interface=interface,
            backend=backend,
            service=service,
            trusted_proxies=trusted,
            counters=counters,
            hasher=hasher,
            issuer=issuer,
            hooks=self._hooks,
            sealer=sealer,
        )
        if config.smtp_host is not None:  # e-mailed codes go out through this server
            state.mail_sender = SmtpSender(SmtpSettings.from_config(app.config))
        app.extensions[EXTENSION_KEY] = state

        def revoke_sessions(tenant: str, user_id: str, keep_sid: str | None, reason: str) -> int:
            return account_admin(app).revoke_sessions(tenant, user_id, keep_sid=keep_sid, reason=reason)

        service.revoke_sessions = revoke_sessions  # a factor change ends the user's other sessions
        if session_store_built and config.session_store not in ("memory", "redis"):
            from .stores.sqlalchemy.backend import session_writer  # one transaction for both

            service.session_writer = session_writer(backend, session_store, interface)
        for factor in self._factors.values():
            service.register_factor(factor)
        app.session_interface = interface
        app.register_error_handler(AuthFlowError, denial_response)
        app.register_error_handler(Unauthenticated, denial_response)
        app.register_error_handler(StepUpNeeded, denial_response)
        app.register_error_handler(PermissionDenied, denial_response)
        app.context_processor(_template_context)
        app.before_request(_before_request)
        app.after_request(lambda response: interface.save_early(app, response))

        from .cli import authflow_cli

        app.cli.add_command(authflow_cli)

        if issuer is not None:
            app.register_blueprint(issuer.blueprint(url_prefix=config.issuer_url_prefix or None))
        if config.oauth_providers or self._providers:
            self._install_federation(app, state, http_client or self._http_client)
        self._apps.add(app)
        if config.views:
            self.views.register(app)

    @staticmethod
    def _build_session_store(
        config: AuthFlowConfig, database_url: str, backend: Any, clock: Clock, *, create_tables: bool = True
    ) -> SessionStore:
        if config.session_store == "memory":
            return MemorySessionStore(clock=clock)
        from .stores.sqlalchemy.session_store import SqlAlchemySessionStore

        key = config.session_encryption_key or derive_key(config.signing_key, b"authflow.at-rest")
        previous = list(config.previous_session_encryption_keys)
        if config.session_encryption_key is None:
            previous += [derive_key(old, b"authflow.at-rest") for old in config.previous_signing_keys]
        crypto = SessionCrypto(key, previous_keys=previous)
        if config.session_store == "redis":
            from .stores.redis_session_store import RedisSessionStore

            assert config.redis_url is not None  # load_config refuses "redis" without a URL
            return RedisSessionStore(config.redis_url, crypto=crypto, clock=clock)
        engine = getattr(backend, "engine", None) or database_url
        return SqlAlchemySessionStore(engine, crypto=crypto, clock=clock, create_tables=create_tables)

    def _install_federation(self, app: Flask, state: AuthFlowState, http_client: Any) -> None:
        from .federation.wiring import build_federation, register_oauth_blueprint

        state.federation = build_federation(
            app,
            state.config,
            backend=state.backend,
            session_store=state.session_store,
            clock=state.clock,
            hooks=self._hooks,
            definitions=self._providers,
            http_client=http_client,
        )
        register_oauth_blueprint(app, state.config.oauth_url_prefix)

    # --- factors ------------------------------------------------------------------------------

    def register_factor(self, factor: Factor) -> None:
        """Register a :class:`~flask_authflow.authn.factors.base.Factor` (an application's own
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
        from .federation.provider import check_provider_name

        check_provider_name(name)
        self._providers[name] = config_or_factory
        for app in list(self._apps):
            state = get_state(app)
            if state.federation is None:
                if getattr(app, "_got_first_request", False):
                    raise RuntimeError(
                        "register_provider after the app served requests: register providers before "
                        "the first request (or set AUTHFLOW_OAUTH_PROVIDERS)"
                    )
                self._install_federation(app, state, self._http_client)
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

    def unauthorized_handler(self, handler: DenialHandlerT) -> DenialHandlerT:
        """Register the response to a request that needs a login and has none
        (as Flask-Login's ``unauthorized_handler``). Without one, the denial raises
        :class:`~flask_authflow.errors.Unauthenticated`, which ``@app.errorhandler(Unauthenticated)``
        or ``@app.errorhandler(401)`` can answer (default: a redirect to
        ``AUTHFLOW_LOGIN_VIEW`` for browsers, a 401 JSON or text error otherwise)."""
        self._hooks.unauthorized_handler = handler
        return handler

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
        self, identifier: str, password: str, *, tenant: str | None = None
    ) -> LoginOutcome | FactorOutcome:
        """Begin a login and verify the password in one call, as ``POST /login`` does.

        Returns the ``begin_login`` outcome when it is not ``FactorRequired(PASSWORD)``
        (locked, step-up), else the ``verify_factor`` outcome.
        """
        state = get_state()
        session = current_auth_session()
        handle = state.service.with_audit_context(audit_context())
        tenant_name = tenant or state.config.default_tenant
        with FactorCredential.password(password) as credential:
            begun = handle.begin_login(identifier, tenant_name, session)
            if not (isinstance(begun, FactorRequired) and begun.kind is FactorKind.PASSWORD):
                return begun
            return handle.verify_factor(credential, session)

    def login_user(
        self,
        user_id: str,
        tenant: str | None = None,
        *,
        method: str = "external",
        skip_factors: bool = False,
    ) -> Authenticated | FactorRequired:
        """Log the user in on the current session after the application checked who it is
        (sign-up, a magic link): see :meth:`AuthnRequest.establish
        <flask_authflow.authn.service.AuthnRequest.establish>`.

        Returns ``Authenticated``, or ``FactorRequired`` when the user has enrolled factors
        beyond the password (never skipped unless ``skip_factors=True``, which is audited).

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

    def verify_factor(self, kind: FactorKind | str, secret: str | bytes) -> FactorOutcome:
        """Present the credential of ``kind`` for the current session's pending step: a code
        (TOTP, HOTP, e-mail, recovery code) or WebAuthn's response JSON. See
        :meth:`AuthnRequest.verify_factor <flask_authflow.authn.service.AuthnRequest.verify_factor>`.

        :raises InvalidInput: an unknown kind or a malformed credential."""
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


class ViewsRegistrar:
    """``authflow.views``: registers the ready-made pages (the ``authflow_views`` blueprint)."""

    def register(self, app: Flask, *, url_prefix: str | None = None) -> None:
        """Register the ``authflow_views`` blueprint on ``app`` (once; ``AUTHFLOW_VIEWS = True``
        does the same at ``init_app``)."""
        from .views import VIEWS_BLUEPRINT, register_views

        if VIEWS_BLUEPRINT in app.blueprints:
            return
        register_views(app, url_prefix=url_prefix)


def _kind(kind: FactorKind | str) -> FactorKind:
    try:
        return FactorKind(kind)
    except ValueError:
        raise InvalidInput(f"unknown factor kind {kind!r}") from None


def _template_context() -> dict[str, Any]:
    return {"current_user": current_user, "current_session": current_session}


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
    """The TCP peer and every ``X-Forwarded-For`` hop of the request in ``environ`` are
    loopback addresses.

    A proxy on this machine that forwards a remote client (``X-Forwarded-For:
    203.0.113.9``) does not make that client local; a malformed hop counts as remote.
    """
    if not _is_loopback(environ.get("REMOTE_ADDR")):  # what request.remote_addr reads
        return False
    # WSGI joins repeated header lines into one comma-separated value, and the environ
    # lookup avoids walking every header as ``request.headers.getlist`` does.
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    if forwarded is None:
        return True
    return all(_is_loopback(hop.strip()) for hop in forwarded.split(","))


def _before_request() -> Response | None:
    # Every request runs this: the app and the request are looked up once each.
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    config = get_state(app).config
    if (
        not config.cookie_secure
        and config.allow_insecure_loopback
        and not (app.debug or app.testing)
        and not _is_loopback_request(request.environ)
    ):
        # Cookies without Secure may only travel on this machine. The client is told no
        # more than that; the operator reads what to set in the log.
        log.warning(
            "refused a non-loopback client: cookies are sent without Secure "
            "(set AUTHFLOW_COOKIE_SECURE=True and serve over HTTPS)"
        )
        return error_response(LoopbackOnly())
    session = current_auth_session()
    if session.binding_mismatch and not g.get("_authflow_mismatch_counted"):
        g._authflow_mismatch_counted = True
        get_state(app).counters.binding_mismatch()
    return None
