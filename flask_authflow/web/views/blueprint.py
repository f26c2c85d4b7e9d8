"""The ``authflow_views`` blueprint: sign in (password, then each pending factor, or a
passkey), logout, step-up (the user's strongest step, see :mod:`.stepup`), the account
page (change password, sessions with "log out" buttons) and the account's sign-in methods
(``/account/factors``).

Every page is a Jinja template under ``authflow/`` that the application overrides by
placing a file of the same name in its own templates folder (Flask looks in the app's
folder before the blueprint's). Forms are protected by ``flask_authflow.web.csrf``.
Nothing on a page names a raw session id: sessions are identified by their ``sid_hash``.
"""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import Blueprint, Flask, Response, redirect, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow.audit.context import audit_context
from flask_authflow.core.session import AuthSession, SessionRecord, sid_hash
from flask_authflow.devices.labels import device_label
from flask_authflow.errors import AuthFlowError, AuthnError, StepUpNeeded
from flask_authflow.i18n import N_, translate
from flask_authflow.login.recovery import Ended
from flask_authflow.outcomes import Authenticated, FactorCredential, FactorKind, Locked, StepUpRequired
from flask_authflow.responses import package_headers, wants_json
from flask_authflow.web.csrf import CSRF_HEADER, csrf_field_name, csrf_token, csrf_valid, rotate_csrf_token
from flask_authflow.web.decorators import login_required
from flask_authflow.web.json_body import refuse_bad_json
from flask_authflow.web.state import account_admin, current_auth_session, get_state
from flask_authflow.web.views import account_mail, accounts, devices, login_code, security, signin, stepup
from flask_authflow.web.views.api_tokens import api_token_rows, create_api_token, revoke_api_token
from flask_authflow.web.views.common import (
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
    page,
    readable_time,
    signed_in,
    stored_sid,
    to_login,
    to_step_up,
)
from flask_authflow.web.views.logout import logout

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

#: How the account page names the first step a session signed in with (a provider: its name).
_METHOD_NAMES = {
    "password": N_("password"),
    "webauthn": N_("security key or passkey"),
    "totp": N_("authenticator app"),
    "hotp": N_("hardware token"),
    "email_otp": N_("e-mail code"),
    "recovery_code": N_("recovery code"),
}


# --- the pages -----------------------------------------------------------------------------------


def _account_page(
    status: int = 200, *, error: str | None = None, notice: str | None = None, **extra: Any
) -> Response:
    session = current_auth_session()
    state = get_state()
    tenant, user_id = str(session.tenant), str(session.user_id)
    current = stored_sid(session)
    records = state.session_store.list_user_sessions(tenant, user_id)
    records.sort(key=lambda r: (r.sid != current, -r.last_seen_at.timestamp()))
    sessions = [_session_row(record, current) for record in records]
    return page(
        "account.html",
        status,
        error=error,
        notice=notice,
        identifier=identifier_of(session),
        tenant=tenant,
        authenticated_at=session.authenticated_at,
        sessions=sessions,
        enrolled_factors=_enrolled_factors(session),
        has_password=state.backend.get_password_hash(tenant, user_id) is not None,
        **_provider_rows(tenant, user_id),
        **api_token_rows(tenant, user_id),
        **extra,
        **devices.device_rows(tenant, user_id),
    )


def _enrolled_factors(session: AuthSession) -> list[str]:
    """What the account page lists as the user's sign-in methods besides the password
    ("Authenticator app", "Security key" ...), each kind once, in enrollment order; empty
    when the password alone signs the user in (the page then suggests adding one)."""
    try:
        configs = handle().user_factors(session)
    except AuthFlowError:  # a store failed: the page still shows, without the list
        return []
    names: list[str] = []
    for config in configs:
        if config.kind is FactorKind.PASSWORD or not config.factor_id:
            continue
        name = translate(
            security.KIND_NAMES.get(config.kind.value, config.kind.value.replace("_", " ").capitalize())
        )
        if name not in names:
            names.append(name)
    return names


def _provider_rows(tenant: str, user_id: str) -> dict[str, list[str]]:
    """The configured providers the user has linked (``linked_providers``) and not
    (``linkable_providers``), by name, for the account page's unlink and link buttons."""
    federation = get_state().federation
    if federation is None:
        return {"linked_providers": [], "linkable_providers": []}
    linked = federation.linked_providers(tenant, user_id)
    names = federation.registry.names()
    return {
        "linked_providers": [name for name in names if name in linked],
        "linkable_providers": [name for name in names if name not in linked],
    }


def _method_name(method: str | None) -> str | None:
    if method is None or method in _METHOD_NAMES:
        return translate(_METHOD_NAMES[method]) if method else method
    return method.partition(":")[2] or method  # "oidc:acme": acme


def _session_row(record: SessionRecord, current_sid: str) -> dict[str, Any]:
    return {
        "hash": sid_hash(record.sid),
        "device": devices.shown_label(device_label(record.device)),  # as the devices list
        "last_seen_at": record.last_seen_at,
        "created_at": record.created_at,
        "authenticated_at": record.authenticated_at,
        "auth_method": _method_name(record.auth_method),
        "current": hmac.compare_digest(record.sid, current_sid),
    }


#: The account page for the account actions of other modules (the API tokens).
account_page = _account_page
#: A session as the account page lists it (for the headless API's list).
session_row = _session_row


# --- the views -----------------------------------------------------------------------------------


def logout_refused_page() -> Response:
    """A logout form without a valid CSRF token: the page it came from, with the error (400)."""
    if signed_in():
        return _account_page(400, error=MESSAGES["csrf"])
    return signin.login_page(400, error=MESSAGES["csrf"])


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
        ``throttled``, a store down."""
    handle().check_password_change(session)
    _confirm_password(session, current)
    ended = account_admin().change_password(
        str(session.tenant),
        identifier_of(session) or "",
        new,
        keep_sid=stored_sid(session),
        context=audit_context(),
        session=session,
    )
    session.rotate_id()
    rotate_csrf_token()
    return ended


@login_required
def account() -> ResponseReturnValue:
    notice = NOTICES.get(request.args.get("notice", ""))
    return _account_page(notice=notice)


def account_post_refused() -> BaseResponse | None:
    """Why an account form may not run: not signed in (to the login page) or a bad token."""
    if not signed_in():
        return to_login(url_for(f"{VIEWS_BLUEPRINT}.account"))
    if not csrf_valid():
        return _account_page(400, error=MESSAGES["csrf"])
    return None


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
        return _account_page(400, error=MESSAGES["password_fields"])
    if not hmac.compare_digest(new.encode("utf-8"), confirm.encode("utf-8")):
        return _account_page(400, error=MESSAGES["password_mismatch"])
    try:
        ended = change_own_password(session, current, new)
    except StepUpNeeded:  # a user with a second factor passes it again first
        return to_step_up(url_for(f"{VIEWS_BLUEPRINT}.account"))
    except AuthFlowError as error:  # wrong, locked, the policy's WeakPassword, too long, throttled
        status = 400 if error.code == "no_password" else error_status(error)  # the page's answer
        return _account_page(status, error=error_message(error))
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
    if not account_admin().revoke_session(tenant, user_id, session_hash, reason="revoked_by_user"):
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
        return _account_page(400, error=MESSAGES["password_fields"])
    if not hmac.compare_digest(new.encode("utf-8"), confirm.encode("utf-8")):
        return _account_page(400, error=MESSAGES["password_mismatch"])
    try:
        ended = accounts.add_password(session, new)
    except StepUpNeeded:
        return to_step_up(url_for(f"{VIEWS_BLUEPRINT}.account"))
    except AuthFlowError as error:  # it has one already, the policy's WeakPassword, too long
        return _account_page(error_status(error), error=error_message(error))
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
        return _account_page(404, error=MESSAGES["no_session"])
    if ended == "logged_out":
        return to_login(None)
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="session_revoked"))


def revoke_other_sessions() -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    # Everywhere else includes the user's scripts (API tokens) and pending mailed links.
    account_admin().logout_everywhere(
        str(session.tenant),
        str(session.user_id),
        keep_sid=stored_sid(session),
        context=audit_context(),
        session=session,
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
        return _account_page(404, error=MESSAGES["no_device"])
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
