"""The ``authflow_views`` blueprint: login (password, then each pending factor), logout,
step-up and the account page (change password, sessions with "log out" buttons).

Every page is a Jinja template under ``authflow/`` that the application overrides by
placing a file of the same name in its own templates folder (Flask looks in the app's
folder before the blueprint's). Forms are protected by ``flask_authflow.views.csrf``.
Nothing on a page names a raw session id: sessions are identified by their ``sid_hash``.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from ..audit.context import audit_context
from ..authn.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
    StepUpRequired,
)
from ..authn.service import AuthnRequest
from ..decorators import login_required, safe_next
from ..errors import AuthFlowError
from ..session.model import AuthSession, SessionRecord, describe_device, sid_hash
from ..state import account_admin, current_auth_session, get_state
from ..users import ANONYMOUS_USER, load_current_user
from .csrf import csrf_field_name, csrf_token, csrf_valid, rotate_csrf_token

__all__ = ["TEMPLATE_FOLDER", "VIEWS_BLUEPRINT", "build_blueprint", "register_views"]

#: Name of the blueprint (and prefix of its endpoints: ``authflow_views.login`` ...).
VIEWS_BLUEPRINT = "authflow_views"
#: Where the default templates live (``authflow/login.html`` ...).
TEMPLATE_FOLDER = str(Path(__file__).resolve().parent.parent / "templates")

#: Longest one-time code accepted from the factor form (longer is refused, 400).
MAX_CODE_LENGTH = 256

MESSAGES = {
    "invalid": "Wrong username or password.",
    "invalid_code": "That code was not accepted. Sign in again.",
    "retry_code": "That code was not accepted. Try again.",
    "csrf": "This form has expired or did not come from this site. Please try again.",
    "missing": "Enter your username and password.",
    "missing_code": "Enter the code.",
    "missing_password": "Enter your password.",
    "wrong_password": "Your password is not correct.",
    "wrong_current_password": "Your current password is not correct.",
    "password_fields": "Fill in your current password and the new password twice.",
    "password_mismatch": "The two new passwords do not match.",
    "no_password": "This account has no password to confirm.",
    "no_session": "That session is not one of yours, or it has already ended.",
}

#: The notices the account page shows after a redirect (``?notice=...``); only these keys
#: are accepted, so the query string cannot put text on the page.
NOTICES = {
    "password_changed": "Your password has been changed. Your other sessions have been logged out.",
    "session_revoked": "That session has been logged out.",
    "others_revoked": "All your other sessions have been logged out.",
    "stepped_up": "Thank you: your identity is confirmed.",
}

_FACTOR_LABELS = {
    FactorKind.TOTP: ("Authentication code", "The 6-digit code from your authenticator app.", "numeric"),
    FactorKind.HOTP: ("Authentication code", "The code from your security token.", "numeric"),
    FactorKind.EMAIL_OTP: ("Code from your e-mail", "We sent a code to your e-mail address.", "numeric"),
    FactorKind.RECOVERY_CODE: ("Recovery code", "One of the recovery codes you saved.", "text"),
}
_SESSION_HASH = re.compile(r"[0-9a-f]{64}")


# --- helpers -------------------------------------------------------------------------------------


def _handle() -> AuthnRequest:
    return get_state().service.with_audit_context(audit_context())


def _page(template: str, status: int = 200, **context: Any) -> Response:
    """Render ``authflow/<template>`` with the CSRF field and the defaults every page uses."""
    context.setdefault("error", None)
    context.setdefault("next", None)
    body = render_template(
        f"authflow/{template}",
        csrf_token=csrf_token(),
        csrf_field_name=csrf_field_name(),
        **context,
    )
    return Response(body, status=status, mimetype="text/html")


def _next_arg(source: Mapping[str, str]) -> str | None:
    value = source.get("next")
    return safe_next(value) if isinstance(value, str) else None


def _after_login(target: str | None) -> BaseResponse:
    return redirect(target or url_for(f"{VIEWS_BLUEPRINT}.account"))


def _to_login(target: str | None) -> BaseResponse:
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.login", next=target))


def _lock_message(until: datetime) -> str:
    return f"Too many failed attempts. Try again after {until.strftime('%Y-%m-%d %H:%M:%S')} UTC."


def _error_status(error: AuthFlowError) -> int:
    """The status of a refused form: the error's own 4xx/5xx, else 400 (never a 500)."""
    return error.status if 400 <= error.status < 600 and error.status != 500 else 400


def _stored_sid(session: AuthSession) -> str:
    """The id under which the store holds the current session (before any rotation in this
    request): what "keep this session" must keep."""
    loaded = getattr(session, "loaded_sid", None)
    return loaded if isinstance(loaded, str) else session.sid


def _signed_in() -> bool:
    """An Authenticated session whose user the app's ``user_loader`` (if any) still finds."""
    if not current_auth_session().is_authenticated:
        return False
    if get_state().hooks.user_loader is None:
        return True
    return load_current_user() is not ANONYMOUS_USER


def _identifier(session: AuthSession) -> str | None:
    user = get_state().backend.get_user(str(session.tenant), str(session.user_id))
    return user.identifier if user is not None else None


def _form_text(name: str) -> str:
    value = request.form.get(name)
    return value if isinstance(value, str) else ""


# --- the pages -----------------------------------------------------------------------------------


def _login_page(status: int = 200, **context: Any) -> Response:
    session = current_auth_session()
    context.setdefault("signed_in_as", _identifier(session) if session.is_authenticated else None)
    context.setdefault("username", "")
    return _page("login.html", status, **context)


def _account_page(status: int = 200, *, error: str | None = None, notice: str | None = None) -> Response:
    session = current_auth_session()
    state = get_state()
    tenant, user_id = str(session.tenant), str(session.user_id)
    current = _stored_sid(session)
    records = state.session_store.list_user_sessions(tenant, user_id)
    records.sort(key=lambda r: (r.sid != current, -r.last_seen_at.timestamp()))
    sessions = [_session_row(record, current) for record in records]
    return _page(
        "account.html",
        status,
        error=error,
        notice=notice,
        identifier=_identifier(session),
        tenant=tenant,
        authenticated_at=session.authenticated_at,
        sessions=sessions,
    )


def _session_row(record: SessionRecord, current_sid: str) -> dict[str, Any]:
    return {
        "hash": sid_hash(record.sid),
        "device": describe_device(record.device),
        "last_seen_at": record.last_seen_at,
        "created_at": record.created_at,
        "authenticated_at": record.authenticated_at,
        "auth_method": record.auth_method,
        "current": hmac.compare_digest(record.sid, current_sid),
    }


def _factor_context(kind_name: str) -> dict[str, Any]:
    try:
        labels = _FACTOR_LABELS.get(FactorKind(kind_name))
    except ValueError:
        labels = None
    label, hint, inputmode = labels or (
        "Verification code",
        "The code for the next step of your sign-in.",
        "text",
    )
    return {"factor": kind_name, "label": label, "hint": hint, "inputmode": inputmode}


# --- the views -----------------------------------------------------------------------------------


def login() -> ResponseReturnValue:
    target = _next_arg(request.args if request.method == "GET" else request.form)
    if request.method == "GET":
        return _login_page(next=target)
    username = _form_text("username")
    if not csrf_valid():
        return _login_page(400, next=target, username=username, error=MESSAGES["csrf"])
    password = _form_text("password")
    if not username.strip() or not password:
        return _login_page(400, next=target, username=username, error=MESSAGES["missing"])
    state = get_state()
    session = current_auth_session()
    handle = _handle()
    try:
        with FactorCredential.password(password) as credential:
            begun = handle.begin_login(username, state.config.default_tenant, session)
            if isinstance(begun, FactorRequired) and begun.kind is FactorKind.PASSWORD:
                outcome: Any = handle.verify_factor(credential, session)
            else:
                outcome = begun
    except AuthFlowError as error:
        return _login_page(_error_status(error), next=target, username=username, error=error.message)
    return _login_outcome(outcome, target, username)


def _login_outcome(outcome: Any, target: str | None, username: str = "") -> BaseResponse:
    """The response to a login step: the next page, or the login form with the error."""
    if isinstance(outcome, Authenticated):
        rotate_csrf_token()
        return _after_login(target)
    if isinstance(outcome, FactorRequired) and outcome.kind is not FactorKind.PASSWORD:
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.factor", next=target))
    if isinstance(outcome, Locked):
        return _login_page(
            403,
            next=target,
            username=username,
            error=_lock_message(outcome.until),
            locked_until=outcome.until,
        )
    return _login_page(401, next=target, username=username, error=MESSAGES["invalid"])


def factor() -> ResponseReturnValue:
    target = _next_arg(request.args if request.method == "GET" else request.form)
    session = current_auth_session()
    if _signed_in():
        return _after_login(target)
    pending = session.next_factor if session.is_authenticating else None
    if pending is None or pending == FactorKind.PASSWORD.value:
        return _to_login(target)
    if request.method == "GET":
        return _page("factor.html", next=target, **_factor_context(pending))
    if not csrf_valid():
        return _page("factor.html", 400, next=target, error=MESSAGES["csrf"], **_factor_context(pending))
    code = "".join(_form_text("code").split())
    if not code:
        return _page(
            "factor.html", 400, next=target, error=MESSAGES["missing_code"], **_factor_context(pending)
        )
    if len(code) > MAX_CODE_LENGTH:
        return _page(
            "factor.html",
            400,
            next=target,
            error=f"The code is too long (at most {MAX_CODE_LENGTH} characters).",
            **_factor_context(pending),
        )
    step = session.record.next_step
    chosen = _form_text("kind") or step[0]
    if chosen not in step or chosen not in FactorKind:
        return _page(
            "factor.html", 400, next=target, error=MESSAGES["invalid_code"], **_factor_context(pending)
        )
    try:
        with FactorCredential.code(FactorKind(chosen), code) as credential:
            outcome = _handle().verify_factor(credential, session)
    except AuthFlowError as error:
        return _page(
            "factor.html", _error_status(error), next=target, error=error.message, **_factor_context(pending)
        )
    if isinstance(outcome, InvalidCredential):
        if session.is_authenticating:  # a later step: the user may try again
            return _page(
                "factor.html", 401, next=target, error=MESSAGES["retry_code"], **_factor_context(pending)
            )
        return _login_page(401, next=target, error=MESSAGES["invalid_code"])
    return _login_outcome(outcome, target)


def logout() -> ResponseReturnValue:
    if not csrf_valid():
        if _signed_in():
            return _account_page(400, error=MESSAGES["csrf"])
        return _login_page(400, error=MESSAGES["csrf"])
    _handle().logout(current_auth_session())
    return _to_login(None)


def step_up() -> ResponseReturnValue:
    target = _next_arg(request.args if request.method == "GET" else request.form)
    session = current_auth_session()
    if not _signed_in():
        return _to_login(target)
    identifier = _identifier(session)
    if request.method == "GET":
        return _page("step_up.html", next=target, identifier=identifier)
    if not csrf_valid():
        return _page("step_up.html", 400, next=target, identifier=identifier, error=MESSAGES["csrf"])
    password = _form_text("password")
    if not password:
        return _page(
            "step_up.html", 400, next=target, identifier=identifier, error=MESSAGES["missing_password"]
        )
    result = _confirm_password(session, password)
    if isinstance(result, Authenticated):
        return redirect(target or url_for(f"{VIEWS_BLUEPRINT}.account", notice="stepped_up"))
    message, status = result
    return _page(
        "step_up.html",
        status,
        next=target,
        identifier=identifier,
        error=MESSAGES["wrong_password"] if message is None else message,
    )


def _confirm_password(session: AuthSession, password: str) -> Authenticated | tuple[str | None, int]:
    """Re-verify the signed-in user's password through the service (a step-up: lockout
    counted, audited, ``authenticated_at`` refreshed). ``Authenticated``, or the error to
    show and its status (``None``: the generic wrong-password text, 401)."""
    handle = _handle()
    try:
        with FactorCredential.password(password) as credential:
            begun = handle.begin_step_up(session)
            if not (isinstance(begun, StepUpRequired) and begun.factors[:1] == (FactorKind.PASSWORD,)):
                return MESSAGES["no_password"], 400
            outcome = handle.verify_factor(credential, session)
    except AuthFlowError as error:
        return error.message, _error_status(error)
    if isinstance(outcome, Authenticated):
        return outcome
    if isinstance(outcome, Locked):
        return _lock_message(outcome.until), 403
    return None, 401


@login_required
def account() -> ResponseReturnValue:
    notice = NOTICES.get(request.args.get("notice", ""))
    return _account_page(notice=notice)


def _account_post_refused() -> BaseResponse | None:
    """Why an account form may not run: not signed in (to the login page) or a bad token."""
    if not _signed_in():
        return _to_login(url_for(f"{VIEWS_BLUEPRINT}.account"))
    if not csrf_valid():
        return _account_page(400, error=MESSAGES["csrf"])
    return None


def change_password() -> ResponseReturnValue:
    refused = _account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    current, new, confirm = (
        _form_text("current_password"),
        _form_text("new_password"),
        _form_text("new_password_confirm"),
    )
    if not current or not new or not confirm:
        return _account_page(400, error=MESSAGES["password_fields"])
    if not hmac.compare_digest(new.encode("utf-8"), confirm.encode("utf-8")):
        return _account_page(400, error=MESSAGES["password_mismatch"])
    confirmed = _confirm_password(session, current)
    if not isinstance(confirmed, Authenticated):
        message, status = confirmed
        return _account_page(status, error=MESSAGES["wrong_current_password"] if message is None else message)
    tenant = str(session.tenant)
    identifier = _identifier(session) or ""
    try:
        account_admin().set_password(tenant, identifier, new, keep_sid=_stored_sid(session))
    except AuthFlowError as error:  # a password policy's WeakPassword, a too long password
        return _account_page(_error_status(error), error=error.message)
    session.rotate_id()
    rotate_csrf_token()
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="password_changed"))


def revoke_session(session_hash: str) -> ResponseReturnValue:
    refused = _account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    if not _SESSION_HASH.fullmatch(session_hash):
        return _account_page(404, error=MESSAGES["no_session"])
    if hmac.compare_digest(sid_hash(_stored_sid(session)), session_hash):
        _handle().logout(session)  # "log out this session": the audited logout
        return _to_login(None)
    tenant, user_id = str(session.tenant), str(session.user_id)
    if not account_admin().revoke_session(tenant, user_id, session_hash, reason="revoked_by_user"):
        return _account_page(404, error=MESSAGES["no_session"])
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="session_revoked"))


def revoke_other_sessions() -> ResponseReturnValue:
    refused = _account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    account_admin().revoke_sessions(
        str(session.tenant), str(session.user_id), keep_sid=_stored_sid(session), reason="revoked_by_user"
    )
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="others_revoked"))


def _frame_guard(response: Response) -> Response:
    """The pages hold password forms and "log out" buttons: never inside another site's frame."""
    response.headers.setdefault("X-Frame-Options", "DENY")
    if "Content-Security-Policy" not in response.headers:
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    return response


# --- wiring --------------------------------------------------------------------------------------


def build_blueprint() -> Blueprint:
    """A new ``authflow_views`` blueprint (templates from ``TEMPLATE_FOLDER``)."""
    bp = Blueprint(VIEWS_BLUEPRINT, __name__, template_folder=TEMPLATE_FOLDER)
    bp.add_url_rule("/login", "login", login, methods=["GET", "POST"])
    bp.add_url_rule("/login/factor", "factor", factor, methods=["GET", "POST"])
    bp.add_url_rule("/logout", "logout", logout, methods=["POST"])
    bp.add_url_rule("/step-up", "step_up", step_up, methods=["GET", "POST"])
    bp.add_url_rule("/account", "account", account, methods=["GET"])
    bp.add_url_rule("/account/password", "change_password", change_password, methods=["POST"])
    bp.add_url_rule(
        "/account/sessions/<session_hash>/revoke", "revoke_session", revoke_session, methods=["POST"]
    )
    bp.add_url_rule(
        "/account/sessions/revoke-others", "revoke_other_sessions", revoke_other_sessions, methods=["POST"]
    )
    bp.after_request(_frame_guard)
    return bp


def register_views(app: Flask, *, url_prefix: str | None = None) -> Blueprint:
    """Register the ready views on ``app`` (initialised with flask-authflow) and return the
    blueprint; ``url_prefix`` puts them under a path (``/auth/login`` ...). Registering
    twice returns the blueprint already registered."""
    get_state(app)  # refuse an app without flask-authflow now, not at the first request
    existing = app.blueprints.get(VIEWS_BLUEPRINT)
    if isinstance(existing, Blueprint):
        return existing
    bp = build_blueprint()
    app.register_blueprint(bp, url_prefix=url_prefix)
    return bp
