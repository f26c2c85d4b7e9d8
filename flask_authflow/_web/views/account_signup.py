"""The sign-up pages and their JSON twins (``AUTHFLOW_REGISTRATION``): create an account,
confirm its address with the mailed code or link, send the code again; with
``AUTHFLOW_REGISTRATION_PASSKEY`` an account whose first credential is a passkey, and a
password added to it later. Each answers 404 unless its feature is on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flask import Response, jsonify, request
from flask.typing import ResponseReturnValue

from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.external_url import mailed_url
from flask_authflow._web.mail_budgets import spend, strangers
from flask_authflow._web.outgoing_mail import compose_mail, send_mail
from flask_authflow._web.state import account_admin, current_auth_session, get_state
from flask_authflow._web.views._account_forms import (
    app_password_policy,
    form_error_json,
    guarded,
    new_password,
    read_body,
    settings,
    text_field,
    throttle_client,
    wants_json,
)
from flask_authflow._web.views.account_mail import (
    MailAfter,
    mail_ready,
    not_offered,
    sent_answer,
)
from flask_authflow._web.views.common import (
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    VIEWS_BLUEPRINT,
    json_error,
    page,
    stored_sid,
)
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import (
    AuthFlowError,
    InvalidInput,
    StepUpNeeded,
)
from flask_authflow.login import _passkey_signup as passkey_signup_flow
from flask_authflow.login import _sign_in_ways as sign_in_ways
from flask_authflow.login import _signup as signup_flow
from flask_authflow.login._recovery import Ended

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
    return guarded(_signup, "signup.html")


def _signup() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("signup.html", 400, error=MESSAGES["csrf"])
    start_signup(body, confirm=not wants_json())
    return sent_answer("verification_sent", "signup.html")


def start_signup(body: Mapping[str, Any], *, confirm: bool) -> None:
    """Create the account of ``body`` (``username``, ``email``, ``password``; ``confirm``:
    and ``password_confirm``) and mail its link before the sign-up commits (the same for an
    address that has an account: its owner gets a notice); throttled per address."""
    throttle_client("signup")
    mail_ready()
    password = new_password(body, confirm=confirm)
    state = get_state()
    signup_flow.signup(
        state.service,
        account_admin(),
        audit_context(),
        current_auth_session(),
        state.config.default_tenant,
        text_field(body, "username", 254),
        text_field(body, "email", 254),
        password,
        policy=app_password_policy(),
        ttl=settings().verification_ttl,
        deliver=_deliver_in_transaction,
    )


def passkey_signup_options() -> ResponseReturnValue:
    """JSON: creation options for a sign-up with a passkey (``AUTHFLOW_REGISTRATION_PASSKEY``;
    form or JSON ``{"username", "email"}``). Counted as a sign-up by the throttle."""
    if not settings().registration_passkey:
        return not_offered()
    try:
        body = read_body()
        if not wants_json() and not csrf_valid():
            return json_error("csrf", MESSAGES["csrf"], 400)
        options = begin_passkey_signup(text_field(body, "username", 254), text_field(body, "email", 254))
    except AuthFlowError as error:
        return _throttled(form_error_json(error), error)
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
    return guarded(_passkey_signup, "signup.html")


def _passkey_signup() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
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
    return guarded(_verify, "signup_verify.html", token=None)


def _verify() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
        return page("signup_verify.html", 400, error=MESSAGES["csrf"], token=None)
    user = confirm_signup(body)
    if wants_json():
        return jsonify({"status": "email_confirmed", "username": user.identifier})
    return page("signup_verify.html", 200, done=True, token=None)


def confirm_signup(body: Mapping[str, Any]) -> UserRecord:
    """Confirm a new account's address by ``body``'s ``token`` (the link) or its
    ``username`` and ``code`` (typed from the mail); the account it confirmed."""
    state = get_state()
    token, code = text_field(body, "token", 64), text_field(body, "code", 32)
    return signup_flow.verify_signup(
        state.service,
        audit_context(),
        current_auth_session(),
        token,
        tenant=state.config.default_tenant,
        identifier=text_field(body, "username", 254) if token is None else None,
        code=code,
    )


def signup_resend() -> ResponseReturnValue:
    """``POST`` (form or JSON ``{"username"}`` / ``{"email"}``): mail a new link to an
    account that is not confirmed yet; the same answer for every input."""
    if not settings().registration:
        return not_offered()
    if request.method == "GET":
        return page("signup_resend.html")
    return guarded(_resend, "signup_resend.html")


def _resend() -> ResponseReturnValue:
    body = read_body()
    if not wants_json() and not csrf_valid():
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
        identifier=text_field(body, "username", 254),
        email=text_field(body, "email", 254),
        ttl=settings().verification_ttl,
    )
    mail = _signup_mail(found)  # composed for every request: the same work whatever matched
    return MailAfter(found.to, mail, strangers())
