"""The reference page of the headless API (the manual's ``headless-reference.rst``),
rendered from its OpenAPI document, so the page says what the code serves.

Regenerate it after changing a route, from the manual's folder::

    python -m flask_authflow._web.headless.reference > headless-reference.rst

(``tests/test_headless_openapi.py`` fails while the committed page is not current.)
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from flask import Flask

from flask_authflow._web.extension import AuthFlow
from flask_authflow._web.headless.blueprint import api_document

__all__ = ["reference_document", "render_reference"]

_TITLE = "Headless API reference"


def _heading(text: str, mark: str) -> list[str]:
    return [text, mark * len(text), ""]


def _type(schema: Mapping[str, Any]) -> str:
    """A schema as a short phrase: ``string (at most 64)``, ``LoginStep``, ``array of string``."""
    if "$ref" in schema:
        return f"`{str(schema['$ref']).rsplit('/', 1)[-1]}`_"
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"])
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(f"``{value}``" for value in schema["enum"])
    if kind == "string" and "maxLength" in schema:
        return f"string (at most {schema['maxLength']} characters)"
    if kind == "integer" and "minimum" in schema:
        return f"integer ({schema['minimum']} to {schema['maximum']})"
    return kind


def _operation(path: str, method: str, operation: Mapping[str, Any]) -> list[str]:
    lines = _heading(f"``{method.upper()} {path}``", "-")
    lines += [str(operation["summary"]) + ".", ""]
    if operation.get("description"):
        lines += [" ".join(str(operation["description"]).split()), ""]
    lines += [f":Operation: ``{operation['operationId']}``"]
    lines += [":Clients: " + ", ".join(f"``{kind}``" for kind in operation["x-client-kinds"])]
    body = operation.get("requestBody")
    if body is not None:
        lines += [":Request body: " + _type(body["content"]["application/json"]["schema"])]
    params = [p for p in operation["parameters"] if p.get("in") == "path"]
    for param in params:
        lines += [f":Path ``{param['name']}``: {_type(param['schema'])}"]
    lines += ["", "Answers:", ""]
    for status, answer in operation["responses"].items():
        content = answer.get("content", {}).get("application/json")
        shape = f" ({_type(content['schema'])})" if content else ""
        lines += [f"``{status}``{shape}", f"    {' '.join(str(answer['description']).split())}", ""]
    return lines


def _schema(name: str, schema: Mapping[str, Any]) -> list[str]:
    lines = [f".. _{name}:", "", *_heading(name, "~")]
    if schema.get("description"):
        lines += [str(schema["description"]), ""]
    required = set(schema.get("required", ()))
    for member, member_schema in schema.get("properties", {}).items():
        need = "required" if member in required else "optional"
        lines += [f"``{member}`` ({need}): {_type(member_schema)}"]
        if member_schema.get("description"):
            lines += [f"    {member_schema['description']}"]
        lines += [""]
    if schema.get("additionalProperties"):
        lines += ["Other members may be present.", ""]
    return lines


def render_reference(document: Mapping[str, Any]) -> str:
    """The reStructuredText reference page of ``document``."""
    lines = [
        ".. This page is generated from the OpenAPI document: do not edit it by hand.",
        "   In the manual's folder:",
        "   python -m flask_authflow._web.headless.reference > headless-reference.rst",
        "",
        *_heading(_TITLE, "="),
        f"The routes of the headless API (version {document['info']['version']}) at their default "
        "prefix, as ``GET /auth/api/v1/openapi.json`` serves them; see :doc:`headless` for how to "
        "use them. Every operation also takes the ``Authflow-Client`` header (``browser`` or "
        "``app``) and, for a browser changing something, ``X-CSRF-Token``; an ``app`` client gets "
        "its new session token in the ``Authflow-Session-Token`` answer header.",
        "",
    ]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            lines += _operation(path, method, operation)
    lines += _heading("Bodies", "-")
    for name, schema in document["components"]["schemas"].items():
        lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def reference_document() -> dict[str, Any]:
    """The document of an app with every default (the one the committed page shows)."""
    app = Flask(__name__)
    app.config.update(
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_VIEWS=True, AUTHFLOW_DATABASE_URL="sqlite://"
    )
    AuthFlow(app)
    with app.app_context():
        return api_document(app)


if __name__ == "__main__":  # pragma: no cover - the documented command
    print(render_reference(reference_document()), end="")
