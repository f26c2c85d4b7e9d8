"""Linking and unlinking a provider identity to the signed-in user: a link ceremony (a
federated login begun by a freshly authenticated user, whose callback links instead of
signing in), the user's links by provider, and an unlink that never leaves the user
without a way to sign in."""

from __future__ import annotations

from datetime import timedelta

from flask_authflow import signals
from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow.errors import AuthFlowError
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import CsrfMismatch, OAuthError
from flask_authflow.federation._linking import (
    IdentityLinked,
    LastSignInMethod,
    LinkIntent,
    NotLinked,
    has_other_way,
    link_identity_to,
)
from flask_authflow.federation._links import IdentityLink
from flask_authflow.federation._login._begin import OAuthLoginOptions, begin
from flask_authflow.federation._login._callback import callback_identity, checked_callback, keep_tokens
from flask_authflow.federation._login._services import FederationServices, factor_of

__all__ = ["begin_link", "finish_link", "linked_providers", "unlink"]


def begin_link(
    svc: FederationServices,
    session: AuthSession,
    provider_name: str,
    *,
    fresh_within: timedelta,
    return_to: str | None = None,
) -> str:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.begin_link`."""
    intent = LinkIntent.of_fresh_session(session, svc.clock.now(), fresh_within)
    return begin(svc, session, provider_name, OAuthLoginOptions(return_to=return_to), intent)


def finish_link(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    intent: LinkIntent,
    ceremony: Ceremony | None,
    query: tuple[str | None, str | None, str | None, str | None],
) -> IdentityLinked:
    code, state, iss, error = query
    factor = factor_of(provider_name)
    try:
        ceremony, provider = checked_callback(svc, provider_name, ceremony, state, iss, error)
        signed_in = session.state is AuthState.AUTHENTICATED
        if not signed_in or (session.tenant, session.user_id) != (intent.tenant, intent.user_id):
            raise CsrfMismatch("the session changed since the link started")
        identity, tokens, _record = callback_identity(svc, provider, ceremony, code)
        with svc.one_commit(session, with_session=True):  # the link, tokens, audit row, session
            link = link_identity_to(
                svc.links, intent, identity.issuer, identity.subject, identity.tenant, identity.link
            )
            keep_tokens(svc, provider, intent.tenant, intent.user_id, tokens)
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
        svc.sender,
        tenant=intent.tenant,
        user_id=intent.user_id,
        provider=provider.name,
        issuer=link.issuer,
    )
    return IdentityLinked(provider=provider.name, link=link, return_to=ceremony.return_to)


def linked_providers(svc: FederationServices, tenant: str, user_id: str) -> dict[str, list[IdentityLink]]:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.linked_providers`."""
    links = svc.links.links_of_user(tenant, user_id)
    found: dict[str, list[IdentityLink]] = {}
    for name in svc.registry.names():
        try:
            issuer = svc.registry.get_any(name, tenant).issuer
        except AuthFlowError:
            continue
        mine = [link for link in links if link.issuer == issuer]
        if mine:
            found[name] = mine
    return found


def unlink(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    *,
    fresh_within: timedelta,
) -> int:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.unlink`."""
    user = LinkIntent.of_fresh_session(session, svc.clock.now(), fresh_within)
    factor = factor_of(provider_name)
    try:
        links = linked_providers(svc, user.tenant, user.user_id).get(provider_name, [])
        if not links:
            raise NotLinked()
        if svc.factors is None or not has_other_way(svc.factors, svc.links, user.tenant, user.user_id, links):
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
    with svc.one_commit(session):  # the links, the stored tokens and the audit rows
        for link in links:
            svc.links.unlink_identity(link.issuer, link.subject)
        if svc.tokens is not None:
            svc.tokens.forget(user.tenant, user.user_id, provider_name, reason="unlink")
        handle.record_event(
            "identity_unlink", "success", session, tenant=user.tenant, user_id=user.user_id, factor=factor
        )
    signals.identity_unlinked.send(
        svc.sender,
        tenant=user.tenant,
        user_id=user.user_id,
        provider=provider_name,
        issuer=links[0].issuer,
    )
    return len(links)
