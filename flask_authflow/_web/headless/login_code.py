"""Sign-in by e-mailed code (``AUTHFLOW_LOGIN_BY_CODE``): ask for a code, then pass it.

The same calls as the pages (:mod:`flask_authflow._web.views.login_code`): the same answer
whether an account matches or not, the mail (code and link on the configured origin) sent
after the answer on the strangers' budget unless the request is the owner's, throttled,
locked out and audited as a login. The code passes the login's first step; a user with a
second factor is then asked for it (``/login/factor``).
"""

from __future__ import annotations

from flask import after_this_request
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorCredential, FactorKind, InvalidCredential
from flask_authflow._web.headless.login import STEP, step_reply
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Object, String
from flask_authflow._web.headless.session import session_state
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views.common import MESSAGES, handle
from flask_authflow._web.views.login_code import deliver_after, login_code_offered, request_code

__all__ = ["routes"]

routes = Routes("login-code")

REQUEST_BODY = Object(
    {"username": String(254, min_length=1, description="The username or the e-mail address.")},
    required=("username",),
    name="LoginCodeRequest",
)
CODE_BODY = Object(
    {"code": String(32, min_length=1, description="The 8-digit code from the mail.")},
    required=("code",),
    name="LoginCode",
)
_OFF = {404: ("not_found",)}


def _offered() -> None:
    if not login_code_offered():
        raise Refusal("not_found", N_("Sign-in by e-mailed code is not offered here."), 404)


@routes.post(
    "/login/code",
    "loginCodeRequest",
    "E-mail a sign-in code",
    body=REQUEST_BODY,
    answers={200: Answer("The code step (the same answer whether an account matched)", STEP)},
    errors={**_OFF, 400: ("invalid_input",)},
    throttled=True,
)
def request_login_code(call: Call) -> Reply:
    """Start a sign-in whose first step is a code mailed to the account's verified address
    (with a link for the browser that asked); unknown accounts get the same answer."""
    _offered()
    found, mail = request_code(call.body["username"])

    @after_this_request
    def deliver(response: BaseResponse) -> BaseResponse:
        return deliver_after(found, mail, response)

    kinds = [FactorKind.LOGIN_CODE.value]
    return Reply({"status": "factor_required", "kinds": kinds, "session": session_state(call.kind)})


@routes.post(
    "/login/code/verify",
    "loginCodeVerify",
    "Pass the sign-in code",
    body=CODE_BODY,
    answers={200: Answer("The next step, or the completed login", STEP)},
    errors={
        **_OFF,
        400: ("invalid_input",),
        401: ("retry_code",),
        403: ("locked",),
        409: ("login_not_started",),
    },
    throttled=True,
)
def verify_login_code(call: Call) -> Reply:
    """The code from the mail. A wrong one is 401 ``retry_code`` (the login waits; the code
    dies after its tries, the lockout counts each); a second factor follows when enrolled."""
    _offered()
    session = current_auth_session()
    if not (session.is_authenticating and FactorKind.LOGIN_CODE.value in session.record.next_step):
        raise Refusal("login_not_started", N_("No sign-in code is waiting: ask for one."), 409)
    code = "".join(str(call.body["code"]).split())  # a malformed code: InvalidInput (400), not counted
    with FactorCredential(FactorKind.LOGIN_CODE, code) as credential:
        outcome = handle().verify_factor(credential, session)
    if isinstance(outcome, InvalidCredential):
        raise Refusal("retry_code", MESSAGES["retry_code"], 401)
    return step_reply(call.kind, outcome)
