"""Confirm it is you (step-up): the signed-in user's strongest login step again, as the
step-up page asks it (:mod:`flask_authflow._web.views.stepup`): begin, send a code, request
a security key's options, verify. A completed step-up rotates the session id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask_authflow._outcomes import Authenticated, FactorCredential, FactorKind, Locked
from flask_authflow._web.headless.login import WEBAUTHN_OPTIONS, webauthn_reply
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Json, Object, String
from flask_authflow._web.headless.session import KIND_LIST, SESSION, session_state
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MAX_CODE_LENGTH,
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    handle,
    lock_message,
    pending_step_up,
)
from flask_authflow._web.views.signin import send_refused, sends_codes
from flask_authflow._web.views.stepup import ensure_step_up, send_step_up_code, strongest_step, waiting_step

__all__ = ["routes"]

routes = Routes("step-up")

_PASSWORD = FactorKind.PASSWORD.value

WAITING = Object(
    {"kinds": KIND_LIST, "session": SESSION},
    required=("kinds", "session"),
    name="StepUpWaiting",
    description="The step-up waiting: pass one of ``kinds`` at ``/step-up/verify``.",
)
STEPPED_UP = Object(
    {"status": String(16, choices=("stepped_up",)), "session": SESSION},
    required=("status", "session"),
    name="SteppedUp",
)
VERIFY_BODY = Object(
    {
        "kind": String(64, min_length=1, description="One of the waiting kinds (default: the first)."),
        "password": String(4096, description="With ``kind`` password."),
        "code": String(MAX_CODE_LENGTH, description="A code (spaces are ignored)."),
        "credential": Json(MAX_CREDENTIAL_LENGTH, description="A security key's assertion."),
    },
    name="StepUpVerify",
)
KIND_BODY = Object({"kind": String(64, min_length=1)}, required=("kind",), name="StepUpSend")
SENT = Object(
    {"status": String(16, choices=("sent",)), "kind": String(64)},
    required=("status", "kind"),
    name="StepUpSent",
)


@routes.post(
    "/step-up",
    "beginStepUp",
    "Begin a step-up (or show the one waiting)",
    answers={200: Answer("The step-up waiting", WAITING)},
    signed_in=True,
)
def begin(call: Call) -> Reply:
    """The user's strongest login step is asked again: the password for an account without
    second factors, else one of the kinds of its last step. A step-up already waiting is
    kept (an e-mailed code stays valid)."""
    kinds, _ = ensure_step_up(current_auth_session())
    return Reply({"kinds": list(kinds), "session": session_state(call.kind)})


def _chosen(body: Mapping[str, Any]) -> tuple[FactorKind, str]:
    session = current_auth_session()
    kinds = waiting_step(session) or strongest_step(session)
    chosen = body.get("kind") or (_PASSWORD if "password" in body else kinds[0])
    if chosen not in kinds or chosen not in FactorKind:
        code = "stronger_step" if chosen == _PASSWORD else "wrong_kind"
        raise Refusal(code, MESSAGES[code], 400)
    kind = FactorKind(chosen)
    if kind is FactorKind.PASSWORD:
        secret = str(body.get("password", ""))
        missing = "missing_password"
    elif kind is FactorKind.WEBAUTHN:
        secret, missing = str(body.get("credential", "")), "missing_credential"
    else:
        secret, missing = "".join(str(body.get("code", "")).split()), "missing_code"
    if not secret:
        raise Refusal(missing, MESSAGES[missing], 400)
    return kind, secret


def _wrong(kind: FactorKind) -> str:
    if kind is FactorKind.PASSWORD:
        return "wrong_password"
    return "retry_key" if kind is FactorKind.WEBAUTHN else "retry_code"


@routes.post(
    "/step-up/verify",
    "verifyStepUp",
    "Pass the step-up",
    body=VERIFY_BODY,
    answers={200: Answer("Confirmed: the login counts as fresh", STEPPED_UP)},
    errors={
        400: ("wrong_kind", "stronger_step", "missing_password", "missing_code", "missing_credential"),
        401: ("wrong_password", "retry_code", "retry_key"),
        403: ("locked",),
    },
    signed_in=True,
    throttled=True,
)
def verify(call: Call) -> Reply:
    """The password, a code or a security key's assertion of a waiting kind. A wrong
    answer ends the step-up (the login stays): begin a new one."""
    kind, secret = _chosen(call.body)
    session = current_auth_session()
    ensure_step_up(session)
    with FactorCredential(kind, secret) as credential:
        outcome = handle().verify_factor(credential, session)
    if isinstance(outcome, Authenticated):
        return Reply({"status": "stepped_up", "session": session_state(call.kind)})
    if isinstance(outcome, Locked):
        raise Refusal("locked", lock_message(outcome.until), 403, locked_until=outcome.until.isoformat())
    code = _wrong(kind)
    raise Refusal(code, MESSAGES[code], 401)


@routes.post(
    "/step-up/send",
    "sendStepUpCode",
    "Send a code for the step-up",
    body=KIND_BODY,
    answers={200: Answer("The code is on its way", SENT)},
    errors={400: ("wrong_kind", "sends_nothing", "no_code"), 429: ("too_many_sends",)},
    signed_in=True,
    throttled=True,
)
def send(call: Call) -> Reply:
    """ "E-mail me a code" for the step-up (one is begun if none waits)."""
    session = current_auth_session()
    kind_name = call.body["kind"]
    if kind_name not in (waiting_step(session) or strongest_step(session)) or kind_name not in FactorKind:
        raise Refusal("wrong_kind", MESSAGES["wrong_kind"], 400)
    kind = FactorKind(kind_name)
    if not sends_codes(kind.value, get_state().service.factor(kind)):
        raise Refusal("sends_nothing", MESSAGES["sends_nothing"], 400)
    problem = send_step_up_code(session, kind)
    if problem == "too_many_sends":
        raise Refusal("too_many_sends", send_refused(problem, step_up=True), 429)
    if problem is not None:
        raise Refusal("no_code", send_refused(problem, step_up=True), 400)
    return Reply({"status": "sent", "kind": kind.value})


@routes.post(
    "/step-up/webauthn/options",
    "stepUpWebAuthnOptions",
    "A security key's request options for the step-up",
    answers={200: Answer("``navigator.credentials.get`` options", WEBAUTHN_OPTIONS)},
    errors={400: ("wrong_kind",), 503: ("no_challenge",)},
    signed_in=True,
    throttled=True,
)
def webauthn_options(call: Call) -> Reply:
    """A new challenge for the step-up's security key (the step-up is begun if none waits);
    post the assertion to ``/step-up/verify`` with ``kind`` webauthn."""
    session = current_auth_session()
    kinds, _ = ensure_step_up(session)
    if FactorKind.WEBAUTHN.value not in (pending_step_up(session) or kinds):
        raise Refusal("wrong_kind", MESSAGES["wrong_kind"], 400)
    required = handle().challenge(FactorKind.WEBAUTHN, session)
    return webauthn_reply(required.challenges.get(FactorKind.WEBAUTHN))
