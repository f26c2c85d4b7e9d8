"""Logout driven by the provider, and towards it: back-channel logout (a verified logout
token revokes the sessions it names, once: its ``jti`` is remembered) and the end-session
URL of RP-initiated logout for a federated session."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask_authflow import signals
from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession
from flask_authflow.errors import AuthFlowError, TokenCheck
from flask_authflow.federation._errors import LogoutTokenInvalid, OAuthError
from flask_authflow.federation._login._services import FederationServices, factor_of

__all__ = ["backchannel_logout", "end_session_url"]


def backchannel_logout(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    token: Any,
    *,
    tenant: str | None = None,
) -> int:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.backchannel_logout`."""
    try:
        provider = svc.registry.get(provider_name, tenant or svc.default_tenant)
        claims = provider.verify_logout_jwt(token)
        expires = datetime.fromtimestamp(claims.exp, tz=UTC)
        if not svc.links.remember_jti(claims.issuer, claims.jti, expires):
            raise LogoutTokenInvalid(TokenCheck.JWT_ID, "this logout token was already used")
    except OAuthError as exc:
        handle.record_event(
            "backchannel_logout", "failure", session, factor=factor_of(provider_name), reason=exc.code
        )
        raise
    revoked = 0
    if claims.sid:
        revoked += svc.session_store.delete_federated_sessions(claims.issuer, claims.sid)
    link = svc.links.find_link(claims.issuer, claims.sub) if claims.sub else None
    if link is not None:
        for record in svc.session_store.list_user_sessions(link.tenant, link.user_id):
            if record.federation and record.federation.get("issuer") == claims.issuer:
                svc.session_store.delete(record.sid)
                revoked += 1
        signals.session_revoked.send(
            svc.sender, user_id=link.user_id, tenant=link.tenant, reason="backchannel_logout"
        )
        if svc.tokens is not None:
            svc.tokens.forget(link.tenant, link.user_id, provider_name, reason="backchannel_logout")
    handle.record_event(
        "backchannel_logout",
        "success",
        session,
        tenant=link.tenant if link else None,
        user_id=link.user_id if link else None,
        factor=factor_of(provider_name),
        reason=f"revoked_{min(revoked, 999)}",
    )
    return revoked


def end_session_url(
    svc: FederationServices, federation: Mapping[str, str], state: str, *, default_return: str | None = None
) -> str | None:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.end_session_url`."""
    name = federation.get("provider")
    id_token = federation.get("id_token")
    if not name or not id_token:
        return None
    try:
        provider = svc.registry.get(name)
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
