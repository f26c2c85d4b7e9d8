"""Sign-up and the confirmation of its address (``AUTHFLOW_REGISTRATION``), and the
password reset by a mailed link (``AUTHFLOW_PASSWORD_RESET``).

The same flows as the account pages (:mod:`flask_authflow._web.views.accounts`): throttled
per address and network, the same answer and work whether an account matches, mails
composed from the configured origin (``AUTHFLOW_EXTERNAL_URL``; their links open the ready
pages, their codes can be typed into an app) and delivered after the answer. A feature
that is off answers 404 ``not_found``.
"""

from __future__ import annotations

from flask import after_this_request, current_app
from werkzeug.wrappers.response import Response

from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorRequired
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Boolean, Integer, Object, String
from flask_authflow._web.views import account_mail, accounts
from flask_authflow._web.views.common import VIEWS_BLUEPRINT

__all__ = ["ENDED", "TOKEN", "offered", "routes"]

routes = Routes("registration")

USERNAME = String(254, min_length=1, description="What the user signs in with.")
EMAIL = String(254, min_length=1, description="An e-mail address.")
PASSWORD = String(4096, min_length=1)
#: A mailed link's token (the ``token`` of its query string).
TOKEN = String(
    43, min_length=43, pattern="[A-Za-z0-9_-]{43}", description="The ``token`` of the mailed link."
)

SIGNUP_BODY = Object(
    {"username": USERNAME, "email": EMAIL, "password": PASSWORD},
    required=("username", "email", "password"),
    name="Signup",
    description="A new account: its username, its address (confirmed by the mail) and its password.",
)
VERIFY_BODY = Object(
    {
        "token": TOKEN,
        "username": USERNAME,
        "code": String(32, min_length=1, description="The code of the mail, with ``username``."),
    },
    name="SignupVerification",
    description="The mailed link's ``token``, or the ``username`` and the mail's ``code``.",
)
WHO_BODY = Object(
    {"username": USERNAME, "email": EMAIL},
    name="AccountHint",
    description="The account's ``username`` or its ``email``.",
)
RESET_BODY = Object(
    {"token": TOKEN, "password": PASSWORD}, required=("token", "password"), name="PasswordReset"
)

ACCEPTED = Object(
    {
        "status": String(32, choices=("verification_sent", "sent_if_known", "sent_if_pending")),
    },
    required=("status",),
    name="Accepted",
    description="Taken: the same answer whether or not an account matches.",
)
CONFIRMED = Object(
    {"status": String(32, choices=("email_confirmed",)), "username": String(1024)},
    required=("status", "username"),
    name="SignupConfirmed",
)
COUNT = Integer(0, 2**31 - 1)
#: What a recovery ended (:meth:`flask_authflow.login._recovery.Ended.to_dict`).
ENDED = {
    "sessions_ended": COUNT,
    "api_tokens_revoked": COUNT,
    "account_tokens_voided": Object({}, open=True, description="Pending mailed links voided, by kind."),
    "email_change_voided": Boolean(),
    "lock_cleared": Boolean(),
}
RESET_DONE = Object(
    {
        "status": String(32, choices=("password_reset",)),
        **ENDED,
        "email_verified": Boolean(description="The link also confirmed the account's address."),
    },
    required=("status", *ENDED, "email_verified"),
    name="PasswordResetDone",
    description="The new password is set; every session, API token and mailed link of the account ended.",
)

_TOKEN_ERRORS = {401: ("account_token_invalid",), 410: ("account_token_used", "account_token_expired")}
_OFF = {404: ("not_found",)}
_MAIL = {503: ("mail_delivery_failed",)}


def offered(enabled: bool, page: str) -> None:
    """404 ``not_found`` unless the feature is ``enabled`` and the ready page its mailed
    links open (``authflow_views.<page>``) is registered: without it a link leads nowhere."""
    if not enabled or f"{VIEWS_BLUEPRINT}.{page}" not in current_app.view_functions:
        raise Refusal("not_found", N_("This site does not offer that."), 404)


@routes.post(
    "/signup",
    "signup",
    "Create an account",
    body=SIGNUP_BODY,
    answers={202: Answer("The confirmation link is on its way", ACCEPTED)},
    errors={
        **_OFF,
        400: ("weak_password", "password_too_long", "identifier_not_own_address"),
        409: ("user_exists",),
        **_MAIL,
    },
    throttled=True,
)
def signup(call: Call) -> Reply:
    """Create the account and mail its confirmation link and code (to an address that has
    an account, its owner gets a notice instead; the answer is the same). A username that
    another account has is 409 ``user_exists``."""
    offered(accounts.settings().registration, "signup_verify")
    accounts.start_signup(call.body, confirm=False)
    return Reply({"status": "verification_sent"}, 202)


@routes.post(
    "/signup/verify",
    "verifySignup",
    "Confirm a new account's address",
    body=VERIFY_BODY,
    answers={200: Answer("The address is confirmed: the account may sign in", CONFIRMED)},
    errors={**_OFF, **_TOKEN_ERRORS},
    throttled=True,  # typed codes: per account and network
)
def verify_signup(call: Call) -> Reply:
    """The mailed link's ``token``, or the ``username`` and the ``code`` the mail shows.
    Attempts at a code are counted: too many void it (410), and typed codes are throttled
    per account and network (429)."""
    offered(accounts.settings().registration, "signup_verify")
    user = accounts.confirm_signup(call.body)
    return Reply({"status": "email_confirmed", "username": user.identifier})


@routes.post(
    "/signup/resend",
    "resendSignupMail",
    "Mail a new confirmation link",
    body=WHO_BODY,
    answers={202: Answer("Sent if the account waits for its confirmation", ACCEPTED)},
    errors={**_OFF, **_MAIL},
    throttled=True,
)
def resend_signup(call: Call) -> Reply:
    """A new link for an account whose address is not confirmed yet; the same answer for
    every input."""
    offered(accounts.settings().registration, "signup_verify")
    later = accounts.resend_signup(call.body)
    after_this_request(later.after)
    return Reply({"status": "sent_if_pending"}, 202)


@routes.post(
    "/password/forgot",
    "requestPasswordReset",
    "Mail a password reset link",
    body=WHO_BODY,
    answers={202: Answer("Sent if an account matches", ACCEPTED)},
    errors={**_OFF, **_MAIL},
    throttled=True,
)
def forgot_password(call: Call) -> Reply:
    """The same answer, and the same work, whether or not an account matches."""
    offered(accounts.settings().password_reset, "reset_password")
    later = accounts.start_reset(call.body)
    after_this_request(later.after)
    return Reply({"status": "sent_if_known"}, 202)


@routes.post(
    "/password/reset",
    "resetPassword",
    "Set a new password with a mailed link's token",
    body=RESET_BODY,
    answers={200: Answer("The password is set", RESET_DONE)},
    errors={
        **_OFF,
        **_TOKEN_ERRORS,
        400: ("weak_password", "password_too_long"),
        401: ("account_token_invalid", "second_factor_required"),
    },
)
def reset_password(call: Call) -> Reply:
    """A user with a second factor passes it first (401 ``second_factor_required`` with the
    ``kinds``: ``/login/factor``), then sends this again. The reset ends every session, API
    token and pending link of the account, and mails its address a notice."""
    offered(accounts.settings().password_reset, "reset_password")
    outcome = accounts.finish_reset(call.body, confirm=False)
    if isinstance(outcome, FactorRequired):
        kinds = [kind.value for kind in outcome.kinds]
        message = N_("Pass your second factor (POST /login/factor), then send this request again.")
        raise Refusal("second_factor_required", message, 401, kinds=kinds)
    body = {"status": "password_reset", **outcome.ended.to_dict(), "email_verified": outcome.email_verified}

    @after_this_request
    def notice(response: Response) -> Response:  # the notice of what ended, once answered
        return account_mail.notify_recovery(
            outcome.tenant, outcome.user_id, outcome.ended, response, reset=True
        )

    return Reply(body)
