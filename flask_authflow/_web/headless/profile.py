"""The signed-in account (``GET /account``) and the change of its e-mail address.

The change goes through the same flow as ``/account/email``
(:func:`flask_authflow._web.views.accounts.start_email_change`): it needs a fresh login
(401 ``step_up_required``: pass ``/step-up`` first), the confirmation link goes to the new
address from the configured origin, and the confirmation mails the old address a notice.
"""

from __future__ import annotations

from flask import after_this_request

from flask_authflow._web.headless.registration import TOKEN, offered
from flask_authflow._web.headless.routes import Answer, Call, Reply, Routes
from flask_authflow._web.headless.schema import Boolean, Nullable, Object, String
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views import accounts
from flask_authflow.errors import UserNotFound

__all__ = ["ACCOUNT", "routes"]

routes = Routes("account")

ACCOUNT = Object(
    {
        "id": String(256, description="The user's id in its tenant (never changes)."),
        "tenant": String(256),
        "identifier": String(1024, description="What the user signs in with."),
        "email": Nullable(String(1024)),
        "email_verified": Boolean(),
        "created_at": String(64, description="ISO 8601."),
        "authenticated_at": Nullable(String(64), description="When this session's login completed."),
        "auth_method": Nullable(
            String(128), description="How it signed in (``password``, ``oidc:<provider>``)."
        ),
    },
    required=(
        "id",
        "tenant",
        "identifier",
        "email",
        "email_verified",
        "created_at",
        "authenticated_at",
        "auth_method",
    ),
    name="Account",
)
EMAIL_BODY = Object({"email": String(254, min_length=1)}, required=("email",), name="EmailChange")
CONFIRM_BODY = Object({"token": TOKEN}, required=("token",), name="EmailChangeConfirmation")
SENT = Object(
    {"status": String(32, choices=("verification_sent",))}, required=("status",), name="VerificationSent"
)
CHANGED = Object(
    {"status": String(32, choices=("email_changed",))}, required=("status",), name="EmailChanged"
)


@routes.get(
    "/account",
    "getAccount",
    "The signed-in account",
    answers={200: Answer("The account", ACCOUNT)},
    errors={404: ("user_not_found",)},
    signed_in=True,
)
def get_account(call: Call) -> Reply:
    """Who is signed in: never a secret, never another user's data."""
    session = current_auth_session()
    user = get_state().service.store.get_user(str(session.tenant), str(session.user_id))
    if user is None:  # deleted while signed in
        raise UserNotFound()
    at = session.authenticated_at
    return Reply(
        {
            "id": user.user_id,
            "tenant": user.tenant,
            "identifier": user.identifier,
            "email": user.email,
            "email_verified": user.email_verified_at is not None,
            "created_at": user.created_at.isoformat(),
            "authenticated_at": at.isoformat() if at is not None else None,
            "auth_method": session.record.auth_method,
        }
    )


@routes.post(
    "/account/email",
    "requestEmailChange",
    "Change the account's e-mail address",
    body=EMAIL_BODY,
    answers={202: Answer("A confirmation link went to the new address", SENT)},
    errors={401: ("step_up_required",), 404: ("not_found",), 503: ("mail_delivery_failed",)},
    signed_in=True,
)
def request_email_change(call: Call) -> Reply:
    """Mail a link to the new address; the address changes when it is confirmed
    (``/account/email/confirm``). Needs a fresh login; 404 when the app does not serve the
    page the link opens."""
    offered(True, "confirm_email_change")
    later = accounts.start_email_change(call.body)
    after_this_request(later.after)
    return Reply({"status": "verification_sent"}, 202)


@routes.post(
    "/account/email/confirm",
    "confirmEmailChange",
    "Confirm a new e-mail address",
    body=CONFIRM_BODY,
    answers={200: Answer("The new address replaced the old one", CHANGED)},
    errors={
        401: ("account_token_invalid",),
        409: ("user_exists",),
        410: ("account_token_used", "account_token_expired"),
    },
)
def confirm_email_change(call: Call) -> Reply:
    """The mailed link's ``token``: the new address replaces the old one, which is told."""
    changed = accounts.finish_email_change(call.body)
    after_this_request(lambda response: accounts.email_changed_notice(changed, response))
    return Reply({"status": "email_changed"})
