"""The account pages and their JSON twins: "forgot password" and the reset link.

``/password/forgot`` (``AUTHFLOW_PASSWORD_RESET``) takes a username or an e-mail address
and answers the same whether an account matches; the mail (text and HTML, from the
overridable templates ``authflow/mail/<name>.txt`` and ``.html``) is composed in both
cases and delivered, for a real account only, after the answer went out.
``/password/reset`` shows the form of a mailed link and sets the new password; a user
with a second factor passes it on the sign-in factor page first and comes back. A form
post is an HTML page; a JSON body (``Content-Type: application/json``) gets JSON: 202/200,
400 for a malformed body, 401/410 for a bad or used token, never a 500.

Every mail goes out through :func:`send_mail` (the one place: a rate limit of mail per
address or client belongs there). Every link in a mail is built by
:func:`~flask_authflow._web.external_url.mailed_url` on the configured origin
(``AUTHFLOW_EXTERNAL_URL``), never on the request's ``Host``. A completed reset and a
password change mail the account's address a notice (``authflow/mail/password_changed_notice``)
that lists what ended with it (:func:`~flask_authflow._web.views.account_mail.notify_recovery`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from flask import current_app, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow import signals
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import FactorRequired
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.external_url import mailed_url
from flask_authflow._web.mail_budgets import strangers
from flask_authflow._web.outgoing_mail import compose_mail, send_mail
from flask_authflow._web.security_notices import notify, notify_now
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views._account_forms import (
    account_link_flags,
    account_links,
    app_password_policy,
    guarded,
    new_password,
    read_body,
    settings,
    signed_in_form,
    text_field,
    throttle_client,
    wants_json,
)
from flask_authflow._web.views.account_mail import (
    MailAfter,
    mail_ready,
    not_offered,
    notify_recovery,
    sent_answer,
)
from flask_authflow._web.views.account_signup import (
    add_password,
    begin_passkey_signup,
    confirm_signup,
    finish_passkey_signup,
    passkey_signup,
    passkey_signup_options,
    resend_signup,
    signup,
    signup_resend,
    signup_verify,
    start_signup,
)
from flask_authflow._web.views.common import (
    MESSAGES,
    VIEWS_BLUEPRINT,
    page,
)
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import (
    StepUpNeeded,
    UserNotFound,
)
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _email_change as email_change_flow
from flask_authflow.login import _password_reset as password_reset
from flask_authflow.login import _signup as signup_flow
from flask_authflow.login import _username_change as username_change_flow
from flask_authflow.login._password_reset import PasswordResetDone

__all__ = [
    "account_link_flags",
    "account_links",
    "add_password",
    "begin_passkey_signup",
    "change_email",
    "change_username",
    "compose_mail",
    "confirm_address",
    "confirm_email",
    "confirm_signup",
    "email_changed_notice",
    "finish_email_change",
    "finish_passkey_signup",
    "finish_reset",
    "forgot_password",
    "mail_reset_link",
    "passkey_signup",
    "passkey_signup_options",
    "rename_user",
    "resend_signup",
    "reset_password",
    "send_mail",
    "settings",
    "signup",
    "signup_resend",
    "signup_verify",
    "start_email_change",
    "start_reset",
    "start_signup",
    "throttle_client",
]

log = logging.getLogger("flask_authflow.mail")

R = TypeVar("R", bound=BaseResponse)

#: The largest body an account form or JSON request may have.
MAX_BODY = 16 * 1024


# --- forgot password -----------------------------------------------------------------------------


def forgot_password() -> ResponseReturnValue:
    """``GET``: the form; ``POST`` (form or JSON ``{"username"}`` / ``{"email"}``): mail a link."""
    if not settings().password_reset:
        return not_offered()
    if request.method == "GET":
        return page("forgot.html")
    return guarded(_request_reset, "forgot.html")


def _request_reset() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("forgot.html", 400, error=MESSAGES["csrf"])
    later = start_reset(body)
    return later.after(sent_answer("sent_if_known", "forgot.html"))


def start_reset(body: Mapping[str, Any]) -> MailAfter:
    """The "forgot password" of ``body``'s ``username`` or ``email`` (the page's and the
    headless API's): throttled per address, a token issued and its mail composed whether or
    not an account matches (delivered, for a real one, :meth:`MailAfter.after` the answer)."""
    throttle_client("reset")
    mail_ready()  # no way to send mail: the same error for every request, before anything is done
    username, email = text_field(body, "username", 254), text_field(body, "email", 254)
    tenant = get_state().config.default_tenant
    handle = get_state().service
    session = current_auth_session()
    found = password_reset.request_reset(
        handle, audit_context(), session, tenant, identifier=username, email=email, ttl=settings().reset_ttl
    )
    issued = found.issued
    mail = compose_mail(
        "password_reset",
        link=mailed_url(f"{VIEWS_BLUEPRINT}.reset_password", token=issued.token),
        code=issued.display_code,
        identifier=found.identifier or "",
        minutes=int(settings().reset_ttl.total_seconds() // 60),
    )
    return MailAfter(found.to, mail, strangers(tenant, found.identifier))


# --- the reset link ------------------------------------------------------------------------------


def reset_password() -> ResponseReturnValue:
    """``GET ?token=...``: the new-password form of a mailed link; ``POST`` (form or JSON
    ``{"token", "password"}``): set it."""
    if not settings().password_reset:
        return not_offered()
    if request.method == "GET":
        token = request.args.get("token", "")
        return guarded(lambda: _reset_form(token), "reset.html", token=None)
    return guarded(_reset, "reset.html", token=None)


def _reset_form(token: str) -> ResponseReturnValue:
    store = account_tokens.token_store(get_state().service.account_tokens)
    account_tokens.peek_token(store, token, password_reset.KIND, get_state().service.clock.now())
    return page("reset.html", token=token)


def finish_reset(body: Mapping[str, Any], *, confirm: bool) -> PasswordResetDone | FactorRequired:
    """Set the new password of a mailed reset link (``body``'s ``token`` and ``password``;
    ``confirm``: and ``password_confirm``); :class:`FactorRequired` when the user passes a
    second factor first."""
    token = text_field(body, "token", 64) or ""
    password = new_password(body, confirm=confirm)
    return password_reset.reset_password(
        get_state().service,
        audit_context(),
        current_auth_session(),
        token,
        password,
        policy=app_password_policy(),
    )


def _reset() -> ResponseReturnValue:
    body = read_body()
    token = text_field(body, "token", 64) or ""
    if not wants_json() and not csrf_valid():
        return page("reset.html", 400, error=MESSAGES["csrf"], token=token)
    outcome = finish_reset(body, confirm=not wants_json())
    if isinstance(outcome, FactorRequired):
        return _second_factor_first(token, outcome)
    if wants_json():
        answer = jsonify(
            {"status": "password_reset", **outcome.ended.to_dict(), "email_verified": outcome.email_verified}
        )
    else:
        answer = page("reset.html", 200, done=True, token=None)
    return notify_recovery(outcome.tenant, outcome.user_id, outcome.ended, answer, reset=True)


def _second_factor_first(token: str, outcome: FactorRequired) -> ResponseReturnValue:
    """The user has a second factor: pass it on the factor page, then come back here."""
    kinds = [kind.value for kind in outcome.kinds]
    if wants_json():
        response = jsonify(
            {
                "error": "second_factor_required",
                "message": "Pass your second factor (POST /login/factor), then send this request again.",
                "kinds": kinds,
            }
        )
        response.status_code = 401
        return response
    back = url_for(f"{VIEWS_BLUEPRINT}.reset_password", token=token)
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.factor", next=back))


# --- change of e-mail ----------------------------------------------------------------------------


def change_email() -> ResponseReturnValue:
    """``GET``: the form (signed in); ``POST`` (form or JSON ``{"email"}``): mail a
    confirmation link to the new address. Needs a fresh login (else the step-up page, or
    401 ``step_up_needed`` in JSON)."""
    return signed_in_form("email_change.html", _change_email)


def _change_email() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("email_change.html", 400, error=MESSAGES["csrf"])
    try:
        later = start_email_change(body)
    except StepUpNeeded:
        if wants_json():
            raise
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.step_up", next=request.path))
    return later.after(sent_answer("verification_sent", "email_change.html"))


def start_email_change(body: Mapping[str, Any]) -> MailAfter:
    """Mail a confirmation link to the signed-in user's new address (``body``'s ``email``).

    :raises StepUpNeeded: the login is not fresh enough."""
    mail_ready()
    found = email_change_flow.request_email_change(
        get_state().service,
        audit_context(),
        current_auth_session(),
        text_field(body, "email", 254),
        ttl=settings().verification_ttl,
    )
    link = mailed_url(f"{VIEWS_BLUEPRINT}.confirm_email_change", token=found.issued.token)
    minutes = int(settings().verification_ttl.total_seconds() // 60)
    mail = compose_mail(
        "email_change_verify", link=link, identifier=found.identifier, minutes=minutes, code=None
    )
    return MailAfter(found.to, mail)


def confirm_email() -> ResponseReturnValue:
    """``GET ?token=...``: a button; ``POST`` (form or JSON ``{"token"}``): the new
    address replaces the old one, which gets a notice."""
    if request.method == "GET":
        return page("email_change_confirm.html", token=request.args.get("token", "")[:64])
    return guarded(_confirm_email, "email_change_confirm.html", token=None)


def _confirm_email() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("email_change_confirm.html", 400, error=MESSAGES["csrf"], token=None)
    changed = finish_email_change(body)
    if wants_json():
        answer = jsonify({"status": "email_changed"})
    else:
        answer = page("email_change_confirm.html", 200, done=True, token=None)
    return email_changed_notice(changed, answer)


def finish_email_change(body: Mapping[str, Any]) -> email_change_flow.EmailChanged:
    """The new address of ``body``'s ``token`` replaces the old one."""
    return email_change_flow.confirm_email_change(
        get_state().service, audit_context(), current_auth_session(), text_field(body, "token", 64)
    )


def email_changed_notice(changed: email_change_flow.EmailChanged, answer: R) -> R:
    """``answer``, with the notice of ``changed`` to the old address once it went out."""
    new = email_change_flow.mask(changed.user.email or "")
    return notify(
        "email_changed", changed.user.tenant, changed.user.user_id, answer, previous=changed.previous, new=new
    )


# --- change of username --------------------------------------------------------------------------


def change_username() -> ResponseReturnValue:
    """``GET``: the form (signed in); ``POST`` (form or JSON ``{"username"}``): the new
    username, at once. Needs a fresh login (else the step-up page, or 401
    ``step_up_required`` in JSON); counted by the ``signup`` throttle (a refusal tells
    whether a name is taken, as sign-up does)."""
    return signed_in_form("username_change.html", _change_username)


def _change_username() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("username_change.html", 400, error=MESSAGES["csrf"])
    throttle_client("signup")
    try:
        changed = username_change_flow.change_username(
            get_state().service, audit_context(), current_auth_session(), text_field(body, "username", 1024)
        )
    except StepUpNeeded:
        if wants_json():
            raise
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.step_up", next=request.path))
    user = changed.user
    if wants_json():
        answer = jsonify({"status": "username_changed", "username": user.identifier})
    else:
        answer = page("username_change.html", 200, done=True)
    return notify(
        username_change_flow.EVENT, user.tenant, user.user_id, answer, previous_identifier=changed.previous
    )


# --- operators (the command line) ----------------------------------------------------------------


def _operator_session() -> AuthSession:
    return AuthSession(new_guest_record(get_state().service.clock.now()), new=True)


def mail_reset_link(tenant: str, identifier: str) -> str | None:
    """Mail ``identifier`` a reset link now (``flask authflow users send-reset``); the
    address it went to, ``None`` when the account has none or is disabled. Needs an
    application context; the link starts with ``AUTHFLOW_EXTERNAL_URL`` (or ``SERVER_NAME``;
    in development without either, ``http://localhost``).

    :raises MailDeliveryError: no sender or no origin for the link, or the mail could not be
        sent (the token stays usable)."""
    mail_ready()
    state = get_state()
    found = password_reset.request_reset(
        state.service,
        audit_context(),
        _operator_session(),
        tenant,
        identifier=identifier,
        ttl=settings().reset_ttl,
    )
    if found.to is None:
        return None
    link = mailed_url(f"{VIEWS_BLUEPRINT}.reset_password", token=found.issued.token)
    with current_app.test_request_context():
        mail = compose_mail(
            "password_reset",
            link=link,
            code=found.issued.display_code,
            identifier=found.identifier or "",
            minutes=int(settings().reset_ttl.total_seconds() // 60),
        )
    send_mail(found.to, *mail)
    return found.to


def rename_user(tenant: str, identifier: str, new: str) -> str:
    """Rename an account (``flask authflow users rename``): the new identifier; the account's
    address gets the notice now.

    :raises UserNotFound: no such account. :raises InvalidInput, UserExists: the new name
        is refused."""
    state = get_state()
    changed = username_change_flow.rename_user(
        state.service, audit_context(), _operator_session(), tenant, identifier, new
    )
    user = changed.user
    notify_now(username_change_flow.EVENT, user.tenant, user.user_id, previous_identifier=changed.previous)
    return user.identifier


def confirm_address(tenant: str, identifier: str) -> bool:
    """Mark the account's address confirmed (``flask authflow users confirm``): it may sign
    in; its verification links stop working. ``False`` when it has no address.

    :raises UserNotFound: no such account."""
    state = get_state()
    store = state.service.store
    user = store.find_user(tenant, identifier)
    if user is None:
        raise UserNotFound()
    if user.email is None:
        return False
    now = state.service.clock.now()
    store.set_email(tenant, user.user_id, user.email, verified_at=user.email_verified_at or now)
    account_tokens.token_store(state.service.account_tokens).void_account_tokens(
        tenant, user.user_id, signup_flow.KIND, now
    )
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    signals.email_confirmed.send(app, user_id=user.user_id, tenant=tenant)
    return True


# --- wiring ---------------------------------------------------------------------------------------

#: The rules of the account views: (rule, endpoint, view, methods).
RULES: list[tuple[str, str, Any, list[str]]] = [
    ("/password/forgot", "forgot_password", forgot_password, ["GET", "POST"]),
    ("/password/reset", "reset_password", reset_password, ["GET", "POST"]),
    ("/signup", "signup", signup, ["GET", "POST"]),
    ("/signup/passkey/options", "passkey_signup_options", passkey_signup_options, ["POST"]),
    ("/signup/passkey", "passkey_signup", passkey_signup, ["POST"]),
    ("/signup/verify", "signup_verify", signup_verify, ["GET", "POST"]),
    ("/signup/resend", "signup_resend", signup_resend, ["GET", "POST"]),
    ("/account/email", "change_email", change_email, ["GET", "POST"]),
    ("/account/email/confirm", "confirm_email_change", confirm_email, ["GET", "POST"]),
    ("/account/username", "change_username", change_username, ["GET", "POST"]),
]
