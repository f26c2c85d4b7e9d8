"""Sign-in: the password step, each factor step (a code, or a security key's assertion),
"send me a code" and the security key's request options for the pending step.

The same service calls as the sign-in pages (:mod:`flask_authflow._web.views.signin`):
throttled, locked out and audited as they are; each completed step rotates the session
id (a browser gets a new cookie and CSRF token, an app a new token).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask_authflow._i18n import N_
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
    WorkflowPending,
)
from flask_authflow._web.csrf import rotate_csrf_token
from flask_authflow._web.devices import request_trust
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Boolean, Json, Object, String
from flask_authflow._web.headless.session import KIND_LIST, SESSION, held_kinds, session_state
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MAX_CODE_LENGTH,
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    handle,
    lock_message,
    signed_in,
)
from flask_authflow._web.views.signin import password_login, send_refused, sends_codes

__all__ = ["STEP", "WEBAUTHN_OPTIONS", "routes", "step_reply"]

routes = Routes("login")

STEP = Object(
    {
        "status": String(
            32,
            choices=("authenticated", "factor_required", "enrollment_required"),
            description="``factor_required``: post one of ``kinds`` to ``/login/factor``; "
            "``enrollment_required``: set up a factor again before the login completes.",
        ),
        "kinds": KIND_LIST,
        "session": SESSION,
    },
    required=("status", "kinds", "session"),
    name="LoginStep",
    description="Where a login is after a step.",
)

PASSWORD_BODY = Object(
    {
        "username": String(1024, min_length=1),
        "password": String(4096, min_length=1),
        "remember": Boolean(description="Keep me signed in (a longer session)."),
    },
    required=("username", "password"),
    name="PasswordLogin",
)

FACTOR_BODY = Object(
    {
        "kind": String(64, min_length=1, description="One of the pending step's kinds (default: its first)."),
        "code": String(MAX_CODE_LENGTH, description="The code (spaces are ignored)."),
        "credential": Json(
            MAX_CREDENTIAL_LENGTH, description="A security key's assertion (``kind`` webauthn)."
        ),
        "trust_device": Boolean(description="Trust this device once the login completes."),
    },
    name="FactorStep",
)

SEND_BODY = Object({"kind": String(64, min_length=1)}, name="SendCode")

SENT = Object(
    {"status": String(16, choices=("sent",)), "kind": String(64)},
    required=("status", "kind"),
    name="CodeSent",
)

WEBAUTHN_OPTIONS = Object(
    {"publicKey": Json(MAX_CREDENTIAL_LENGTH, description="``PublicKeyCredentialRequestOptions`` as JSON.")},
    required=("publicKey",),
    name="WebAuthnOptions",
    open=True,
)

_STEP_ERRORS = {
    401: ("invalid", "retry_code", "retry_key", "invalid_code"),
    403: ("locked",),
    409: ("login_not_started",),
}


def step_reply(kind: str, outcome: Any) -> Reply:
    """The answer to a login step's ``outcome``; a refusal for a wrong or locked one."""
    if isinstance(outcome, Authenticated):
        rotate_csrf_token()
        return Reply({"status": "authenticated", "kinds": [], "session": session_state(kind)})
    if isinstance(outcome, WorkflowPending):
        rotate_csrf_token()
        held = list(held_kinds(current_auth_session()))  # what to set up before the login completes
        return Reply({"status": "enrollment_required", "kinds": held, "session": session_state(kind)})
    if isinstance(outcome, FactorRequired) and outcome.kind is not FactorKind.PASSWORD:
        kinds = [k.value for k in outcome.kinds] or [outcome.kind.value]
        return Reply({"status": "factor_required", "kinds": kinds, "session": session_state(kind)})
    if isinstance(outcome, Locked):
        raise Refusal("locked", lock_message(outcome.until), 403, locked_until=outcome.until.isoformat())
    raise Refusal("invalid", MESSAGES["invalid"], 401)


@routes.post(
    "/login/password",
    "loginWithPassword",
    "Sign in with a username and password",
    body=PASSWORD_BODY,
    answers={200: Answer("The next step, or the completed login", STEP)},
    errors={**_STEP_ERRORS, 403: ("locked", "email_not_verified", "account_disabled")},
    throttled=True,
)
def login_password(call: Call) -> Reply:
    """The first step: the same answer and work for an unknown user as for a wrong password."""
    body = call.body
    return step_reply(
        call.kind, password_login(body["username"], body["password"], remember=body.get("remember", False))
    )


def _pending_step() -> tuple[str, ...]:
    """The kinds of the factor step the session's login waits for (none: no such step)."""
    session = current_auth_session()
    step = session.record.next_step if session.is_authenticating else ()
    return () if step in ((), (FactorKind.PASSWORD.value,)) else step


def _chosen(kind: str | None, step: tuple[str, ...]) -> FactorKind:
    if not step:
        raise Refusal("login_not_started", N_("No sign-in step is waiting."), 409)
    chosen = kind or step[0]
    if chosen not in step or chosen not in FactorKind:
        raise Refusal("wrong_kind", MESSAGES["wrong_kind"], 400)
    return FactorKind(chosen)


def _secret(kind: FactorKind, body: Mapping[str, Any]) -> str:
    if kind is FactorKind.WEBAUTHN:
        if "credential" not in body:
            raise Refusal("missing_credential", MESSAGES["missing_credential"], 400)
        return str(body["credential"])
    code = "".join(str(body.get("code", "")).split())  # "123 456" as apps show it
    if not code:
        raise Refusal("missing_code", MESSAGES["missing_code"], 400)
    return code


@routes.post(
    "/login/factor",
    "loginFactorStep",
    "Pass the pending factor step",
    body=FACTOR_BODY,
    answers={200: Answer("The next step, or the completed login", STEP)},
    errors={**_STEP_ERRORS, 400: ("wrong_kind", "missing_code", "missing_credential")},
    throttled=True,
)
def login_factor(call: Call) -> Reply:
    """A code (TOTP, HOTP, e-mailed, recovery) or a security key's assertion for the
    pending step. A wrong answer is 401 ``retry_code``/``retry_key`` while the login
    waits, ``invalid_code`` once the service ended it (sign in again)."""
    if signed_in():
        return Reply({"status": "authenticated", "kinds": [], "session": session_state(call.kind)})
    kind = _chosen(call.body.get("kind"), _pending_step())
    secret = _secret(kind, call.body)
    request_trust(call.body.get("trust_device", False))  # "trust this device", if the sign-in completes
    session = current_auth_session()
    with FactorCredential(kind, secret) as credential:
        outcome = handle().verify_factor(credential, session)
    if isinstance(outcome, InvalidCredential):
        if session.is_authenticating:  # a later step: the user may try again
            code = "retry_key" if kind is FactorKind.WEBAUTHN else "retry_code"
            raise Refusal(code, MESSAGES[code], 401)
        raise Refusal("invalid_code", MESSAGES["invalid_code"], 401)
    return step_reply(call.kind, outcome)


@routes.post(
    "/login/factor/send",
    "loginSendCode",
    "Send a code for the pending step",
    body=SEND_BODY,
    answers={200: Answer("The code is on its way", SENT)},
    errors={
        400: ("wrong_kind", "sends_nothing", "no_code"),
        409: ("login_not_started",),
        429: ("too_many_sends",),
    },
    throttled=True,
)
def login_send(call: Call) -> Reply:
    """ "E-mail me a code" (or an application's own kind that sends codes)."""
    kind = _chosen(call.body.get("kind") or FactorKind.EMAIL_OTP.value, _pending_step())
    if not sends_codes(kind.value, get_state().service.factor(kind)):
        raise Refusal("sends_nothing", MESSAGES["sends_nothing"], 400)
    answer = handle().challenge(kind, current_auth_session()).challenges.get(kind)
    problem = answer.get("error") if isinstance(answer, Mapping) else None
    if problem == "too_many_sends":
        raise Refusal("too_many_sends", send_refused(problem), 429)
    if problem is not None:
        raise Refusal("no_code", send_refused(problem), 400)
    return Reply({"status": "sent", "kind": kind.value})


def webauthn_reply(public: Any) -> Reply:
    """A security key's request options (``{"publicKey": ...}``) as the service made them."""
    if not isinstance(public, Mapping) or not public or "error" in public:
        raise Refusal("no_challenge", N_("The security key request could not be prepared."), 503)
    return Reply(dict(public) if "publicKey" in public else {"publicKey": dict(public)})


@routes.post(
    "/login/factor/webauthn/options",
    "loginWebAuthnOptions",
    "A security key's request options for the pending step",
    answers={200: Answer("``navigator.credentials.get`` options", WEBAUTHN_OPTIONS)},
    errors={400: ("wrong_kind",), 409: ("login_not_started",), 503: ("no_challenge",)},
    throttled=True,
)
def login_webauthn_options(call: Call) -> Reply:
    """A new challenge for the pending step's security key; post the assertion to
    ``/login/factor`` with ``kind`` webauthn."""
    _chosen(FactorKind.WEBAUTHN.value, _pending_step())
    required = handle().challenge(FactorKind.WEBAUTHN, current_auth_session())
    return webauthn_reply(required.challenges.get(FactorKind.WEBAUTHN))
