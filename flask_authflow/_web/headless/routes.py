"""How a flow declares a route of the headless API, and how every route is answered.

A flow module makes one :class:`Routes` and declares each route with its decorator::

    routes = Routes("login")

    @routes.post("/login/password", "loginPassword", "Sign in with a password",
                 body=PASSWORD_BODY, answers={200: Answer("The next step", STEP)},
                 errors={401: ("invalid",), 403: ("locked", "email_not_verified")}, throttled=True)
    def password(call: Call) -> Reply:
        ...

The declaration is the single source of the route: the blueprint registers it, the
request body is checked against ``body`` before the view runs, and the OpenAPI document
is built from it (:mod:`.openapi`). Every route may also answer the statuses
:func:`Route.statuses` adds: 400 (bad JSON, body or client kind, CSRF), 503 (a store is
down), 429 when ``throttled``, 401 ``login_required`` when ``signed_in``.

A view returns a :class:`Reply` or raises an
:class:`~flask_authflow.errors.AuthFlowError` (its code and status; a :class:`Refusal`
for one of the library's other codes): every refusal is ``{"error": code, "message":
...}`` JSON, never cached, never a 500.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Response, jsonify, request

from flask_authflow._i18n import N_, gettext, translate
from flask_authflow._responses import SERVER_ERROR_MESSAGE, request_id
from flask_authflow._web.headless.clients import KINDS, client_kind
from flask_authflow._web.headless.schema import Object, Shape, String
from flask_authflow._web.json_body import json_body
from flask_authflow._web.state import current_auth_session
from flask_authflow.errors import AuthFlowError, StoreUnavailable
from flask_authflow.sessions._interface import RequestSession

__all__ = ["Answer", "Call", "Refusal", "Reply", "Route", "Routes", "answer_error", "dispatch"]

log = logging.getLogger("flask_authflow")

#: The statuses every route may answer, with the codes that explain them.
COMMON_ERRORS: Mapping[int, tuple[str, ...]] = {
    400: ("invalid_input", "client_kind_mismatch", "csrf"),
    503: ("store_unavailable", "store_busy", "audit_unavailable"),
}


class Refusal(AuthFlowError):
    """A refusal with one of the library's codes that has no exception class of its own
    (the keys of ``web.views.common.MESSAGES``: ``invalid``, ``retry_code``, ...);
    ``details`` are added to the body (``locked_until``, ``kinds``)."""

    def __init__(self, code: str, message: str, status: int, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.details = details

    def to_dict(self) -> dict[str, Any]:  # type: ignore[override,unused-ignore]
        return {"error": self.code, "message": self.message, **self.details}


@dataclass(frozen=True)
class Answer:
    """A declared answer: its description and body shape (``None``: no body)."""

    description: str
    body: Shape | None = None


@dataclass(frozen=True)
class Reply:
    """What a view answers: a JSON body and its status (one the route declared)."""

    body: Mapping[str, Any]
    status: int = 200


@dataclass(frozen=True)
class Call:
    """What a view is called with: the checked body, path parameters and client kind."""

    kind: str
    body: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """One declared route (see the module docstring)."""

    method: str
    path: str
    operation: str
    summary: str
    tag: str
    view: Callable[[Call], Reply]
    answers: Mapping[int, Answer]
    body: Object | None = None
    errors: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    params: Mapping[str, String] = field(default_factory=dict)
    kinds: tuple[str, ...] = KINDS
    signed_in: bool = False
    throttled: bool = False
    description: str = ""

    def statuses(self) -> dict[int, tuple[str, ...]]:
        """Every error status the route may answer, with its codes."""
        found: dict[int, tuple[str, ...]] = {status: codes for status, codes in COMMON_ERRORS.items()}
        if self.signed_in:
            found[401] = ("login_required",)
        if self.throttled:
            found[429] = ("throttled",)
        for status, codes in self.errors.items():
            found[status] = tuple(dict.fromkeys((*found.get(status, ()), *codes)))
        return dict(sorted(found.items()))

    @property
    def rule(self) -> str:
        """The Flask rule (``/sessions/<session_hash>``) of ``path`` (``/sessions/{session_hash}``)."""
        return self.path.replace("{", "<").replace("}", ">")


#: A route's view: the checked call in, the reply out.
View = Callable[["Call"], "Reply"]
#: The decorator that declares a view.
Declare = Callable[[View], View]


class Routes:
    """The routes of one flow module, all under one OpenAPI tag."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.routes: list[Route] = []

    def route(self, method: str, path: str, operation: str, summary: str, **declared: Any) -> Declare:
        """Declare ``view`` as ``method path`` (keywords: the fields of :class:`Route`)."""

        def register(view: View) -> View:
            description = declared.pop("description", None) or (view.__doc__ or "").strip()
            self.routes.append(
                Route(method, path, operation, summary, self.tag, view, description=description, **declared)
            )
            return view

        return register

    def get(self, path: str, operation: str, summary: str, **declared: Any) -> Declare:
        return self.route("GET", path, operation, summary, **declared)

    def post(self, path: str, operation: str, summary: str, **declared: Any) -> Declare:
        return self.route("POST", path, operation, summary, **declared)

    def delete(self, path: str, operation: str, summary: str, **declared: Any) -> Declare:
        return self.route("DELETE", path, operation, summary, **declared)


def _json(body: Mapping[str, Any], status: int) -> Response:
    response = jsonify(dict(body))
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response


def answer_error(error: AuthFlowError) -> Response:
    """The JSON refusal of ``error`` (its status; 503 for any 5xx). A 5xx shows a generic
    message and the request id (its own message may name hosts or paths; it is logged)."""
    if error.status >= 500:  # 503 whatever the error's own 5xx: a route never answers 500
        rid = request_id()
        log.error("%s (%s) answered %d, request id %s", error.code, error.message, error.status, rid)
        message = gettext("%(message)s (request id %(id)s)", message=translate(SERVER_ERROR_MESSAGE), id=rid)
        response = _json({"error": error.code, "message": message, "request_id": rid}, 503)
    else:
        body = {**error.to_dict(), "message": translate(error.message)}
        response = _json(body, error.status if 400 <= error.status < 500 else 400)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _body(route: Route) -> Mapping[str, Any]:
    if route.body is None:
        return {}
    value = json_body() if request.is_json else None  # json_body: bounded, parsed once
    if value is None and not route.body.required:
        value = {}
    return route.body.check(value, "body")


def _params(route: Route, given: Mapping[str, Any]) -> dict[str, Any]:
    return {name: shape.check(given.get(name), name) for name, shape in route.params.items()}


def dispatch(route: Route, signed_in: Callable[[], bool]) -> Callable[..., Response]:
    """The Flask view of ``route``: the session readable (else 503), client kind and CSRF,
    sign-in, body and parameters checked, then the view; typed errors answered as JSON."""

    def endpoint(**given: Any) -> Response:
        try:
            session = current_auth_session()
            if isinstance(session, RequestSession) and session.store_failed:
                raise StoreUnavailable()  # its session could not be read: decide nothing
            kind = client_kind(route.kinds)
            if route.signed_in and not signed_in():
                raise Refusal("login_required", N_("Sign in first."), 401)
            call = Call(kind=kind, body=_body(route), params=_params(route, given))
            reply = route.view(call)
        except AuthFlowError as error:
            answer = answer_error(error)
        else:
            answer = _json(reply.body, reply.status)
        if answer.status_code not in route.answers and answer.status_code not in route.statuses():
            warnings.warn(
                f"{route.operation} answered {answer.status_code}, a status it does not declare",
                RuntimeWarning,
                stacklevel=1,
            )
        return answer

    endpoint.__name__ = route.operation
    return endpoint
