"""Calling the headless API in tests, as either kind of client.

``ApiClient(app, kind)`` wraps Flask's test client:

* ``browser``: the cookie jar, ``Authflow-Client: browser``, and on every request but GET
  the CSRF token in ``X-CSRF-Token`` (read from ``GET /session`` when it does not have
  one, and again after each answer that rotated it);
* ``app``: **no** cookie jar, ``Authflow-Client: app``, and ``Authorization: Session
  <token>`` with the token of the last ``Authflow-Session-Token`` answer header (an empty
  header drops it), as a mobile client keeps it.

Every answer is checked against the app's OpenAPI document: its status is declared for
the operation, and its JSON body validates against that status's schema (so the tests of
every flow also prove the document true). The ``api`` fixture of a test module is
typically ``ApiClient(site.app, kind)`` with ``kind`` parametrised over :data:`KINDS`.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from werkzeug.test import TestResponse

from flask_authflow._web.headless import CLIENT_HEADER, TOKEN_HEADER, api_document
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT

__all__ = ["KINDS", "ApiClient", "check_answer"]

KINDS = ("browser", "app")
BASE = "/auth/api/v1"


def _operation(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    for template, item in document["paths"].items():
        pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and method.lower() in item:
            return dict(item[method.lower()])
    raise AssertionError(f"{method} {path} is not an operation of the document")


def check_answer(document: dict[str, Any], method: str, path: str, answer: TestResponse) -> None:
    """``answer`` has a status the operation declares and a body its schema accepts."""
    operation = _operation(document, method, path.split("?")[0])
    declared = operation["responses"].get(str(answer.status_code))
    assert declared is not None, f"{operation['operationId']} answered undeclared {answer.status_code}"
    content = declared.get("content", {}).get("application/json")
    if content is None:
        return
    assert answer.is_json, f"{operation['operationId']} answered {answer.status_code} without JSON"
    document_schema = {**document, "$schema": "https://json-schema.org/draft/2020-12/schema"}
    registry: Registry[Any] = Registry().with_resource("urn:api", Resource.from_contents(document_schema))
    Draft202012Validator(_rooted(content["schema"]), registry=registry).validate(answer.json)


def _rooted(schema: Any) -> Any:
    """``schema`` with its ``#/components/...`` references pointing into the document."""
    if isinstance(schema, dict):
        return {
            key: ("urn:api" + value if key == "$ref" and value.startswith("#") else _rooted(value))
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_rooted(item) for item in schema]
    return schema


class ApiClient:
    """One client of the headless API (see the module docstring)."""

    def __init__(self, app: Flask, kind: str, *, user_agent: str = TEST_USER_AGENT) -> None:
        assert kind in KINDS
        self.app = app
        self.kind = kind
        #: the Flask test client (a browser's keeps cookies; an app's keeps none).
        self.client: FlaskClient = app.test_client(use_cookies=kind == "browser")
        self.client.environ_base["HTTP_USER_AGENT"] = user_agent
        #: the app's session token (``None``: none yet, or the session ended).
        self.token: str | None = None
        self.csrf: str | None = None
        with app.app_context():
            self.document = api_document(app)

    def headers(self, method: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {CLIENT_HEADER: self.kind}
        if self.kind == "app" and self.token:
            headers["Authorization"] = f"Session {self.token}"
        if self.kind == "browser" and method != "GET":
            headers["X-CSRF-Token"] = self.csrf_token()
        return {**headers, **(extra or {})}

    def csrf_token(self) -> str:
        if self.csrf is None:
            self.csrf = str(self.get("/session").json["csrf_token"])
        return self.csrf

    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        headers: dict[str, str] | None = None,
        *,
        check: bool = True,
    ) -> TestResponse:
        kwargs: dict[str, Any] = {"headers": self.headers(method, headers)}
        if json is not None:
            kwargs["json"] = json
        answer = self.client.open(BASE + path, method=method, **kwargs)
        if TOKEN_HEADER in answer.headers:
            self.token = answer.headers[TOKEN_HEADER] or None
        if self.kind == "browser" and method != "GET" and answer.status_code < 400:
            self.csrf = None  # a login rotates it: read it again before the next change
        if check:
            check_answer(self.document, method, BASE + path, answer)
        return answer

    def get(self, path: str, **kwargs: Any) -> TestResponse:
        return self.call("GET", path, **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> TestResponse:
        return self.call("POST", path, json if json is not None else {}, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> TestResponse:
        return self.call("DELETE", path, **kwargs)
