"""The native (headless) hand-over: a sign-in whose ID token (or authorization code) the
app's own SDK obtains from the provider. :func:`begin_native` keeps a ceremony apart from a
redirect login's; :func:`finish_native` checks what the SDK obtained exactly as a callback
does, then signs in by the same rules."""

from __future__ import annotations

from dataclasses import replace

from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession, SessionRecord, begin_flow, clear_flow
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import CsrfMismatch, Expired, OAuthError
from flask_authflow.federation._login._callback import federation_record, verified_identity
from flask_authflow.federation._login._services import FederationServices, factor_of
from flask_authflow.federation._login._sign_in import FederatedLogin, sign_in
from flask_authflow.federation._provider import OAuthProvider, TokenSet

__all__ = ["NATIVE_KEY", "begin_native", "finish_native"]

#: Where a native sign-in's ceremony (:meth:`FederationService.begin_native`) waits in the
#: session flow, apart from a redirect login's.
NATIVE_KEY = "oauth_native"


def _without_native(record: SessionRecord) -> SessionRecord:
    flow = {k: v for k, v in (record.flow or {}).items() if k != NATIVE_KEY}
    return begin_flow(record, flow) if flow else clear_flow(record)


def begin_native(
    svc: FederationServices, session: AuthSession, provider_name: str, *, tenant: str | None = None
) -> str:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.begin_native`."""
    tenant = tenant or svc.default_tenant
    provider = svc.registry.get(provider_name, tenant)
    ceremony = Ceremony.start(provider.name, provider.issuer, svc.clock.now(), tenant=tenant)
    if provider.dpop is not None:  # the key the exchanged tokens bind to, as a redirect login's
        ceremony = replace(ceremony, dpop_kid=provider.dpop.current_kid())

    def started(r: SessionRecord) -> SessionRecord:
        earlier = {k: v for k, v in (r.flow or {}).items() if k != NATIVE_KEY}
        return begin_flow(r, {**earlier, NATIVE_KEY: ceremony.to_flow()})

    session.transition(started)
    return ceremony.nonce


def finish_native(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    *,
    id_token: str | None = None,
    code: str | None = None,
    code_verifier: str | None = None,
) -> FederatedLogin:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.finish_native`."""
    stored = (session.flow or {}).get(NATIVE_KEY)
    if stored is not None:
        session.transition(_without_native)
    try:
        ceremony, provider = _checked_native(svc, provider_name, Ceremony.from_flow(stored))
        if code:
            # With DPoP, the token request carries a proof of the ceremony's key, so the
            # tokens are bound to it (the SDK's authorization request did not name it).
            tokens = provider.exchange_code(code, code_verifier or "", dpop_kid=ceremony.dpop_kid)
        else:  # an ID token alone: no access token, so no userinfo (its claims only)
            tokens = TokenSet(id_token=id_token or "", access_token="")
        claims = provider.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token or None)
        identity = verified_identity(svc, provider, claims, tokens)
        record = federation_record(provider, identity.subject, tokens, claims.claims)
        return sign_in(svc, handle, session, provider, ceremony, identity, tokens, record)
    except OAuthError as exc:
        handle.record_event(
            "oauth_login", "failure", session, factor=factor_of(provider_name), reason=exc.code
        )
        raise


def _checked_native(
    svc: FederationServices, provider_name: str, ceremony: Ceremony | None
) -> tuple[Ceremony, OAuthProvider]:
    """The native ceremony and provider, when the ceremony is this provider's and in time."""
    if ceremony is None or ceremony.provider != provider_name:
        raise CsrfMismatch("no native sign-in with this provider was started in this session")
    provider = svc.registry.get(provider_name, ceremony.tenant)
    if svc.clock.now() - ceremony.started_at > provider.config.ceremony_timeout:
        raise Expired("the sign-in took longer than the ceremony timeout: start again")
    if ceremony.issuer != provider.issuer:
        raise CsrfMismatch("the provider changed since the sign-in started")
    return ceremony, provider
