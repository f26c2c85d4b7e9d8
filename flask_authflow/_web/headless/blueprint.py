"""The ``authflow_api`` blueprint: every declared route of the headless API under
``<AUTHFLOW_HEADLESS_URL_PREFIX>/v1`` (default ``/auth/api/v1``), and its OpenAPI document
at ``.../openapi.json``.

A flow adds its routes by declaring them in a module of this package (a :class:`~.routes.
Routes` named ``routes``) and adding that module to :data:`FLOWS`.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from flask_authflow._responses import package_headers
from flask_authflow._web.headless import (
    account_sessions,
    api_tokens,
    devices,
    enrollment,
    login,
    login_code,
    passkey_accounts,
    passkeys,
    password,
    profile,
    providers,
    registration,
    session,
    stepup,
    username,
)
from flask_authflow._web.headless.clients import app_carrier
from flask_authflow._web.headless.openapi import VERSION, build_document
from flask_authflow._web.headless.routes import Route, Routes, answer_error, dispatch
from flask_authflow._web.json_body import json_body
from flask_authflow._web.state import get_state
from flask_authflow._web.views.common import signed_in
from flask_authflow.errors import InvalidInput

__all__ = ["API_BLUEPRINT", "FLOWS", "all_routes", "api_document", "register_api"]

#: Name of the blueprint (and prefix of its endpoints: ``authflow_api.getSession`` ...).
API_BLUEPRINT = "authflow_api"

#: The flow modules whose ``routes`` make up the API, in the document's order.
FLOWS: tuple[Any, ...] = (
    session,
    login,
    login_code,
    stepup,
    passkeys,
    providers,
    # the account flows (h-apiflows)
    registration,
    profile,
    enrollment,
    account_sessions,
    devices,
    api_tokens,
    username,
    passkey_accounts,
    password,
)


def all_routes() -> list[Route]:
    """Every declared route, in :data:`FLOWS` order."""
    found: list[Route] = []
    for module in FLOWS:
        collection: Routes = module.routes
        found += collection.routes
    return found


def _base(app: Flask) -> str:
    prefix = get_state(app).config.web.headless_url_prefix or ""
    return f"{prefix.rstrip('/')}/v{VERSION}"


def api_document(app: Flask) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s headless API (its prefix and cookie name)."""
    return build_document(all_routes(), _base(app), cookie_name=get_state(app).session_interface.cookie_name)


def _openapi() -> Response:
    response = jsonify(api_document(current_app))
    response.headers["Cache-Control"] = "no-cache"
    return response


def _refuse_bad_json() -> Response | None:
    """A JSON body too large, too deep or malformed: 400 ``invalid_input`` before any view."""
    if not request.is_json:
        return None
    try:
        json_body()
    except InvalidInput as error:
        return answer_error(error)
    return None


def build_api_blueprint() -> Blueprint:
    """A new ``authflow_api`` blueprint with every route of :data:`FLOWS`."""
    bp = Blueprint(API_BLUEPRINT, __name__)
    for route in all_routes():
        bp.add_url_rule(route.rule, route.operation, dispatch(route, signed_in), methods=[route.method])
    bp.add_url_rule("/openapi.json", "openapi", _openapi, methods=["GET"])
    bp.before_request(_refuse_bad_json)
    bp.after_request(package_headers)
    return bp


def register_api(app: Flask) -> Blueprint:
    """Register the headless API on ``app`` (initialised with flask-authflow) at
    ``AUTHFLOW_HEADLESS_URL_PREFIX`` and let ``Authflow-Client: app`` requests carry their
    session in ``Authorization: Session``; registering twice returns the first blueprint."""
    state = get_state(app)
    existing = app.blueprints.get(API_BLUEPRINT)
    if isinstance(existing, Blueprint):
        return existing
    bp = build_api_blueprint()
    app.register_blueprint(bp, url_prefix=_base(app))
    state.session_interface.carrier_for = app_carrier
    return bp
