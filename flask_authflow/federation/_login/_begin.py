"""Begin a federated login: the ceremony (state, nonce, PKCE verifier, and the DPoP key
the tokens will bind to) stored in the session's flow, and the authorize URL."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from flask_authflow._core.session import AuthSession, SessionRecord, begin_flow
from flask_authflow.federation._ceremony import CEREMONY_KEY, Ceremony
from flask_authflow.federation._linking import LINK_KEY, LinkIntent
from flask_authflow.federation._login._services import FederationServices
from flask_authflow.federation._provider import OAuthProvider

__all__ = ["OAuthLoginOptions", "begin"]


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


def begin(
    svc: FederationServices,
    session: AuthSession,
    provider_name: str,
    options: OAuthLoginOptions | None,
    link: LinkIntent | None,
) -> str:
    """Start a federated login on ``session`` (for the signed-in user of ``link``, a link
    ceremony): store the ceremony in the session's flow, answer the authorize URL.

    :raises UnknownProvider, Discovery, ProviderUnreachable: the provider cannot be used.
    """
    opts = options if options is not None else OAuthLoginOptions()
    tenant = link.tenant if link is not None else opts.tenant or svc.default_tenant
    provider = svc.registry.get_any(provider_name, tenant)
    ceremony = Ceremony.start(
        provider.name,
        provider.issuer,
        svc.clock.now(),
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
