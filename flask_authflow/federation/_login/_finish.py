"""Finish a federated login at its callback: the ceremony used up (single use, whatever
happens next), the callback checked, the identity signed in; a link ceremony's callback
goes to :func:`~._linking.finish_link` instead."""

from __future__ import annotations

from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession, SessionRecord, begin_flow, clear_flow
from flask_authflow.federation._ceremony import CEREMONY_KEY, Ceremony
from flask_authflow.federation._errors import OAuthError
from flask_authflow.federation._linking import LINK_KEY, IdentityLinked, LinkIntent
from flask_authflow.federation._login._callback import callback_identity, checked_callback
from flask_authflow.federation._login._linking import finish_link
from flask_authflow.federation._login._services import FederationServices, factor_of
from flask_authflow.federation._login._sign_in import FederatedLogin, sign_in

__all__ = ["finish"]


def _without_ceremony(record: SessionRecord) -> SessionRecord:
    flow = dict(record.flow or {})
    flow.pop(CEREMONY_KEY, None)
    flow.pop(LINK_KEY, None)
    return begin_flow(record, flow) if flow else clear_flow(record)


def finish(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    code: str | None,
    state: str | None,
    *,
    iss: str | None = None,
    error: str | None = None,
) -> FederatedLogin | IdentityLinked:
    """See :meth:`~flask_authflow.federation._login._service.FederationService.finish`."""
    flow = session.flow or {}
    stored = flow.get(CEREMONY_KEY)
    intent = LinkIntent.from_flow(flow.get(LINK_KEY))
    if stored is not None or LINK_KEY in flow:
        session.transition(_without_ceremony)  # single use, whatever happens next
    ceremony = Ceremony.from_flow(stored)
    if intent is not None:
        return finish_link(svc, handle, session, provider_name, intent, ceremony, (code, state, iss, error))
    try:
        return _finish(svc, handle, session, provider_name, ceremony, code, state, iss, error)
    except OAuthError as exc:
        handle.record_event(
            "oauth_login", "failure", session, factor=factor_of(provider_name), reason=exc.code
        )
        raise


def _finish(
    svc: FederationServices,
    handle: LoginRecorder,
    session: AuthSession,
    provider_name: str,
    ceremony: Ceremony | None,
    code: str | None,
    state: str | None,
    iss: str | None,
    error: str | None,
) -> FederatedLogin:
    ceremony, provider = checked_callback(svc, provider_name, ceremony, state, iss, error)
    identity, tokens, record = callback_identity(svc, provider, ceremony, code)
    return sign_in(svc, handle, session, provider, ceremony, identity, tokens, record)
