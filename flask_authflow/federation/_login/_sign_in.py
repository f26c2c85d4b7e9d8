"""The common end of a callback and a native hand-over: the verified identity mapped to
a local user and linked, its tokens kept and the login established, in one commit
(:class:`FederatedLogin`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._outcomes import Authenticated, FactorRequired, WorkflowPending
from flask_authflow.errors import AuthFlowError, StoreUnavailable
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import OAuthError
from flask_authflow.federation._login._callback import keep_tokens
from flask_authflow.federation._login._identity import FederatedIdentity
from flask_authflow.federation._login._provisioning import map_and_link
from flask_authflow.federation._login._services import FederationServices
from flask_authflow.federation._oauth2 import OAuth2Provider
from flask_authflow.federation._provider import OAuthProvider, TokenSet

__all__ = ["FederatedLogin", "sign_in"]


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


def sign_in(
    svc: FederationServices,
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
        with svc.one_commit(session, with_session=True):  # the account, link, tokens, rows, login
            user_id = map_and_link(svc, identity)
            keep_tokens(svc, provider, identity.tenant, user_id, tokens)
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
