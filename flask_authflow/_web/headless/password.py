"""Change of password (``POST /account/password``): the account page's "change password"
(:func:`flask_authflow._web.views.blueprint.change_own_password`), for API clients.

An account without a password (passkey-only, federated) adds one at
``/account/password/set`` instead (:mod:`.passkey_accounts`).
"""

from __future__ import annotations

from flask import Response, after_this_request

from flask_authflow._web.headless.registration import ENDED
from flask_authflow._web.headless.routes import Answer, Call, Reply, Routes
from flask_authflow._web.headless.schema import Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views import account_mail
from flask_authflow._web.views.blueprint import change_own_password

__all__ = ["routes"]

routes = Routes("account")

CHANGE = Object(
    {
        "current_password": String(4096, min_length=1),
        "new_password": String(4096, min_length=1, description="Checked by the password policy."),
    },
    required=("current_password", "new_password"),
    name="PasswordChange",
)
CHANGED = Object(
    {"status": String(32, choices=("password_changed",)), **ENDED},
    required=("status", *ENDED),
    name="PasswordChanged",
    description="The new password is set; the user's other sessions, API tokens and mailed links ended.",
)


@routes.post(
    "/account/password",
    "changePassword",
    "Change the password",
    body=CHANGE,
    answers={200: Answer("The password is changed; what ended with it", CHANGED)},
    errors={
        400: ("weak_password", "password_too_long"),
        401: ("wrong_current_password", "step_up_required"),
        403: ("locked",),
        409: ("no_password",),
    },
    signed_in=True,
    throttled=True,
)
def change_password(call: Call) -> Reply:
    """Replace the signed-in user's password, given the current one (verified as a step-up:
    failures count towards the lock, 403 ``locked`` with ``locked_until``). A user with a
    second factor passes the strongest step first (401 ``step_up_required``: ``/step-up``);
    the password policy checks the new one. The user's other sessions, API tokens and
    pending mailed links end; this session gets a new id (an app's new token is in the
    answer header, a browser's CSRF token changes) and the account's address gets a
    notice. 409 ``no_password``: the account has none, add one at
    ``/account/password/set``."""
    session = current_auth_session()
    ended = change_own_password(session, call.body["current_password"], call.body["new_password"])
    tenant, user_id = str(session.tenant), str(session.user_id)

    @after_this_request
    def notice(response: Response) -> Response:  # the owner's notice, once the answer went out
        account_mail.notify_recovery(tenant, user_id, ended, response, reset=False)
        return response

    return Reply({"status": "password_changed", **ended.to_dict()})
