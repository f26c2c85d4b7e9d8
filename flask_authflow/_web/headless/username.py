"""Change of username (``POST /account/username``): the flow of the ready view
``/account/username`` (:mod:`flask_authflow.login._username_change`), for API clients."""

from __future__ import annotations

from flask import after_this_request
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._web.headless.routes import Answer, Call, Reply, Routes
from flask_authflow._web.headless.schema import Object, String
from flask_authflow._web.security_notices import notify
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.accounts import throttle_client
from flask_authflow.audit._context import audit_context
from flask_authflow.login import _username_change as username_change_flow

__all__ = ["routes"]

routes = Routes("account")

CHANGE = Object(
    {"username": String(1024, min_length=1, description="The new username (normalised as sign-up does).")},
    required=("username",),
    name="UsernameChange",
)
CHANGED = Object(
    {
        "status": String(32, choices=("username_changed",)),
        "username": String(254, description="The username as stored (normalised)."),
    },
    required=("status", "username"),
    name="UsernameChanged",
)


@routes.post(
    "/account/username",
    "changeUsername",
    "Change the username",
    body=CHANGE,
    answers={200: Answer("The username is changed", CHANGED)},
    errors={
        400: ("identifier_not_own_address", "username_unchanged"),
        401: ("step_up_required",),
        409: ("user_exists",),
    },
    signed_in=True,
    throttled=True,
)
def change_username(call: Call) -> Reply:
    """Rename the signed-in user, at once: needs a fresh login of the strongest step
    (``step_up_required`` otherwise), follows sign-up's rules for identifiers (a name with
    an ``@`` must be the account's own confirmed address), unique in the tenant (409
    ``user_exists``). Counted by the ``signup`` throttle; the account's address gets a
    notice."""
    throttle_client("signup")
    changed = username_change_flow.change_username(
        get_state().service, audit_context(), current_auth_session(), call.body["username"]
    )
    user = changed.user

    @after_this_request
    def noticed(response: BaseResponse) -> BaseResponse:
        event = username_change_flow.EVENT
        return notify(event, user.tenant, user.user_id, response, previous_identifier=changed.previous)

    return Reply({"status": "username_changed", "username": user.identifier})
