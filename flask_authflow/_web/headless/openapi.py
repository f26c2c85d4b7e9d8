"""The OpenAPI 3.1 document of the headless API, assembled from the route declarations.

Nothing here is written by hand beside the routes: each :class:`~.routes.Route` gives its
path, method, body shape, answers and error statuses; the shapes give the JSON Schemas
(:mod:`.schema`). Served at ``GET <prefix>/v1/openapi.json``; the manual's reference page
is rendered from it (``python -m flask_authflow._web.headless.reference``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask_authflow._web.headless.clients import APP, CLIENT_HEADER, CSRF_HEADER, KINDS, TOKEN_HEADER
from flask_authflow._web.headless.routes import Route
from flask_authflow._web.headless.schema import Object, Shape, String, component_schemas

__all__ = ["ERROR", "VERSION", "build_document"]

#: The API's version (the ``v1`` of its paths).
VERSION = "1"

#: The one error body of every refusal.
ERROR = Object(
    {
        "error": String(64, description="A stable machine-readable code (``invalid``, ``locked`` ...)."),
        "message": String(4096, description="A sentence for people, in the request's language."),
        "request_id": String(128, description="With a 5xx: the id under which the cause was logged."),
    },
    required=("error", "message"),
    name="Error",
    description="Every refusal: a code, a message, and details some codes add (``locked_until``, ``kinds``).",
    open=True,
)

_PARAMETERS = {
    "Client": {
        "name": CLIENT_HEADER,
        "in": "header",
        "required": False,
        "description": "The client kind: ``browser`` (default: the session cookie) or ``app`` "
        "(``Authorization: Session <token>``, no cookie).",
        "schema": {"type": "string", "enum": list(KINDS)},
    },
    "Csrf": {
        "name": CSRF_HEADER,
        "in": "header",
        "required": False,
        "description": "A browser client's CSRF token (from ``GET /session``), on every request but GET.",
        "schema": {"type": "string", "maxLength": 256},
    },
}
_TOKEN_HEADER = {
    "description": f"An ``{APP}`` client's new session token (after a rotation); empty: the session ended.",
    "schema": {"type": "string"},
}


def _security(cookie_name: str) -> dict[str, Any]:
    return {
        "browserSession": {"type": "apiKey", "in": "cookie", "name": cookie_name},
        "appSession": {
            "type": "http",
            "scheme": "Session",
            "description": "An app's session token: ``Authorization: Session <token>``.",
        },
    }


def _response(description: str, body: Shape | None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "headers": {TOKEN_HEADER: {"$ref": "#/components/headers/SessionToken"}},
    }
    if body is not None:
        answer["content"] = {"application/json": {"schema": body.json_schema()}}
    return answer


def _errors(codes: tuple[str, ...]) -> str:
    return "Refused: " + ", ".join(f"``{code}``" for code in codes) + "."


def _operation(route: Route) -> dict[str, Any]:
    responses = {str(status): _response(a.description, a.body) for status, a in route.answers.items()}
    for status, codes in route.statuses().items():
        responses.setdefault(str(status), _response(_errors(codes), ERROR))
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": shape.json_schema()}
        for name, shape in route.params.items()
    ]
    parameters += [{"$ref": "#/components/parameters/Client"}, {"$ref": "#/components/parameters/Csrf"}]
    operation: dict[str, Any] = {
        "operationId": route.operation,
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": parameters,
        "responses": dict(sorted(responses.items())),
        "security": [{"browserSession": []}, {"appSession": []}, {}],
        "x-client-kinds": list(route.kinds),
    }
    if route.description:
        operation["description"] = route.description
    if route.body is not None:
        operation["requestBody"] = {
            "required": bool(route.body.required),
            "content": {"application/json": {"schema": route.body.json_schema()}},
        }
    return operation


def build_document(
    routes: Iterable[Route], base: str, *, cookie_name: str = "authflow_session"
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` mounted at ``base`` (``/auth/api/v1``), for
    browser sessions in the cookie ``cookie_name``."""
    routes = list(routes)
    paths: dict[str, dict[str, Any]] = {}
    shapes: list[Shape] = [ERROR]
    for route in routes:
        paths.setdefault(base + route.path, {})[route.method.lower()] = _operation(route)
        shapes += [a.body for a in route.answers.values() if a.body is not None]
        shapes += [route.body] if route.body is not None else []
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "flask-authflow headless API",
            "version": VERSION,
            "description": "Sign-in, factors, sessions and account flows as JSON, for single-page "
            "apps (``browser`` clients) and mobile apps (``app`` clients). See the headless guide.",
        },
        "tags": [{"name": tag} for tag in dict.fromkeys(route.tag for route in routes)],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": component_schemas(shapes),
            "parameters": _PARAMETERS,
            "headers": {"SessionToken": _TOKEN_HEADER},
            "securitySchemes": _security(cookie_name),
        },
    }
