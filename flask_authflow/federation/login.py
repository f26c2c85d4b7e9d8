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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flask_authflow import signals
from flask_authflow.clock import Clock
from flask_authflow.core.identifiers import MAX_IDENTIFIER_LENGTH, normalise_identifier
from flask_authflow.core.ports import IdentityStore, LoginRecorder, SessionStore, UserRecord
from flask_authflow.core.session import AuthSession, AuthState, SessionRecord, begin_flow, clear_flow
from flask_authflow.errors import AuthFlowError, TokenCheck
from flask_authflow.federation.ceremony import CEREMONY_KEY, Ceremony
from flask_authflow.federation.errors import (
    CsrfMismatch,
    Expired,
    IssuerMismatch,
    LogoutTokenInvalid,
    OAuthError,
    UserNotLinked,
)
from flask_authflow.federation.links import FederationStore, IdentityLink
from flask_authflow.federation.oauth2 import OAuth2Provider, PlainIdentity
from flask_authflow.federation.provider import OAuthProvider, ProviderRegistry, TokenSet
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
]

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
    def verified_email(self) -> str | None:
        """The e-mail address, only when the provider says it is verified (``email_verified``
        is exactly ``true``); never link accounts by an unverified address."""
        source: Mapping[str, Any] = self.userinfo if self.userinfo is not None else self.claims
        email = source.get("email")
        if isinstance(email, str) and email and source.get("email_verified") is True:
            return email
        return None


def email_link_key(email: str) -> str | None:
    """The address an e-mail link compares, exactly: the local part as the provider sent
    it and the domain with its ASCII letters lower-cased; ``None`` (never link) for an
    address outside ASCII, or without exactly one ``@`` between two non-empty parts.

    No Unicode folding: a provider-verified address whose first letter is the fullwidth
    ``a`` (U+FF41) is not the local ``alice@example.com``.
    """
    if not email.isascii() or email.count("@") != 1:
        return None
    local, _, domain = email.partition("@")
    if not local or not domain or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) == 0x7F for ch in email):
        return None
    return f"{local}@{domain.lower()}"


#: ``claims_mapper(identity)``: the local user (an id or a ``UserRecord``) to log in, or ``None`` to refuse.
ClaimsMapper = Callable[[FederatedIdentity], "str | UserRecord | None"]


def default_claims_mapper(identity: FederatedIdentity, accounts: IdentityStore) -> str:
    """The mapping used when the application registers no ``claims_mapper``.

    1. An identity already linked logs in as its linked user.
    2. With ``link_by_email`` on the provider and a *verified* e-mail that is exactly
       (:func:`email_link_key`) the identifier of an existing local account in the
       tenant, that account. An address outside ASCII never links here: an application
       that wants it decides in its own ``claims_mapper``.
    3. Otherwise a new passwordless local account named ``<provider>:<sub>`` (found again
       if it exists), which the caller links.
    """
    if identity.link is not None:
        return identity.link.user_id
    email = identity.verified_email
    key = email_link_key(email) if identity.link_by_email and email is not None else None
    if key is not None and len(key) <= MAX_IDENTIFIER_LENGTH:
        existing = accounts.find_user(identity.tenant, normalise_identifier(key))
        if existing is not None and existing.identifier == key:
            return existing.user_id
    name = f"{identity.provider}:{identity.subject}"
    found = accounts.find_user(identity.tenant, normalise_identifier(name))
    if found is not None:
        return found.user_id
    return accounts.create_user(identity.tenant, name, None).user_id


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


def _without_ceremony(record: SessionRecord) -> SessionRecord:
    flow = dict(record.flow or {})
    flow.pop(CEREMONY_KEY, None)
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
    ) -> None:
        self.registry = registry
        self.links = links
        self.accounts = accounts
        self.session_store = session_store
        self.clock = clock
        self.default_tenant = default_tenant
        self._claims_mapper = claims_mapper
        #: what ``session_revoked`` is sent with (the Flask app, as Flask does).
        self.sender = sender if sender is not None else self

    def provider(self, name: str) -> OAuthProvider:
        return self.registry.get(name)

    # --- login ------------------------------------------------------------------------------

    def begin(
        self, session: AuthSession, provider_name: str, options: OAuthLoginOptions | None = None
    ) -> str:
        """Start a federated login on ``session``: the authorize URL to send the browser to.

        :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
        """
        opts = options if options is not None else OAuthLoginOptions()
        tenant = opts.tenant or self.default_tenant
        provider = self.registry.get_any(provider_name, tenant)
        ceremony = Ceremony.start(
            provider.name,
            provider.issuer,
            self.clock.now(),
            return_to=opts.return_to,
            pending_workflow=opts.pending_workflow,
            tenant=tenant,
        )
        extra = {k: v for k, v in (("prompt", opts.prompt), ("login_hint", opts.login_hint)) if v}
        url = provider.authorization_url(ceremony, scopes=opts.scopes, **extra)
        session.transition(lambda r: begin_flow(r, {**(r.flow or {}), CEREMONY_KEY: ceremony.to_flow()}))
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
    ) -> FederatedLogin:
        """Complete the login from the callback's query (``code``, ``state``, and the RFC 9207
        ``iss`` / the ``error`` parameters when present).

        :raises OAuthError: the variant names the failed step (the session does not
            transition; the ceremony is cleared either way).
        """
        flow = session.flow or {}
        stored = flow.get(CEREMONY_KEY)
        if stored is not None:
            session.transition(_without_ceremony)  # single use, whatever happens next
        ceremony = Ceremony.from_flow(stored)
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
        if not isinstance(code, str) or not code:
            raise CsrfMismatch("the callback carries no authorization code")
        if isinstance(provider, OAuth2Provider):  # never OpenID Connect: no ID token is read
            plain = provider.sign_in(code, ceremony.code_verifier)
            tokens = TokenSet(id_token="", access_token=plain.access_token)
            identity = self._plain_identity(provider, plain)
            record = {"provider": provider.name, "issuer": provider.issuer, "sub": identity.subject}
        else:
            tokens = provider.exchange_code(code, ceremony.code_verifier)
            claims = provider.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token)
            identity = self._identity(provider, claims, tokens)
            record = _federation_record(provider, identity.subject, tokens, claims.claims)
        user_id = self._map(identity)
        link = identity.link
        if link is None or link.user_id != user_id or link.tenant != identity.tenant:
            self.links.link_identity(provider.issuer, identity.subject, identity.tenant, user_id)
        outcome = handle.establish(
            session,
            identity.tenant,
            user_id,
            method=f"{'oauth' if isinstance(provider, OAuth2Provider) else 'oidc'}:{provider.name}",
            pending_workflow=ceremony.pending_workflow,
            federation=record,
        )
        return FederatedLogin(
            provider=provider.name,
            identity=identity,
            outcome=outcome,
            state=session.state,
            return_to=ceremony.return_to,
            tokens=tokens,
            post_login_redirect=provider.config.post_login_redirect,
        )

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
        if iss is None and isinstance(provider, OAuthProvider) and provider.metadata.iss_parameter_supported:
            raise IssuerMismatch("the provider sends an iss parameter, and this callback has none")
        if ceremony.issuer != provider.issuer:
            raise CsrfMismatch("the provider changed since the login started")
        if error is not None:
            raise OAuthError(f"the provider refused the login: {error[:64]}")
        return ceremony, provider

    def _identity(
        self, provider: OAuthProvider, claims: VerifiedClaims, tokens: TokenSet
    ) -> FederatedIdentity:
        """The validated identity, with its userinfo (when configured) and its existing link."""
        subject = str(claims.sub)
        userinfo = provider.fetch_userinfo(tokens.access_token, subject) if provider.uses_userinfo else None
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

    def _map(self, identity: FederatedIdentity) -> str:
        mapper = self._claims_mapper()
        result = mapper(identity) if mapper is not None else default_claims_mapper(identity, self.accounts)
        if isinstance(result, UserRecord):
            return result.user_id
        if isinstance(result, str) and result:
            return result
        raise UserNotLinked("no local account for this sign-in")

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
