"""Signing in: the password form, the factor step (one form per acceptable kind, a security
key button, "e-mail me a code") and the passkey button, with the JSON endpoints the
WebAuthn script calls.

A login step may be passed by any one of several kinds (``totp|webauthn|recovery_code``):
the factor page offers each kind the app can verify. A wrong code at that step keeps the
login (the user may try again; the lockout bounds the tries); a lock ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import Response, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.factors import Factor, PasskeyFactor
from flask_authflow._i18n import N_, gettext, translate
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorRequired,
    InvalidCredential,
    Locked,
    WorkflowPending,
)
from flask_authflow._responses import wants_json
from flask_authflow._web.csrf import csrf_valid, rotate_csrf_token
from flask_authflow._web.devices import remember_session, request_trust
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MAX_CODE_LENGTH,
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    VIEWS_BLUEPRINT,
    after_login,
    error_message,
    error_status,
    form_flag,
    form_text,
    handle,
    identifier_of,
    json_answer,
    json_error,
    lock_message,
    page,
    pending_step_up,
    post_login_url,
    request_next,
    signed_in,
    to_login,
)
from flask_authflow.errors import AuthFlowError, InvalidInput
from flask_authflow.login._verification import EmailNotVerified

__all__ = [
    "FACTOR_NOTICES",
    "StepMethod",
    "factor",
    "factor_page",
    "factor_send",
    "factor_webauthn_options",
    "login",
    "login_outcome",
    "login_page",
    "passkey_available",
    "passkey_login",
    "passkey_options",
    "password_login",
    "send_refused",
    "sends_codes",
    "step_methods",
]

#: The notices the factor page shows after a redirect (``?notice=...``); only these keys.
FACTOR_NOTICES = {
    "code_sent": N_("We sent a code to your e-mail address. It is valid for a few minutes."),
    "login_code_sent": N_(
        "If an account matches, we sent a code and a link to its e-mail address. Enter the code here, "
        "or open the link in this browser."
    ),
}


@dataclass(frozen=True, slots=True)
class StepMethod:
    """One way to pass the pending login step, as the factor page shows it.

    ``type`` is ``"code"`` (a text field) or ``"webauthn"`` (a button); ``send`` says the
    page offers "E-mail me a code" for it; ``sent`` that a code went out on entering the step.
    """

    kind: str
    type: str
    title: str
    label: str
    hint: str
    inputmode: str
    autocomplete: str
    maxlength: int
    send: bool = False
    sent: bool = False

    @property
    def send_label(self) -> str:
        """The text of the button that sends a code: "E-mail me a code", "... a new code"."""
        return _send_label(self.kind, again=self.sent)


# (title, label, hint, inputmode, autocomplete)
_CODE_TEXTS: dict[str, tuple[str, str, str, str, str]] = {
    "totp": (
        N_("Use your authenticator app"),
        N_("Authentication code"),
        N_("The 6-digit code from your authenticator app."),
        "numeric",
        "one-time-code",
    ),
    "hotp": (
        N_("Use your security token"),
        N_("Authentication code"),
        N_("The code your security token shows."),
        "numeric",
        "one-time-code",
    ),
    "email_otp": (
        N_("Use a code sent by e-mail"),
        N_("Code from your e-mail"),
        N_("We sent a code to your e-mail address."),
        "numeric",
        "one-time-code",
    ),
    "login_code": (
        N_("Enter the code from your e-mail"),
        N_("Sign-in code"),
        N_("The 8-digit code we sent to your e-mail address. It works once, for a few minutes."),
        "numeric",
        "one-time-code",
    ),
    "recovery_code": (
        N_("Use a recovery code"),
        N_("Recovery code"),
        N_("One of the recovery codes you saved (xxxxx-xxxxx). Each works once."),
        "text",
        "off",
    ),
}
_GENERIC_TEXTS = (
    N_("Use a verification code"),
    N_("Verification code"),
    N_("The code for the next step of your sign-in."),
    "text",
    "one-time-code",
)


def _maxlength(kind: str, factor: Factor | None) -> int:
    """Room for the code as people type it (digits in groups, a hyphen), not its exact length:
    the server strips spaces and checks the format itself."""
    if kind == "recovery_code":
        return 16
    digits = factor.digits if factor is not None else None
    return 2 * digits if digits is not None and 0 < digits <= 32 else 64


def sends_codes(kind: str, factor: Factor | None) -> bool:
    """The factor sends a code when asked ("e-mail me a code"): e-mail codes, or an
    application's own kind that declares ``challenge_on_request`` (an SMS code)."""
    return factor is not None and factor.challenge_on_request


def _send_label(kind: str, again: bool = False) -> str:
    if kind == FactorKind.EMAIL_OTP.value:
        return gettext("E-mail me a new code") if again else gettext("E-mail me a code")
    return gettext("Send me a new code") if again else gettext("Send me a code")


def step_methods(kinds: tuple[str, ...]) -> list[StepMethod]:
    """The ways to pass a step of ``kinds`` that this app can verify, in the step's order."""
    service = get_state().service
    methods: list[StepMethod] = []
    for name in kinds:
        if name not in FactorKind or name == FactorKind.PASSWORD.value:
            continue
        factor = service.factor(FactorKind(name))
        if factor is None:
            continue
        if name == FactorKind.WEBAUTHN.value:
            methods.append(
                StepMethod(
                    kind=name, type="webauthn", title=gettext("Use your security key or passkey"),
                    label=gettext("Use your security key"),
                    hint=gettext("Your browser asks for your security key or passkey."),
                    inputmode="none", autocomplete="off", maxlength=MAX_CREDENTIAL_LENGTH,
                )
            )  # fmt: skip
            continue
        title, label, hint, inputmode, autocomplete = _CODE_TEXTS.get(name, _GENERIC_TEXTS)
        title, label, hint = translate(title), translate(label), translate(hint)
        # A sign-in code is not resent within its login: asking again starts a new sign-in.
        send = sends_codes(name, factor) and name != FactorKind.LOGIN_CODE.value
        sent = send and len(kinds) == 1  # the service sends the code itself when it is the only way
        if send and not sent:
            hint = gettext(
                "Press “%(button)s”, then type the code from the message.", button=_send_label(name)
            )
        methods.append(
            StepMethod(
                kind=name, type="code", title=title, label=label, hint=hint, inputmode=inputmode,
                autocomplete=autocomplete, maxlength=_maxlength(name, factor), send=send, sent=sent,
            )
        )  # fmt: skip
    return methods


# --- the sign-in page ----------------------------------------------------------------------------


def passkey_available() -> bool:
    """Passkey sign-in is on for the default tenant and the WebAuthn factor is registered."""
    state = get_state()
    factor = state.service.factor(FactorKind.WEBAUTHN)
    return state.config.factors.passkey_login_allowed(state.config.default_tenant) and isinstance(
        factor, PasskeyFactor
    )


def login_page(status: int = 200, **context: Any) -> Response:
    session = current_auth_session()
    context.setdefault("signed_in_as", identifier_of(session) if session.is_authenticated else None)
    context.setdefault("username", "")
    context.setdefault("passkey_login", passkey_available())
    state = get_state()
    context.setdefault("login_by_code", state.config.factors.login_by_code)
    return page("login.html", status, **context)


def password_login(username: str, password: str, *, remember: bool = False) -> Any:
    """Begin a login of ``username`` in the default tenant and verify ``password`` when the
    password is its first step (the sign-in page's and the headless API's login); with
    ``remember``, a longer session once signed in. The outcome of the last step.

    :raises AuthFlowError: refused before any step (throttled, a store failed ...).
    """
    session = current_auth_session()
    request_handle = handle()
    with FactorCredential.password(password) as credential:
        # One commit: the begin's rows are written with the password step's.
        outcome: Any = request_handle.login_with_password(
            username, get_state().config.default_tenant, session, credential
        )
    if remember:
        remember_session(session)  # "keep me signed in": a longer session once signed in
    return outcome


def login() -> ResponseReturnValue:
    target = request_next()
    if request.method == "GET":
        return login_page(next=target)
    username = form_text("username")
    if not csrf_valid():
        return login_page(400, next=target, username=username, error=MESSAGES["csrf"])
    password = form_text("password")
    if not username.strip() or not password:
        return login_page(400, next=target, username=username, error=MESSAGES["missing"])
    try:
        remember = form_flag("remember")  # checked before the password is: a typo costs no attempt
    except InvalidInput as error:
        return login_page(400, next=target, username=username, error=error.message)
    try:
        outcome = password_login(username, password, remember=remember)
    except AuthFlowError as error:
        code = error.code if isinstance(error, EmailNotVerified) else None  # the documented code
        return login_page(
            error_status(error), next=target, username=username, error=error_message(error), error_code=code
        )
    return login_outcome(outcome, target, username)


def login_outcome(outcome: Any, target: str | None, username: str = "") -> BaseResponse:
    """The response to a login step: the next page, or the login form with the error."""
    if isinstance(outcome, Authenticated):
        rotate_csrf_token()
        return after_login(target)
    if isinstance(outcome, WorkflowPending):  # a factor to set up again before the login completes
        rotate_csrf_token()
        location = url_for(f"{VIEWS_BLUEPRINT}.factors")
        if wants_json():
            return json_answer({"status": "enrollment_required", "location": location})
        return redirect(location)
    if isinstance(outcome, FactorRequired) and outcome.kind is not FactorKind.PASSWORD:
        location = url_for(f"{VIEWS_BLUEPRINT}.factor", next=target)
        if wants_json():
            kinds = [kind.value for kind in outcome.kinds]
            return json_answer({"status": "factor_required", "kinds": kinds, "location": location})
        return redirect(location)
    if isinstance(outcome, Locked):
        return login_page(
            403,
            next=target,
            username=username,
            error=lock_message(outcome.until),
            locked_until=outcome.until,
        )
    return login_page(401, next=target, username=username, error=MESSAGES["invalid"])


# --- the factor step -----------------------------------------------------------------------------


def _pending_step() -> tuple[str, ...]:
    """The kinds of the step the session's login waits for (empty: none, or the password)."""
    session = current_auth_session()
    step = session.record.next_step if session.is_authenticating else ()
    return () if step in ((), (FactorKind.PASSWORD.value,)) else step


def _factor_page(target: str | None, status: int = 200, **context: Any) -> Response:
    kinds = _pending_step()
    methods = step_methods(kinds)
    return page(
        "factor.html",
        status,
        next=target,
        kinds=kinds,
        methods=methods,
        trust_days=get_state().devices.settings.trust_duration.days or None,
        factor=methods[0].kind if methods else (kinds[0] if kinds else None),
        **context,
    )


def factor_page(target: str | None, status: int = 200, **context: Any) -> Response:
    """The factor page of the pending step (its ways; a notice or an error in ``context``)."""
    return _factor_page(target, status, **context)


def factor() -> ResponseReturnValue:
    target = request_next()
    session = current_auth_session()
    if signed_in():
        return after_login(target)
    step = _pending_step()
    if not step:
        return to_login(target)
    if request.method == "GET":
        return _factor_page(target, notice=FACTOR_NOTICES.get(request.args.get("notice", "")))
    if not csrf_valid():
        return _factor_page(target, 400, error=MESSAGES["csrf"])
    chosen = form_text("kind") or step[0]
    if chosen not in step or chosen not in FactorKind:
        return _factor_page(target, 400, error=MESSAGES["wrong_kind"])
    kind = FactorKind(chosen)
    if kind is FactorKind.WEBAUTHN:
        secret = form_text("credential").strip()
        if not secret:
            return _factor_page(target, 400, error=MESSAGES["missing_credential"])
        if len(secret) > MAX_CREDENTIAL_LENGTH:
            return _factor_page(target, 400, error=MESSAGES["credential_too_long"])
    else:
        secret = "".join(form_text("code").split())  # "123 456" as apps show it
        if not secret:
            return _factor_page(target, 400, error=MESSAGES["missing_code"])
        if len(secret) > MAX_CODE_LENGTH:
            return _factor_page(target, 400, error=MESSAGES["too_long"])
    try:
        trust = form_flag("trust_device")
    except InvalidInput as error:
        return _factor_page(target, 400, error=error.message)
    request_trust(trust)  # "trust this device", if the sign-in completes
    try:
        with FactorCredential(kind, secret) as credential:
            outcome = handle().verify_factor(credential, session)
    except AuthFlowError as error:  # malformed input: the login is kept, nothing was counted
        return _factor_page(target, error_status(error), error=error_message(error))
    if isinstance(outcome, InvalidCredential):
        if session.is_authenticating:  # a later step: the user may try again
            message = MESSAGES["retry_key" if kind is FactorKind.WEBAUTHN else "retry_code"]
            return _factor_page(target, 401, error=message)
        return login_page(401, next=target, error=MESSAGES["invalid_code"])
    return login_outcome(outcome, target)


def factor_send() -> ResponseReturnValue:
    """ "E-mail me a code": (re)issue the challenge of a kind of the pending step."""
    target = request_next()
    if signed_in():
        return after_login(target)
    step = _pending_step()
    if not step:
        return to_login(target)
    if not csrf_valid():
        return _factor_page(target, 400, error=MESSAGES["csrf"])
    chosen = form_text("kind") or FactorKind.EMAIL_OTP.value
    if chosen not in step or chosen not in FactorKind:
        return _factor_page(target, 400, error=MESSAGES["wrong_kind"])
    kind = FactorKind(chosen)
    if not sends_codes(chosen, get_state().service.factor(kind)):
        return _factor_page(target, 400, error=MESSAGES["sends_nothing"])
    try:
        required = handle().challenge(kind, current_auth_session())
    except AuthFlowError as error:
        return _factor_page(target, error_status(error), error=error_message(error))
    answer = required.challenges.get(kind)
    problem = answer.get("error") if isinstance(answer, Mapping) else None
    if problem is not None:  # the factor declined without raising (too many codes sent ...)
        return _factor_page(target, 429 if problem == "too_many_sends" else 400, error=send_refused(problem))
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.factor", next=target, notice="code_sent"))


def send_refused(problem: object, *, step_up: bool = False) -> str:
    """What the page says when the factor declined to send a code (``problem``: its error)."""
    if step_up:
        if problem == "too_many_sends":
            return gettext(
                "You asked for the most codes one confirmation may send. Use the last one, or another way."
            )
        return gettext("No code could be sent. Try again later, or use another way.")
    if problem == "too_many_sends":
        return gettext("You asked for the most codes one sign-in may send. Start over to get a new one.")
    return gettext("No code could be sent for this sign-in. Start over, or use another way.")


def _webauthn_options(public: Mapping[str, Any]) -> Response:
    body = dict(public) if "publicKey" in public else {"publicKey": dict(public)}
    response = jsonify(body)
    response.headers["Cache-Control"] = "no-store"
    return response


def factor_webauthn_options() -> ResponseReturnValue:
    """JSON: the WebAuthn request options for the pending step of a login, or the pending
    step-up of a signed-in user (a new challenge)."""
    session = current_auth_session()
    webauthn = FactorKind.WEBAUTHN.value
    if webauthn not in _pending_step() and not (webauthn in pending_step_up(session) and signed_in()):
        # Signed in: the step-up ended (a failed try, another tab): the step-up page begins
        # a new one. Otherwise the login ended: sign in again.
        location = (
            url_for(f"{VIEWS_BLUEPRINT}.step_up", next=request_next())
            if signed_in()
            else url_for(f"{VIEWS_BLUEPRINT}.login")
        )
        return json_error(
            "login_not_started", N_("No sign-in step is waiting for a security key."), 409, location=location
        )
    if not csrf_valid():
        return json_error("csrf", MESSAGES["csrf"], 400)
    try:
        required = handle().challenge(FactorKind.WEBAUTHN, session)
    except AuthFlowError as error:
        return json_error(error.code, error_message(error), error_status(error))
    public = required.challenges.get(FactorKind.WEBAUTHN)
    if not isinstance(public, Mapping) or not public or "error" in public:
        return json_error("no_challenge", N_("The security key request could not be prepared."), 503)
    return _webauthn_options(public)


# --- passkeys ------------------------------------------------------------------------------------


def passkey_options() -> ResponseReturnValue:
    """JSON: request options for a usernameless passkey sign-in."""
    if not csrf_valid():
        return json_error("csrf", MESSAGES["csrf"], 400)
    state = get_state()
    try:
        options = handle().begin_passkey_login(state.config.default_tenant, current_auth_session())
    except AuthFlowError as error:
        return json_error(error.code, error_message(error), error_status(error))
    return _webauthn_options(options)


def passkey_login() -> ResponseReturnValue:
    """JSON: finish a passkey sign-in with the browser's assertion (form field ``credential``)."""
    target = request_next()
    if not csrf_valid():
        return json_error("csrf", MESSAGES["csrf"], 400)
    secret = form_text("credential").strip()
    if not secret:
        return json_error("invalid_input", MESSAGES["missing_credential"], 400)
    if len(secret) > MAX_CREDENTIAL_LENGTH:
        return json_error("invalid_input", MESSAGES["credential_too_long"], 400)
    try:
        with FactorCredential(FactorKind.WEBAUTHN, secret) as credential:
            outcome = handle().finish_passkey_login(credential, current_auth_session())
    except AuthFlowError as error:
        return json_error(error.code, error_message(error), error_status(error))
    if isinstance(outcome, Authenticated):
        rotate_csrf_token()
        return _json({"status": "authenticated", "location": target or post_login_url()})
    if isinstance(outcome, FactorRequired):
        return _json(
            {"status": "factor_required", "location": url_for(f"{VIEWS_BLUEPRINT}.factor", next=target)}
        )
    if isinstance(outcome, WorkflowPending):  # a second factor to set up before the sign-in completes
        rotate_csrf_token()
        return _json({"status": "enrollment_required", "location": url_for(f"{VIEWS_BLUEPRINT}.factors")})
    if isinstance(outcome, Locked):
        return json_error("locked", lock_message(outcome.until), 403, until=outcome.until.isoformat())
    return json_error("invalid_credential", MESSAGES["passkey_refused"], 401)


def _json(body: dict[str, Any]) -> Response:
    response = jsonify(body)
    response.headers["Cache-Control"] = "no-store"
    return response
