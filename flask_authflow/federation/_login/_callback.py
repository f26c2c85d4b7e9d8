"""The callback's common steps, shared by a login, a link and a native sign-in: the
callback checked against its ceremony (state, timing, issuer), the code exchanged, the ID
token checked, userinfo read and the identity built; the tokens kept (``store_tokens``)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import CsrfMismatch, Expired, IssuerMismatch, OAuthError
from flask_authflow.federation._login._identity import FederatedIdentity
from flask_authflow.federation._login._services import FederationServices
from flask_authflow.federation._oauth2 import OAuth2Provider, PlainIdentity
from flask_authflow.federation._provider import OAuthProvider, TokenSet
from flask_authflow.jose import VerifiedClaims

__all__ = [
    "callback_identity",
    "checked_callback",
    "federation_record",
    "keep_tokens",
    "verified_identity",
]


def checked_callback(
    svc: FederationServices,
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
    provider = svc.registry.get_any(provider_name, ceremony.tenant)
    if svc.clock.now() - ceremony.started_at > provider.config.ceremony_timeout:
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


def callback_identity(
    svc: FederationServices, provider: OAuthProvider | OAuth2Provider, ceremony: Ceremony, code: str | None
) -> tuple[FederatedIdentity, TokenSet, dict[str, str]]:
    """The callback's identity (code exchanged, ID token checked), its tokens and what
    the session keeps of it."""
    if not isinstance(code, str) or not code:
        raise CsrfMismatch("the callback carries no authorization code")
    if isinstance(provider, OAuth2Provider):  # never OpenID Connect: no ID token is read
        plain = provider.sign_in(code, ceremony.code_verifier)
        tokens = TokenSet(id_token="", access_token=plain.access_token)
        identity = _plain_identity(svc, provider, plain)
        return (
            identity,
            tokens,
            {"provider": provider.name, "issuer": provider.issuer, "sub": identity.subject},
        )
    if provider.dpop is not None and ceremony.dpop_kid is None:
        raise CsrfMismatch("the login began before DPoP was configured: start again")
    tokens = provider.exchange_code(code, ceremony.code_verifier, dpop_kid=ceremony.dpop_kid)
    claims = provider.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token)
    identity = verified_identity(svc, provider, claims, tokens)
    return identity, tokens, federation_record(provider, identity.subject, tokens, claims.claims)


def verified_identity(
    svc: FederationServices, provider: OAuthProvider, claims: VerifiedClaims, tokens: TokenSet
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
        tenant=provider.config.tenant or svc.default_tenant,
        claims=dict(claims.claims),
        userinfo=userinfo,
        link=svc.links.find_link(provider.issuer, subject),
        link_by_email=provider.config.link_by_email,
    )


def _plain_identity(
    svc: FederationServices, provider: OAuth2Provider, plain: PlainIdentity
) -> FederatedIdentity:
    """The identity a plain OAuth 2.0 provider's user API vouched for (no ID token)."""
    return FederatedIdentity(
        provider=provider.name,
        issuer=provider.issuer,
        subject=plain.subject,
        tenant=provider.config.tenant or svc.default_tenant,
        claims=dict(plain.claims),
        link=svc.links.find_link(provider.issuer, plain.subject),
        link_by_email=provider.config.link_by_email,
    )


def keep_tokens(
    svc: FederationServices,
    provider: OAuthProvider | OAuth2Provider,
    tenant: str,
    user_id: str,
    tokens: TokenSet,
) -> None:
    """Keep the callback's tokens when the provider has ``store_tokens``.

    :raises ConfigurationError: it has, and the backend cannot store them."""
    if not isinstance(provider, OAuthProvider) or not provider.config.store_tokens:
        return
    if svc.tokens is None:
        raise ConfigurationError(
            f"provider {provider.name!r} has store_tokens, but the backend cannot store provider "
            "tokens (it must implement ProviderTokenStore)"
        )
    svc.tokens.keep(tenant, user_id, provider, tokens, provider.config.scopes)


def federation_record(
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
