"""TOTP (RFC 6238) and HOTP (RFC 4226) with pyotp: 6 digits, SHA-1; TOTP 30 s and ±1 step,
HOTP a look-ahead of 10; each counter value accepted once.

The key (160 bits) is sealed at rest (:mod:`.sealing`). The factor's ``counter`` is the
next time step that may be used: a code of step ``s`` passes only if the store moves the
counter from at most ``s`` to ``s + 1`` in one conditional statement, so a code (or any
older one) is accepted once per user, across logins, threads and processes.
"""

from __future__ import annotations

import base64
import io
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import pyotp
import segno

from flask_authflow._core.factors import (
    Accepted,
    EnrollContext,
    EnrollmentStart,
    FactorCheck,
    FactorContext,
    Rejected,
    RejectReason,
    StoredEnrollment,
)
from flask_authflow._core.ports import FactorConfig
from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.mfa._otp import (
    HOTP_LOOK_AHEAD,
    TOTP_DIGITS,
    TOTP_PERIOD,
    TOTP_SECRET_BYTES,
    codes_equal,
    hotp_value,
    parse_code,
    totp_step,
)
from flask_authflow.mfa._sealing import SECRET_UNREADABLE, FactorSealer

__all__ = ["TOTP_WINDOW", "HotpFactor", "TotpFactor", "advance_to", "imported_key", "qr_svg"]

#: Steps accepted either side of the current one (clock drift between phone and server).
TOTP_WINDOW = 1
#: How far back a code is recognised as *replayed* rather than simply wrong (audit only).
_REPLAY_LOOKBACK = 3


def qr_svg(data: str) -> str:
    """``data`` as a QR code, an inline ``<svg>`` element (no external asset, no script)."""
    buffer = io.BytesIO()
    segno.make(data, error="m", micro=False).save(
        buffer,
        kind="svg",
        xmldecl=False,
        svgns=True,
        scale=4,
        border=4,
        svgclass="authflow-qr",
        title="QR code",
    )
    return buffer.getvalue().decode("utf-8")


class TotpFactor(StoredEnrollment):
    """The ``totp`` factor and its enrollment.

    :param sealer: seals the key at rest (factor id as associated data).
    """

    __slots__ = ("sealer",)
    #: A cheap check: reservation, check and settlement share one transaction.
    expensive = False
    #: Nothing to send: the authenticator app shows the code.
    challenge_on_request = False
    digits = TOTP_DIGITS

    def __init__(self, sealer: FactorSealer) -> None:
        self.sealer = sealer

    @property
    def kind(self) -> FactorKind:
        return FactorKind.TOTP

    def check_input(self, credential: FactorCredential) -> None:
        parse_code(credential, TOTP_DIGITS)

    def challenge(self, ctx: FactorContext) -> None:
        return None  # the authenticator app needs nothing from us

    def _key(self, config: FactorConfig) -> str | None:
        key = self.sealer.open_factor(config)  # None, logged: an unreadable key never matches
        try:
            return key.decode("ascii") if key is not None else None
        except UnicodeDecodeError:  # fail closed
            return None

    def _candidates(self, config: FactorConfig, now: datetime) -> tuple[range, range]:
        """(counters a code may match, used counters that only identify a replay)."""
        step = totp_step(now, TOTP_PERIOD)
        fresh = range(max(step - TOTP_WINDOW, config.counter), step + TOTP_WINDOW + 1)
        used = range(step - _REPLAY_LOOKBACK, min(config.counter, step + TOTP_WINDOW + 1))
        return fresh, used

    def _match(self, config: FactorConfig, code: str, now: datetime) -> tuple[int | None, bool] | None:
        """(the matching counter not yet used, whether the code matched a used one); ``None``
        when the key opens under no configured key (logged by the sealer)."""
        key = self._key(config)
        if key is None:
            return None
        fresh, used = self._candidates(config, now)
        for candidate in fresh:
            if codes_equal(hotp_value(key, candidate, TOTP_DIGITS), code):
                return candidate, False
        replayed = any(codes_equal(hotp_value(key, c, TOTP_DIGITS), code) for c in used if c >= 0)
        return None, replayed

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        code = parse_code(credential, TOTP_DIGITS)
        if not ctx.factors:
            return Rejected(RejectReason.NOT_ENROLLED)
        replayed, readable = False, False
        for config in ctx.factors:
            found = self._match(config, code, ctx.now)
            if found is None:
                continue
            matched, seen = found
            replayed, readable = replayed or seen, True
            if matched is not None:
                return Accepted(config.factor_id, commit=advance_to(ctx, config.factor_id, matched + 1))
        if not readable:  # no key of the user opens: say so in the audit row (and the log)
            return Rejected(SECRET_UNREADABLE)
        return Rejected(RejectReason.REPLAYED if replayed else RejectReason.INVALID)

    # --- enrollment ------------------------------------------------------------------------

    def provisioning_uri(self, key: str, account_name: str, issuer_name: str) -> str:
        """The ``otpauth://totp/...`` URI authenticator apps read (from the QR code)."""
        return pyotp.TOTP(key, digits=TOTP_DIGITS, interval=TOTP_PERIOD).provisioning_uri(
            name=account_name, issuer_name=issuer_name
        )

    #: Stored in English; the pages show it translated.
    label = N_("Authenticator app")

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        """A new key, stored sealed and pending; the URI and its QR code for the user's app."""
        factor_id = secrets.token_urlsafe(16)
        key = base64.b32encode(secrets.token_bytes(TOTP_SECRET_BYTES)).decode("ascii")
        config = FactorConfig(
            user_id=ctx.user_id,
            kind=self.kind,
            created_at=ctx.now,
            secret=self.sealer.seal(factor_id, key.encode("ascii")),
            factor_id=factor_id,
            confirmed=False,
            data={"label": self.label},
        )
        ctx.store.add_factor(ctx.tenant, config)
        uri = self.provisioning_uri(key, ctx.account_name, ctx.issuer_name)
        return EnrollmentStart(
            factor_id=factor_id,
            kind=self.kind,
            # The key in clear for manual entry in an app: shown this once, stored only sealed.
            public={
                "otpauth_uri": uri,
                "qr_svg": qr_svg(uri),
                "secret": key,
            },
        )

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        """The user typed a code from the new key: it must match (±1 step), and it is used up."""
        code = parse_code(credential, TOTP_DIGITS)
        config = ctx.store.get_factor(ctx.tenant, ctx.user_id, factor_id)
        if config is None or config.kind is not self.kind:
            return Rejected(RejectReason.NOT_ENROLLED)
        found = self._match(config, code, ctx.now)
        if found is None or found[0] is None:
            return Rejected(SECRET_UNREADABLE if found is None else RejectReason.INVALID)
        matched = found[0]
        # The proving code may not be used again at the first login: once the service has
        # confirmed the factor, it runs this commit, which marks the step used.
        return Accepted(factor_id, commit=advance_to(ctx, factor_id, matched + 1))


def advance_to(ctx: FactorContext | EnrollContext, factor_id: str, counter: int) -> Callable[[], bool]:
    """The single-use update: move the factor's counter to ``counter`` if it is below it."""
    store, tenant, user_id, now = ctx.store, ctx.tenant, ctx.user_id, ctx.now
    return lambda: store.advance_factor_counter(tenant, user_id, factor_id, counter, now=now)


class HotpFactor(TotpFactor):
    """The ``hotp`` factor (RFC 4226, counter-based tokens) and its enrollment.

    ``counter`` is the next counter the token may show; a code matching one of the next
    ``HOTP_LOOK_AHEAD`` (10) values passes and moves the counter past it, by
    compare-and-set in the store (reuse, and a second request racing with the same code,
    are refused).
    """

    __slots__ = ()
    label = N_("Hardware token")

    @property
    def kind(self) -> FactorKind:
        return FactorKind.HOTP

    def _candidates(self, config: FactorConfig, now: datetime) -> tuple[range, range]:
        start = config.counter
        return range(start, start + HOTP_LOOK_AHEAD), range(max(0, start - HOTP_LOOK_AHEAD), start)

    def provisioning_uri(self, key: str, account_name: str, issuer_name: str) -> str:
        """The ``otpauth://hotp/...`` URI (initial counter 0)."""
        return pyotp.HOTP(key, digits=TOTP_DIGITS).provisioning_uri(
            name=account_name, issuer_name=issuer_name, initial_count=0
        )


def imported_key(
    sealer: FactorSealer, user_id: str, kind: FactorKind, key: bytes, now: datetime, counter: int = 0
) -> FactorConfig:
    """A confirmed TOTP or HOTP factor for a key another application issued (an import):
    the user's authenticator app keeps showing valid codes. ``counter``: HOTP's next counter
    (TOTP starts at 0: any current code passes once).

    :raises ValueError: another kind, an empty key or a negative counter."""
    if kind not in (FactorKind.TOTP, FactorKind.HOTP) or not key or counter < 0:
        raise ValueError("an imported one-time-password key is a TOTP or HOTP key with a counter >= 0")
    factor_id = secrets.token_urlsafe(16)
    encoded = base64.b32encode(key).decode("ascii").rstrip("=")
    label = HotpFactor.label if kind is FactorKind.HOTP else TotpFactor.label
    return FactorConfig(
        user_id=user_id,
        kind=kind,
        created_at=now,
        secret=sealer.seal(factor_id, encoded.encode("ascii")),
        factor_id=factor_id,
        counter=counter,
        data={"label": label},
    )
