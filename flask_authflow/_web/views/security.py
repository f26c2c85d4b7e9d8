"""The account's sign-in methods (``/account/factors``): list them, add an authenticator app,
a security key or passkey, e-mail codes, recovery codes, and remove them.

Adding or removing a factor needs a recent login (``AUTHFLOW_FRESHNESS``): when the
service answers :class:`~flask_authflow.errors.StepUpNeeded`, the user is sent to the
step-up page and comes back here. A confirmed change ends the user's other sessions
(the service does it) and gives this session a new id. Secrets are shown once, in the
response to the POST that created them (the TOTP key and its QR code, recovery codes),
and never stored anywhere they could be shown again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from flask import Response, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue
from markupsafe import Markup
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.factors import EnrollmentStart
from flask_authflow._core.ports import FactorConfig
from flask_authflow._i18n import N_, gettext, ngettext, translate
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.decorators import login_required
from flask_authflow._web.security_notices import notify
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.common import (
    MAX_CODE_LENGTH,
    MAX_CREDENTIAL_LENGTH,
    MESSAGES,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    form_text,
    handle,
    json_error,
    page,
    signed_in,
    to_login,
    to_step_up,
)
from flask_authflow._web.views.signin import passkey_available
from flask_authflow.errors import AuthFlowError, EnrollmentError, FactorNotRegistered, StepUpNeeded
from flask_authflow.login import _required_enrollment as required_enrollment

__all__ = [
    "FACTORS_NOTICES",
    "KIND_NAMES",
    "confirm_email",
    "confirm_recovery_codes",
    "confirm_totp",
    "confirm_webauthn",
    "enroll_email",
    "enroll_totp",
    "factor_row",
    "factors",
    "generate_recovery_codes",
    "held_kinds",
    "may_enroll",
    "noticed",
    "offered_kind",
    "remaining_uses",
    "remove_factor",
    "webauthn_enroll_options",
]

#: What the factors page calls each kind.
KIND_NAMES = {
    "totp": N_("Authenticator app"),
    "hotp": N_("Hardware token"),
    "email_otp": N_("E-mail codes"),
    "webauthn": N_("Security key"),
    "recovery_code": N_("Recovery codes"),
}

#: The notices the factors page shows after a redirect (``?notice=...``); only these keys.
FACTORS_NOTICES = {
    "totp_added": N_("Your authenticator app is set up. Your other sessions have been logged out."),
    "webauthn_added": N_("Your security key is added. Your other sessions have been logged out."),
    "email_added": N_("E-mail codes are set up. Your other sessions have been logged out."),
    "recovery_added": N_(
        "Your recovery codes are active; earlier recovery codes no longer work. "
        "Your other sessions have been logged out."
    ),
    "factor_removed": N_("The sign-in method has been removed. Your other sessions have been logged out."),
}

_FACTOR_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_LABEL = 64
_MAX_ADDRESS = 320
_TRUE = frozenset({"1", "on", "true", "yes"})


# --- helpers -------------------------------------------------------------------------------------


def _here() -> str:
    return url_for(f"{VIEWS_BLUEPRINT}.factors")


def _done(notice: str) -> BaseResponse:
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.factors", notice=notice))


def _noticed(event: str, kind: str, response: BaseResponse) -> BaseResponse:
    """``response``, with the owner's security notice of ``event`` for a factor of ``kind``."""
    session = current_auth_session()
    name = KIND_NAMES.get(kind, kind.replace("_", " ").capitalize())  # translated in the mail
    return notify(event, str(session.tenant), str(session.user_id), response, kind=name)


def _can_enroll(kind: FactorKind) -> bool:
    """A factor of ``kind`` can be added here: it is registered and, for e-mail codes, the
    app can send mail (``AUTHFLOW_SMTP_HOST``, or a test outbox)."""
    state = get_state()
    if kind is FactorKind.EMAIL_OTP and state.mail_sender is None:
        return False
    try:
        state.service.enrollment(kind)
    except FactorNotRegistered:
        return False
    return True


def _masked(address: str) -> str:
    """``a***@example.com``: enough to recognise one's address, not to harvest it from a screen."""
    local, at, domain = address.rpartition("@")
    return f"{local[:1]}***@{domain}" if at and local else "***"


def _remaining(config: FactorConfig) -> int | None:
    """How many uses the factor has left (recovery codes), as its enrollment counts them."""
    try:
        enrollment = get_state().service.enrollment(config.kind)
    except FactorNotRegistered:
        return None
    return enrollment.remaining(config)


def _factor_row(config: FactorConfig) -> dict[str, Any]:
    kind = config.kind.value
    data: Mapping[str, Any] = config.data or {}
    label = data.get("label")
    detail = None
    left = _remaining(config)
    if left is not None:
        total = data.get("count")
        detail = (
            ngettext("%(num)d of %(total)d codes left", "%(num)d of %(total)d codes left", left, total=total)
            if isinstance(total, int)
            else ngettext("%(num)d code left", "%(num)d codes left", left)
        )
    elif kind == FactorKind.EMAIL_OTP.value and isinstance(data.get("address"), str):
        detail = _masked(data["address"])
    elif kind == FactorKind.WEBAUTHN.value and data.get("passkey") is True:
        detail = gettext("Passkey: signs you in without a password")
    return {
        "id": config.factor_id,
        "kind": kind,
        "kind_name": translate(KIND_NAMES.get(kind, kind.replace("_", " ").capitalize())),
        # a name the user gave, or a default name stored in English ("Authenticator app")
        "label": translate(label if isinstance(label, str) and label else KIND_NAMES.get(kind, kind)),
        "created_at": config.created_at,
        "last_used_at": config.last_used_at,
        "detail": detail,
    }


def _held_kinds() -> tuple[str, ...]:
    """The kinds a login held for a required enrollment must set up (empty: not held)."""
    return required_enrollment.pending_kinds(current_auth_session().record, get_state().clock.now())


def _offered(kind: FactorKind) -> bool:
    """A factor of ``kind`` can be added now: offered here, and (a login held until a factor
    is set up) one of the kinds it must set up."""
    held = _held_kinds()
    return _can_enroll(kind) and (not held or kind.value in held)


def _may_enroll() -> bool:
    """Signed in, or a login held until a factor is set up again."""
    return signed_in() or bool(_held_kinds())


def _factors_page(status: int = 200, *, error: str | None = None, notice: str | None = None) -> Response:
    session = current_auth_session()
    configs = handle().user_factors(session)
    rows = [_factor_row(c) for c in configs if c.kind is not FactorKind.PASSWORD and c.factor_id]
    kinds = {row["kind"] for row in rows}
    held = _held_kinds()
    return page(
        "factors.html",
        status,
        error=error,
        notice=notice,
        factors=rows,
        required=[translate(KIND_NAMES.get(kind, kind)) for kind in held],
        has_second_factor=bool(kinds - {FactorKind.RECOVERY_CODE.value}),
        has_recovery_codes=FactorKind.RECOVERY_CODE.value in kinds,
        can_totp=_offered(FactorKind.TOTP),
        can_webauthn=_offered(FactorKind.WEBAUTHN),
        can_email=_offered(FactorKind.EMAIL_OTP),
        can_recovery=_offered(FactorKind.RECOVERY_CODE),
        passkey_login=passkey_available() and not held,
    )


def _no_store(response: Response) -> Response:
    """A page that shows a secret once: never kept by a cache or the browser's history."""
    response.headers["Cache-Control"] = "no-store"
    return response


def _refused() -> BaseResponse | None:
    """Why a form here may not run: not signed in (to the login page) or a bad token."""
    if not _may_enroll():
        return to_login(_here())
    if not csrf_valid():
        return _factors_page(400, error=MESSAGES["csrf"])
    return None


def _begin(kind: FactorKind, params: Mapping[str, Any]) -> EnrollmentStart | BaseResponse:
    """Start an enrollment, or the response that replaces the page (step-up, refusal)."""
    if not _can_enroll(kind):
        return _factors_page(400, error=MESSAGES["unavailable_kind"])
    try:
        return handle().begin_enrollment(current_auth_session(), kind, params)
    except StepUpNeeded:
        return to_step_up(_here())
    except AuthFlowError as error:
        return _factors_page(error_status(error), error=error_message(error))


def _pending_id() -> str | None:
    factor_id = form_text("factor_id")
    return factor_id if _FACTOR_ID.fullmatch(factor_id) else None


def _confirm(kind: FactorKind, factor_id: str, secret: str) -> AuthFlowError | BaseResponse | None:
    """Confirm an enrollment: ``None`` when done, the error to show, or a step-up redirect."""
    try:
        with FactorCredential(kind, secret) as credential:
            handle().confirm_enrollment(current_auth_session(), kind, factor_id, credential)
    except StepUpNeeded:
        return to_step_up(_here())
    except AuthFlowError as error:
        return error
    return None


def _code() -> tuple[str, str | None]:
    """The code typed in the form (spaces removed), and the message refusing it, if any."""
    code = "".join(form_text("code").split())
    if not code:
        return code, MESSAGES["missing_code"]
    if len(code) > MAX_CODE_LENGTH:
        return code, MESSAGES["too_long"]
    return code, None


def _enroll_message(error: AuthFlowError, kind: FactorKind) -> str:
    """A refused confirmation: a wrong proof or a set-up that expired look the same to the
    user (try again; if that fails, start again); malformed input keeps its own message."""
    if isinstance(error, EnrollmentError):
        return MESSAGES["enroll_key" if kind is FactorKind.WEBAUTHN else "enroll_code"]
    return error_message(error)


# --- the list ------------------------------------------------------------------------------------


def factors() -> ResponseReturnValue:
    if _held_kinds():  # a login held until a factor is set up again: only that is offered
        return _factors_page(notice=FACTORS_NOTICES.get(request.args.get("notice", "")))
    return _listed()


@login_required
def _listed() -> ResponseReturnValue:
    return _factors_page(notice=FACTORS_NOTICES.get(request.args.get("notice", "")))


def remove_factor(factor_id: str) -> ResponseReturnValue:
    refused = _refused()
    if refused is not None:
        return refused
    if not _FACTOR_ID.fullmatch(factor_id):
        return _factors_page(404, error=MESSAGES["no_factor"])
    try:
        kinds = {c.factor_id: c.kind.value for c in handle().user_factors(current_auth_session())}
        removed = handle().disable_factor(current_auth_session(), factor_id)
    except StepUpNeeded:
        return to_step_up(_here())
    except AuthFlowError as error:
        return _factors_page(error_status(error), error=error_message(error))
    if not removed:
        return _factors_page(404, error=MESSAGES["no_factor"])
    return _noticed("factor_removed", kinds.get(factor_id, ""), _done("factor_removed"))


# --- authenticator app (TOTP) --------------------------------------------------------------------


def _totp_page(
    factor_id: str, public: Mapping[str, Any] | None, status: int = 200, **context: Any
) -> Response:
    qr = public.get("qr_svg") if public else None
    secret = public.get("secret") if public else None
    return _no_store(
        page(
            "enroll_totp.html",
            status,
            factor_id=factor_id,
            # segno's SVG of the otpauth URI: path data and a fixed title, no text of the user's.
            qr_svg=Markup(qr) if isinstance(qr, str) and qr.lstrip().startswith("<svg") else None,  # noqa: S704
            secret=secret if isinstance(secret, str) else None,
            otpauth_uri=public.get("otpauth_uri") if public else None,
            **context,
        )
    )


def enroll_totp() -> ResponseReturnValue:
    if request.method == "GET":  # a reload of the set-up page: the key is never shown twice
        return redirect(_here())
    refused = _refused()
    if refused is not None:
        return refused
    start = _begin(FactorKind.TOTP, {})
    if not isinstance(start, EnrollmentStart):
        return start
    return _totp_page(start.factor_id, start.public)


def confirm_totp() -> ResponseReturnValue:
    return _confirm_code(
        FactorKind.TOTP,
        "totp_added",
        lambda factor_id, status, **ctx: _totp_page(factor_id, None, status, **ctx),
    )


def _confirm_code(kind: FactorKind, notice: str, render: Callable[..., Response]) -> ResponseReturnValue:
    """The proof-of-possession form of a code-based enrollment: CSRF, the pending factor,
    the typed code; ``render(factor_id, status, error=...)`` shows the set-up page again."""
    refused = _refused()
    if refused is not None:
        return refused
    factor_id = _pending_id()
    if factor_id is None:
        return _factors_page(400, error=MESSAGES["no_pending"])
    code, problem = _code()
    if problem is not None:
        return render(factor_id, 400, error=problem)
    result = _confirm(kind, factor_id, code)
    if isinstance(result, AuthFlowError):
        return render(factor_id, error_status(result), error=_enroll_message(result, kind))
    return result if result is not None else _noticed("factor_added", kind.value, _done(notice))


# --- recovery codes ------------------------------------------------------------------------------


def _recovery_page(factor_id: str, codes: list[str] | None, status: int = 200, **context: Any) -> Response:
    return _no_store(page("recovery_codes.html", status, factor_id=factor_id, codes=codes, **context))


def generate_recovery_codes() -> ResponseReturnValue:
    if request.method == "GET":  # the codes were shown once, in the answer to the POST
        return redirect(_here())
    refused = _refused()
    if refused is not None:
        return refused
    start = _begin(FactorKind.RECOVERY_CODE, {})
    if not isinstance(start, EnrollmentStart):
        return start
    codes = start.public.get("codes")
    shown = [c for c in codes if isinstance(c, str)] if isinstance(codes, list) else []
    return _recovery_page(start.factor_id, shown)


def confirm_recovery_codes() -> ResponseReturnValue:
    return _confirm_code(
        FactorKind.RECOVERY_CODE,
        "recovery_added",
        lambda factor_id, status, **ctx: _recovery_page(factor_id, None, status, **ctx),
    )


# --- e-mail codes --------------------------------------------------------------------------------


def _email_page(factor_id: str, address: str, status: int = 200, **context: Any) -> Response:
    return _no_store(page("enroll_email.html", status, factor_id=factor_id, address=address, **context))


def enroll_email() -> ResponseReturnValue:
    if request.method == "GET":
        return redirect(_here())
    refused = _refused()
    if refused is not None:
        return refused
    address = form_text("address").strip()
    if not address:
        return _factors_page(400, error=MESSAGES["missing_address"])
    if len(address) > _MAX_ADDRESS:
        return _factors_page(
            400, error=gettext("The address is too long (at most %(max)d characters).", max=_MAX_ADDRESS)
        )
    start = _begin(FactorKind.EMAIL_OTP, {"address": address})
    if not isinstance(start, EnrollmentStart):
        return start
    return _email_page(start.factor_id, address)


def confirm_email() -> ResponseReturnValue:
    address = form_text("address").strip()[:_MAX_ADDRESS]
    return _confirm_code(
        FactorKind.EMAIL_OTP,
        "email_added",
        lambda factor_id, status, **ctx: _email_page(factor_id, address, status, **ctx),
    )


# --- security keys and passkeys (WebAuthn) -------------------------------------------------------


def webauthn_enroll_options() -> ResponseReturnValue:
    """JSON: start adding a security key: ``{"factor_id", "publicKey"}`` for
    ``navigator.credentials.create``; a step-up or a login answers with a ``location``."""
    if not _may_enroll():
        return json_error("unauthenticated", N_("Sign in first."), 401, location=to_login(_here()).location)
    if not csrf_valid():
        return json_error("csrf", MESSAGES["csrf"], 400)
    if not _can_enroll(FactorKind.WEBAUTHN):
        return json_error("factor_not_registered", MESSAGES["unavailable_kind"], 400)
    label = " ".join(form_text("label").split()) or N_("Security key")  # stored in English, shown translated
    if len(label) > _MAX_LABEL:
        return json_error(
            "invalid_input",
            gettext("The name is too long (at most %(max)d characters).", max=_MAX_LABEL),
            400,
        )
    passkey = form_text("passkey").strip().lower() in _TRUE
    try:
        start = handle().begin_enrollment(
            current_auth_session(), FactorKind.WEBAUTHN, {"label": label, "passkey": passkey}
        )
    except StepUpNeeded as error:
        return json_error(
            error.code, N_("Confirm it is you first."), 401, location=to_step_up(_here()).location
        )
    except AuthFlowError as error:
        return json_error(error.code, error_message(error), error_status(error))
    public = dict(start.public)
    body = public if "publicKey" in public else {"publicKey": public}
    response = jsonify({"factor_id": start.factor_id, **body})
    response.headers["Cache-Control"] = "no-store"
    return response


def confirm_webauthn() -> ResponseReturnValue:
    refused = _refused()
    if refused is not None:
        return refused
    factor_id = _pending_id()
    if factor_id is None:
        return _factors_page(400, error=MESSAGES["no_pending"])
    credential = form_text("credential").strip()
    if not credential:
        return _factors_page(400, error=MESSAGES["missing_credential"])
    if len(credential) > MAX_CREDENTIAL_LENGTH:
        return _factors_page(400, error=MESSAGES["credential_too_long"])
    result = _confirm(FactorKind.WEBAUTHN, factor_id, credential)
    if isinstance(result, AuthFlowError):
        return _factors_page(error_status(result), error=_enroll_message(result, FactorKind.WEBAUTHN))
    return result if result is not None else _noticed("factor_added", "webauthn", _done("webauthn_added"))


#: What the headless API shares with these pages: the kinds a held login must set up,
#: whether this session may enroll, a factor's uses left, a factor as the list shows it,
#: and the owner's notice of a change.
factor_row = _factor_row
held_kinds = _held_kinds
may_enroll = _may_enroll
offered_kind = _offered
noticed = _noticed
remaining_uses = _remaining
