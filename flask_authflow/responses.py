"""Turning typed errors into HTTP responses (JSON for JSON clients, text otherwise)."""

from __future__ import annotations

from flask import Response, jsonify, request

from .errors import AuthFlowError

__all__ = ["error_response", "wants_json"]


def wants_json() -> bool:
    """The client sent JSON, or prefers ``application/json`` over HTML."""
    if request.is_json:
        return True
    best = request.accept_mimetypes.best_match(["application/json", "text/html", "text/plain"])
    return (
        best == "application/json" and request.accept_mimetypes[best] > request.accept_mimetypes["text/html"]
    )


def error_response(error: AuthFlowError) -> Response:
    """The response for a typed error: ``{"error": code, "message": ...}`` or plain text, never cached."""
    if wants_json():
        response = jsonify(error.to_dict())
    else:
        response = Response(f"{error.message}\n", mimetype="text/plain")
    response.status_code = error.status
    response.headers["Cache-Control"] = "no-store"
    return response
