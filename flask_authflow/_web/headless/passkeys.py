"""Passkey sign-in without a username: request options, then the assertion, through the
same service calls as the sign-in page's passkey button."""

from __future__ import annotations

from flask_authflow._outcomes import FactorCredential, FactorKind, InvalidCredential
from flask_authflow._web.headless.login import STEP, WEBAUTHN_OPTIONS, step_reply, webauthn_reply
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Json, Object
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import MAX_CREDENTIAL_LENGTH, MESSAGES, handle

__all__ = ["routes"]

routes = Routes("passkeys")

ASSERTION = Object(
    {"credential": Json(MAX_CREDENTIAL_LENGTH, description="The browser's or platform's assertion.")},
    required=("credential",),
    name="PasskeyAssertion",
)


@routes.post(
    "/login/passkey/options",
    "passkeyOptions",
    "Request options for a passkey sign-in",
    answers={200: Answer("``navigator.credentials.get`` options (no allowed credentials)", WEBAUTHN_OPTIONS)},
    errors={400: ("factor_not_registered",), 403: ("permission_denied",), 503: ("no_challenge",)},
    throttled=True,
)
def options(call: Call) -> Reply:
    """A new challenge for a usernameless sign-in (kept in the session until used)."""
    public = handle().begin_passkey_login(get_state().config.default_tenant, current_auth_session())
    return webauthn_reply(public)


@routes.post(
    "/login/passkey",
    "passkeyLogin",
    "Sign in with a passkey",
    body=ASSERTION,
    answers={200: Answer("The next step, or the completed login", STEP)},
    errors={
        400: ("factor_not_registered", "login_not_started"),
        401: ("invalid_credential", "login_not_started"),
        403: ("locked", "account_disabled", "permission_denied", "email_not_verified"),
    },
    throttled=True,
)
def login(call: Call) -> Reply:
    """Finish the sign-in with the assertion of the challenge ``/login/passkey/options`` gave."""
    with FactorCredential(FactorKind.WEBAUTHN, call.body["credential"]) as credential:
        outcome = handle().finish_passkey_login(credential, current_auth_session())
    if isinstance(outcome, InvalidCredential):
        raise Refusal("invalid_credential", MESSAGES["passkey_refused"], 401)
    return step_reply(call.kind, outcome)
