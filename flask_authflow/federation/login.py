"""The federated login ceremony and back-channel logout: :class:`FederationService`.

``begin`` stores a :class:`~flask_authflow.federation.ceremony.Ceremony` in the session
and returns the authorize URL; ``finish`` runs the callback's steps (state, token exchange,
ID-token checks, optional userinfo), maps the validated claims to a local user (the
application's ``claims_mapper``, or the default one), links the provider identity to
that user and establishes the session through the same path as ``login_user``
(audit row with method ``oidc:<provider>``, ``login_succeeded``, id rotation). On any
failure nothing transitions and the ceremony is gone.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from flask_authflow import signals
from flask_authflow.clock import Clock
from flask_authflow.core.app_users import AppTransaction, AppUserHooks
from flask_authflow.core.identifiers import normalise_email, normalise_identifier, provider_identifier
from flask_authflow.core.ports import (
    FactorStore,
    IdentityStore,
    LoginRecorder,
    SessionStore,
    UnitOfWork,
    UserRecord,
)
from flask_authflow.core.session import AuthSession, AuthState, SessionRecord, begin_flow, clear_flow
from flask_authflow.errors import (
    AuthFlowError,
    ConfigurationError,
    InvalidInput,
    StepUpNeeded,
    StoreUnavailable,
    TokenCheck,
)
from flask_authflow.federation.ceremony import CEREMONY_KEY, Ceremony
from flask_authflow.federation.errors import (
    CsrfMismatch,
    Expired,
    IssuerMismatch,
    LogoutTokenInvalid,
    OAuthError,
    UserNotLinked,
)
from flask_authflow.federation.linking import (
    LINK_KEY,
    IdentityLinked,
    IdentityLinkedElsewhere,
    LastSignInMethod,
    LinkIntent,
    NotLinked,
    ProvisionHook,
    ProvisioningFailed,
    has_other_way,
    provisioned_id,
)
from flask_authflow.federation.links import FederationStore, IdentityLink
from flask_authflow.federation.oauth2 import OAuth2Provider, PlainIdentity
from flask_authflow.federation.provider import OAuthProvider, ProviderRegistry, TokenSet
from flask_authflow.federation.provider_tokens import ProviderTokens
from flask_authflow.jose import VerifiedClaims
from flask_authflow.outcomes import Authenticated, FactorRequired, WorkflowPending

__all__ = [
    "ClaimsMapper",
    "FederatedIdentity",
    "FederatedLogin",
    "FederationService",
    "OAuthLoginOptions",
    "default_claims_mapper",
    "email_link_key",
    "email_linked_user",
]

#: The application's own database transaction, if it has one (Flask-SQLAlchemy's
#: ``db.session``): a callback's writes join it (see :meth:`FederationService.one_commit`).
AppTransactionSource = Callable[[], "AppTransaction | None"]
#: Opens the backend's unit of work (``LoginStore.begin_unit``): every write of a callback,
#: a link or an unlink runs in it and commits once. ``None``: the backend has none.
UnitSource = Callable[[], UnitOfWork] | None
#: Writes the signed-in session in the callback's unit, when the session store is on the
#: backend's database: ``(session, unit) -> after_commit``, or ``None`` when the session
#: was ended meanwhile. ``None`` (Redis, memory): the response writes it after the commit.
SessionJoin = Callable[[AuthSession, UnitOfWork], "Callable[[], None] | None"]

log = logging.getLogger("flask_authflow.federation")


@dataclass(frozen=True)
class OAuthLoginOptions:
    """Options of one federated login (all optional).

    :param return_to: a same-site path to land on after the callback (checked by the view).
    :param pending_workflow: the federated step belongs to a longer ceremony (a sign-up):
        the session ends in PendingWorkflow instead of Authenticated.
    :param scopes: scopes for this login instead of the provider's configured ones.
    :param prompt, login_hint: passed to the authorize request when set.
    :param tenant: for a provider registered with a factory (per-tenant federation): the
        tenant the factory is called with; the provider it builds names the local tenant.
        Ignored by providers registered with a fixed configuration.
    """

    return_to: str | None = None
    pending_workflow: bool = False
    scopes: tuple[str, ...] | None = None
    prompt: str | None = None
    login_hint: str | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class FederatedIdentity:
    """A provider identity whose ID token passed every check, for the claims mapper."""

    provider: str
    issuer: str
    subject: str
    tenant: str
    claims: Mapping[str, Any] = field(repr=False)
    userinfo: Mapping[str, Any] | None = field(default=None, repr=False)
    #: The existing link of (issuer, subject), if any.
    link: IdentityLink | None = None
    #: The provider allows linking to an existing account by verified e-mail.
    link_by_email: bool = False

    @property
    def local_identifier(self) -> str:
        """``<provider>:<sub>``, the sub's case kept: the identifier the default mapping
        gives the local account it creates (a ``provision_user`` hook may use it too)."""
        return provider_identifier(self.provider, self.subject)

    @property
    def verified_email(self) -> str | None:
        """The e-mail address, only when the provider says it is verified (``email_verified``
        is exactly ``true``); never link accounts by an unverified address."""
        source: Mapping[str, Any] = self.userinfo if self.userinfo is not None else self.claims
        email = source.get("email")
        if isinstance(email, str) and email and source.get("email_verified") is True:
            return email
        return None


def email_link_key(email: str) -> str | None:
    """The form of a provider-verified address that linking by e-mail looks up: the whole
    address lower-cased, as every account's address is stored
    (:func:`~flask_authflow.core.identifiers.normalise_email`); ``None`` (never link) for
    an address outside ASCII, or without exactly one ``@`` between two non-empty parts.

    No Unicode folding: a provider-verified address whose first letter is the fullwidth
    ``a`` (U+FF41) is not the local ``alice@example.com``.
    """
    if not email.isascii() or email.count("@") != 1:
        return None
    local, _, domain = email.partition("@")
    if not local or not domain or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) == 0x7F for ch in email):
        return None
    try:
        return normalise_email(email)
    except InvalidInput:
        return None


#: ``claims_mapper(identity)``: the local user (an id or a ``UserRecord``) to log in, or ``None`` to refuse.
ClaimsMapper = Callable[[FederatedIdentity], "str | UserRecord | None"]


def default_claims_mapper(
    identity: FederatedIdentity,
    accounts: IdentityStore,
    *,
    create_account: Callable[[FederatedIdentity, str], UserRecord] | None = None,
) -> str:
    """The mapping used when the application registers no ``claims_mapper``.

    1. An identity already linked logs in as its linked user.
    2. With ``link_by_email`` on the provider and an e-mail the provider says is
       verified, the account of the tenant whose own **verified** address it is
       (:func:`email_linked_user`; compared in lower case, never with an identifier). An
       address outside ASCII never links here: an application that wants it decides in
       its own ``claims_mapper``.
    3. Otherwise a new passwordless local account named ``<provider>:<sub>`` (found again
       if it exists), which the caller links; ``create_account(identity, name)`` makes it
       (the service passes one that runs the application's ``user_created`` hook).
    """
    if identity.link is not None:
        return identity.link.user_id
    matched = email_linked_user(identity, accounts)
    if matched is not None:
        return matched
    name = identity.local_identifier
    found = accounts.find_user(identity.tenant, normalise_identifier(name))
    if found is not None:
        return found.user_id
    if create_account is not None:
        return create_account(identity, name).user_id
    return accounts.create_user(identity.tenant, name).user_id


def _provisioning_error(exc: BaseException, hook: str, identity: FederatedIdentity) -> BaseException:
    """What a failed provisioning hook answers: its own refusal (an ``OAuthError``), a
    store outage (503) or an interrupt as they are; any other failure as
    :class:`ProvisioningFailed` (logged, never shown to the browser)."""
    kept = isinstance(exc, OAuthError) or (isinstance(exc, AuthFlowError) and exc.status >= 500)
    if kept or not isinstance(exc, Exception):
        return exc
    log.exception("%s failed for a sign-in with %s", hook, identity.provider)
    return ProvisioningFailed()


def email_linked_user(identity: FederatedIdentity, accounts: IdentityStore) -> str | None:
    """The existing local account that ``link_by_email`` links the identity to, or ``None``.

    Only an account whose **verified** e-mail address is the provider's verified address
    (compared as :func:`email_link_key` has it) is a match: never an account's identifier,
    which sign-up, an import or an administrator may set to any text, and never an
    address its account has not proved it reads (a sign-up waiting for confirmation, an
    unconfirmed import). Without a match the sign-in goes on as if no account had the
    address."""
    email = identity.verified_email
    key = email_link_key(email) if identity.link_by_email and email is not None else None
    if key is None:
        return None
    existing = accounts.find_user_by_email(identity.tenant, key)
    if existing is None or existing.email != key or existing.email_verified_at is None:
        return None
    return existing.user_id


#: Where a native sign-in's ceremony (:meth:`FederationService.begin_native`) waits in the
#: session flow, apart from a redirect login's.
NATIVE_KEY = "oauth_native"


@dataclass(frozen=True)
class FederatedLogin:
    """The result of a successful callback."""

    provider: str
    identity: FederatedIdentity
    outcome: Authenticated | FactorRequired | WorkflowPending
    state: AuthState
    return_to: str | None
    tokens: TokenSet = field(repr=False)
    #: The provider's ``post_login_redirect`` (where to go without ``return_to``).
    post_login_redirect: str = "/"


def _without_native(record: SessionRecord) -> SessionRecord:
    flow = {k: v for k, v in (record.flow or {}).items() if k != NATIVE_KEY}
    return begin_flow(record, flow) if flow else clear_flow(record)


def _without_ceremony(record: SessionRecord) -> SessionRecord:
    flow = dict(record.flow or {})
    flow.pop(CEREMONY_KEY, None)
    flow.pop(LINK_KEY, None)
    return begin_flow(record, flow) if flow else clear_flow(record)


class FederationService:
    """Federated login, back-channel logout and RP-initiated logout for one app."""

    def __init__(
        self,
        registry: ProviderRegistry,
        *,
        links: FederationStore,
        accounts: IdentityStore,
        session_store: SessionStore,
        clock: Clock,
        default_tenant: str,
        claims_mapper: Callable[[], ClaimsMapper | None] = lambda: None,
        sender: object = None,
        factors: FactorStore | None = None,
        provision_user: Callable[[], ProvisionHook | None] = lambda: None,
        app_transaction: AppTransactionSource = lambda: None,
        app_users: AppUserHooks | None = None,
        tokens: ProviderTokens | None = None,
        begin_unit: UnitSource = None,
        session_join: Callable[[], SessionJoin | None] = lambda: None,
    ) -> None:
        self.registry = registry
        self._begin_unit = begin_unit
        self._session_join = session_join
        self.links = links
        self.accounts = accounts
        self.session_store = session_store
        self.clock = clock
        self.default_tenant = default_tenant
        self._claims_mapper = claims_mapper
        self._provision_user = provision_user
        self._app_transaction = app_transaction
        #: runs the application's ``user_created`` hook for an account a sign-in creates.
        self.app_users = app_users
        #: where unlink looks for the user's other ways to sign in (password, passkey).
        self.factors = factors
        #: keeps the tokens of providers with ``store_tokens`` (``None``: the store cannot).
        self.tokens = tokens
        #: what ``session_revoked`` is sent with (the Flask app, as Flask does).
        self.sender = sender if sender is not None else self

    def provider(self, name: str) -> OAuthProvider:
        return self.registry.get(name)

    # --- the one commit -----------------------------------------------------------------------

    @contextmanager
    def one_commit(self, session: AuthSession, *, with_session: bool = False) -> Iterator[None]:
        """Run the block's writes (an account and the application's rows of its hooks, an
        identity link, provider tokens, audit rows and, ``with_session`` on a session store
        of the backend's database, the session: signed in, its ceremony used up) in ONE
        commit, or none of them.

        The application's ``db.session`` is never ended here when it holds work of its own
        (the block then runs in a savepoint of it, the application's commit decides its
        hook rows); when it holds nothing, the flow owns its transaction and the backend's
        unit of work runs in it (on SQLite the unit must not run beside it: one writer).
        On any failure the session is put back as it was when the block began.
        """
        snapshot = session.snapshot()
        transaction = self._app_transaction()
        with ExitStack() as app:
            # login_succeeded, user_created, ...: sent once the commit is done, or never.
            release = app.enter_context(signals.held_until_commit())
            if transaction is not None and transaction.pending():
                app.enter_context(transaction.savepoint())
            elif transaction is not None and not transaction.owned():
                app.enter_context(transaction.own())
            unit = self._open_unit()
            try:
                yield
                written = None
                if unit is not None:
                    join = self._session_join() if with_session else None
                    written = _joined_session(join, session, unit) if join is not None else None
                    held, unit = unit, None
                    held.commit()
            except BaseException:
                if unit is not None:
                    unit.rollback()
                session.restore(snapshot)
                raise
        if written is not None:
            written()
        release()

    def _open_unit(self) -> UnitOfWork | None:
        """The backend's unit of work, or ``None`` (none, or one already open in this
        context: the block's writes join that one, whose owner commits)."""
        if self._begin_unit is None:
            return None
        try:
            return self._begin_unit()
        except RuntimeError:
            return None

    # --- login ------------------------------------------------------------------------------

    def begin(
        self, session: AuthSession, provider_name: str, options: OAuthLoginOptions | None = None
    ) -> str:
        """Start a federated login on ``session``: the authorize URL to send the browser to.

        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
        """
        return self._begin(session, provider_name, options, None)

    def _begin(
        self,
        session: AuthSession,
        provider_name: str,
        options: OAuthLoginOptions | None,
        link: LinkIntent | None,
    ) -> str:
        opts = options if options is not None else OAuthLoginOptions()
        tenant = link.tenant if link is not None else opts.tenant or self.default_tenant
        provider = self.registry.get_any(provider_name, tenant)
        ceremony = Ceremony.start(
            provider.name,
            provider.issuer,
            self.clock.now(),
            return_to=opts.return_to,
            pending_workflow=opts.pending_workflow,
            tenant=tenant,
        )
        if isinstance(provider, OAuthProvider) and provider.dpop is not None:
            ceremony = replace(ceremony, dpop_kid=provider.dpop.current_kid())  # the key tokens bind to
        extra = {k: v for k, v in (("prompt", opts.prompt), ("login_hint", opts.login_hint)) if v}
        url = provider.authorization_url(ceremony, scopes=opts.scopes, **extra)
        flow: dict[str, Any] = {CEREMONY_KEY: ceremony.to_flow()}
        if link is not None:
            flow[LINK_KEY] = link.to_flow()

        def started(r: SessionRecord) -> SessionRecord:
            earlier = {k: v for k, v in (r.flow or {}).items() if k not in (CEREMONY_KEY, LINK_KEY)}
            return begin_flow(r, {**earlier, **flow})

        session.transition(started)
        return url

    def finish(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        code: str | None,
        state: str | None,
        *,
        iss: str | None = None,
        error: str | None = None,
    ) -> FederatedLogin | IdentityLinked:
        """Complete the login from the callback's query (``code``, ``state``, and the RFC 9207
        ``iss`` / the ``error`` parameters when present). The callback of a link ceremony
        (:meth:`begin_link`) links the identity to the signed-in user instead, and returns
        :class:`~flask_authflow.federation.linking.IdentityLinked`.

        :raises OAuthError: the variant names the failed step (the session does not
            transition; the ceremony is cleared either way).
        """
        flow = session.flow or {}
        stored = flow.get(CEREMONY_KEY)
        intent = LinkIntent.from_flow(flow.get(LINK_KEY))
        if stored is not None or LINK_KEY in flow:
            session.transition(_without_ceremony)  # single use, whatever happens next
        ceremony = Ceremony.from_flow(stored)
        if intent is not None:
            return self._finish_link(
                handle, session, provider_name, intent, ceremony, (code, state, iss, error)
            )
        try:
            return self._finish(handle, session, provider_name, ceremony, code, state, iss, error)
        except OAuthError as exc:
            handle.record_event(
                "oauth_login", "failure", session, factor=f"oidc:{provider_name}"[:32], reason=exc.code
            )
            raise

    def _finish(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        ceremony: Ceremony | None,
        code: str | None,
        state: str | None,
        iss: str | None,
        error: str | None,
    ) -> FederatedLogin:
        ceremony, provider = self._checked_callback(provider_name, ceremony, state, iss, error)
        identity, tokens, record = self._callback_identity(provider, ceremony, code)
        return self._sign_in(handle, session, provider, ceremony, identity, tokens, record)

    def _sign_in(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider: OAuthProvider | OAuth2Provider,
        ceremony: Ceremony,
        identity: FederatedIdentity,
        tokens: TokenSet,
        record: dict[str, str],
    ) -> FederatedLogin:
        """Map and link the verified identity, keep its tokens and establish the login, in
        one commit (the callback's and the native hand-over's common end)."""
        method = f"{'oauth' if isinstance(provider, OAuth2Provider) else 'oidc'}:{provider.name}"
        try:
            with self.one_commit(session, with_session=True):  # the account, link, tokens, rows, login
                user_id = self._map_and_link(identity)
                self._keep_tokens(provider, identity.tenant, user_id, tokens)
                outcome = handle.establish(
                    session,
                    identity.tenant,
                    user_id,
                    method=method,
                    pending_workflow=ceremony.pending_workflow,
                    federation=record,
                )
        except AuthFlowError as exc:
            if not isinstance(exc, (OAuthError, StoreUnavailable)):  # refused (a disabled account):
                # its row was rolled back with the unit; it is written again on its own
                handle.record_event(
                    "login", "refused", session, tenant=identity.tenant, factor=method, reason=exc.code
                )
            raise
        return FederatedLogin(
            provider=provider.name,
            identity=identity,
            outcome=outcome,
            state=session.state,
            return_to=ceremony.return_to,
            tokens=tokens,
            post_login_redirect=provider.config.post_login_redirect,
        )

    def begin_native(self, session: AuthSession, provider_name: str, *, tenant: str | None = None) -> str:
        """Start a sign-in whose ID token (or authorization code) an app's native SDK
        obtains from the provider: the nonce the app hands to the SDK, kept in ``session``
        (apart from a redirect login's ceremony) for :meth:`finish_native`.

        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used
            (a plain OAuth 2.0 provider has no ID token: unknown here).
        """
        tenant = tenant or self.default_tenant
        provider = self.registry.get(provider_name, tenant)
        ceremony = Ceremony.start(provider.name, provider.issuer, self.clock.now(), tenant=tenant)

        def started(r: SessionRecord) -> SessionRecord:
            earlier = {k: v for k, v in (r.flow or {}).items() if k != NATIVE_KEY}
            return begin_flow(r, {**earlier, NATIVE_KEY: ceremony.to_flow()})

        session.transition(started)
        return ceremony.nonce

    def finish_native(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        *,
        id_token: str | None = None,
        code: str | None = None,
        code_verifier: str | None = None,
    ) -> FederatedLogin:
        """Complete a native sign-in begun by :meth:`begin_native` with what the app's SDK
        obtained: the provider's ``id_token`` (its claims only: without an access token no
        userinfo is read), or an authorization ``code`` and its PKCE ``code_verifier``
        (exchanged as the callback exchanges its code). The ID token is
        checked exactly as the callback's (issuer, audience, the nonce of
        :meth:`begin_native`, signature through the JWKS cache), then mapped and linked by
        the same rules. Single use: the ceremony is cleared whatever happens.

        :raises OAuthError: the variant names the failed step.
        """
        stored = (session.flow or {}).get(NATIVE_KEY)
        if stored is not None:
            session.transition(_without_native)
        try:
            ceremony, provider = self._checked_native(provider_name, Ceremony.from_flow(stored))
            if code:
                tokens = provider.exchange_code(code, code_verifier or "")
            else:  # an ID token alone: no access token, so no userinfo (its claims only)
                tokens = TokenSet(id_token=id_token or "", access_token="")
            claims = provider.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token or None)
            identity = self._identity(provider, claims, tokens)
            record = _federation_record(provider, identity.subject, tokens, claims.claims)
            return self._sign_in(handle, session, provider, ceremony, identity, tokens, record)
        except OAuthError as exc:
            handle.record_event(
                "oauth_login", "failure", session, factor=f"oidc:{provider_name}"[:32], reason=exc.code
            )
            raise

    def _checked_native(
        self, provider_name: str, ceremony: Ceremony | None
    ) -> tuple[Ceremony, OAuthProvider]:
        """The native ceremony and provider, when the ceremony is this provider's and in time."""
        if ceremony is None or ceremony.provider != provider_name:
            raise CsrfMismatch("no native sign-in with this provider was started in this session")
        provider = self.registry.get(provider_name, ceremony.tenant)
        if self.clock.now() - ceremony.started_at > provider.config.ceremony_timeout:
            raise Expired("the sign-in took longer than the ceremony timeout: start again")
        if ceremony.issuer != provider.issuer:
            raise CsrfMismatch("the provider changed since the sign-in started")
        return ceremony, provider

    def _callback_identity(
        self, provider: OAuthProvider | OAuth2Provider, ceremony: Ceremony, code: str | None
    ) -> tuple[FederatedIdentity, TokenSet, dict[str, str]]:
        """The callback's identity (code exchanged, ID token checked), its tokens and what
        the session keeps of it."""
        if not isinstance(code, str) or not code:
            raise CsrfMismatch("the callback carries no authorization code")
        if isinstance(provider, OAuth2Provider):  # never OpenID Connect: no ID token is read
            plain = provider.sign_in(code, ceremony.code_verifier)
            tokens = TokenSet(id_token="", access_token=plain.access_token)
            identity = self._plain_identity(provider, plain)
            return (
                identity,
                tokens,
                {"provider": provider.name, "issuer": provider.issuer, "sub": identity.subject},
            )
        if provider.dpop is not None and ceremony.dpop_kid is None:
            raise CsrfMismatch("the login began before DPoP was configured: start again")
        tokens = provider.exchange_code(code, ceremony.code_verifier, dpop_kid=ceremony.dpop_kid)
        claims = provider.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token)
        identity = self._identity(provider, claims, tokens)
        return identity, tokens, _federation_record(provider, identity.subject, tokens, claims.claims)

    def _checked_callback(
        self,
        provider_name: str,
        ceremony: Ceremony | None,
        state: str | None,
        iss: str | None,
        error: str | None,
    ) -> tuple[Ceremony, OAuthProvider | OAuth2Provider]:
        """The ceremony and provider of a callback whose state, timing and issuer hold."""
        if (
            ceremony is None
            or ceremony.provider != provider_name
            or not isinstance(state, str)
            or not hmac.compare_digest(ceremony.state.encode(), state.encode("utf-8", "replace"))
        ):
            raise CsrfMismatch("the login callback does not belong to a login started in this session")
        provider = self.registry.get_any(provider_name, ceremony.tenant)
        if self.clock.now() - ceremony.started_at > provider.config.ceremony_timeout:
            raise Expired("the login took longer than the ceremony timeout: start again")
        if iss is not None and iss != provider.issuer:
            raise IssuerMismatch("the callback's iss parameter names another issuer")
        if (
            iss is None
            and isinstance(provider, OAuthProvider)
            and (provider.metadata.iss_parameter_supported or provider.config.fapi2)
        ):
            raise IssuerMismatch("the provider sends an iss parameter, and this callback has none")
        if ceremony.issuer != provider.issuer:
            raise CsrfMismatch("the provider changed since the login started")
        if error is not None:
            raise OAuthError(f"the provider refused the login: {error[:64]}")
        return ceremony, provider

    def _identity(
        self, provider: OAuthProvider, claims: VerifiedClaims, tokens: TokenSet
    ) -> FederatedIdentity:
        """The validated identity, with its userinfo (when configured and an access token
        came with it) and its existing link."""
        subject = str(claims.sub)
        fetch = provider.uses_userinfo and bool(tokens.access_token)
        userinfo = (
            provider.fetch_userinfo(tokens.access_token, subject, dpop_kid=tokens.dpop_kid) if fetch else None
        )
        return FederatedIdentity(
            provider=provider.name,
            issuer=provider.issuer,
            subject=subject,
            tenant=provider.config.tenant or self.default_tenant,
            claims=dict(claims.claims),
            userinfo=userinfo,
            link=self.links.find_link(provider.issuer, subject),
            link_by_email=provider.config.link_by_email,
        )

    def _plain_identity(self, provider: OAuth2Provider, plain: PlainIdentity) -> FederatedIdentity:
        """The identity a plain OAuth 2.0 provider's user API vouched for (no ID token)."""
        return FederatedIdentity(
            provider=provider.name,
            issuer=provider.issuer,
            subject=plain.subject,
            tenant=provider.config.tenant or self.default_tenant,
            claims=dict(plain.claims),
            link=self.links.find_link(provider.issuer, plain.subject),
            link_by_email=provider.config.link_by_email,
        )

    def _keep_tokens(
        self, provider: OAuthProvider | OAuth2Provider, tenant: str, user_id: str, tokens: TokenSet
    ) -> None:
        """Keep the callback's tokens when the provider has ``store_tokens``.

        :raises ConfigurationError: it has, and the backend cannot store them."""
        if not isinstance(provider, OAuthProvider) or not provider.config.store_tokens:
            return
        if self.tokens is None:
            raise ConfigurationError(
                f"provider {provider.name!r} has store_tokens, but the backend cannot store provider "
                "tokens (it must implement ProviderTokenStore)"
            )
        self.tokens.keep(tenant, user_id, provider, tokens, provider.config.scopes)

    def _map_and_link(self, identity: FederatedIdentity) -> str:
        """The local user of the identity, linked to it: the claims mapper's, else the
        linked one, else (with ``link_by_email``) the account whose verified address is
        its verified e-mail, else
        the ``provision_user`` hook's (with the link, in one transaction), else the
        default mapping's."""
        hook = self._provision_user() if identity.link is None and self._claims_mapper() is None else None
        if hook is not None:
            matched = email_linked_user(identity, self.accounts)
            if matched is None:
                return self._provision(hook, identity)
            user_id = matched
        else:
            user_id = self._map(identity)
        link = identity.link
        if link is None or link.user_id != user_id or link.tenant != identity.tenant:
            self.links.link_identity(identity.issuer, identity.subject, identity.tenant, user_id)
        return user_id

    def _provision(self, hook: ProvisionHook, identity: FederatedIdentity) -> str:
        """Run the hook and link its user, in the callback's one commit
        (:meth:`one_commit`: the hook's rows in the application's transaction the flow
        owns, or in a savepoint of the application's own; never committed here)."""
        try:
            user_id = provisioned_id(hook(identity, identity.tenant))
            if user_id is None:
                raise UserNotLinked("the application created no account for this sign-in")
            self.links.link_identity(identity.issuer, identity.subject, identity.tenant, user_id)
        except BaseException as exc:
            error = _provisioning_error(exc, "provision_user", identity)
            if error is exc:
                raise
            raise error from exc
        return user_id

    def _map(self, identity: FederatedIdentity) -> str:
        mapper = self._claims_mapper()
        if mapper is not None:
            result = mapper(identity)
        else:
            result = default_claims_mapper(identity, self.accounts, create_account=self._create_account)
        if isinstance(result, UserRecord):
            return result.user_id
        if isinstance(result, str) and result:
            return result
        raise UserNotLinked("no local account for this sign-in")

    def _create_account(self, identity: FederatedIdentity, name: str) -> UserRecord:
        """A passwordless account named ``name`` for the identity, with the application's
        row (its ``user_created`` hook, told the token's claims)."""

        def make() -> UserRecord:
            return self.accounts.create_user(identity.tenant, name)

        if self.app_users is None:
            return make()
        try:
            return self.app_users.create(self.accounts, make, source="federation", claims=identity.claims)
        except BaseException as exc:
            error = _provisioning_error(exc, "user_created", identity)
            if error is exc:
                raise
            raise error from exc

    # --- linking ----------------------------------------------------------------------------

    def _fresh_user(self, session: AuthSession, fresh_within: timedelta) -> LinkIntent:
        """The signed-in user of ``session``, if they authenticated within ``fresh_within``.

        :raises StepUpNeeded: not signed in, or the last authentication is older."""
        record = session.record
        if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
            raise StepUpNeeded("linking a provider needs a signed-in session")
        if record.authenticated_at is None or self.clock.now() - record.authenticated_at > fresh_within:
            raise StepUpNeeded("linking a provider needs a fresh authentication: verify your identity again")
        return LinkIntent(record.tenant, record.user_id)

    def begin_link(
        self,
        session: AuthSession,
        provider_name: str,
        *,
        fresh_within: timedelta,
        return_to: str | None = None,
    ) -> str:
        """Start linking ``provider_name`` to the signed-in user: the authorize URL. The
        callback links the provider identity to this user instead of logging in.

        :raises StepUpNeeded: the last authentication is older than ``fresh_within``.
        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
        """
        intent = self._fresh_user(session, fresh_within)
        return self._begin(session, provider_name, OAuthLoginOptions(return_to=return_to), intent)

    def _finish_link(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        intent: LinkIntent,
        ceremony: Ceremony | None,
        query: tuple[str | None, str | None, str | None, str | None],
    ) -> IdentityLinked:
        code, state, iss, error = query
        factor = f"oidc:{provider_name}"[:32]
        try:
            ceremony, provider = self._checked_callback(provider_name, ceremony, state, iss, error)
            signed_in = session.state is AuthState.AUTHENTICATED
            if not signed_in or (session.tenant, session.user_id) != (intent.tenant, intent.user_id):
                raise CsrfMismatch("the session changed since the link started")
            identity, tokens, _record = self._callback_identity(provider, ceremony, code)
            with self.one_commit(session, with_session=True):  # the link, tokens, audit row, session
                link = self._link_to(identity, intent)
                self._keep_tokens(provider, intent.tenant, intent.user_id, tokens)
                handle.record_event(
                    "identity_link",
                    "success",
                    session,
                    tenant=intent.tenant,
                    user_id=intent.user_id,
                    factor=factor,
                )
        except OAuthError as exc:
            handle.record_event(
                "identity_link",
                "failure",
                session,
                tenant=intent.tenant,
                user_id=intent.user_id,
                factor=factor,
                reason=exc.code,
            )
            raise
        signals.identity_linked.send(
            self.sender,
            tenant=intent.tenant,
            user_id=intent.user_id,
            provider=provider.name,
            issuer=link.issuer,
        )
        return IdentityLinked(provider=provider.name, link=link, return_to=ceremony.return_to)

    def _link_to(self, identity: FederatedIdentity, intent: LinkIntent) -> IdentityLink:
        existing = identity.link
        if existing is not None and (existing.tenant, existing.user_id) == (intent.tenant, intent.user_id):
            return existing  # linked already: nothing changes
        if existing is not None:
            raise IdentityLinkedElsewhere()
        if identity.tenant != intent.tenant:
            raise UserNotLinked("this provider signs in to another tenant")
        return self.links.link_identity(identity.issuer, identity.subject, intent.tenant, intent.user_id)

    def linked_providers(self, tenant: str, user_id: str) -> dict[str, list[IdentityLink]]:
        """The user's links by the name of the provider they came from (providers that
        cannot be reached now are left out)."""
        links = self.links.links_of_user(tenant, user_id)
        found: dict[str, list[IdentityLink]] = {}
        for name in self.registry.names():
            try:
                issuer = self.registry.get_any(name, tenant).issuer
            except AuthFlowError:
                continue
            mine = [link for link in links if link.issuer == issuer]
            if mine:
                found[name] = mine
        return found

    def unlink(
        self, handle: LoginRecorder, session: AuthSession, provider_name: str, *, fresh_within: timedelta
    ) -> int:
        """Unlink every identity of ``provider_name`` from the signed-in user; returns how many.

        :raises StepUpNeeded: the last authentication is older than ``fresh_within``.

        Refuses with ``NotLinked`` when the provider is not linked to the user, and with
        ``LastSignInMethod`` when it is their last way to sign in (no password, no
        passkey, no other linked provider).
        """
        user = self._fresh_user(session, fresh_within)
        factor = f"oidc:{provider_name}"[:32]
        try:
            links = self.linked_providers(user.tenant, user.user_id).get(provider_name, [])
            if not links:
                raise NotLinked()
            if self.factors is None or not has_other_way(
                self.factors, self.links, user.tenant, user.user_id, links
            ):
                raise LastSignInMethod()
        except OAuthError as exc:
            handle.record_event(
                "identity_unlink",
                "failure",
                session,
                tenant=user.tenant,
                user_id=user.user_id,
                factor=factor,
                reason=exc.code,
            )
            raise
        with self.one_commit(session):  # the links, the stored tokens and the audit rows
            for link in links:
                self.links.unlink_identity(link.issuer, link.subject)
            if self.tokens is not None:
                self.tokens.forget(user.tenant, user.user_id, provider_name, reason="unlink")
            handle.record_event(
                "identity_unlink", "success", session, tenant=user.tenant, user_id=user.user_id, factor=factor
            )
        signals.identity_unlinked.send(
            self.sender,
            tenant=user.tenant,
            user_id=user.user_id,
            provider=provider_name,
            issuer=links[0].issuer,
        )
        return len(links)

    # --- logout -----------------------------------------------------------------------------

    def backchannel_logout(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        provider_name: str,
        token: Any,
        *,
        tenant: str | None = None,
    ) -> int:
        """Verify a back-channel logout token and revoke what it names; returns how many
        sessions ended.

        Revokes the sessions of the provider session (``issuer``, ``sid``) and, for ``sub``,
        the sessions of the local user linked to (``issuer``, ``sub``) that came from this
        issuer; ``sub`` is never taken for a local id. A replayed ``jti`` is refused.

        :raises LogoutTokenInvalid: naming the failed check (``jwt_id`` for a replay).
        """
        try:
            provider = self.registry.get(provider_name, tenant or self.default_tenant)
            claims = provider.verify_logout_jwt(token)
            expires = datetime.fromtimestamp(claims.exp, tz=UTC)
            if not self.links.remember_jti(claims.issuer, claims.jti, expires):
                raise LogoutTokenInvalid(TokenCheck.JWT_ID, "this logout token was already used")
        except OAuthError as exc:
            handle.record_event(
                "backchannel_logout", "failure", session, factor=f"oidc:{provider_name}"[:32], reason=exc.code
            )
            raise
        revoked = 0
        if claims.sid:
            revoked += self.session_store.delete_federated_sessions(claims.issuer, claims.sid)
        link = self.links.find_link(claims.issuer, claims.sub) if claims.sub else None
        if link is not None:
            for record in self.session_store.list_user_sessions(link.tenant, link.user_id):
                if record.federation and record.federation.get("issuer") == claims.issuer:
                    self.session_store.delete(record.sid)
                    revoked += 1
            signals.session_revoked.send(
                self.sender, user_id=link.user_id, tenant=link.tenant, reason="backchannel_logout"
            )
            if self.tokens is not None:
                self.tokens.forget(link.tenant, link.user_id, provider_name, reason="backchannel_logout")
        handle.record_event(
            "backchannel_logout",
            "success",
            session,
            tenant=link.tenant if link else None,
            user_id=link.user_id if link else None,
            factor=f"oidc:{provider_name}"[:32],
            reason=f"revoked_{min(revoked, 999)}",
        )
        return revoked

    def end_session_url(
        self, federation: Mapping[str, str], state: str, *, default_return: str | None = None
    ) -> str | None:
        """Where RP-initiated logout sends the browser, for a session established by
        ``federation`` (``SessionRecord.federation``), or ``None`` when the provider has no
        end-session endpoint or the session is not federated.

        ``default_return`` (the app's own logout-return URL for this provider) is the
        ``post_logout_redirect_uri`` when the provider's configuration names none."""
        name = federation.get("provider")
        id_token = federation.get("id_token")
        if not name or not id_token:
            return None
        try:
            provider = self.registry.get(name)
        except AuthFlowError:
            return None
        if provider.metadata.end_session_endpoint is None:
            return None
        target = provider.config.post_logout_redirect_uri
        if target is None and default_return is not None:
            return provider.build_end_session_url(
                id_token, default_return, state=state, also_allowed=(default_return,)
            )
        return provider.build_end_session_url(id_token, post_logout_redirect_uri=target, state=state)


def _joined_session(join: SessionJoin, session: AuthSession, unit: UnitOfWork) -> Callable[[], None]:
    """Write the signed-in session in ``unit``; what to run once it committed.

    :raises CsrfMismatch: the session was ended by another request meanwhile."""
    written = join(session, unit)
    if written is None:
        raise CsrfMismatch("this login's session ended in another request")
    return written


def _federation_record(
    provider: OAuthProvider, subject: str, tokens: TokenSet, claims: Mapping[str, Any]
) -> dict[str, str]:
    """What the session keeps of its federated login (RP-initiated and back-channel logout read it)."""
    federation = {
        "provider": provider.name,
        "issuer": provider.issuer,
        "sub": subject,
        "id_token": tokens.id_token,
    }
    provider_sid = claims.get("sid")
    if isinstance(provider_sid, str) and provider_sid:
        federation["sid"] = provider_sid
    return federation
