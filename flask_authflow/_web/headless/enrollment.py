"""The account's sign-in methods: list them, add an authenticator app (TOTP), a hardware
token (HOTP), e-mail codes, a security key or passkey (WebAuthn) or recovery codes, and
remove one.

The same service calls as ``/account/factors`` (:mod:`flask_authflow._web.views.security`):
adding or removing needs a fresh login whose last factor is of the user's strongest step
(else 401 ``step_up_required``: pass ``/step-up`` first); each addition is a ``begin``
that answers what the user is shown once (a key, codes, WebAuthn options; never again)
and a ``confirm`` with the proof (a code, the security key's response). A confirmed
change ends the user's other sessions, rotates this one (an app gets a new token) and
mails the owner a notice. A login held until a factor is set up may use these routes too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import after_this_request

from flask_authflow._core.factors import EnrollmentStart
from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Array, Boolean, Integer, Json, Nullable, Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views import security
from flask_authflow._web.views.common import MAX_CODE_LENGTH, MAX_CREDENTIAL_LENGTH, MESSAGES, handle
from flask_authflow.errors import FactorNotRegistered

__all__ = ["routes"]

routes = Routes("factors")

#: A factor's id as the routes take it (the pages' pattern).
FACTOR_ID = String(64, min_length=1, pattern=r"[A-Za-z0-9_-]+", description="The factor's id.")

FACTOR = Object(
    {
        "id": String(64),
        "kind": String(64),
        "kind_name": String(256, description="The kind as people read it, in the request's language."),
        "label": String(256, description="The name the user gave, or the kind's."),
        "created_at": String(64),
        "last_used_at": Nullable(String(64)),
        "detail": Nullable(String(1024), description="Codes left, a masked address, passkey or not."),
    },
    required=("id", "kind", "kind_name", "label", "created_at", "last_used_at", "detail"),
    name="Factor",
)
FACTORS = Object(
    {
        "factors": Array(FACTOR, 256),
        "offered": Array(String(64), 32, description="The kinds this site lets the user add now."),
        "required": Array(String(64), 32, description="The kinds a held login must set up (else empty)."),
    },
    required=("factors", "offered", "required"),
    name="Factors",
)
STARTED = Object(
    {
        "factor_id": String(64, description="Give it back to the kind's ``confirm``."),
        "kind": String(64),
        "secret": String(256, description="TOTP/HOTP: the key, for typing into an app by hand."),
        "otpauth_uri": String(4096, description="TOTP/HOTP: what the QR code holds."),
        "address": String(320, description="E-mail codes: where the code went."),
        "codes": Array(String(64), 64, description="Recovery codes: shown this once; confirm one."),
        "publicKey": Json(
            MAX_CREDENTIAL_LENGTH, description="WebAuthn: ``PublicKeyCredentialCreationOptions`` as JSON."
        ),
    },
    required=("factor_id", "kind"),
    name="EnrollmentStarted",
    description="What the user is shown once to set the factor up.",
)
CONFIRM_CODE = Object(
    {"factor_id": FACTOR_ID, "code": String(MAX_CODE_LENGTH, min_length=1)},
    required=("factor_id", "code"),
    name="EnrollmentCode",
)
CONFIRM_KEY = Object(
    {
        "factor_id": FACTOR_ID,
        "credential": Json(MAX_CREDENTIAL_LENGTH, description="The ``PublicKeyCredential`` as JSON."),
    },
    required=("factor_id", "credential"),
    name="EnrollmentCredential",
)
ADDRESS_BODY = Object({"address": String(320, min_length=1)}, required=("address",), name="EmailFactor")
KEY_BODY = Object(
    {
        "label": String(64, description="A name for the key (default: Security key)."),
        "passkey": Boolean(
            description="A passkey: a discoverable credential that signs in without a password."
        ),
    },
    name="SecurityKey",
)
DONE = Object(
    {"status": String(32, choices=("factor_added", "factor_removed")), "kind": String(64)},
    required=("status", "kind"),
    name="FactorChanged",
    description="Done: the user's other sessions have ended, this one has a new id.",
)
RECOVERY = Object(
    {"remaining": Integer(0, 1024), "total": Nullable(Integer(0, 1024))},
    required=("remaining", "total"),
    name="RecoveryCodesLeft",
)

_BEGIN_ERRORS = {
    400: ("factor_not_registered", "enrollment_failed"),
    401: ("login_required", "step_up_required"),
    404: ("user_not_found",),  # deleted while signed in
}
_CONFIRM_ERRORS = {**_BEGIN_ERRORS, 400: ("factor_not_registered", "enrollment_failed", "missing_code")}
_KINDS = (
    FactorKind.TOTP,
    FactorKind.HOTP,
    FactorKind.EMAIL_OTP,
    FactorKind.WEBAUTHN,
    FactorKind.RECOVERY_CODE,
)


def _allowed() -> None:
    """Signed in, or a login held until a factor is set up; else 401 ``login_required``."""
    if not security.may_enroll():
        raise Refusal("login_required", N_("Sign in first."), 401)


def _begin(kind: FactorKind, params: Mapping[str, Any]) -> EnrollmentStart:
    _allowed()
    if not security.offered_kind(kind):
        raise FactorNotRegistered(MESSAGES["unavailable_kind"])
    return handle().begin_enrollment(current_auth_session(), kind, params)


def _confirm(kind: FactorKind, factor_id: str, secret: str) -> Reply:
    _allowed()
    with FactorCredential(kind, secret) as credential:
        handle().confirm_enrollment(current_auth_session(), kind, factor_id, credential)
    after_this_request(lambda response: security.noticed("factor_added", kind.value, response))
    return Reply({"status": "factor_added", "kind": kind.value})


def _code(call: Call) -> str:
    code = "".join(str(call.body["code"]).split())
    if not code:
        raise Refusal("missing_code", MESSAGES["missing_code"], 400)
    return code


@routes.get(
    "/account/factors",
    "listFactors",
    "The account's sign-in methods",
    answers={200: Answer("The methods beside the password, and what may be added", FACTORS)},
    errors={401: ("login_required",)},
)
def list_factors(call: Call) -> Reply:
    """Never a secret: kinds, names, dates, codes left."""
    _allowed()
    configs = handle().user_factors(current_auth_session())
    rows = [security.factor_row(c) for c in configs if c.kind is not FactorKind.PASSWORD and c.factor_id]
    factors = [
        {**row, "created_at": row["created_at"].isoformat(), "last_used_at": _iso(row["last_used_at"])}
        for row in rows
    ]
    return Reply(
        {
            "factors": factors,
            "offered": [kind.value for kind in _KINDS if security.offered_kind(kind)],
            "required": list(security.held_kinds()),
        }
    )


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _started(start: EnrollmentStart, **shown: Any) -> Reply:
    return Reply({"factor_id": start.factor_id, "kind": start.kind.value, **shown}, 201)


def _otp(kind: FactorKind) -> Reply:
    start = _begin(kind, {})
    public = start.public
    return _started(
        start, secret=str(public.get("secret", "")), otpauth_uri=str(public.get("otpauth_uri", ""))
    )


_STARTED = {201: Answer("Set up the factor, then confirm it", STARTED)}
_DONE = {200: Answer("The factor is added", DONE)}


@routes.post(
    "/account/factors/totp", "beginTotp", "Add an authenticator app", answers=_STARTED, errors=_BEGIN_ERRORS
)
def begin_totp(call: Call) -> Reply:
    """A new key (shown once): add it to the app, then confirm a code. A new app replaces
    the old one."""
    return _otp(FactorKind.TOTP)


@routes.post(
    "/account/factors/totp/confirm",
    "confirmTotp",
    "Confirm an authenticator app with a code",
    body=CONFIRM_CODE,
    answers=_DONE,
    errors=_CONFIRM_ERRORS,
)
def confirm_totp(call: Call) -> Reply:
    return _confirm(FactorKind.TOTP, call.body["factor_id"], _code(call))


@routes.post(
    "/account/factors/hotp",
    "beginHotp",
    "Add a hardware token (HOTP)",
    answers=_STARTED,
    errors=_BEGIN_ERRORS,
)
def begin_hotp(call: Call) -> Reply:
    """A new counter-based key (shown once), then confirm a code."""
    return _otp(FactorKind.HOTP)


@routes.post(
    "/account/factors/hotp/confirm",
    "confirmHotp",
    "Confirm a hardware token with a code",
    body=CONFIRM_CODE,
    answers=_DONE,
    errors=_CONFIRM_ERRORS,
)
def confirm_hotp(call: Call) -> Reply:
    return _confirm(FactorKind.HOTP, call.body["factor_id"], _code(call))


@routes.post(
    "/account/factors/email",
    "beginEmailCodes",
    "Add e-mail codes",
    body=ADDRESS_BODY,
    answers=_STARTED,
    errors={**_BEGIN_ERRORS, 429: ("throttled",), 503: ("mail_delivery_failed",)},
)
def begin_email(call: Call) -> Reply:
    """Send a code to ``address``, then confirm it."""
    address = call.body["address"].strip()
    start = _begin(FactorKind.EMAIL_OTP, {"address": address})
    return _started(start, address=address)


@routes.post(
    "/account/factors/email/confirm",
    "confirmEmailCodes",
    "Confirm e-mail codes with the code sent",
    body=CONFIRM_CODE,
    answers=_DONE,
    errors=_CONFIRM_ERRORS,
)
def confirm_email(call: Call) -> Reply:
    return _confirm(FactorKind.EMAIL_OTP, call.body["factor_id"], _code(call))


@routes.post(
    "/account/factors/webauthn",
    "beginSecurityKey",
    "Add a security key or passkey",
    body=KEY_BODY,
    answers=_STARTED,
    errors=_BEGIN_ERRORS,
)
def begin_webauthn(call: Call) -> Reply:
    """Creation options for ``navigator.credentials.create``; confirm with its response."""
    label = " ".join(call.body.get("label", "").split()) or N_("Security key")  # stored in English
    passkey = call.body.get("passkey", False)
    start = _begin(FactorKind.WEBAUTHN, {"label": label, "passkey": passkey})
    public = dict(start.public)
    return _started(start, publicKey=public.get("publicKey", public))


@routes.post(
    "/account/factors/webauthn/confirm",
    "confirmSecurityKey",
    "Confirm a security key with its response",
    body=CONFIRM_KEY,
    answers=_DONE,
    errors=_CONFIRM_ERRORS,
)
def confirm_webauthn(call: Call) -> Reply:
    return _confirm(FactorKind.WEBAUTHN, call.body["factor_id"], call.body["credential"])


@routes.post(
    "/account/factors/recovery-codes",
    "generateRecoveryCodes",
    "Make new recovery codes",
    answers=_STARTED,
    errors=_BEGIN_ERRORS,
)
def begin_recovery(call: Call) -> Reply:
    """Ten new codes, shown once; confirming one of them makes them the user's codes and
    ends any earlier set (until then the earlier set keeps working)."""
    start = _begin(FactorKind.RECOVERY_CODE, {})
    codes = start.public.get("codes")
    return _started(start, codes=[c for c in codes if isinstance(c, str)] if isinstance(codes, list) else [])


@routes.post(
    "/account/factors/recovery-codes/confirm",
    "confirmRecoveryCodes",
    "Confirm new recovery codes with one of them",
    body=CONFIRM_CODE,
    answers=_DONE,
    errors=_CONFIRM_ERRORS,
)
def confirm_recovery(call: Call) -> Reply:
    return _confirm(FactorKind.RECOVERY_CODE, call.body["factor_id"], _code(call))


@routes.get(
    "/account/factors/recovery-codes",
    "countRecoveryCodes",
    "How many recovery codes are left",
    answers={200: Answer("Codes left (0 without a set)", RECOVERY)},
    errors={401: ("login_required",)},
)
def count_recovery(call: Call) -> Reply:
    _allowed()
    configs = handle().user_factors(current_auth_session())
    sets = [c for c in configs if c.kind is FactorKind.RECOVERY_CODE and c.factor_id]
    if not sets:
        return Reply({"remaining": 0, "total": None})
    total = (sets[-1].data or {}).get("count")
    return Reply(
        {
            "remaining": security.remaining_uses(sets[-1]) or 0,
            "total": total if isinstance(total, int) else None,
        }
    )


@routes.delete(
    "/account/factors/{factor_id}",
    "removeFactor",
    "Remove a sign-in method",
    params={"factor_id": FACTOR_ID},
    answers={200: Answer("The method is removed", DONE)},
    errors={401: ("login_required", "step_up_required"), 404: ("not_found",)},
)
def remove_factor(call: Call) -> Reply:
    """The password cannot be removed here; an id that is not one of the user's is 404."""
    _allowed()
    factor_id = call.params["factor_id"]
    session = current_auth_session()
    kinds = {c.factor_id: c.kind.value for c in handle().user_factors(session)}
    if not handle().disable_factor(session, factor_id):
        raise Refusal("not_found", MESSAGES["no_factor"], 404)
    kind = kinds.get(factor_id, "")
    after_this_request(lambda response: security.noticed("factor_removed", kind, response))
    return Reply({"status": "factor_removed", "kind": kind})
