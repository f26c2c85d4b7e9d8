"""API authentication on the views that allow it: bearer tokens and the request loader.

A view decorated ``@login_required(api=True)`` (or ``@api_scopes_required(...)``) serves,
besides an Authenticated session, a request that carries ``Authorization: Bearer
afp_...`` (a personal API token, :mod:`flask_authflow.api_auth`) or that the application's
``@authflow.request_loader`` recognises. Neither is consulted when the session is
Authenticated, nor on any other view. The request stays a guest's for the session (no
cookie is set); ``current_user`` is the token's user, loaded the same way as for a
session.

Refusals are JSON with ``WWW-Authenticate: Bearer`` (RFC 6750): 401 ``invalid_token``
for a token that was presented and refused, 403 ``insufficient_scope`` for a valid token
without a scope the view needs. An address that had its share of refused tokens is answered
429 ``throttled`` with ``Retry-After`` before its token is looked up (audited in aggregate:
see ``flask_authflow.api_auth._service``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from blinker import ANY
from flask import Flask, Response, current_app, jsonify, request

from flask_authflow import signals
from flask_authflow._core.ports import ApiTokenRecord, UserRecord
from flask_authflow._web.current_user import load_user, set_api_user
from flask_authflow._web.per_request import keep_for_request, request_kept
from flask_authflow._web.state import AuthFlowState, get_state
from flask_authflow.api_auth._service import ApiTokenService, TokenRefused
from flask_authflow.api_auth._settings import ApiTokenSettings
from flask_authflow.api_auth._tokens import TOKEN_PREFIX
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, InsufficientApiScope

__all__ = [
    "API_TOKENS_KEY",
    "ApiPrincipal",
    "api_denial",
    "api_principal",
    "api_tokens",
    "current_api_token",
    "install_api_tokens",
    "token_service",
]

#: Key of the app's :class:`~flask_authflow.api_auth._service.ApiTokenService` in ``app.extensions``.
API_TOKENS_KEY = "authflow_api_tokens"
_PRINCIPAL_KEY = "_authflow_api_principal"
#: The longest ``Authorization`` value read; longer ones are refused unread.
MAX_AUTHORIZATION = 4096
#: Revocations of a user's sessions that take the user's API tokens too: every session of
#: the user ended (``AccountAdmin.revoke_sessions``), disabling, deleting. A password reset,
#: a password change and log-out-everywhere end the tokens in their own unit of work,
#: audited with the request's context (:mod:`flask_authflow.login._recovery`); ending one
#: session (``session_revoked``, ``revoked_by_user``) keeps them.
REVOKING_REASONS = frozenset({"revoked", "user_disabled", "user_deleted"})


@dataclass(frozen=True, slots=True)
class ApiPrincipal:
    """Who an API request is: the user object, and the token when it came with one
    (``None`` for a user the request loader returned)."""

    user: Any
    token: ApiTokenRecord | None = None


def install_api_tokens(app: Flask, state: AuthFlowState) -> ApiTokenService:
    """Build the app's token service from ``AUTHFLOW_API_TOKEN_*`` (``init_app`` calls it)."""
    service = ApiTokenService(
        state.backend,
        state.backend,
        clock=state.clock,
        audit_sink=state.service.audit_sink,
        settings=ApiTokenSettings.from_config(app.config),
        throttle=state.service.throttle,
        begin_unit=state.service.store.begin_unit,
    )
    app.extensions[API_TOKENS_KEY] = service
    return service


def token_service(app: Flask | None = None) -> ApiTokenService:
    """The :class:`~flask_authflow.api_auth._service.ApiTokenService` of ``app`` (default: the current
    app): the engine under ``authflow.tokens``, which also verifies presented tokens."""
    target = app if app is not None else current_app
    service: ApiTokenService | None = target.extensions.get(API_TOKENS_KEY)  # install_api_tokens put it
    if service is None:
        raise RuntimeError("flask-authflow is not initialised on this app: call AuthFlow(app) first")
    return service


def api_tokens(app: Flask | None = None) -> ApiTokenService:
    """Deprecated (goes in 0.9): use ``authflow.tokens`` (:class:`~flask_authflow.api_auth.Tokens`)."""
    warnings.warn(
        "flask_authflow.web.api_auth.api_tokens() is deprecated and goes in 0.9: use authflow.tokens "
        "(create(user_id, name, scopes, tenant=...), list, get, revoke)",
        DeprecationWarning,
        stacklevel=2,
    )
    return token_service(app)


@signals.session_revoked.connect_via(ANY)
def _revoke_tokens_with_sessions(sender: Any, **extra: Any) -> None:
    """Ending every session of a user, disabling and deleting end the user's tokens too."""
    if extra.get("reason") not in REVOKING_REASONS or not isinstance(sender, Flask):
        return
    service: ApiTokenService | None = sender.extensions.get(API_TOKENS_KEY)  # None: not our app
    tenant, user_id = extra.get("tenant"), extra.get("user_id")
    if service is not None and isinstance(tenant, str) and isinstance(user_id, str):
        service.revoke_all(tenant, user_id, reason=str(extra["reason"]))


def _bearer() -> str | None:
    """The bearer token of the request (``""`` when the header is empty or too long),
    ``None`` without an ``Authorization: Bearer`` header."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() if len(header) <= MAX_AUTHORIZATION else ""


def _by_token(state: AuthFlowState, value: str) -> ApiPrincipal:
    record = token_service().verify(value, context=audit_context())
    user = load_user(state, record.tenant, record.user_id)
    if user is None:  # the application's user loader no longer finds the token's user
        raise TokenRefused("user_unknown")
    set_api_user(record.tenant, record.user_id, user)
    return ApiPrincipal(user, record)


def _resolve() -> ApiPrincipal | None:
    """Who the request is by its token or the request loader (``None``: neither says);
    :class:`~flask_authflow.api_auth._service.TokenRefused` for a presented token refused."""
    state = get_state()
    value = _bearer()
    if value is not None and value.startswith(TOKEN_PREFIX):
        return _by_token(state, value)
    loader = state.hooks.request_loader
    if loader is not None:
        user = loader(request._get_current_object())  # type: ignore[attr-defined]
        if user is not None:
            key = (user.tenant, user.user_id) if isinstance(user, UserRecord) else (None, None)
            set_api_user(key[0], key[1], user)
            return ApiPrincipal(user)
    if value is not None:  # a bearer token nobody recognised: refused (and audited) as malformed
        return _by_token(state, value)
    return None


def api_principal() -> ApiPrincipal | None:
    """The current request's API principal (resolved once per request), ``None`` when it
    carries no credential the API accepts.

    :raises ~flask_authflow.api_auth._service.TokenRefused: it presented a token that was refused.
    """
    cached = request_kept(_PRINCIPAL_KEY)  # never another request's (one g may serve several)
    if cached is not None:
        if isinstance(cached, TokenRefused):
            raise cached
        return cached if isinstance(cached, ApiPrincipal) else None
    try:
        principal = _resolve()
    except TokenRefused as refused:
        keep_for_request(_PRINCIPAL_KEY, refused)
        raise
    keep_for_request(_PRINCIPAL_KEY, principal if principal is not None else False)
    return principal


def current_api_token() -> ApiTokenRecord | None:
    """The token the current request was authenticated with (``None`` for a session, the
    request loader, or outside an API view)."""
    cached = request_kept(_PRINCIPAL_KEY)
    return cached.token if isinstance(cached, ApiPrincipal) else None


def missing_scopes(wanted: frozenset[str]) -> InsufficientApiScope | None:
    """A refusal when the request's token lacks a scope of ``wanted`` (sessions and request
    loader users are the user themself: scopes restrict tokens only)."""
    token = current_api_token()
    if token is None or wanted <= frozenset(token.scopes):
        return None
    refusal = InsufficientApiScope("the access token lacks a scope this endpoint needs")
    token_service().audit_refusal("insufficient_scope", token, context=audit_context())
    return refusal


def api_denial(error: AuthFlowError, scopes: frozenset[str] = frozenset()) -> Response:
    """The JSON answer of a refused API request, with its ``WWW-Authenticate`` challenge."""
    response = jsonify(error.to_dict())
    response.status_code = error.status
    challenge = 'Bearer realm="api"'
    if isinstance(error, TokenRefused | InsufficientApiScope):
        challenge += f', error="{error.code}"'
    if isinstance(error, InsufficientApiScope) and scopes:
        challenge += f', scope="{" ".join(sorted(scopes))}"'
    response.headers["WWW-Authenticate"] = challenge
    response.headers["Cache-Control"] = "no-store"
    if error.retry_after is not None:  # a throttled address
        response.headers["Retry-After"] = str(error.retry_after)
    return response
