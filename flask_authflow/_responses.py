"""Turning typed errors into HTTP responses (JSON for JSON clients, text otherwise).

A server-side failure (status 5xx) never shows its own message to the client: messages
of configuration and store errors can name paths, file modes or hosts. The client gets
a generic text and the request id; the real message is logged with that id.
"""

from __future__ import annotations

import logging
import uuid

from flask import Response, g, has_request_context, jsonify, request

from flask_authflow._i18n import N_, gettext, translate
from flask_authflow.errors import AuthFlowError

__all__ = [
    "AUDIT_CONTEXT_KEY",
    "CLIENT_HEADER",
    "PACKAGE_HEADERS",
    "SERVER_ERROR_MESSAGE",
    "error_response",
    "package_headers",
    "request_id",
    "wants_json",
]

log = logging.getLogger("flask_authflow")

#: Where the request's :class:`~flask_authflow.audit._context.AuditContext` is kept on ``flask.g``.
AUDIT_CONTEXT_KEY = "_authflow_audit_context"
_FALLBACK_ID_KEY = "_authflow_error_request_id"
#: What a client sees of a 5xx error (followed by the request id).
SERVER_ERROR_MESSAGE = N_("the service could not complete the request; try again later")
#: Headers on every answer of the package's blueprints (pages, JSON, errors): no content
#: sniffing, and no ``Referer`` that would carry a reset link's token to another site.
PACKAGE_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def request_id() -> str:
    """The current request's id: the audit context's, else one made for this error."""
    if not has_request_context():
        return uuid.uuid4().hex
    ctx = g.get(AUDIT_CONTEXT_KEY)
    known = getattr(ctx, "request_id", None)
    if isinstance(known, str):
        return known
    fallback = g.get(_FALLBACK_ID_KEY)
    if not isinstance(fallback, str):
        fallback = uuid.uuid4().hex
        setattr(g, _FALLBACK_ID_KEY, fallback)
    return fallback


#: The header a client of the headless JSON API declares its kind in (``browser`` or
#: ``app``); such a client always gets JSON, whatever its ``Accept`` says.
CLIENT_HEADER = "Authflow-Client"


def wants_json() -> bool:
    """The client sent JSON, declared itself a headless client (:data:`CLIENT_HEADER`), or
    prefers ``application/json`` over HTML."""
    if request.is_json or CLIENT_HEADER in request.headers:
        return True
    best = request.accept_mimetypes.best_match(["application/json", "text/html", "text/plain"])
    return (
        best == "application/json" and request.accept_mimetypes[best] > request.accept_mimetypes["text/html"]
    )


def error_response(error: AuthFlowError) -> Response:
    """The response for a typed error: ``{"error": code, "message": ...}`` or plain text, never cached.

    For a 5xx status the message is replaced by :data:`SERVER_ERROR_MESSAGE` and the
    request id (the body also carries ``"request_id"``); the real message is logged.
    """
    body = {**error.to_dict(), "message": translate(error.message)}
    if error.status >= 500:
        rid = request_id()
        log.error("%s (%s) answered %d, request id %s", error.code, error.message, error.status, rid)
        body = {
            "error": error.code,
            "message": gettext(
                "%(message)s (request id %(id)s)", message=translate(SERVER_ERROR_MESSAGE), id=rid
            ),
            "request_id": rid,
        }
    if wants_json():
        response = jsonify(body)
    else:
        response = Response(f"{body['message']}\n", mimetype="text/plain")
    response.status_code = error.status
    response.headers["Cache-Control"] = "no-store"
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def package_headers(response: Response) -> Response:
    """``after_request`` of the package's blueprints: :data:`PACKAGE_HEADERS`, unless the
    view set its own value (the manual's security page says how an application sets the same
    headers on its own views)."""
    for name, value in PACKAGE_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
