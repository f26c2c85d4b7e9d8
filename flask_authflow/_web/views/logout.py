"""The app's one logout route: ``POST <AUTHFLOW_LOGOUT_URL_PREFIX>/logout`` (default ``/auth/logout``).

``AuthFlow(app)`` registers it (blueprint ``authflow_logout``, endpoint
``authflow_logout.logout``) unless ``AUTHFLOW_LOGOUT_URL_PREFIX`` is ``None``; the ready
views and federation use it rather than adding logout routes of their own (with the route
switched off, the ready views register this same view at their ``/logout``).

It ends the session (audited, id rotated, data dropped) and answers:

* a JSON request (``Content-Type: application/json``): 200 ``{"status": "logged_out"}``,
  plus ``"location"``, the provider's end-session URL, when a federated session should
  be ended at its provider too;
* a form: 302 to that URL, else to ``AUTHFLOW_POST_LOGOUT_VIEW``, else to the ready
  views' login page when they are registered, else to ``/`` (a client that prefers JSON
  gets ``{"status": "done", "location": ...}`` instead of the redirect).

Cross-site requests are refused (403) whatever their body. A form must carry the
session's CSRF token (:func:`~flask_authflow._web.csrf.csrf_token`, field ``csrf_token``;
Flask-WTF's token when the app uses ``CSRFProtect``), as every form of the ready views
does: without it the answer is 400 and the session is kept. A JSON request needs no token:
a browser cannot send one cross-site without a CORS preflight.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Flask, Response, current_app, jsonify, redirect, request
from flask.typing import ResponseReturnValue

from flask_authflow._core.session import AuthSession
from flask_authflow._responses import package_headers, wants_json
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.json_body import refuse_bad_json
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.account_page import logout_refused_page
from flask_authflow._web.views.common import (
    LOGOUT_BLUEPRINT,
    MESSAGES,
    VIEWS_BLUEPRINT,
    json_error,
    post_logout_url,
)
from flask_authflow.audit._context import audit_context

__all__ = ["LOGOUT_BLUEPRINT", "end_session", "logout", "register_logout"]


def _cross_site() -> bool:
    """A browser says the request came from another site (Fetch metadata, or an ``Origin``
    on another host). Only the host is compared: behind a proxy that ends TLS, the app may
    see ``http`` where the browser's ``Origin`` says ``https``."""
    if request.headers.get("Sec-Fetch-Site") == "cross-site":
        return True
    origin = request.headers.get("Origin")
    return origin is not None and urlsplit(origin).netloc.lower() != request.host.lower()


def _refused(status: int, code: str, message: str) -> ResponseReturnValue:
    if status == 400 and VIEWS_BLUEPRINT in current_app.blueprints and not request.is_json:
        return logout_refused_page()  # the page the form came from, with the error
    if wants_json():
        return json_error(code, message, status)
    response = Response(f"{message}\n", status=status, mimetype="text/plain")
    response.headers["Cache-Control"] = "no-store"
    return response


def _provider_logout(session: AuthSession, federation: dict[str, Any]) -> str | None:
    """The provider's end-session URL for a federated session (federation loads only then)."""
    from flask_authflow._web.federation_views import provider_logout_url

    return provider_logout_url(session, federation)


def end_session() -> str | None:
    """End the current session (audited, id rotated, data dropped); the provider's
    end-session URL when a federated session should be ended there too (the ready views'
    logout and the headless API's)."""
    session = current_auth_session()
    federation: dict[str, Any] = dict(session.record.federation or {})
    get_state().service.with_audit_context(audit_context()).logout(session)
    return _provider_logout(session, federation) if federation else None


def logout() -> ResponseReturnValue:
    """End the current session; see the module docstring for the answers."""
    if _cross_site():
        return _refused(403, "cross_site", "logout must be requested from this site")
    if not request.is_json and not csrf_valid():
        return _refused(400, "csrf", MESSAGES["csrf"])
    location = end_session()
    if request.is_json:
        response = jsonify({"status": "logged_out", **({"location": location} if location else {})})
    else:
        response = redirect(location or post_logout_url())  # type: ignore[assignment]
    response.headers["Cache-Control"] = "no-store"
    return response


def register_logout(app: Flask, url_prefix: str | None) -> None:
    """Register the ``authflow_logout`` blueprint at ``url_prefix`` (``None``: nothing)."""
    if url_prefix is None or LOGOUT_BLUEPRINT in app.blueprints:
        return
    blueprint = Blueprint(LOGOUT_BLUEPRINT, __name__)
    blueprint.add_url_rule("/logout", "logout", logout, methods=["POST"])
    blueprint.before_request(refuse_bad_json)
    blueprint.after_request(package_headers)
    app.register_blueprint(blueprint, url_prefix=url_prefix or None)
