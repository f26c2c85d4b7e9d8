"""The provider's answers that every endpoint shares: OAuth errors and redirects."""

from __future__ import annotations

from flask import Response, jsonify


def error(status: int, code: str, description: str) -> Response:
    """An OAuth 2.0 error answer (``{"error", "error_description"}``), never cached."""
    resp = jsonify({"error": code, "error_description": description})
    resp.status_code = status
    resp.headers["Cache-Control"] = "no-store"
    return resp


def invalid_client() -> Response:
    """401 ``invalid_client`` with the ``WWW-Authenticate`` challenge RFC 6749 §5.2 asks for."""
    resp = error(401, "invalid_client", "client authentication failed")
    resp.headers["WWW-Authenticate"] = 'Basic realm="op"'
    return resp


def redirect(location: str) -> Response:
    resp = Response(status=302)
    resp.headers["Location"] = location
    resp.headers["Cache-Control"] = "no-store"
    return resp
