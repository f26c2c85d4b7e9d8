"""What every page of the ``authflow_views`` blueprint shares: names, messages, rendering,
``next`` handling, the post-login and post-logout destinations, the signed-in check, the
pending step-up and the JSON mode (a request with a JSON body, or that prefers
``application/json``, gets JSON where a browser gets a page)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Response, current_app, jsonify, redirect, render_template, request, url_for
from werkzeug.routing import BuildError
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._i18n import (
    N_,
    format_datetime,
    gettext,
    template_context,
    translate,
    translations_active,
)
from flask_authflow._responses import wants_json
from flask_authflow._web.csrf import csrf_field_name, csrf_token
from flask_authflow._web.current_user import ANONYMOUS_USER, load_current_user
from flask_authflow._web.json_body import json_body
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, InvalidInput
from flask_authflow.login._service import AuthnRequest
from flask_authflow.sessions._interface import RequestSession

__all__ = [
    "LOGOUT_BLUEPRINT",
    "MAX_CODE_LENGTH",
    "MAX_CREDENTIAL_LENGTH",
    "MESSAGES",
    "TEMPLATE_FOLDER",
    "VIEWS_BLUEPRINT",
    "after_login",
    "destination",
    "error_status",
    "form_flag",
    "form_has",
    "form_text",
    "handle",
    "identifier_of",
    "json_answer",
    "json_error",
    "lock_message",
    "logout_endpoint",
    "next_arg",
    "page",
    "page_json",
    "pending_step_up",
    "post_login_url",
    "post_logout_url",
    "readable_time",
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
    "invalid": N_("Wrong username or password."),
    "invalid_code": N_("That code was not accepted. Sign in again."),
    "retry_code": N_("That code was not accepted. Try again."),
    "retry_key": N_("Your security key was not accepted. Try again."),
    "csrf": N_("This form has expired or did not come from this site. Please try again."),
    "missing": N_("Enter your username and password."),
    "missing_code": N_("Enter the code."),
    "missing_credential": N_("Use your security key first (this needs JavaScript)."),
    "missing_password": N_("Enter your password."),
    "missing_address": N_("Enter an e-mail address."),
    "too_long": N_("The code is too long (at most 256 characters)."),
    "credential_too_long": N_("The security key's response is too large."),
    "wrong_kind": N_("This sign-in step does not take that kind of code."),
    "sends_nothing": N_("That sign-in method does not send codes."),
    "wrong_password": N_("Your password is not correct."),
    "wrong_current_password": N_("Your current password is not correct."),
    "password_fields": N_("Fill in your current password and the new password twice."),
    "password_exists": N_("Your account has a password already: change it with your current password."),
    "password_mismatch": N_("The two new passwords do not match."),
    "no_password": N_("This account has no password to confirm."),
    "no_session": N_("That session is not one of yours, or it has already ended."),
    "no_device": N_("That device is not one of yours, or it has already been forgotten."),
    "no_factor": N_("That sign-in method is not one of yours, or it has already been removed."),
    "no_pending": N_("That set-up has expired or was already finished. Start again."),
    "enroll_code": N_("That code was not accepted. Try again, or start again."),
    "enroll_key": N_("Your security key's response was not accepted. Start again."),
    "unavailable_kind": N_("This site does not offer that sign-in method."),
    "passkey_refused": N_("That passkey was not accepted."),
    "stronger_step": N_(
        "Your password alone is not enough here: confirm it is you with one of the ways below."
    ),
}

#: The ``error`` code of a JSON answer whose message is not one of :data:`MESSAGES`, by status.
STATUS_CODES = {
    400: "invalid_input",
    401: "invalid_credential",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    429: "too_many_requests",
    503: "unavailable",
}
_CODES = {message: code for code, message in MESSAGES.items()}
#: Context a page needs and a JSON answer does not (the token is sent under its own name).
_PAGE_ONLY = frozenset({"csrf_token", "csrf_field_name", "logout_endpoint", "authflow_layout", "error_code"})

log = logging.getLogger(__name__)


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
    """Render ``authflow/<template>`` with the CSRF field and the defaults every page uses
    (extending ``AUTHFLOW_VIEWS_LAYOUT``); in JSON mode, the same context as JSON
    (:func:`page_json`)."""
    context.setdefault("error", None)
    context.setdefault("next", None)
    context.setdefault("notice", None)
    if wants_json():
        return page_json(template, status, context)
    for key in ("error", "notice"):  # English constants and typed errors' messages, translated
        if isinstance(context[key], str):
            context[key] = translate(context[key])
    body = render_template(
        f"authflow/{template}",
        **template_context(),
        csrf_token=csrf_token(),
        csrf_field_name=csrf_field_name(),
        logout_endpoint=logout_endpoint(),
        authflow_layout=get_state().config.web.views_layout,
        **context,
    )
    return Response(body, status=status, mimetype="text/html")


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it (dates in ISO 8601, dataclasses as objects); ``None``
    for what it cannot."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item) for item in value]
    return None


def page_json(template: str, status: int, context: Mapping[str, Any]) -> Response:
    """A page's answer in JSON mode: an error is ``{"error": code, "message": ...}`` (the
    code is the context's ``error_code`` (a typed error's own code the docs promise, such as
    ``email_not_verified``), else the key of :data:`MESSAGES`, else one per status); a page
    is ``{"page": name, "csrf_token": ..., ...its context}``. Never cached."""
    error = context.get("error")
    if status >= 400:
        message = error if isinstance(error, str) else N_("The request was refused.")
        code = context.get("error_code") or _CODES.get(message) or STATUS_CODES.get(status, "refused")
        if context.get("locked_until") is not None:
            code = "locked"
        extra = {k: _plain(v) for k, v in context.items() if k in ("locked_until", "kinds")}
        return json_error(code, message, status, **extra)
    body = {k: _plain(v) for k, v in context.items() if k not in _PAGE_ONLY}
    response = jsonify({"page": template.removesuffix(".html"), "csrf_token": csrf_token(), **body})
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response


def json_answer(body: Mapping[str, Any], status: int = 200) -> Response:
    """A JSON answer of the JSON mode, never cached."""
    response = jsonify(dict(body))
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response


def json_error(code: str, message: str, status: int, **extra: Any) -> Response:
    """``{"error": code, "message": ...}`` with ``status``, never cached (the WebAuthn scripts read it)."""
    response = jsonify({"error": code, "message": translate(str(message)), **extra})
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
        return N_("The service could not complete the request. Try again later.")
    return error.message


def readable_time(value: datetime | None) -> str:
    """``25 Nov 2026, 12:03 UTC``: a time as people read it (the ``authflow_datetime``
    filter; the account page's script shows it in the browser's own time zone)."""
    if value is None:
        return ""
    if translations_active():  # the request's time zone and locale
        return format_datetime(value)
    utc = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return f"{utc.day} {utc:%b %Y, %H:%M} UTC"


def lock_message(until: datetime) -> str:
    return gettext("Too many failed attempts. Try again after %(time)s.", time=format_datetime(until))


# --- navigation ----------------------------------------------------------------------------------


def next_arg(source: Mapping[str, str]) -> str | None:
    value = source.get("next")
    return safe_next(value) if isinstance(value, str) else None


def request_next() -> str | None:
    """``next`` from the query string (GET) or the form or JSON body (POST), if it is safe."""
    if request.method == "GET":
        return next_arg(request.args)
    value = form_text("next") or request.args.get("next")
    return safe_next(value) if value else None


def destination(configured: str | None, default: str) -> str:
    """The URL of a configured destination (a path, or an endpoint name resolved now), or
    ``default`` when none is configured or the endpoint does not exist (logged)."""
    if configured is None:
        return default
    if configured.startswith("/"):
        return configured  # checked at init_app: a same-site path, as ``next`` must be
    try:
        return url_for(configured)
    except BuildError:
        log.warning("the configured destination %r is not an endpoint of this app", configured)
        return default


def post_login_url() -> str:
    """``AUTHFLOW_POST_LOGIN_VIEW``, else the account page."""
    return destination(get_state().config.web.post_login_view, url_for(f"{VIEWS_BLUEPRINT}.account"))


def post_logout_url() -> str:
    """``AUTHFLOW_POST_LOGOUT_VIEW``, else the sign-in page (``/`` without the ready views)."""
    views = VIEWS_BLUEPRINT in current_app.blueprints
    return destination(
        get_state().config.web.post_logout_view, url_for(f"{VIEWS_BLUEPRINT}.login") if views else "/"
    )


def after_login(target: str | None) -> BaseResponse:
    """Where a completed sign-in goes: a safe ``next``, else ``AUTHFLOW_POST_LOGIN_VIEW``."""
    location = target or post_login_url()
    if wants_json():
        return json_answer({"status": "authenticated", "location": location})
    return redirect(location)


def to_login(target: str | None) -> BaseResponse:
    location = url_for(f"{VIEWS_BLUEPRINT}.login", next=target)
    if wants_json():
        return json_error("login_required", "Sign in first.", 401, location=location)
    return redirect(location)


def to_step_up(target: str) -> BaseResponse:
    """ "Confirm it is you" first, then back to ``target``."""
    location = url_for(f"{VIEWS_BLUEPRINT}.step_up", next=target)
    if wants_json():
        return json_error("step_up_required", "Confirm it is you first.", 401, location=location)
    return redirect(location)


# --- the session ---------------------------------------------------------------------------------


def stored_sid(session: AuthSession) -> str:
    """The id under which the store holds the current session (before any rotation in this
    request): what "keep this session" must keep."""
    # The session interface's own class knows the id it loaded (a session built otherwise:
    # its own id).
    loaded = session.loaded_sid if isinstance(session, RequestSession) else None
    return loaded if loaded is not None else session.sid


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


def _json_body() -> Mapping[str, Any]:
    try:
        body = json_body()
    except InvalidInput:  # answered 400 by the blueprint before any view reads it
        return {}
    return body if isinstance(body, Mapping) else {}


def form_text(name: str) -> str:
    """Field ``name`` of the form, or of the JSON body (a WebAuthn ``credential`` object as
    compact JSON; ``true``/``false`` as text), ``""`` when absent or of another type."""
    if request.is_json:
        value: Any = _json_body().get(name)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, Mapping) and name == "credential":  # the browser's PublicKeyCredential
            return json.dumps(value, separators=(",", ":"))
        return value if isinstance(value, str) else ""
    value = request.form.get(name)
    return value if isinstance(value, str) else ""


#: What a form's checkbox sends when ticked (the pages send ``1``).
_FORM_TRUE = frozenset({"1", "true", "on", "yes"})


def form_flag(name: str) -> bool:
    """A yes/no field: a ticked checkbox of a form (``1``), or a JSON boolean (absent or
    ``null``: no). A JSON value of another type (``"1"``, ``1``) is
    :class:`~flask_authflow.errors.InvalidInput`, so a script learns its mistake instead of
    silently getting "no"."""
    if not request.is_json:
        return request.form.get(name, "").strip().lower() in _FORM_TRUE
    value = _json_body().get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise InvalidInput(f"{name} must be true or false")


def form_has(name: str) -> bool:
    """The form (or JSON body) carries field ``name``, even empty."""
    return name in (_json_body() if request.is_json else request.form)
