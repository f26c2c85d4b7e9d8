"""What an import will do with each user, decided before anything is written.

For every :class:`~.model.ImportedUser` the plan says what **carries** (the hash, the
verified address, the disabled state, roles, each factor with its secret), what the user
will be **asked** at the next sign-in (to confirm an unverified address, to set up again a
factor that could not be carried), what would be **lowered** (a factor the user had that
cannot be carried: without ``--accept-reenrollment`` the whole run is refused; with it, the
factor becomes a required enrollment), what is **not carried** without making the account
easier to enter (an extra address, a role whose name we cannot keep), and whether the user
is **refused** (with the reason). The same plan is printed by ``--dry-run`` and executed by
:mod:`.write`, so a dry run says exactly what the run will do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flask_authflow._cli.importing.links import plan_links
from flask_authflow._cli.importing.model import (
    EmailFactor,
    HotpFactor,
    ImportedEmail,
    ImportedFactor,
    ImportedUser,
    RecoveryCodes,
    TotpFactor,
    WebAuthnCredential,
    WebAuthnUse,
)
from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow.errors import AuthFlowError
from flask_authflow.login._legacy_hashes import LegacyHashes, LegacyResult, identify
from flask_authflow.login._password import PasswordHasher
from flask_authflow.mfa._recovery import imported_code_set
from flask_authflow.mfa._sealing import FactorSealer

__all__ = ["PlanContext", "UserPlan", "plan_user"]

#: The one TOTP/HOTP shape our factors verify (what authenticator apps use).
_OTP_DIGITS, _OTP_PERIOD, _OTP_ALGORITHM = 6, 30, "SHA1"
#: The fixed time of the recovery codes' shape check.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What the plan checks against: the default tenant, the hasher and legacy schemes that
    decide which hashes can log in, which factor kinds the app has (``registered(kind)``),
    and whether lowered factors may become required enrollments."""

    default_tenant: str
    hasher: PasswordHasher
    legacy: LegacyHashes
    registered: Callable[[str], bool]
    accept_reenrollment: bool = False
    #: The issuer of each of the app's providers by name (identity links; ``None``: none).
    issuer_of: Callable[[str], str | None] = lambda name: None


@dataclass(slots=True)
class UserPlan:
    """One user's plan (see the module's documentation); ``factors`` are those written."""

    label: str
    user: ImportedUser | None = None
    identifier: str = ""
    tenant: str = ""
    email: str | None = None
    email_verified: bool = False
    carried: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)
    not_carried: list[str] = field(default_factory=list)
    refused: str | None = None
    factors: list[ImportedFactor] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    #: ``(issuer, subject)`` of each identity link carried.
    links: list[tuple[str, str]] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "identifier": self.identifier or self.label,
            "carried": self.carried,
            "asked": self.asked,
            "lowered": self.lowered,
            "not_carried": self.not_carried,
            "refused": self.refused,
        }


class Refused(Exception):
    """The user cannot be imported (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def plan_user(user: ImportedUser, ctx: PlanContext) -> UserPlan:
    """The plan for ``user`` (refused users have ``refused`` set and nothing else counts)."""
    plan = UserPlan(label=user.identifier[:200] if isinstance(user.identifier, str) else "?", user=user)
    try:
        _identity(plan, user, ctx)
        _links(plan, user, ctx)  # before the password: a linked user may have none
        _password(plan, user, ctx)
        _emails(plan, user.emails)
        if user.disabled:
            plan.carried.append("disabled")
        plan.carried.extend(f"role {name}" for name in user.roles)
        for factor in user.factors:
            _factor(plan, factor, ctx)
        for missing in user.unreadable:
            _lower(plan, missing.kind, missing.reason, ctx)
    except Refused as refused:
        return UserPlan(label=plan.label, user=user, identifier=plan.identifier, refused=refused.reason)
    if not ctx.accept_reenrollment:
        plan.required = []  # the run is refused while anything would be lowered
    plan.asked.extend(f"set up {kind} again" for kind in plan.required)
    return plan


def _identity(plan: UserPlan, user: ImportedUser, ctx: PlanContext) -> None:
    if not isinstance(user.identifier, str) or not user.identifier.strip():
        raise Refused("no identifier")
    tenant = user.tenant if user.tenant not in (None, "") else ctx.default_tenant
    try:
        plan.identifier = normalise_identifier(user.identifier)
        plan.tenant = check_tenant(str(tenant))
    except AuthFlowError as error:
        raise Refused(error.message) from None


def _links(plan: UserPlan, user: ImportedUser, ctx: PlanContext) -> None:
    plan.links, not_carried = plan_links(user.links, ctx.issuer_of)
    plan.carried.extend(f"identity link {issuer}" for issuer, _ in plan.links)
    plan.not_carried.extend(not_carried)


def _password(plan: UserPlan, user: ImportedUser, ctx: PlanContext) -> None:
    stored = user.password_hash
    if stored is None and plan.links:
        return  # no password in the source (a social login): signs in through the link
    if not isinstance(stored, str) or not stored:
        raise Refused("no password hash")
    refusal = hash_refusal(stored, ctx.hasher, ctx.legacy)
    if refusal is not None:
        raise Refused(refusal)
    plan.carried.append("password")


def hash_refusal(stored: str, hasher: PasswordHasher, legacy: LegacyHashes) -> str | None:
    """Why ``stored`` could never log in, or ``None``."""
    if stored.startswith("$argon2id$"):
        if hasher.over_ceiling(stored):
            return "the Argon2 hash is over the AUTHFLOW_ARGON2_MAX_* ceilings"
        return None
    scheme = identify(stored)
    if scheme is None:
        return "the hash is of no scheme flask-authflow verifies"
    if scheme not in legacy.schemes:
        return f"the hash scheme {scheme!r} is not in AUTHFLOW_LEGACY_PASSWORD_SCHEMES"
    found = legacy.inspect(stored)
    if found is LegacyResult.OVER_CEILING:
        return f"the {scheme} hash's stored cost is over the ceilings"
    if found is not None:
        return f"the {scheme} hash is malformed"
    return None


def _primary(emails: Sequence[ImportedEmail]) -> ImportedEmail | None:
    marked = [e for e in emails if e.primary]
    verified = [e for e in emails if e.verified]
    chosen = marked or verified or list(emails)
    return chosen[0] if chosen else None


def _emails(plan: UserPlan, emails: Sequence[ImportedEmail]) -> None:
    primary = _primary(emails)
    if primary is None:
        return
    if not isinstance(primary.address, str):
        raise Refused("the e-mail address is not text")
    try:
        plan.email = normalise_email(primary.address)
    except AuthFlowError:
        raise Refused("the e-mail address is malformed") from None
    plan.email_verified = primary.verified
    if primary.verified:
        plan.carried.append("e-mail address (verified)")
    else:
        plan.carried.append("e-mail address (unverified)")
        plan.asked.append("confirm the e-mail address")
    plan.not_carried.extend(f"further e-mail address {e.address}" for e in emails if e is not primary)


def _lower(plan: UserPlan, kind: str, reason: str, ctx: PlanContext) -> None:
    """A factor the user had that cannot be carried: lowered, to be set up again."""
    if not ctx.registered(kind):
        raise Refused(f"{kind} could not be carried ({reason}) and this app cannot set it up again")
    plan.lowered.append(f"{kind}: {reason}")
    if kind not in plan.required:
        plan.required.append(kind)


def _factor(plan: UserPlan, factor: ImportedFactor, ctx: PlanContext) -> None:
    kind, problem = _problem(factor, plan)
    if problem is None and not ctx.registered(kind):
        problem = f"the app has no {kind} factor"
    if problem is not None:
        _lower(plan, kind, problem, ctx)
        return
    if isinstance(factor, RecoveryCodes) and not factor.codes:
        return  # every code was used: nothing to carry, nothing lowered
    plan.factors.append(factor)
    plan.carried.append(_describe(factor))


def _problem(factor: ImportedFactor, plan: UserPlan) -> tuple[str, str | None]:
    """``(our kind, why it cannot be carried or None)``."""
    if isinstance(factor, TotpFactor):
        shape = (factor.digits, factor.period, factor.algorithm.upper())
        ok = shape == (_OTP_DIGITS, _OTP_PERIOD, _OTP_ALGORITHM) and bool(factor.secret)
        return "totp", None if ok else f"{factor.digits} digits / {factor.period} s / {factor.algorithm}"
    if isinstance(factor, HotpFactor):
        ok = factor.digits == _OTP_DIGITS and bool(factor.secret) and factor.counter >= 0
        return "hotp", None if ok else f"{factor.digits}-digit codes"
    if isinstance(factor, EmailFactor):
        return "email_otp", None if (factor.address or plan.email) else "no e-mail address"
    if isinstance(factor, RecoveryCodes):
        return "recovery_code", _codes_problem(factor)
    if isinstance(factor, WebAuthnCredential):
        return "webauthn", None if factor.credential_id and factor.public_key else "no credential"
    return "unknown", "a factor of no known kind"


def _codes_problem(codes: RecoveryCodes) -> str | None:
    if codes.hashes and not codes.codes:
        return f"only the source's hashes ({codes.scheme or 'unknown scheme'}) are stored"
    if not codes.codes:
        return None
    try:  # the shape check alone: a throwaway sealer key, nothing kept
        imported_code_set(FactorSealer.from_key(bytes(32)), "check", list(codes.codes), _EPOCH)
    except ValueError:
        return "codes of a shape the sign-in form does not accept"
    return None


def _describe(factor: ImportedFactor) -> str:
    if isinstance(factor, WebAuthnCredential):
        return "passkey" if factor.use is WebAuthnUse.FIRST else "security key (second factor)"
    if isinstance(factor, RecoveryCodes):
        return f"recovery codes ({len(factor.codes)} unused)"
    if isinstance(factor, EmailFactor):
        return "e-mail codes"
    return "authenticator app (TOTP)" if isinstance(factor, TotpFactor) else "hardware token (HOTP)"
