"""The ``authflow_views`` blueprint: sign in (password, then each pending factor, or a
passkey), logout, step-up (the user's strongest step, see :mod:`.stepup`), the account
page (change password, sessions with "log out" buttons) and the account's sign-in methods
(``/account/factors``).

Every page is a Jinja template under ``authflow/`` that the application overrides by
placing a file of the same name in its own templates folder (Flask looks in the app's
folder before the blueprint's). Forms are protected by ``flask_authflow._web.csrf``.
Nothing on a page names a raw session id: sessions are identified by their ``sid_hash``.
"""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import Blueprint, Flask, Response, redirect, request, url_for
from flask.typing import ResponseReturnValue

from flask_authflow._core.session import AuthSession, sid_hash
from flask_authflow._i18n import N_
from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind, Locked, StepUpRequired
from flask_authflow._responses import package_headers, wants_json
from flask_authflow._web import services
from flask_authflow._web.csrf import CSRF_HEADER, csrf_field_name, csrf_token, rotate_csrf_token
from flask_authflow._web.decorators import login_required
from flask_authflow._web.json_body import refuse_bad_json
from flask_authflow._web.state import account_admin, current_auth_session, get_state
from flask_authflow._web.views import account_mail, accounts, devices, login_code, security, signin, stepup
from flask_authflow._web.views.account_page import account_page, account_post_refused
from flask_authflow._web.views.api_tokens import create_api_token, revoke_api_token
from flask_authflow._web.views.common import (
    LOGOUT_BLUEPRINT,
    MESSAGES,
    TEMPLATE_FOLDER,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    form_text,
    handle,
    identifier_of,
    json_answer,
    lock_message,
    readable_time,
    stored_sid,
    to_login,
    to_step_up,
)
from flask_authflow._web.views.logout import logout
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, AuthnError, StepUpNeeded
from flask_authflow.login._recovery import Ended, PasswordReplaced

__all__ = ["TEMPLATE_FOLDER", "VIEWS_BLUEPRINT", "build_blueprint", "register_views"]

#: The notices the account page shows after a redirect (``?notice=...``); only these keys
#: are accepted, so the query string cannot put text on the page.
NOTICES = {
    "password_changed": N_("Your password has been changed. Your other sessions have been logged out."),
    "password_set": N_("Your password has been set: you can sign in with it too."),
    "session_revoked": N_("That session has been logged out."),
    "others_revoked": N_("All your other sessions have been logged out. Your API tokens have been revoked."),
    "api_token_revoked": N_("The API token has been revoked."),
    "device_forgotten": N_("That device has been forgotten. Its next sign-in counts as a new device."),
    "stepped_up": N_("Thank you: your identity is confirmed."),
    "identity_linked": N_("The provider is linked: you can now sign in with it."),
    "identity_unlinked": N_("The provider is unlinked: it no longer signs you in."),
}

_SESSION_HASH = re.compile(r"[0-9a-f]{64}")

# --- the views -----------------------------------------------------------------------------------


class CurrentPasswordRefused(AuthnError):
    """The current password, asked for with a new one, is not accepted: wrong (401
    ``wrong_current_password``), the account is locked (403 ``locked``, with
    ``locked_until``), or the account has no password to confirm (409 ``no_password``: it
    adds one at ``/account/password/set`` instead)."""

    def __init__(self, code: str, message: str, status: int, **details: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.details = details

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), **self.details}


def _confirm_password(session: AuthSession, password: str) -> None:
    """Re-verify the signed-in user's password through the service (a password step-up:
    lockout counted, audited, ``authenticated_at`` refreshed; not enough to change factors
    when the user has a second factor, see :mod:`.stepup`).

    :raises CurrentPasswordRefused: wrong, locked, or no password. :raises AuthFlowError:
        the service's own refusal (``throttled``, a store down)."""
    request_handle = handle()
    with FactorCredential.password(password) as credential:
        begun = request_handle.begin_step_up(session)
        if not (isinstance(begun, StepUpRequired) and begun.factors[:1] == (FactorKind.PASSWORD,)):
            raise CurrentPasswordRefused("no_password", MESSAGES["no_password"], 409)
        outcome = request_handle.verify_factor(credential, session)
    if isinstance(outcome, Locked):
        until = outcome.until
        raise CurrentPasswordRefused("locked", lock_message(until), 403, locked_until=until.isoformat())
    if not isinstance(outcome, Authenticated):
        raise CurrentPasswordRefused("wrong_current_password", MESSAGES["wrong_current_password"], 401)


def change_own_password(session: AuthSession, current: str, new: str) -> Ended:
    """Change the signed-in user's password (the account page's and the headless API's): a
    user with a second factor passes it again first, the current password is verified as a
    step-up, the policy checks the new one; in one commit with its audit rows the user's
    other sessions, API tokens and pending links end. The session gets a new id and CSRF
    token; the caller mails the notice (``account_mail.notify_recovery``) with its answer.

    :raises StepUpNeeded: the strongest step first. :raises CurrentPasswordRefused: see
        there. :raises AuthFlowError: the policy's ``WeakPassword``, ``PasswordTooLong``,
        ``throttled``, a store down. Of two parallel changes with the same current password
        one wins; the other is ``wrong_current_password`` (as it would be a moment later)."""
    handle().check_password_change(session)
    verified = get_state().backend.get_password_hash(str(session.tenant), str(session.user_id))
    _confirm_password(session, current)
    try:
        ended = account_admin().change_password(
            str(session.tenant),
            identifier_of(session) or "",
            new,
            keep_sid=stored_sid(session),
            context=audit_context(),
            session=session,
            replaces=verified,
        )
    except PasswordReplaced as exc:
        raise CurrentPasswordRefused(
            "wrong_current_password", MESSAGES["wrong_current_password"], 401
        ) from exc
    session.rotate_id()
    rotate_csrf_token()
    return ended


@login_required
def account() -> ResponseReturnValue:
    notice = NOTICES.get(request.args.get("notice", ""))
    return account_page(notice=notice)


def change_password() -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    current, new, confirm = (
        form_text("current_password"),
        form_text("new_password"),
        form_text("new_password_confirm"),
    )
    if not current or not new or not confirm:
        return account_page(400, error=MESSAGES["password_fields"])
    if not hmac.compare_digest(new.encode("utf-8"), confirm.encode("utf-8")):
        return account_page(400, error=MESSAGES["password_mismatch"])
    try:
        ended = change_own_password(session, current, new)
    except StepUpNeeded:  # a user with a second factor passes it again first
        return to_step_up(url_for(f"{VIEWS_BLUEPRINT}.account"))
    except AuthFlowError as error:  # wrong, locked, the policy's WeakPassword, too long, throttled
        status = 400 if error.code == "no_password" else error_status(error)  # the page's answer
        return account_page(status, error=error_message(error))
    answer = redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="password_changed"))
    return account_mail.notify_recovery(str(session.tenant), str(session.user_id), ended, answer, reset=False)


def end_user_session(session_hash: str) -> str | None:
    """End the signed-in user's session named by ``session_hash`` (the page's and the
    headless API's): ``"logged_out"`` for the current one (the audited logout),
    ``"revoked"`` for another, ``None`` when it is none of the user's live sessions."""
    session = current_auth_session()
    if not _SESSION_HASH.fullmatch(session_hash):
        return None
    if hmac.compare_digest(sid_hash(stored_sid(session)), session_hash):
        handle().logout(session)  # "log out this session": the audited logout
        return "logged_out"
    tenant, user_id = str(session.tenant), str(session.user_id)
    if not services.sessions().revoke(user_id, session_hash, tenant=tenant, reason="revoked_by_user"):
        return None
    return "revoked"


def set_password() -> ResponseReturnValue:
    """A password for an account that has none (a passkey-only or federated one): no old
    password to ask, so a fresh sign-in instead (a step-up with the user's strongest way)."""
    refused = account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    new, confirm = form_text("new_password"), form_text("new_password_confirm")
    if not new or not confirm:
        return account_page(400, error=MESSAGES["password_fields"])
    if not hmac.compare_digest(new.encode("utf-8"), confirm.encode("utf-8")):
        return account_page(400, error=MESSAGES["password_mismatch"])
    try:
        ended = accounts.add_password(session, new)
    except StepUpNeeded:
        return to_step_up(url_for(f"{VIEWS_BLUEPRINT}.account"))
    except AuthFlowError as error:  # it has one already, the policy's WeakPassword, too long
        return account_page(error_status(error), error=error_message(error))
    session.rotate_id()
    rotate_csrf_token()
    answer = redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="password_set"))
    return account_mail.notify_recovery(str(session.tenant), str(session.user_id), ended, answer, reset=False)


def revoke_session(session_hash: str) -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    ended = end_user_session(session_hash)
    if ended is None:
        return account_page(404, error=MESSAGES["no_session"])
    if ended == "logged_out":
        return to_login(None)
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="session_revoked"))


def revoke_other_sessions() -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    # Everywhere else includes the user's scripts (API tokens) and pending mailed links.
    services.sessions().revoke_all(
        str(session.user_id), tenant=str(session.tenant), keep_sid=stored_sid(session)
    )
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="others_revoked"))


def csrf() -> ResponseReturnValue:
    """JSON: the session's CSRF token for a single-page app (``X-CSRF-Token`` header or the
    ``csrf_token`` field of its requests); never cached."""
    return json_answer({"csrf_token": csrf_token(), "field": csrf_field_name(), "header": CSRF_HEADER})


def _json_redirect(response: Response) -> Response:
    """In JSON mode a redirect the views answered becomes ``{"status": "done", "location":
    ..., "notice": ...}`` (200): a script follows ``location`` itself."""
    location = response.headers.get("Location", "")
    notice = parse_qs(urlsplit(location).query).get("notice", [None])[0]
    answer = json_answer({"status": "done", "location": location, "notice": notice})
    for cookie in response.headers.getlist("Set-Cookie"):
        answer.headers.add("Set-Cookie", cookie)
    return answer


def forget_device(device_id: str) -> ResponseReturnValue:
    """ "Forget this device": its record and trust go; its next sign-in is a new device."""
    refused = account_post_refused()
    if refused is not None:
        return refused
    if not devices.forget_device_of_current_user(device_id):
        return account_page(404, error=MESSAGES["no_device"])
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="device_forgotten"))


def _frame_guard(response: Response) -> Response:
    """The pages hold password forms, CSRF tokens and "log out" buttons: never inside another
    site's frame, and no HTML of theirs in a cache (a guest's sign-in page included). Runs
    for every response of the views and of the logout route (whose refusal is a page too).
    In JSON mode, a redirect becomes JSON (:func:`_json_redirect`)."""
    if request.blueprint not in (VIEWS_BLUEPRINT, LOGOUT_BLUEPRINT):
        return response
    if response.status_code in (301, 302, 303, 307, 308) and wants_json():
        response = package_headers(_json_redirect(response))  # a new response: the headers again
    response.headers.setdefault("X-Frame-Options", "DENY")
    if "Content-Security-Policy" not in response.headers:
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    if response.mimetype == "text/html" and not response.cache_control.no_store:
        response.headers["Cache-Control"] = "no-store"
    return response


# --- wiring --------------------------------------------------------------------------------------


def build_blueprint(*, with_logout: bool = True) -> Blueprint:
    """A new ``authflow_views`` blueprint (templates from ``TEMPLATE_FOLDER``); ``with_logout``
    adds the logout view at ``/logout`` (for an app without the ``authflow_logout`` route)."""
    bp = Blueprint(VIEWS_BLUEPRINT, __name__, template_folder=TEMPLATE_FOLDER)
    rules: list[tuple[str, str, Any, list[str]]] = [
        ("/login", "login", signin.login, ["GET", "POST"]),
        ("/login/factor", "factor", signin.factor, ["GET", "POST"]),
        ("/login/factor/send", "factor_send", signin.factor_send, ["POST"]),
        ("/login/factor/webauthn-options", "factor_webauthn_options", signin.factor_webauthn_options,
         ["POST"]),
        ("/login/passkey/options", "passkey_options", signin.passkey_options, ["POST"]),
        ("/login/passkey", "passkey_login", signin.passkey_login, ["POST"]),
        ("/step-up", "step_up", stepup.step_up, ["GET", "POST"]),
        ("/account", "account", account, ["GET"]),
        ("/account/password", "change_password", change_password, ["POST"]),
        ("/account/password/set", "set_password", set_password, ["POST"]),
        ("/account/sessions/<session_hash>/revoke", "revoke_session", revoke_session, ["POST"]),
        ("/account/sessions/revoke-others", "revoke_other_sessions", revoke_other_sessions, ["POST"]),
        ("/account/api-tokens", "create_api_token", create_api_token, ["POST"]),
        ("/account/api-tokens/revoke", "revoke_api_token", revoke_api_token, ["POST"]),
        ("/account/devices/<device_id>/forget", "forget_device", forget_device, ["POST"]),
        ("/account/factors", "factors", security.factors, ["GET"]),
        ("/account/factors/totp", "enroll_totp", security.enroll_totp, ["GET", "POST"]),
        ("/account/factors/totp/confirm", "confirm_totp", security.confirm_totp, ["POST"]),
        ("/account/factors/recovery-codes", "generate_recovery_codes", security.generate_recovery_codes,
         ["GET", "POST"]),
        ("/account/factors/recovery-codes/confirm", "confirm_recovery_codes", security.confirm_recovery_codes,
         ["POST"]),
        ("/account/factors/email", "enroll_email", security.enroll_email, ["GET", "POST"]),
        ("/account/factors/email/confirm", "confirm_email", security.confirm_email, ["POST"]),
        ("/account/factors/webauthn/options", "webauthn_enroll_options", security.webauthn_enroll_options,
         ["POST"]),
        ("/account/factors/webauthn/confirm", "confirm_webauthn", security.confirm_webauthn, ["POST"]),
        ("/account/factors/<factor_id>/remove", "remove_factor", security.remove_factor, ["POST"]),
        ("/csrf", "csrf", csrf, ["GET"]),
    ]  # fmt: skip
    rules += accounts.RULES  # sign-up, password reset (each answers 404 unless enabled)
    rules += login_code.RULES  # sign-in by e-mailed code (404 unless AUTHFLOW_LOGIN_BY_CODE)
    if with_logout:  # the app has no logout route of its own (AUTHFLOW_LOGOUT_URL_PREFIX = None)
        rules.append(("/logout", "logout", logout, ["POST"]))
    for rule, endpoint, view, methods in rules:
        bp.add_url_rule(rule, endpoint, view, methods=methods)
    bp.before_request(refuse_bad_json)  # a too deep or too large JSON body: 400, never a 500
    bp.after_request(package_headers)  # nosniff, no-referrer (reset links carry tokens)
    bp.after_app_request(_frame_guard)  # the logout route's pages are another blueprint's
    bp.add_app_template_filter(readable_time, "authflow_datetime")
    bp.context_processor(accounts.account_links)
    bp.add_app_template_global(accounts.account_link_flags, "authflow_account_links")
    return bp


def register_views(app: Flask, *, url_prefix: str | None = None) -> Blueprint:
    """Register the ready views on ``app`` (initialised with flask-authflow) and return the
    blueprint; ``url_prefix`` puts them under a path (``/auth/login`` ...). Registering
    twice returns the blueprint already registered."""
    get_state(app)  # refuse an app without flask-authflow now, not at the first request
    existing = app.blueprints.get(VIEWS_BLUEPRINT)
    if isinstance(existing, Blueprint):
        return existing
    bp = build_blueprint(with_logout=LOGOUT_BLUEPRINT not in app.blueprints)
    app.register_blueprint(bp, url_prefix=url_prefix)
    return bp
