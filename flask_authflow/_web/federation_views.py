"""The ``authflow_oauth`` blueprint: federated login, callback, back-channel and RP-initiated logout.

Routes (under ``AUTHFLOW_OAUTH_URL_PREFIX``, default ``/auth``):

``GET /login/<provider>``
    302 to the provider's authorize URL (``?next=/path`` is remembered, same-site paths
    only; ``?tenant=`` reaches a per-tenant provider factory); 400 with the error text on
    failure (404 for an unknown provider, 502 when the provider cannot be reached or its
    discovery document is unusable).
``GET /callback/<provider>``
    302 to ``next`` or the provider's ``post_login_redirect``; 401 with the error text on
    failure (502 when the provider failed, 403 when no local account maps to the
    identity, 404 for an unknown provider); every failure writes an audit row.
``POST /callback/<provider>``
    The callback of a ``form_post`` provider (Sign in with Apple): code and state as a
    form; checked like the GET callback (405 for a provider in query mode).
``POST /backchannel-logout/<provider>``
    The provider's back-channel logout (form field ``logout_token``): 200, or 400 with a
    JSON error; always ``Cache-Control: no-store``.
``POST /link/<provider>``
    A signed-in user links the provider to their account (a form with the CSRF token,
    as the account page's "Link" button sends): 302 to the provider, whose callback then
    links the provider identity to this user instead of logging in, and comes back to
    the account page. A login older than ``AUTHFLOW_FRESHNESS`` is sent to the step-up
    page first. 400 without a valid CSRF token; an identity already linked to another
    user is refused (409) with an audit row.
``POST /unlink/<provider>``
    Unlinks the provider from the signed-in user (CSRF token, fresh login): 302 to the
    account page; 409 when it is the user's last way to sign in (no password, no
    passkey, no other linked provider), 404 when it is not linked.
``GET /logout/return/<provider>``
    Where the provider sends the browser back (register it as the post-logout redirect
    URI): checks the ``state``, then 302 to ``/``.

The logout itself is the app's one logout route (``authflow_logout``, see
:mod:`flask_authflow._web.views.logout`): for a federated session it calls
:func:`provider_logout_url` and sends the browser on to the provider.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, current_app, jsonify, redirect, request, url_for

from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.session import AuthSession, begin_flow, clear_flow
from flask_authflow._i18n import translate
from flask_authflow._responses import package_headers
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.decorators import denial_page
from flask_authflow._web.json_body import refuse_bad_json
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.security_notices import notify
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, InvalidInput, StepUpNeeded
from flask_authflow.federation._ceremony import CEREMONY_KEY
from flask_authflow.federation._errors import OAuthError
from flask_authflow.federation._linking import IdentityLinked
from flask_authflow.federation._login import FederationService, OAuthLoginOptions

__all__ = [
    "OAUTH_BLUEPRINT",
    "build_oauth_blueprint",
    "federation_service",
    "form_post_callback",
    "provider_logout_url",
]

#: The blueprint's name (endpoints are ``authflow_oauth.login`` and so on).
OAUTH_BLUEPRINT = "authflow_oauth"
_LOGOUT_KEY = "oauth_logout"


def federation_service() -> FederationService:
    """The current app's :class:`FederationService` (a provider must be configured)."""
    service = get_state().federation
    if service is None:
        raise RuntimeError("no OpenID provider is configured on this app (AUTHFLOW_OAUTH_PROVIDERS)")
    return service


def _text(message: str, status: int) -> Response:
    response = Response(f"{message}\n", status=status, mimetype="text/plain")
    response.headers["Cache-Control"] = "no-store"
    return response


def _sign_in_failed(provider: str, exc: AuthFlowError, status: int, *, cancelled: bool = False) -> Response:
    """A sign-in with ``provider`` that did not complete: for a browser, the
    ``authflow/sign_in_failed.html`` page with a way back (the sign-in page, else ``/``);
    for other clients, the text. ``cancelled``: the provider answered with an error (the
    user cancelled or was refused there)."""
    if not _wants_page():
        return _text(exc.message, status)
    views = "authflow_views" in current_app.blueprints
    return denial_page(
        "authflow/sign_in_failed.html",
        status,
        provider=provider,
        message=translate(exc.message),
        cancelled=cancelled,
        retry_url=url_for("authflow_views.login") if views else None,
    )


def _wants_page() -> bool:
    """The client is a browser: it prefers HTML to text and JSON."""
    accept = request.accept_mimetypes
    return accept.best_match(["text/html", "text/plain", "application/json"]) == "text/html" and (
        accept["text/html"] > 0
    )


def _failure_status(exc: AuthFlowError, default: int) -> int:
    """A provider that failed (unreachable, unusable discovery) is a 502; a refusal of the
    request is its own 4xx (404 unknown provider, 403 no local account), else ``default``."""
    if isinstance(exc, OAuthError) and exc.status in (403, 404, 409, 502):
        return exc.status
    return default


def _single(name: str) -> str | None:
    """A query parameter given at most once (a repeated one is refused as ambiguous)."""
    values = request.args.getlist(name)
    if len(values) > 1:
        raise OAuthError(f"the callback repeats the {name} parameter")
    return values[0] if values else None


def _tenant_arg() -> str | None:
    """``?tenant=`` for providers registered with a per-tenant factory (checked, else refused)."""
    value = request.args.get("tenant")
    return None if value is None else check_tenant(value)


def login(provider: str) -> Response:
    handle_next = safe_next(request.args.get("next"))
    try:
        url = federation_service().begin(
            current_auth_session(), provider, OAuthLoginOptions(return_to=handle_next, tenant=_tenant_arg())
        )
    except AuthFlowError as exc:
        if exc.status >= 500 and not isinstance(exc, OAuthError):
            raise
        return _sign_in_failed(provider, exc, _failure_status(exc, 400))
    response = redirect(url)
    response.headers["Cache-Control"] = "no-store"
    return response  # type: ignore[return-value]


def callback(provider: str) -> Response:
    return _complete(provider, {name: _single(name) for name in ("code", "state", "iss", "error")})


def form_post_callback(provider: str) -> Response:
    """The callback of a ``response_mode=form_post`` provider: code and state arrive as a
    form POST. Without the login's session (a ``SameSite=Lax`` cookie is not sent on the
    provider's cross-site POST), a 303 turns it into the GET callback, which carries the
    cookie and checks the state; with it, the state is checked here. Providers in query
    mode get 405."""
    service = federation_service()
    try:
        mode = service.provider(provider).config.response_mode
    except AuthFlowError as exc:
        if exc.status >= 500 and not isinstance(exc, OAuthError):
            raise
        return _text(exc.message, _failure_status(exc, 400))
    if mode != "form_post" or request.mimetype != "application/x-www-form-urlencoded":
        return _text("this callback accepts a form POST only from a form_post provider", 405)
    values: dict[str, str | None] = {}
    for name in ("code", "state", "iss", "error"):
        given = request.form.getlist(name)
        if len(given) > 1:
            return _text(f"the callback repeats the {name} parameter", 400)
        values[name] = given[0] if given else None
    if CEREMONY_KEY not in (current_auth_session().flow or {}):
        query = {k: v for k, v in values.items() if v is not None}
        target = url_for(f"{OAUTH_BLUEPRINT}.callback", provider=provider) + "?" + urlencode(query)
        return redirect(target, code=303)  # type: ignore[return-value]
    return _complete(provider, values)


def _complete(provider: str, values: dict[str, str | None]) -> Response:
    service = federation_service()
    session = current_auth_session()
    handle = get_state().service.with_audit_context(audit_context())
    try:
        result = service.finish(
            handle,
            session,
            provider,
            values["code"],
            values["state"],
            iss=values["iss"],
            error=values["error"],
        )
    except AuthFlowError as exc:
        if exc.status >= 500 and not isinstance(exc, OAuthError):
            raise  # a store outage is a 503, not the client's fault
        cancelled = values["error"] is not None
        return _sign_in_failed(provider, exc, _failure_status(exc, 401), cancelled=cancelled)
    if isinstance(result, IdentityLinked):
        linked = redirect(_account_url(notice="identity_linked"))
        return notify("provider_linked", str(session.tenant), str(session.user_id), linked, provider=provider)  # type: ignore[return-value]
    if session.is_authenticating:
        # Factors beyond the federated login (TOTP, a key) are still required.
        if "authflow_views" in current_app.blueprints:
            return redirect(url_for("authflow_views.factor"))  # type: ignore[return-value]
        return _text(f"next factor required: {session.next_factor}", 401)
    target = safe_next(result.return_to) or result.post_login_redirect
    return redirect(target)  # type: ignore[return-value]


# --- linking ------------------------------------------------------------------------------------

_VIEWS = "authflow_views"


def _account_url(**query: Any) -> str:
    """The ready account page (with a whitelisted ``notice``), or ``/`` without the ready views."""
    if _VIEWS in current_app.blueprints:
        return url_for(f"{_VIEWS}.account", **query)
    return "/"


def _link_refused() -> Response | None:
    """Why a link or unlink form may not run: not signed in (the login page, or 401) or
    no valid CSRF token (400)."""
    if not current_auth_session().is_authenticated:
        if _VIEWS in current_app.blueprints:
            return redirect(url_for(f"{_VIEWS}.login", next=_account_url()))  # type: ignore[return-value]
        return _text("sign in first", 401)
    if not csrf_valid():
        return _text("the form's security token is missing or expired: reload the page and try again", 400)
    return None


def _linking_failed(exc: AuthFlowError) -> Response:
    """A link or unlink that cannot go ahead: step up first (the step-up page, which comes
    back to the account page), or the refusal's text."""
    if isinstance(exc, StepUpNeeded):
        if _VIEWS in current_app.blueprints:
            return redirect(url_for(f"{_VIEWS}.step_up", next=_account_url()))  # type: ignore[return-value]
        return _text(exc.message, 401)
    if exc.status >= 500 and not isinstance(exc, OAuthError):
        raise exc
    return _text(exc.message, _failure_status(exc, 400))


def link(provider: str) -> Response:
    refused = _link_refused()
    if refused is not None:
        return refused
    freshness = get_state().config.login.freshness
    try:
        url = federation_service().begin_link(
            current_auth_session(), provider, fresh_within=freshness, return_to=_account_url()
        )
    except AuthFlowError as exc:
        return _linking_failed(exc)
    response = redirect(url)
    response.headers["Cache-Control"] = "no-store"
    return response  # type: ignore[return-value]


def unlink(provider: str) -> Response:
    refused = _link_refused()
    if refused is not None:
        return refused
    freshness = get_state().config.login.freshness
    handle = get_state().service.with_audit_context(audit_context())
    try:
        federation_service().unlink(handle, current_auth_session(), provider, fresh_within=freshness)
    except AuthFlowError as exc:
        return _linking_failed(exc)
    session = current_auth_session()
    unlinked = redirect(_account_url(notice="identity_unlinked"))
    return notify("provider_unlinked", str(session.tenant), str(session.user_id), unlinked, provider=provider)  # type: ignore[return-value]


def backchannel_logout(provider: str) -> Response:
    service = federation_service()
    handle = get_state().service.with_audit_context(audit_context())
    token = (
        request.form.get("logout_token") if request.mimetype == "application/x-www-form-urlencoded" else None
    )
    try:
        service.backchannel_logout(handle, current_auth_session(), provider, token, tenant=_tenant_arg())
    except (OAuthError, InvalidInput) as exc:
        response = jsonify(error="invalid_request", error_description=exc.message)
        response.status_code = 400
    else:
        response = Response(status=200)
    response.headers["Cache-Control"] = "no-store"
    return response


def provider_logout_url(session: AuthSession, federation: dict[str, Any]) -> str | None:
    """Where to send the browser after the local logout of a federated session (its
    ``record.federation``, read before the logout): the provider's end-session URL with a
    fresh ``state``, remembered in ``session`` for :func:`logout_return`; ``None`` when the
    provider has no end-session endpoint or refuses the redirect. The
    ``post_logout_redirect_uri`` is the provider's configured one, else this app's
    ``/logout/return/<provider>`` route."""
    service = get_state().federation
    provider_name = federation.get("provider") if federation else None
    if not isinstance(provider_name, str) or not provider_name or service is None:
        return None
    state = secrets.token_urlsafe(32)
    try:
        # Without a configured post-logout URI, the provider sends the browser back to this
        # app's logout-return route (register it at the provider).
        own_return = url_for(f"{OAUTH_BLUEPRINT}.logout_return", provider=provider_name, _external=True)
        url = service.end_session_url(federation, state, default_return=own_return)
    except AuthFlowError:
        return None
    if url is not None:
        provider = federation.get("provider", "")
        session.transition(lambda r: begin_flow(r, {_LOGOUT_KEY: {"provider": provider, "state": state}}))
    return url


def logout_return(provider: str) -> Response:
    session = current_auth_session()
    stored: Any = (session.flow or {}).get(_LOGOUT_KEY)
    if stored is not None:
        session.transition(clear_flow)
    state = request.args.get("state", "")
    if (
        not isinstance(stored, dict)
        or stored.get("provider") != provider
        or not isinstance(stored.get("state"), str)
        or not hmac.compare_digest(stored["state"].encode(), state.encode("utf-8", "replace"))
    ):
        return _text("this logout return does not match a logout started here", 400)
    return redirect("/")  # type: ignore[return-value]


def build_oauth_blueprint() -> Blueprint:
    """A fresh ``authflow_oauth`` blueprint (one per app: prefixes may differ)."""
    blueprint = Blueprint(OAUTH_BLUEPRINT, __name__)
    blueprint.add_url_rule("/login/<provider>", "login", login, methods=["GET"])
    blueprint.add_url_rule("/callback/<provider>", "callback", callback, methods=["GET"])
    blueprint.add_url_rule("/callback/<provider>", "form_post_callback", form_post_callback, methods=["POST"])
    blueprint.add_url_rule(
        "/backchannel-logout/<provider>", "backchannel_logout", backchannel_logout, methods=["POST"]
    )
    blueprint.add_url_rule("/logout/return/<provider>", "logout_return", logout_return, methods=["GET"])
    blueprint.add_url_rule("/link/<provider>", "link", link, methods=["POST"])
    blueprint.add_url_rule("/unlink/<provider>", "unlink", unlink, methods=["POST"])
    blueprint.before_request(refuse_bad_json)
    blueprint.after_request(package_headers)
    return blueprint
