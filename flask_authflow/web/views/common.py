"""What every page of the ``authflow_views`` blueprint shares: names, messages, rendering,
``next`` handling, the signed-in check, the pending step-up and JSON answers for the
WebAuthn scripts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import Response, current_app, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow.audit.context import audit_context
from flask_authflow.core.session import AuthSession, AuthState
from flask_authflow.errors import AuthFlowError
from flask_authflow.login.service import AuthnRequest
from flask_authflow.web.csrf import csrf_field_name, csrf_token
from flask_authflow.web.current_user import ANONYMOUS_USER, load_current_user
from flask_authflow.web.decorators import safe_next
from flask_authflow.web.state import current_auth_session, get_state

__all__ = [
    "LOGOUT_BLUEPRINT",
    "MAX_CODE_LENGTH",
    "MAX_CREDENTIAL_LENGTH",
    "MESSAGES",
    "TEMPLATE_FOLDER",
    "VIEWS_BLUEPRINT",
    "after_login",
    "error_status",
    "form_text",
    "handle",
    "identifier_of",
    "json_error",
    "lock_message",
    "logout_endpoint",
    "next_arg",
    "page",
    "pending_step_up",
    "signed_in",
    "stored_sid",
    "to_login",
    "to_step_up",
]

#: Name of the blueprint (and prefix of its endpoints: ``authflow_views.login`` ...).
VIEWS_BLUEPRINT = "authflow_views"
#: Name of the app's logout blueprint (its one endpoint is ``authflow_logout.logout``).
LOGOUT_BLUEPRINT = "authflow_logout"
#: Where the default templates live (``authflow/login.html`` ...).
TEMPLATE_FOLDER = str(Path(__file__).resolve().parent.parent / "templates")

#: Longest one-time code accepted from a form (longer is refused, 400).
MAX_CODE_LENGTH = 256
#: Longest WebAuthn response (the browser's credential as JSON) accepted from a form.
MAX_CREDENTIAL_LENGTH = 16 * 1024

MESSAGES = {
    "invalid": "Wrong username or password.",
    "invalid_code": "That code was not accepted. Sign in again.",
    "retry_code": "That code was not accepted. Try again.",
    "retry_key": "Your security key was not accepted. Try again.",
    "csrf": "This form has expired or did not come from this site. Please try again.",
    "missing": "Enter your username and password.",
    "missing_code": "Enter the code.",
    "missing_credential": "Use your security key first (this needs JavaScript).",
    "missing_password": "Enter your password.",
    "missing_address": "Enter an e-mail address.",
    "too_long": f"The code is too long (at most {MAX_CODE_LENGTH} characters).",
    "credential_too_long": "The security key's response is too large.",
    "wrong_kind": "This sign-in step does not take that kind of code.",
    "sends_nothing": "That sign-in method does not send codes.",
    "wrong_password": "Your password is not correct.",
    "wrong_current_password": "Your current password is not correct.",
    "password_fields": "Fill in your current password and the new password twice.",
    "password_mismatch": "The two new passwords do not match.",
    "no_password": "This account has no password to confirm.",
    "no_session": "That session is not one of yours, or it has already ended.",
    "no_device": "That device is not one of yours, or it has already been forgotten.",
    "no_factor": "That sign-in method is not one of yours, or it has already been removed.",
    "no_pending": "That set-up has expired or was already finished. Start again.",
    "enroll_code": "That code was not accepted. Try again, or start again.",
    "enroll_key": "Your security key's response was not accepted. Start again.",
    "unavailable_kind": "This site does not offer that sign-in method.",
    "passkey_refused": "That passkey was not accepted.",
    "stronger_step": "Your password alone is not enough here: confirm it is you with one of the ways below.",
}


# --- rendering -----------------------------------------------------------------------------------


def handle() -> AuthnRequest:
    """The login service bound to this request's audit context."""
    return get_state().service.with_audit_context(audit_context())


def logout_endpoint() -> str:
    """The endpoint of the app's logout route: ``authflow_logout.logout``, or the ready
    views' own ``authflow_views.logout`` when ``AUTHFLOW_LOGOUT_URL_PREFIX`` is ``None``."""
    if LOGOUT_BLUEPRINT in current_app.blueprints:
        return f"{LOGOUT_BLUEPRINT}.logout"
    return f"{VIEWS_BLUEPRINT}.logout"


def page(template: str, status: int = 200, **context: Any) -> Response:
    """Render ``authflow/<template>`` with the CSRF field and the defaults every page uses."""
    context.setdefault("error", None)
    context.setdefault("next", None)
    context.setdefault("notice", None)
    body = render_template(
        f"authflow/{template}",
        csrf_token=csrf_token(),
        csrf_field_name=csrf_field_name(),
        logout_endpoint=logout_endpoint(),
        **context,
    )
    return Response(body, status=status, mimetype="text/html")


def json_error(code: str, message: str, status: int, **extra: Any) -> Response:
    """``{"error": code, "message": ...}`` with ``status``, never cached (the WebAuthn scripts read it)."""
    response = jsonify({"error": code, "message": message, **extra})
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response


def error_status(error: AuthFlowError) -> int:
    """The status of a refused form: the error's own 4xx/5xx, else 400 (never a 500)."""
    return error.status if 400 <= error.status < 600 and error.status != 500 else 400


def error_message(error: AuthFlowError) -> str:
    """What a page shows for ``error``: its message, except for server-side failures whose
    messages may name hosts or paths."""
    if error.status >= 500:
        return "The service could not complete the request. Try again later."
    return error.message


def lock_message(until: datetime) -> str:
    return f"Too many failed attempts. Try again after {until.strftime('%Y-%m-%d %H:%M:%S')} UTC."


# --- navigation ----------------------------------------------------------------------------------


def next_arg(source: Mapping[str, str]) -> str | None:
    value = source.get("next")
    return safe_next(value) if isinstance(value, str) else None


def request_next() -> str | None:
    """``next`` from the query string (GET) or the form (POST), if it is safe."""
    return next_arg(request.args if request.method == "GET" else request.form)


def after_login(target: str | None) -> BaseResponse:
    return redirect(target or url_for(f"{VIEWS_BLUEPRINT}.account"))


def to_login(target: str | None) -> BaseResponse:
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.login", next=target))


def to_step_up(target: str) -> BaseResponse:
    """ "Confirm it is you" first, then back to ``target``."""
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.step_up", next=target))


# --- the session ---------------------------------------------------------------------------------


def stored_sid(session: AuthSession) -> str:
    """The id under which the store holds the current session (before any rotation in this
    request): what "keep this session" must keep."""
    loaded = getattr(session, "loaded_sid", None)
    return loaded if isinstance(loaded, str) else session.sid


def signed_in() -> bool:
    """An Authenticated session whose user the app's ``user_loader`` (if any) still finds."""
    if not current_auth_session().is_authenticated:
        return False
    if get_state().hooks.user_loader is None:
        return True
    return load_current_user() is not ANONYMOUS_USER


def pending_step_up(session: AuthSession) -> tuple[str, ...]:
    """The kinds that pass the step-up the session's login waits for (empty: none pending)."""
    record = session.record
    return record.pending_step if record.state is AuthState.AUTHENTICATED else ()


def identifier_of(session: AuthSession) -> str | None:
    user = get_state().backend.get_user(str(session.tenant), str(session.user_id))
    return user.identifier if user is not None else None


def form_text(name: str) -> str:
    value = request.form.get(name)
    return value if isinstance(value, str) else ""
