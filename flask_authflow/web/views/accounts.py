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
:func:`~flask_authflow.web.external_url.mailed_url` on the configured origin
(``AUTHFLOW_EXTERNAL_URL``), never on the request's ``Host``. A completed reset and a
password change mail the account's address a notice (``authflow/mail/password_changed_notice``)
that lists what ended with it (:func:`~flask_authflow.web.views.account_mail.notify_recovery`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flask import Flask, Response, current_app, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow import signals
from flask_authflow.audit.context import audit_context
from flask_authflow.core.ports import UserRecord
from flask_authflow.core.session import AuthSession, new_guest_record
from flask_authflow.errors import (
    AuthFlowError,
    InvalidInput,
    StepUpNeeded,
    Unauthenticated,
    UserNotFound,
)
from flask_authflow.i18n import translate
from flask_authflow.login import account_tokens, password_reset, sign_in_ways
from flask_authflow.login import email_change as email_change_flow
from flask_authflow.login import passkey_signup as passkey_signup_flow
from flask_authflow.login import signup as signup_flow
from flask_authflow.login import username_change as username_change_flow
from flask_authflow.login.account_settings import AccountSettings
from flask_authflow.login.password_policy import PasswordPolicy
from flask_authflow.login.password_reset import PasswordResetDone
from flask_authflow.login.recovery import Ended
from flask_authflow.outcomes import FactorCredential, FactorKind, FactorRequired
from flask_authflow.web.csrf import csrf_valid
from flask_authflow.web.external_url import mailed_url
from flask_authflow.web.json_body import json_body
from flask_authflow.web.mail_budgets import spend, strangers
from flask_authflow.web.outgoing_mail import compose_mail, send_mail
from flask_authflow.web.security_notices import notify, notify_now
from flask_authflow.web.state import account_admin, current_auth_session, get_state
from flask_authflow.web.views.account_mail import (
    MailAfter,
    mail_ready,
    not_offered,
    notify_recovery,
    sent_answer,
)
from flask_authflow.web.views.common import (
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    json_error,
    page,
    stored_sid,
)

__all__ = [
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


def _wants_json() -> bool:
    return request.is_json


def _body() -> Mapping[str, Any]:
    """The JSON object or the form; :class:`InvalidInput` for anything else or too large."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise InvalidInput("the request body is too large")
    if not _wants_json():
        return request.form
    body = json_body()
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


def _text(body: Mapping[str, Any], name: str, limit: int = 1024) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidInput(f"{name} must be a string of at most {limit} characters")
    return value


def _json_error(error: AuthFlowError, **extra: Any) -> Response:
    response = jsonify({"error": error.code, "message": translate(error_message(error)), **extra})
    response.status_code = error_status(error)
    response.headers["Cache-Control"] = "no-store"
    return response


def _policy() -> PasswordPolicy:
    state = get_state()
    return state.password_policy or PasswordPolicy.from_settings(state.config.passwords)


def _guarded(view: Callable[[], ResponseReturnValue], form: str, **context: Any) -> ResponseReturnValue:
    """Run ``view``; a typed error becomes JSON or the form page with the message (and
    ``Retry-After`` when it is a throttle's refusal)."""
    try:
        return view()
    except AuthFlowError as error:
        answer = (
            _json_error(error)
            if _wants_json()
            else page(form, error_status(error), error=error_message(error), **context)
        )
        if error.retry_after is not None:
            answer = current_app.make_response(answer)
            answer.headers["Retry-After"] = str(error.retry_after)
        return answer


def _signed_in_form(form: str, post: Callable[[], ResponseReturnValue]) -> ResponseReturnValue:
    """A signed-in user's form: ``GET`` shows it, ``POST`` runs ``post`` (:func:`_guarded`);
    a guest goes to the sign-in page (401 in JSON)."""
    if not current_auth_session().is_authenticated:
        if _wants_json():
            return _json_error(Unauthenticated())
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.login", next=request.path))
    if request.method == "GET":
        return page(form)
    return _guarded(post, form)


def throttle_client(scope: str) -> None:
    """Count one ``signup`` or ``reset`` request from the client's address and network;
    :class:`~flask_authflow.errors.Throttled` (429) when they had their share."""
    get_state().service.throttle.hit(scope, address=audit_context().client_ip)


# --- forgot password -----------------------------------------------------------------------------


def forgot_password() -> ResponseReturnValue:
    """``GET``: the form; ``POST`` (form or JSON ``{"username"}`` / ``{"email"}``): mail a link."""
    if not settings().password_reset:
        return not_offered()
    if request.method == "GET":
        return page("forgot.html")
    return _guarded(_request_reset, "forgot.html")


def _request_reset() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("forgot.html", 400, error=MESSAGES["csrf"])
    later = start_reset(body)
    return later.after(sent_answer("sent_if_known", "forgot.html"))


def start_reset(body: Mapping[str, Any]) -> MailAfter:
    """The "forgot password" of ``body``'s ``username`` or ``email`` (the page's and the
    headless API's): throttled per address, a token issued and its mail composed whether or
    not an account matches (delivered, for a real one, :meth:`MailAfter.after` the answer)."""
    throttle_client("reset")
    mail_ready()  # no way to send mail: the same error for every request, before anything is done
    username, email = _text(body, "username", 254), _text(body, "email", 254)
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
        return _guarded(lambda: _reset_form(token), "reset.html", token=None)
    return _guarded(_reset, "reset.html", token=None)


def _reset_form(token: str) -> ResponseReturnValue:
    store = account_tokens.token_store(get_state().service.account_tokens)
    account_tokens.peek_token(store, token, password_reset.KIND, get_state().service.clock.now())
    return page("reset.html", token=token)


def _new_password(body: Mapping[str, Any], *, confirm: bool) -> str:
    """``body``'s ``password`` (and, with ``confirm``, the same again in ``password_confirm``)."""
    password = _text(body, "password", 4096)
    again = _text(body, "password_confirm", 4096) if confirm else password
    if password is None or password != again:
        raise InvalidInput(MESSAGES["password_mismatch"] if password else MESSAGES["missing_password"])
    return password


def finish_reset(body: Mapping[str, Any], *, confirm: bool) -> PasswordResetDone | FactorRequired:
    """Set the new password of a mailed reset link (``body``'s ``token`` and ``password``;
    ``confirm``: and ``password_confirm``); :class:`FactorRequired` when the user passes a
    second factor first."""
    token = _text(body, "token", 64) or ""
    password = _new_password(body, confirm=confirm)
    return password_reset.reset_password(
        get_state().service, audit_context(), current_auth_session(), token, password, policy=_policy()
    )


def _reset() -> ResponseReturnValue:
    body = _body()
    token = _text(body, "token", 64) or ""
    if not _wants_json() and not csrf_valid():
        return page("reset.html", 400, error=MESSAGES["csrf"], token=token)
    outcome = finish_reset(body, confirm=not _wants_json())
    if isinstance(outcome, FactorRequired):
        return _second_factor_first(token, outcome)
    if _wants_json():
        answer = jsonify(
            {"status": "password_reset", **outcome.ended.to_dict(), "email_verified": outcome.email_verified}
        )
    else:
        answer = page("reset.html", 200, done=True, token=None)
    return notify_recovery(outcome.tenant, outcome.user_id, outcome.ended, answer, reset=True)


def _second_factor_first(token: str, outcome: FactorRequired) -> ResponseReturnValue:
    """The user has a second factor: pass it on the factor page, then come back here."""
    kinds = [kind.value for kind in outcome.kinds]
    if _wants_json():
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


# --- sign-up -------------------------------------------------------------------------------------


def _signup_mail(found: signup_flow.SignupRequest) -> tuple[str, str, str]:
    minutes = int(settings().verification_ttl.total_seconds() // 60)
    if found.mail == "notice":
        return compose_mail("signup_notice", identifier=found.identifier, forgot=_forgot_url())
    link = mailed_url(f"{VIEWS_BLUEPRINT}.signup_verify", token=found.issued.token)
    code = found.issued.display_code
    return compose_mail("signup_verify", link=link, code=code, identifier=found.identifier, minutes=minutes)


def _forgot_url() -> str | None:
    if not settings().password_reset:
        return None
    return mailed_url(f"{VIEWS_BLUEPRINT}.forgot_password")


def signup() -> ResponseReturnValue:
    """``GET``: the form; ``POST`` (form or JSON ``{"username", "email", "password"}``):
    create the account and mail the link (the same answer for an address that has one)."""
    if not settings().registration:
        return not_offered()
    if request.method == "GET":
        return page("signup.html")
    return _guarded(_signup, "signup.html")


def _signup() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("signup.html", 400, error=MESSAGES["csrf"])
    start_signup(body, confirm=not _wants_json())
    return sent_answer("verification_sent", "signup.html")


def start_signup(body: Mapping[str, Any], *, confirm: bool) -> None:
    """Create the account of ``body`` (``username``, ``email``, ``password``; ``confirm``:
    and ``password_confirm``) and mail its link before the sign-up commits (the same for an
    address that has an account: its owner gets a notice); throttled per address."""
    throttle_client("signup")
    mail_ready()
    password = _new_password(body, confirm=confirm)
    state = get_state()
    signup_flow.signup(
        state.service,
        account_admin(),
        audit_context(),
        current_auth_session(),
        state.config.default_tenant,
        _text(body, "username", 254),
        _text(body, "email", 254),
        password,
        policy=_policy(),
        ttl=settings().verification_ttl,
        deliver=_deliver_in_transaction,
    )


def passkey_signup_options() -> ResponseReturnValue:
    """JSON: creation options for a sign-up with a passkey (``AUTHFLOW_REGISTRATION_PASSKEY``;
    form or JSON ``{"username", "email"}``). Counted as a sign-up by the throttle."""
    if not settings().registration_passkey:
        return not_offered()
    try:
        body = _body()
        if not _wants_json() and not csrf_valid():
            return json_error("csrf", MESSAGES["csrf"], 400)
        options = begin_passkey_signup(_text(body, "username", 254), _text(body, "email", 254))
    except AuthFlowError as error:
        return _throttled(_json_error(error), error)
    answer = jsonify(options)
    answer.headers["Cache-Control"] = "no-store"
    return answer


def begin_passkey_signup(username: str | None, email: str | None) -> Mapping[str, Any]:
    """The creation options of a passkey sign-up (the page's and the API's): throttled as a
    sign-up, refused without a mail sender."""
    throttle_client("signup")
    mail_ready()
    state = get_state()
    return passkey_signup_flow.begin_passkey_signup(
        state.service, audit_context(), current_auth_session(), state.config.default_tenant, username, email
    )


def finish_passkey_signup(secret: str) -> None:
    """Create the account from the browser's attestation (``secret``, its JSON text) and mail
    the link, in one transaction (the page's and the API's)."""
    if not secret.strip():
        raise InvalidInput(MESSAGES["missing_credential"])
    if len(secret) > MAX_CREDENTIAL_LENGTH:
        raise InvalidInput(MESSAGES["credential_too_long"])
    state = get_state()
    with FactorCredential(FactorKind.WEBAUTHN, secret.strip()) as credential:
        passkey_signup_flow.finish_passkey_signup(
            state.service, account_admin(), audit_context(), current_auth_session(), credential,
            ttl=settings().verification_ttl, deliver=_deliver_in_transaction,
        )  # fmt: skip


def passkey_signup() -> ResponseReturnValue:
    """Finish a passkey sign-up with the browser's attestation (form or JSON ``credential``):
    the account, its passkey and the verification mail, in one transaction."""
    if not settings().registration_passkey:
        return not_offered()
    return _guarded(_passkey_signup, "signup.html")


def _passkey_signup() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("signup.html", 400, error=MESSAGES["csrf"])
    value = body.get("credential")
    secret = json.dumps(value) if isinstance(value, dict) else value
    if not isinstance(secret, str):
        raise InvalidInput(MESSAGES["missing_credential"])
    finish_passkey_signup(secret)
    return sent_answer("verification_sent", "signup.html")


def add_password(session: AuthSession, password: str) -> Ended:
    """Give the signed-in account that has no password this one (the account page's and the
    API's): no old password to ask, a sign-in within ``AUTHFLOW_FRESHNESS`` instead; the
    password policy applies, the user's other sessions end (as a change does), and the
    owner gets the notice.

    :raises StepUpNeeded: the sign-in is older. :raises PasswordAlreadySet: the account has
        one (it is changed with the current one). :raises WeakPassword: the policy refused it."""
    state = get_state()
    tenant, user_id = sign_in_ways.check_fresh(state.service, session, "setting a password")
    if state.backend.get_password_hash(tenant, user_id) is not None:
        raise sign_in_ways.PasswordAlreadySet()
    user = state.backend.get_user(tenant, user_id)
    if user is None:
        raise StepUpNeeded("setting a password needs an authenticated session")
    return account_admin().change_password(
        tenant,
        user.identifier,
        password,
        keep_sid=stored_sid(session),
        context=audit_context(),
        session=session,
    )


def _throttled(answer: Response, error: AuthFlowError) -> Response:
    if error.retry_after is not None:
        answer.headers["Retry-After"] = str(error.retry_after)
    return answer


def _deliver_in_transaction(found: signup_flow.SignupRequest) -> None:
    """Send a sign-up's mail (the link, or the notice to an address's owner) before the
    sign-up commits: if it fails, nothing is kept and the answer is 503. Both kinds go out
    the same way, so neither the time nor a failure tells one from the other; a recipient
    past the strangers' mail budget is skipped (logged), as after an answer."""
    if found.to is None:
        return
    if spend(strangers(), found.to, audit_context()):  # anyone can sign up with an address
        send_mail(found.to, *_signup_mail(found))


def signup_verify() -> ResponseReturnValue:
    """``GET ?token=...``: a button that confirms (a mail scanner's fetch changes nothing);
    ``POST`` (form or JSON ``{"token"}`` or ``{"username", "code"}``): confirm the address."""
    if not settings().registration:
        return not_offered()
    if request.method == "GET":
        return page("signup_verify.html", token=request.args.get("token", "")[:64])
    return _guarded(_verify, "signup_verify.html", token=None)


def _verify() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("signup_verify.html", 400, error=MESSAGES["csrf"], token=None)
    user = confirm_signup(body)
    if _wants_json():
        return jsonify({"status": "email_confirmed", "username": user.identifier})
    return page("signup_verify.html", 200, done=True, token=None)


def confirm_signup(body: Mapping[str, Any]) -> UserRecord:
    """Confirm a new account's address by ``body``'s ``token`` (the link) or its
    ``username`` and ``code`` (typed from the mail); the account it confirmed."""
    state = get_state()
    token, code = _text(body, "token", 64), _text(body, "code", 32)
    return signup_flow.verify_signup(
        state.service,
        audit_context(),
        current_auth_session(),
        token,
        tenant=state.config.default_tenant,
        identifier=_text(body, "username", 254) if token is None else None,
        code=code,
    )


def signup_resend() -> ResponseReturnValue:
    """``POST`` (form or JSON ``{"username"}`` / ``{"email"}``): mail a new link to an
    account that is not confirmed yet; the same answer for every input."""
    if not settings().registration:
        return not_offered()
    if request.method == "GET":
        return page("signup_resend.html")
    return _guarded(_resend, "signup_resend.html")


def _resend() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("signup_resend.html", 400, error=MESSAGES["csrf"])
    later = resend_signup(body)
    return later.after(sent_answer("sent_if_pending", "signup_resend.html"))


def resend_signup(body: Mapping[str, Any]) -> MailAfter:
    """A new link for the unconfirmed account of ``body``'s ``username`` or ``email``:
    throttled, and the same work (a mail composed) whatever matched."""
    throttle_client("signup")
    mail_ready()
    state = get_state()
    found = signup_flow.resend_verification(
        state.service,
        audit_context(),
        current_auth_session(),
        state.config.default_tenant,
        identifier=_text(body, "username", 254),
        email=_text(body, "email", 254),
        ttl=settings().verification_ttl,
    )
    mail = _signup_mail(found)  # composed for every request: the same work whatever matched
    return MailAfter(found.to, mail, strangers())


# --- change of e-mail ----------------------------------------------------------------------------


def change_email() -> ResponseReturnValue:
    """``GET``: the form (signed in); ``POST`` (form or JSON ``{"email"}``): mail a
    confirmation link to the new address. Needs a fresh login (else the step-up page, or
    401 ``step_up_needed`` in JSON)."""
    return _signed_in_form("email_change.html", _change_email)


def _change_email() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("email_change.html", 400, error=MESSAGES["csrf"])
    try:
        later = start_email_change(body)
    except StepUpNeeded:
        if _wants_json():
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
        _text(body, "email", 254),
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
    return _guarded(_confirm_email, "email_change_confirm.html", token=None)


def _confirm_email() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("email_change_confirm.html", 400, error=MESSAGES["csrf"], token=None)
    changed = finish_email_change(body)
    if _wants_json():
        answer = jsonify({"status": "email_changed"})
    else:
        answer = page("email_change_confirm.html", 200, done=True, token=None)
    return email_changed_notice(changed, answer)


def finish_email_change(body: Mapping[str, Any]) -> email_change_flow.EmailChanged:
    """The new address of ``body``'s ``token`` replaces the old one."""
    return email_change_flow.confirm_email_change(
        get_state().service, audit_context(), current_auth_session(), _text(body, "token", 64)
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
    return _signed_in_form("username_change.html", _change_username)


def _change_username() -> ResponseReturnValue:
    body = _body()
    if not _wants_json() and not csrf_valid():
        return page("username_change.html", 400, error=MESSAGES["csrf"])
    throttle_client("signup")
    try:
        changed = username_change_flow.change_username(
            get_state().service, audit_context(), current_auth_session(), _text(body, "username", 1024)
        )
    except StepUpNeeded:
        if _wants_json():
            raise
        return redirect(url_for(f"{VIEWS_BLUEPRINT}.step_up", next=request.path))
    user = changed.user
    if _wants_json():
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
