"""The account page (``/account``): what it shows of the signed-in user (sessions, sign-in
methods, linked providers, API tokens, devices), and the refusals the account forms and the
logout form answer with it. The views that act on the account (the blueprint, the API
tokens, the logout) render it from here, so none of them imports another.
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import Response, url_for
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.session import AuthSession, SessionRecord, sid_hash
from flask_authflow._i18n import N_, translate
from flask_authflow._outcomes import FactorKind
from flask_authflow._web import services
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views import devices, security, signin
from flask_authflow._web.views.common import (
    MESSAGES,
    VIEWS_BLUEPRINT,
    handle,
    identifier_of,
    page,
    signed_in,
    stored_sid,
    to_login,
)
from flask_authflow.devices._labels import device_label, shown_label
from flask_authflow.errors import AuthFlowError

__all__ = ["account_page", "account_post_refused", "api_token_rows", "logout_refused_page", "session_row"]


#: How the account page names the first step a session signed in with (a provider: its name).
_METHOD_NAMES = {
    "password": N_("password"),
    "webauthn": N_("security key or passkey"),
    "totp": N_("authenticator app"),
    "hotp": N_("hardware token"),
    "email_otp": N_("e-mail code"),
    "recovery_code": N_("recovery code"),
}


def account_page(
    status: int = 200, *, error: str | None = None, notice: str | None = None, **extra: Any
) -> Response:
    """The account page of the signed-in user: sessions, sign-in methods, providers, API
    tokens and devices, with ``error`` or ``notice`` (already chosen from the known texts)."""
    session = current_auth_session()
    state = get_state()
    tenant, user_id = str(session.tenant), str(session.user_id)
    current = stored_sid(session)
    records = services.sessions().list(user_id, tenant=tenant)  # most recently seen first
    records.sort(key=lambda r: r.sid != current)  # stable: this one first, the rest as they were
    sessions = [session_row(record, current) for record in records]
    return page(
        "account.html",
        status,
        error=error,
        notice=notice,
        identifier=identifier_of(session),
        tenant=tenant,
        authenticated_at=session.authenticated_at,
        sessions=sessions,
        enrolled_factors=_enrolled_factors(session),
        has_password=state.backend.get_password_hash(tenant, user_id) is not None,
        **_provider_rows(tenant, user_id),
        **api_token_rows(tenant, user_id),
        **extra,
        **devices.device_rows(tenant, user_id),
    )


def _enrolled_factors(session: AuthSession) -> list[str]:
    """What the account page lists as the user's sign-in methods besides the password
    ("Authenticator app", "Security key" ...), each kind once, in enrollment order; empty
    when the password alone signs the user in (the page then suggests adding one)."""
    try:
        configs = handle().user_factors(session)
    except AuthFlowError:  # a store failed: the page still shows, without the list
        return []
    names: list[str] = []
    for config in configs:
        if config.kind is FactorKind.PASSWORD or not config.factor_id:
            continue
        name = translate(
            security.KIND_NAMES.get(config.kind.value, config.kind.value.replace("_", " ").capitalize())
        )
        if name not in names:
            names.append(name)
    return names


def _provider_rows(tenant: str, user_id: str) -> dict[str, list[str]]:
    """The configured providers the user has linked (``linked_providers``) and not
    (``linkable_providers``), by name, for the account page's unlink and link buttons."""
    federation = get_state().federation
    if federation is None:
        return {"linked_providers": [], "linkable_providers": []}
    linked = federation.linked_providers(tenant, user_id)
    names = federation.registry.names()
    return {
        "linked_providers": [name for name in names if name in linked],
        "linkable_providers": [name for name in names if name not in linked],
    }


def _method_name(method: str | None) -> str | None:
    if method is None or method in _METHOD_NAMES:
        return translate(_METHOD_NAMES[method]) if method else method
    return method.partition(":")[2] or method  # "oidc:acme": acme


def session_row(record: SessionRecord, current_sid: str) -> dict[str, Any]:
    """A session as the account page lists it (and the headless API's list)."""
    return {
        "hash": sid_hash(record.sid),
        "device": shown_label(device_label(record.device)),  # as the devices list
        "last_seen_at": record.last_seen_at,
        "created_at": record.created_at,
        "authenticated_at": record.authenticated_at,
        "auth_method": _method_name(record.auth_method),
        "current": hmac.compare_digest(record.sid, current_sid),
    }


def logout_refused_page() -> Response:
    """A logout form without a valid CSRF token: the page it came from, with the error (400)."""
    if signed_in():
        return account_page(400, error=MESSAGES["csrf"])
    return signin.login_page(400, error=MESSAGES["csrf"])


def account_post_refused() -> BaseResponse | None:
    """Why an account form may not run: not signed in (to the login page) or a bad token."""
    if not signed_in():
        return to_login(url_for(f"{VIEWS_BLUEPRINT}.account"))
    if not csrf_valid():
        return account_page(400, error=MESSAGES["csrf"])
    return None


def api_token_rows(tenant: str, user_id: str) -> dict[str, Any]:
    """The account page's context for the API token section."""
    settings = token_service().settings
    default = settings.default_expiry
    return {
        "api_tokens": services.tokens().list(user_id, tenant=tenant),
        "api_token_scopes": settings.scopes,
        "api_token_default_days": default.days if default is not None else None,
    }
