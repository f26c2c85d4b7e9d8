"""Passkey-only accounts through the API: sign-up with a passkey and an address (no
password), and a password added later, through the same functions as the ready views
(:func:`~flask_authflow._web.views.accounts.begin_passkey_signup`,
:func:`~flask_authflow._web.views.accounts.finish_passkey_signup`,
:func:`~flask_authflow._web.views.accounts.add_password`)."""

from __future__ import annotations

from flask import Response, after_this_request

from flask_authflow._web.headless.login import WEBAUTHN_OPTIONS
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Json, Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views import account_mail, accounts
from flask_authflow._web.views.common import MAX_CREDENTIAL_LENGTH, MESSAGES

__all__ = ["routes"]

routes = Routes("passkey-accounts")

SIGNUP = Object(
    {"username": String(254, min_length=1), "email": String(254, min_length=1)},
    required=("username", "email"),
    name="PasskeySignupRequest",
)
ATTESTATION = Object(
    {"credential": Json(MAX_CREDENTIAL_LENGTH, description="The browser's or platform's new credential.")},
    required=("credential",),
    name="PasskeySignupCredential",
)
SENT = Object(
    {"status": String(32, choices=("verification_sent",))}, required=("status",), name="PasskeySignupSent"
)
NEW_PASSWORD = Object({"password": String(4096, min_length=1)}, required=("password",), name="NewPassword")
PASSWORD_SET = Object(
    {"status": String(16, choices=("password_set",))}, required=("status",), name="PasswordSet"
)


def _offered() -> None:
    if not accounts.settings().registration_passkey:
        raise Refusal("unavailable_kind", MESSAGES["unavailable_kind"], 404)


@routes.post(
    "/signup/passkey/options",
    "passkeySignupOptions",
    "Creation options for a sign-up with a passkey",
    body=SIGNUP,
    answers={
        200: Answer("``navigator.credentials.create`` options (a discoverable credential)", WEBAUTHN_OPTIONS)
    },
    errors={
        400: ("invalid_input", "identifier_not_own_address", "factor_not_registered"),
        404: ("unavailable_kind",),
        503: ("mail_delivery_failed",),
    },
    throttled=True,
)
def signup_options(call: Call) -> Reply:
    """A new account's passkey ceremony (``AUTHFLOW_REGISTRATION_PASSKEY``): the username and
    address are checked as every sign-up's; nothing is stored until the attestation."""
    _offered()
    return Reply(dict(accounts.begin_passkey_signup(call.body["username"], call.body["email"])))


@routes.post(
    "/signup/passkey",
    "passkeySignup",
    "Create the account with its passkey",
    body=ATTESTATION,
    answers={202: Answer("The account waits for its address (the same answer for a taken address)", SENT)},
    errors={
        400: ("enrollment_failed", "factor_not_registered"),
        404: ("unavailable_kind",),
        409: ("user_exists",),
        503: ("mail_delivery_failed",),
    },
    throttled=True,
)
def signup(call: Call) -> Reply:
    """The account, its passkey and the verification mail in one transaction; signing in
    waits for the mailed link."""
    _offered()
    accounts.finish_passkey_signup(call.body["credential"])
    return Reply({"status": "verification_sent"}, status=202)


@routes.post(
    "/account/password/set",
    "addPassword",
    "Add a password to an account that has none",
    body=NEW_PASSWORD,
    answers={200: Answer("The password is set; the user's other sessions ended", PASSWORD_SET)},
    errors={
        400: ("weak_password", "password_too_long"),
        401: ("step_up_required",),
        409: ("password_exists",),
    },
    signed_in=True,
)
def add_password(call: Call) -> Reply:
    """A passkey-only (or federated) account adds a password: no old one to ask, a sign-in
    within ``AUTHFLOW_FRESHNESS`` instead (``step_up_required`` otherwise)."""
    session = current_auth_session()
    ended = accounts.add_password(session, call.body["password"])
    session.rotate_id()
    tenant, user_id = str(session.tenant), str(session.user_id)

    @after_this_request
    def notice(response: Response) -> Response:  # the owner's notice, once the answer went out
        account_mail.notify_recovery(tenant, user_id, ended, response, reset=False)
        return response

    return Reply({"status": "password_set"})
