"""What the account views share (private to :mod:`flask_authflow._web.views`): the account
settings, the sign-in page's account links, reading a form or JSON body, answering a typed
error as JSON or as the form page, and the throttle of sign-up and reset requests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, current_app, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue

from flask_authflow._i18n import translate
from flask_authflow._web.json_body import json_body
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MESSAGES,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    page,
)
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import (
    AuthFlowError,
    InvalidInput,
    Unauthenticated,
)
from flask_authflow.login._account_settings import AccountSettings
from flask_authflow.login._password_policy import PasswordPolicy

#: The largest body an account form or JSON request may have.
MAX_BODY = 16 * 1024


# --- settings and mail ----------------------------------------------------------------------------


def settings(app: Flask | None = None) -> AccountSettings:
    """The app's account settings (``AUTHFLOW_REGISTRATION``, ``AUTHFLOW_PASSWORD_RESET``, ...),
    read once by ``init_app``."""
    return get_state(app).config.accounts


def account_link_flags() -> dict[str, bool]:
    """Which account links the sign-in pages show ("Forgot password?", "Create account"):
    those whose feature is on and whose view is registered. A template global
    (``authflow_account_links()``), so the sign-in page keeps them whoever renders it: a
    refused password, a lock, a failed factor, an application's own login view that hands
    a form to the ready one, a federated sign-in that failed."""
    found, views = settings(), current_app.view_functions
    return {
        "authflow_signup": found.registration and f"{VIEWS_BLUEPRINT}.signup" in views,
        "authflow_password_reset": found.password_reset and f"{VIEWS_BLUEPRINT}.forgot_password" in views,
        "authflow_passkey_signup": found.registration_passkey
        and f"{VIEWS_BLUEPRINT}.passkey_signup" in views,
    }


def account_links() -> dict[str, Any]:
    """What the sign-in page shows of the account flows (a template context processor of
    the views, for templates that read ``authflow_signup`` / ``authflow_password_reset``)."""
    if request.blueprint != VIEWS_BLUEPRINT:
        return {}
    return account_link_flags()


# --- request bodies --------------------------------------------------------------------------------


def wants_json() -> bool:
    return request.is_json


def read_body() -> Mapping[str, Any]:
    """The JSON object or the form; :class:`InvalidInput` for anything else or too large."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise InvalidInput("the request body is too large")
    if not wants_json():
        return request.form
    body = json_body()
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


def text_field(body: Mapping[str, Any], name: str, limit: int = 1024) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidInput(f"{name} must be a string of at most {limit} characters")
    return value


def form_error_json(error: AuthFlowError, **extra: Any) -> Response:
    response = jsonify({"error": error.code, "message": translate(error_message(error)), **extra})
    response.status_code = error_status(error)
    response.headers["Cache-Control"] = "no-store"
    return response


def app_password_policy() -> PasswordPolicy:
    state = get_state()
    return state.password_policy or PasswordPolicy.from_settings(state.config.passwords)


def guarded(view: Callable[[], ResponseReturnValue], form: str, **context: Any) -> ResponseReturnValue:
    """Run ``view``; a typed error becomes JSON or the form page with the message (and
    ``Retry-After`` when it is a throttle's refusal)."""
    try:
        return view()
    except AuthFlowError as error:
        answer = (
            form_error_json(error)
            if wants_json()
            else page(form, error_status(error), error=error_message(error), **context)
        )
        if error.retry_after is not None:
            answer = current_app.make_response(answer)
            answer.headers["Retry-After"] = str(error.retry_after)
        return answer


def signed_in_form(form: str, post: Callable[[], ResponseReturnValue]) -> ResponseReturnValue:
    """A signed-in user's form: ``GET`` shows it, ``POST`` runs ``post`` (:func:`guarded`);
    a guest goes to the sign-in page (401 in JSON)."""
    if not current_auth_session().is_authenticated:
        if wants_json():
            return form_error_json(Unauthenticated())
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.login", next=request.path))
    if request.method == "GET":
        return page(form)
    return guarded(post, form)


def throttle_client(scope: str) -> None:
    """Count one ``signup`` or ``reset`` request from the client's address and network;
    :class:`~flask_authflow.errors.Throttled` (429) when they had their share."""
    get_state().service.throttle.hit(scope, address=audit_context().client_ip)


def new_password(body: Mapping[str, Any], *, confirm: bool) -> str:
    """``body``'s ``password`` (and, with ``confirm``, the same again in ``password_confirm``)."""
    password = text_field(body, "password", 4096)
    again = text_field(body, "password_confirm", 4096) if confirm else password
    if password is None or password != again:
        raise InvalidInput(MESSAGES["password_mismatch"] if password else MESSAGES["missing_password"])
    return password
