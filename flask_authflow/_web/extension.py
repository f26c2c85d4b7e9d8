"""``AuthFlow``: the one object that wires flask-authflow into a Flask app.

Like Flask-SQLAlchemy, the extension object holds no per-app state: ``init_app``
validates the configuration, builds the stores, the session interface and the
login service, and keeps them in ``app.extensions["authflow"]`` (an
:class:`AuthFlowState`), so one ``AuthFlow()`` can serve several apps.

``AuthFlow`` itself keeps the wiring (``init_app``, ``register_factor``,
``register_provider``), the application's hooks (``user_loader``, ``unauthorized_handler``,
...) and the everyday services of the current app (``authflow.accounts``, ``.roles``,
``.tokens``, ``.sessions``, ``.devices``, ``.factors``, ``.login``, ``.federation``; see
:mod:`flask_authflow._core.service`). What it computes to build an app lives in
:mod:`flask_authflow._web._wiring`; its pre-0.8 methods in :mod:`flask_authflow._web._deprecated`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.app_users import UserCreatedHook, UserDeletedHook
from flask_authflow._core.factors import Factor
from flask_authflow._core.ports import MaintainedSessionStore
from flask_authflow._extras import check_extras
from flask_authflow._mail import MailSender
from flask_authflow._outcomes import FactorKind
from flask_authflow._settings import apply_defaults
from flask_authflow._web import authz, services
from flask_authflow._web._deprecated import DeprecatedMethods
from flask_authflow._web._wiring import (
    _build_issuer,
    _chain_audit,
    _database,
    _declared_ports,
    _hasher,
    _install,
    _login_service,
    _mail_sender,
    _open_backend,
    _session_interface,
    _session_store,
    _session_writer,
)
from flask_authflow._web.breach_wiring import password_policy
from flask_authflow._web.config import AuthFlowConfig
from flask_authflow._web.external_url import check_mail_settings
from flask_authflow._web.factor_wiring import built_in_factors
from flask_authflow._web.headless import register_api
from flask_authflow._web.mfa_required import install_mfa_requirement
from flask_authflow._web.state import (
    EXTENSION_KEY,
    Adapters,
    AuthFlowHooks,
    AuthFlowState,
    DenialHandler,
    UserLoader,
    current_auth_session,
    current_session,
    get_state,
)
from flask_authflow._web.views.logout import register_logout
from flask_authflow.api_auth import Tokens
from flask_authflow.audit._spool import SpoolAuditSink
from flask_authflow.authz import Roles
from flask_authflow.devices import Devices
from flask_authflow.federation import Federation
from flask_authflow.login import Accounts, Factors, Login
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._recovery import Ended
from flask_authflow.login._service import AuthnService
from flask_authflow.mfa._sealing import factor_sealer
from flask_authflow.sessions import Sessions

UserLoaderT = TypeVar("UserLoaderT", bound=UserLoader)
ClaimsMapperT = TypeVar("ClaimsMapperT", bound=Callable[..., Any])
DenialHandlerT = TypeVar("DenialHandlerT", bound=DenialHandler)
RequestLoaderT = TypeVar("RequestLoaderT", bound=Callable[[Any], Any])
UserCreatedT = TypeVar("UserCreatedT", bound=UserCreatedHook)
UserDeletedT = TypeVar("UserDeletedT", bound=UserDeletedHook)

__all__ = ["Adapters", "AuthFlow", "AuthFlowState", "current_auth_session", "current_session", "get_state"]


class AuthFlow(DeprecatedMethods):
    """The flask-authflow extension.

    :param app: the app to initialise now (or call :meth:`init_app` later).
    :param backend: identity/factor/attempt/audit store; default: ``SqlAlchemyBackend``
        on ``AUTHFLOW_DATABASE_URL`` (SQLite in the instance folder when unset).
    :param session_store: where sessions live; default per ``AUTHFLOW_SESSION_STORE``.
    :param clock: the clock every part uses (a ``MockClock`` in tests).
    :param hasher: the Argon2id hasher; default from the ``AUTHFLOW_ARGON2_*`` keys.
    :param http_client: carries the provider traffic of federated login.
    :param mail_sender: sends the app's mail (a :class:`~flask_authflow._mail.MailSender`);
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
        traffic of federated login (a :class:`~flask_authflow.federation._http.HttpClient`; tests
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
        from flask_authflow._web.federation_wiring import build_federation, register_oauth_blueprint

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
            from flask_authflow._web.ssf_views import install_receiver

            install_receiver(app, state, federation, http_client, state.config.federation.url_prefix)

    # --- factors ------------------------------------------------------------------------------

    def register_factor(self, factor: Factor) -> None:
        """Register a :class:`~flask_authflow._core.factors.Factor` (an application's own
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

        ``config_or_factory`` is an :class:`~flask_authflow.federation._provider.OAuthProviderConfig`,
        a dict of the same keys, a ready ``OAuthProvider``, or a factory called with the
        tenant that returns one of those (per-tenant federation). Discovery happens on first
        use. Apps already initialised get it too, if they have not served a request yet.
        """
        from flask_authflow.federation._provider import check_provider_name

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

    def provision_user(self, hook: ClaimsMapperT) -> ClaimsMapperT:
        """Register ``hook(identity, tenant)``: creates the application's user at the first
        federated sign-in of an identity with no link and returns its id (``None`` refuses
        the sign-in); see :doc:`/federation`."""
        self._hooks.provision_user = hook
        return hook

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

    def user_created(self, hook: UserCreatedT) -> UserCreatedT:
        """Register ``hook(new)``: create the application's row for the new account
        ``new.account`` (a :class:`~flask_authflow._core.app_users.NewAccount`, which also
        says what created it). Every path that creates an account runs it (the command
        line, sign-up, a federated first sign-in, the pytest plugin's users), in the
        application's Flask-SQLAlchemy transaction: raising keeps neither the row nor the
        account. See :doc:`/users`."""
        self._hooks.user_created = hook
        return hook

    def user_deleted(self, hook: UserDeletedT) -> UserDeletedT:
        """Register ``hook(account)``: delete the application's row of an account being
        deleted (``flask authflow users delete``, :meth:`AccountAdmin.delete
        <flask_authflow.login._accounts.AccountAdmin.delete>`), in the same transaction as
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

    # --- the services of the current app (see :mod:`flask_authflow._core.service`) ----------

    @property
    def accounts(self) -> Accounts:
        """Accounts: ``create``, ``list``, ``get``, ``disable``, ``enable``, ``delete``,
        ``set_password`` (:class:`~flask_authflow.login.Accounts`)."""
        return services.accounts()

    @property
    def roles(self) -> Roles:
        """Roles: ``create``, ``list``, ``get``, ``delete``; ``grant`` / ``revoke`` to a user;
        ``grant_permission`` / ``revoke_permission`` (:class:`~flask_authflow.authz.Roles`)."""
        return services.roles()

    @property
    def tokens(self) -> Tokens:
        """Personal API tokens: ``create``, ``list``, ``get``, ``revoke``, ``revoke_all``
        (:class:`~flask_authflow.api_auth.Tokens`)."""
        return services.tokens()

    @property
    def sessions(self) -> Sessions[Ended]:
        """A user's sessions: ``list``, ``get``, ``revoke``, ``revoke_all``
        (:class:`~flask_authflow.sessions.Sessions`)."""
        return services.sessions()

    @property
    def devices(self) -> Devices:
        """A user's devices: ``list``, ``get``, ``revoke``, ``revoke_trust``
        (:class:`~flask_authflow.devices.Devices`)."""
        return services.devices()

    @property
    def factors(self) -> Factors:
        """Second factors, an operator's and the signed-in user's
        (:class:`~flask_authflow.login.Factors`)."""
        return services.factors()

    @property
    def login(self) -> Login:
        """The login steps an application calls on the current session
        (:class:`~flask_authflow.login.Login`)."""
        return services.login()

    @property
    def federation(self) -> Federation:
        """Federated login and provider tokens (:class:`~flask_authflow.federation.Federation`)."""
        return services.federation()

    @property
    def state(self) -> AuthFlowState:
        """The :class:`AuthFlowState` of the current app (its stores and engines)."""
        return get_state()

    @property
    def service(self) -> AuthnService:
        """The :class:`AuthnService` of the current app (the login engine)."""
        return get_state().service


class ViewsRegistrar:
    """``authflow.views``: registers the ready-made pages (the ``authflow_views`` blueprint)."""

    def register(self, app: Flask, *, url_prefix: str | None = None) -> None:
        """Register the ``authflow_views`` blueprint on ``app`` (once; ``AUTHFLOW_VIEWS = True``
        does the same at ``init_app``)."""
        from flask_authflow._web.views import VIEWS_BLUEPRINT, register_views

        if VIEWS_BLUEPRINT in app.blueprints:
            return
        register_views(app, url_prefix=url_prefix)
