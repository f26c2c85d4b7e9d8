"""Recovery codes: 10 single-use codes, shown once, stored as HMAC digests.

Each code is 10 characters of a 32-letter alphabet without look-alikes (about 49 bits), shown
as ``xxxxx-xxxxx``; input is accepted with or without the hyphen, in either case. The
store keeps HMAC-SHA256 digests under a server key (:meth:`FactorSealer.code_digest`,
scoped by the factor id) rather than Argon2 hashes: a random code of about 49 bits needs no slow
hash, the server key makes a stolen database useless for guessing, and a check costs
microseconds instead of an Argon2 run per stored code.

The set is one factor record: ``secret`` is the JSON list of unused digests, ``counter``
its version. Using a code removes its digest by compare-and-set on the version, retried
when another code of the set was used meanwhile; so of two requests presenting the same
code, exactly one wins. Regenerating replaces the whole set (the old codes die).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

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
from flask_authflow._core.ports import FactorConfig, FactorRecordStore
from flask_authflow._i18n import gettext
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.errors import InvalidInput
from flask_authflow.mfa._sealing import FactorSealer

__all__ = ["RECOVERY_CODE_COUNT", "RecoveryCodeFactor", "format_code", "imported_code_set"]

#: How many codes a set has.
RECOVERY_CODE_COUNT = 10
_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # 31 signs, no i, l, o, 0, 1: nothing to misread
_LENGTH = 10
_INPUT = re.compile(rb"[a-zA-Z0-9]{5}-?[a-zA-Z0-9]{5}|[a-zA-Z0-9]{4}(?:-?[a-zA-Z0-9]{4}){1,3}")
_SWAP_ATTEMPTS = 5


def _new_code() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))


def format_code(code: str) -> str:
    """``abcdefghjk`` as shown to the user: ``abcde-fghjk``."""
    return f"{code[:5]}-{code[5:]}"


def _parse(credential: FactorCredential) -> str:
    code = _normalised(credential.secret_bytes())
    if code is None:
        raise InvalidInput(gettext("A recovery code is 10 letters and digits, as xxxxx-xxxxx."))
    return code


def _normalised(raw: bytes) -> str | None:
    """A code as its digest is made of it (no hyphens, lower case); ``None`` when it is not
    of our shape (``xxxxx-xxxxx``) or of an imported one (groups of four: Flask-Security-Too's
    ``xxxx-xxxx-xxxx``)."""
    raw = raw.strip()
    if _INPUT.fullmatch(raw) is None:
        return None
    return raw.replace(b"-", b"").decode("ascii").lower()


def imported_code_set(sealer: FactorSealer, user_id: str, codes: list[str], now: datetime) -> FactorConfig:
    """A confirmed recovery-code set of codes another application issued (an import):
    the user's unused codes keep working, each once.

    :raises ValueError: no codes, or a code of a shape the sign-in form does not accept."""
    normalised = [_normalised(code.encode("utf-8")) if code.isascii() else None for code in codes]
    if not normalised or any(code is None for code in normalised):
        raise ValueError("recovery codes of a shape flask-authflow does not accept")
    factor_id = secrets.token_urlsafe(16)
    digests = [sealer.code_digest(factor_id, code) for code in normalised if code is not None]
    return FactorConfig(
        user_id=user_id,
        kind=FactorKind.RECOVERY_CODE,
        created_at=now,
        secret=json.dumps(digests),
        factor_id=factor_id,
        data={"label": "Recovery codes", "count": len(digests)},
    )


class RecoveryCodeFactor(StoredEnrollment):
    """The ``recovery_code`` factor and its enrollment (a new set replaces the old one)."""

    __slots__ = ("sealer",)
    #: A cheap check: reservation, check and settlement share one transaction.
    expensive = False
    challenge_on_request = False
    #: A recovery code is letters and digits (xxxxx-xxxxx), not a numeric code.
    digits = None

    def __init__(self, sealer: FactorSealer) -> None:
        self.sealer = sealer

    @property
    def kind(self) -> FactorKind:
        return FactorKind.RECOVERY_CODE

    def check_input(self, credential: FactorCredential) -> None:
        _parse(credential)

    def challenge(self, ctx: FactorContext) -> None:
        return None

    def _digests(self, config: FactorConfig) -> list[str]:
        try:
            digests = json.loads(config.secret)
        except ValueError:
            return []
        return [d for d in digests if isinstance(d, str)] if isinstance(digests, list) else []

    def _find(self, config: FactorConfig, code: str) -> str | None:
        wanted = self.sealer.code_digest(config.factor_id, code)
        found = None
        for digest in self._digests(config):  # every digest compared: no early exit
            if hmac.compare_digest(digest, wanted):
                found = digest
        return found

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> FactorCheck:
        code = _parse(credential)
        for config in ctx.factors:
            digest = self._find(config, code)
            if digest is not None:
                return Accepted(config.factor_id, commit=self._consumer(ctx, config.factor_id, digest))
        return Rejected(RejectReason.INVALID)

    @staticmethod
    def _consumer(ctx: FactorContext, factor_id: str, digest: str) -> Callable[[], bool]:
        store, tenant, user_id, now = ctx.store, ctx.tenant, ctx.user_id, ctx.now

        def consume() -> bool:
            for _ in range(_SWAP_ATTEMPTS):
                config = store.get_factor(tenant, user_id, factor_id)
                if config is None or not config.confirmed:
                    return False
                digests = json.loads(config.secret)
                if digest not in digests:
                    return False  # used by a parallel request
                digests.remove(digest)
                if store.swap_factor_secret(
                    tenant, user_id, factor_id,
                    expected_counter=config.counter, secret=json.dumps(digests), now=now,
                ):  # fmt: skip
                    return True
            return False

        return consume

    def remaining(self, config: FactorConfig) -> int:
        """How many unused codes the set ``config`` still has."""
        return len(self._digests(config))

    # --- enrollment ------------------------------------------------------------------------

    def _new_set(
        self, tenant: str, user_id: str, store: FactorRecordStore, now: Any
    ) -> tuple[str, list[str]]:
        factor_id = secrets.token_urlsafe(16)
        codes = [_new_code() for _ in range(RECOVERY_CODE_COUNT)]
        digests = [self.sealer.code_digest(factor_id, code) for code in codes]
        store.add_factor(
            tenant,
            FactorConfig(
                user_id=user_id,
                kind=FactorKind.RECOVERY_CODE,
                created_at=now,
                secret=json.dumps(digests),
                factor_id=factor_id,
                confirmed=False,
                data={"label": "Recovery codes", "count": RECOVERY_CODE_COUNT},
            ),
        )
        return factor_id, [format_code(code) for code in codes]

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        """A new set, pending until the user types one code back (proof they kept them)."""
        factor_id, codes = self._new_set(ctx.tenant, ctx.user_id, ctx.store, ctx.now)
        return EnrollmentStart(factor_id, FactorKind.RECOVERY_CODE, public={"codes": codes})

    def confirm(self, ctx: EnrollContext, factor_id: str, credential: FactorCredential) -> FactorCheck:
        code = _parse(credential)
        config = ctx.store.get_factor(ctx.tenant, ctx.user_id, factor_id)
        if config is None or config.kind is not FactorKind.RECOVERY_CODE:
            return Rejected(RejectReason.NOT_ENROLLED)
        return Accepted(factor_id) if self._find(config, code) is not None else Rejected(RejectReason.INVALID)

    def regenerate(self, store: FactorRecordStore, tenant: str, user_id: str, now: Any) -> list[str]:
        """Issue a new set at once (an operator's command): the old set dies. Returns the codes."""
        factor_id, codes = self._new_set(tenant, user_id, store, now)
        store.confirm_factor(tenant, user_id, factor_id, replace_kind=True)
        return codes
