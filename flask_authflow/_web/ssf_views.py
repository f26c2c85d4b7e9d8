"""The Shared Signals receiver's push endpoint (RFC 8935) and its wiring.

``POST <AUTHFLOW_OAUTH_URL_PREFIX>/ssf/push/<transmitter>`` (default ``/auth/ssf/push/...``):
the body is one SET (``Content-Type: application/secevent+jwt``), the transmitter
authenticates with its bearer secret (``Authorization: Bearer <push_token>``, compared in
constant time). Answers, always with ``Cache-Control: no-store``:

* 202 (empty): the SET was handled (or its event is unknown, or its subject is: audited);
* 400 with RFC 8935's JSON ``{"err": code, "description": text}``: ``authentication_failed``
  (no or a wrong bearer secret), ``access_denied`` (the transmitter is configured to be
  polled), ``invalid_request`` (not a SET, wrong ``typ``, bad claims, several events, a
  replay), ``invalid_key`` (algorithm, key or signature), ``invalid_issuer``,
  ``invalid_audience``;
* 404: no transmitter of that name; 503 (``Retry-After``): a store needed to decide or to
  act is down, nothing was acknowledged and the transmitter sends it again.

It is exempt from Flask-WTF's CSRF check (a server posts it, as the back-channel logout).
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from flask_authflow._responses import package_headers
from flask_authflow._web.state import AuthFlowState, current_auth_session, get_state
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, StoreUnavailable
from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._login import FederationService
from flask_authflow.federation._ssf.receiver import ReceiverStores, SignalsReceiver, UnknownTransmitter
from flask_authflow.federation._ssf.settings import transmitters
from flask_authflow.federation._ssf.verify import SetRefused

__all__ = ["SSF_BLUEPRINT", "SSF_EXTENSION", "install_receiver", "receiver_of"]

SSF_BLUEPRINT = "authflow_ssf"
#: Where the app's :class:`SignalsReceiver` is kept (``app.extensions[SSF_EXTENSION]``).
SSF_EXTENSION = "authflow_ssf"
_SET_TYPE = "application/secevent+jwt"
_MAX_BODY = 16 * 1024


def receiver_of(app: Flask) -> SignalsReceiver:
    """The app's :class:`SignalsReceiver` (``AUTHFLOW_SSF_TRANSMITTERS`` must be set)."""
    receiver = app.extensions.get(SSF_EXTENSION)
    if not isinstance(receiver, SignalsReceiver):
        raise RuntimeError("no Shared Signals transmitter is configured (AUTHFLOW_SSF_TRANSMITTERS)")
    return receiver


def _refused(error: str, description: str, status: int = 400) -> Response:
    response = jsonify(err=error, description=description)
    response.status_code = status
    return response


def _authenticated(token: str | None) -> bool:
    """The request's bearer secret is ``token`` (``None``: the app accepts pushes without one)."""
    if token is None:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode("utf-8"))


def _body() -> str | None:
    """The SET of the request, or ``None`` (wrong type, too large, not ASCII)."""
    if request.mimetype != _SET_TYPE:
        return None
    if request.content_length is not None and request.content_length > _MAX_BODY:
        return None
    raw = request.stream.read(_MAX_BODY + 1)
    if len(raw) > _MAX_BODY or not raw.isascii():
        return None
    return raw.decode("ascii").strip()


def push(transmitter: str) -> Response:
    receiver = receiver_of(current_app)
    try:
        configured = receiver.transmitter(transmitter)
    except UnknownTransmitter as exc:
        response = _refused(exc.error, exc.message, 404)
    else:
        response = _receive(receiver, configured.name, configured.push_token, configured.delivery)
    response.headers["Cache-Control"] = "no-store"
    return response


def _receive(receiver: SignalsReceiver, name: str, token: str | None, delivery: str) -> Response:
    if not _authenticated(token):
        return _refused("authentication_failed", "the push did not carry this transmitter's credentials")
    if delivery != "push":
        return _refused("access_denied", "this transmitter is configured to be polled")
    body = _body()
    if body is None:
        return _refused("invalid_request", f"the body must be one SET sent as {_SET_TYPE}")
    handle = get_state().service.with_audit_context(audit_context())
    try:
        receiver.receive(handle, current_auth_session(), name, body)
    except SetRefused as exc:
        return _refused(exc.error, exc.message)
    except (StoreUnavailable, ProviderUnreachable):
        return _unavailable()
    except AuthFlowError as exc:  # anything else the SET provoked is its fault, never a 500
        return _unavailable() if exc.status >= 500 else _refused("invalid_request", exc.message)
    return Response(status=202)


def _unavailable() -> Response:
    """A store (or the transmitter's JWKS) needed to decide is down: nothing was acknowledged."""
    response = _refused("temporarily_unavailable", "try again later", 503)
    response.headers["Retry-After"] = "30"
    return response


def _stores(state: AuthFlowState, federation: FederationService) -> ReceiverStores:
    tokens = federation.tokens
    return ReceiverStores(
        one_time=state.service.store,  # the login store: its one-time tokens join the unit of work
        accounts=state.backend,
        switch=state.backend,
        sessions=state.session_store,
        session_expiry=state.session_interface.expires_at,
        devices=state.backend,
        provider_tokens=tokens.store if tokens is not None else None,
        api_tokens=state.backend,
        begin_unit=state.service.store.begin_unit,
    )


def install_receiver(
    app: Flask, state: AuthFlowState, federation: FederationService, http_client: Any, url_prefix: str
) -> None:
    """Build the app's receiver from ``AUTHFLOW_SSF_TRANSMITTERS`` (refused with what to set
    when unsafe) and register the push endpoint, exempt from Flask-WTF's CSRF check."""
    settings = state.config.federation
    configured = transmitters(settings.ssf_transmitters, settings.default_tenant)
    app.extensions[SSF_EXTENSION] = SignalsReceiver(
        configured,
        federation=federation,
        stores=_stores(state, federation),
        http=http_client or RequestsHttpClient(),
        sender=app,
    )
    blueprint = Blueprint(SSF_BLUEPRINT, __name__)
    blueprint.add_url_rule("/ssf/push/<transmitter>", "push", push, methods=["POST"])
    blueprint.after_request(package_headers)
    app.register_blueprint(blueprint, url_prefix=url_prefix or None)
    exempt = getattr(app.extensions.get("csrf"), "exempt", None)
    if callable(exempt):  # Flask-WTF names exempt views by "module.function"
        exempt(f"{push.__module__}.{push.__name__}")
