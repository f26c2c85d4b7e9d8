"""Password reset ("forgot password"): a mailed single-use token sets a new password.

``request_reset`` takes an identifier or an e-mail address and answers the same way
whether an account matches or not: for an unknown, disabled or address-less account it
makes a token and its code exactly as for a real one (nothing is stored) and hands back a
:class:`ResetRequest` the caller composes a mail from in both cases; only a real
request carries an address to deliver to. Deliver after the answer went out (the views
do), so the time of the SMTP exchange says nothing either.

``reset_password`` sets the new password with the token, valid
:data:`DEFAULT_RESET_TTL` (``AUTHFLOW_PASSWORD_RESET_TTL``), void once used, when a newer
one is mailed, or when the password changes (a change, another reset or "log out
everywhere": see :mod:`~flask_authflow.login._recovery`). The new password must pass the policy
(:class:`~flask_authflow.errors.WeakPassword` otherwise; the token stays usable). A
user with a second factor must pass it first: the first call logs the session in with
method ``password_reset`` standing for the password and answers the
:class:`~flask_authflow._outcomes.FactorRequired` of the user's next step (any of its
kinds, a recovery code included; ``verify_factor`` as in a login); the same call again
on that session, after the factor passed, sets the password.

A completed reset ends everything an attacker may have left (see
:mod:`~flask_authflow.login._recovery`): every session of the user, the one that made it
included, every API token, every pending account token (other reset links, a requested
change of e-mail, verification links) and the account-wide lock. It also **proves the
address**: the link went to the account's address, so when that is still the account's
address and was not verified yet, it is marked verified now (audited ``email_confirmed``,
reason ``password_reset``; signal ``email_confirmed``). Each step is one
:class:`~flask_authflow.login._operation.Operation`: the token is used up, the password
set, the other tokens voided, the API tokens deleted, the locks cleared and the audit
rows written in one unit of work, so of parallel resets with one token exactly one wins
and a failed one leaves the token usable and nothing else changed.

**Transactions** (the manual's Security page): the request commits its token and audit row once;
the completion ends the sessions first, then uses the token, sets the password and ends
the rest in one unit of work (a failure keeps nothing of it and the link stays usable).
Mails go out after the commit and after the answer; a failing sender is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow._core.ports import AccountToken, UserRecord
from flask_authflow._core.session import AuthSession, reset_to_guest
from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorKind, FactorRequired
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AuthFlowError, InvalidInput, StoreUnavailable
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login._account_tokens import AccountTokenInvalid, IssuedToken
from flask_authflow.login._establish import Establish, establish
from flask_authflow.login._operation import LoginServices, Operation, guard_store
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._recovery import Ended, RecoveryServices, end_access, end_sessions

__all__ = [
    "DEFAULT_RESET_TTL",
    "KIND",
    "METHOD",
    "PasswordResetDone",
    "ResetRequest",
    "ResetServices",
    "request_reset",
    "reset_password",
]

log = logging.getLogger("flask_authflow.login")

#: How long a mailed reset token works.
DEFAULT_RESET_TTL = timedelta(minutes=30)
#: The account token kind of a reset.
KIND = "password_reset"
#: The login method a reset token stands for while the user passes a second factor.
METHOD = "password_reset"


class ResetServices(RecoveryServices, Protocol):
    """What the reset needs of the service beyond the login flows: the password hasher and
    the API tokens it ends (see :class:`~flask_authflow.login._recovery.RecoveryServices`)."""


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """What ``request_reset`` made: a token and code for the mail, and where it goes
    (``to`` is ``None`` when no account matched: compose the mail anyway, send nothing)."""

    issued: IssuedToken
    to: str | None
    identifier: str | None

    def __repr__(self) -> str:
        return f"<ResetRequest deliver={self.to is not None}>"


@dataclass(frozen=True, slots=True)
class PasswordResetDone:
    """The password was set; ``sessions_ended`` sessions of the user ended, and ``ended``
    says what else ended (API tokens, pending account tokens, the lock); ``email_verified``:
    the reset proved the account's address, unverified until now."""

    user_id: str
    tenant: str
    sessions_ended: int
    ended: Ended = field(default_factory=Ended, compare=False)
    email_verified: bool = field(default=False, compare=False)


def _address(user: UserRecord | None) -> str | None:
    """Where the user's mail goes: their address, if any."""
    return user.email if user is not None and user.email else None


def _find(svc: LoginServices, tenant: str, identifier: str | None, email: str | None) -> UserRecord | None:
    """The account an identifier or an e-mail address names, if any."""
    if identifier is not None:
        return guard_store(lambda: svc.store.find_user(tenant, identifier))
    if email is None:
        return None
    return guard_store(lambda: svc.store.find_user_by_email(tenant, email))


def _lookup_key(identifier: object, email: object) -> tuple[str | None, str | None]:
    """Exactly one of identifier and e-mail, checked and normalised."""
    if (identifier is None) == (email is None):
        raise InvalidInput(N_("give an identifier or an e-mail address"))
    if identifier is not None:
        if not isinstance(identifier, str):
            raise InvalidInput("the identifier must be a string")
        return normalise_identifier(identifier), None
    if not isinstance(email, str):
        raise InvalidInput(N_("not an e-mail address"))
    return None, normalise_email(email)


def request_reset(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    *,
    identifier: object = None,
    email: object = None,
    ttl: timedelta = DEFAULT_RESET_TTL,
) -> ResetRequest:
    """Start a reset for the account ``identifier`` (or ``email``) names in ``tenant``.

    Answers the same for every input that is well-formed: a :class:`ResetRequest` whose
    ``to`` is set only when a usable account with an address matched.

    :raises InvalidInput: neither or both given, or not the shape of one."""
    try:
        tenant = check_tenant(tenant)
        ident, address = _lookup_key(identifier, email)
    except InvalidInput as exc:
        Operation(svc, ctx, session, "password_reset_requested").refuse(exc, "error")
        raise
    with Operation(svc, ctx, session, "password_reset_requested", tenant=tenant, identifier=ident) as op:
        user = _find(svc, tenant, ident, address)
        to = _address(user) if user is not None and not user.disabled else None
        real = user is not None and to is not None
        op.unit()
        issued = account_tokens.issue(
            account_tokens.token_store(svc.account_tokens),
            kind=KIND,
            tenant=tenant,
            user_id=user.user_id if user is not None else "",
            now=op.now,
            ttl=ttl,
            payload={"email": to} if real else None,
            persist=real,
        )
        user_id = user.user_id if user is not None else None
        op.audit("sent" if real else "skipped", None if real else "no_usable_account", user_id=user_id)
    return ResetRequest(issued, to, user.identifier if real and user is not None else None)


def reset_password(
    svc: ResetServices,
    ctx: AuditContext,
    session: AuthSession,
    token: object,
    password: object,
    *,
    policy: PasswordPolicy | None = None,
) -> PasswordResetDone | FactorRequired:
    """Set a new password with a mailed reset token (see the module's text).

    :raises InvalidInput: a malformed token or password. :raises WeakPassword: the policy
        refused the password. :raises AccountTokenInvalid, AccountTokenUsed,
        AccountTokenExpired: the token cannot be used (see
        :func:`~flask_authflow.login._account_tokens.use_token`)."""
    op = Operation(svc, ctx, session, "password_reset")
    try:
        found = account_tokens.peek_token(account_tokens.token_store(svc.account_tokens), token, KIND, op.now)
        user = _usable(svc, found)
        if not isinstance(password, str) or not password:
            raise InvalidInput("the new password must be a non-empty string")
        kinds = guard_store(lambda: svc.store.required_factors(user.tenant, user.user_id))
        second = len(svc.steps_for(user.tenant, user.user_id, [FactorKind.PASSWORD, *kinds])) > 1
        if policy is not None:
            policy.check(password, username=user.identifier, tenant=user.tenant, has_second_factor=second)
    except AuthFlowError as exc:
        op.refuse(exc, "refused")
        raise
    if second and not _second_factor_passed(session, found):
        return _ask_second_factor(svc, ctx, session, user)
    password_hash = svc.hasher.hash(password)
    return _apply(svc, ctx, session, found, user, password_hash)


def _usable(svc: LoginServices, token: AccountToken) -> UserRecord:
    """The live account a token belongs to (a deleted or disabled one: the token is invalid)."""
    user = guard_store(lambda: svc.store.get_user(token.tenant, token.user_id))
    if user is None or user.disabled:
        raise AccountTokenInvalid()
    return user


def _second_factor_passed(session: AuthSession, token: AccountToken) -> bool:
    """Whether this session logged in with the reset and passed a second factor since the
    token was mailed (the first call of a second-factor user's reset)."""
    record = session.record
    return (
        session.is_authenticated
        and (record.tenant, record.user_id) == (token.tenant, token.user_id)
        and record.auth_method == METHOD
        and len(record.factors_passed) > 1
        and record.authenticated_at is not None
        and record.authenticated_at >= token.created_at
    )


def _ask_second_factor(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, user: UserRecord
) -> FactorRequired:
    """Log the session in with the token standing for the password: the user's second step remains."""
    outcome = establish(svc, ctx, session, user.tenant, user.user_id, Establish(METHOD))
    if not isinstance(outcome, FactorRequired):  # pragma: no cover - the user has a second step
        raise AccountTokenInvalid()
    return outcome


def _apply(
    svc: ResetServices,
    ctx: AuditContext,
    session: AuthSession,
    found: AccountToken,
    user: UserRecord,
    password_hash: str,
) -> PasswordResetDone:
    """End every session of the user, then in one unit of work use the token, set the
    password, prove the address and end what :func:`~flask_authflow.login._recovery.end_access`
    ends (the sessions end first: a failure after that leaves the user logged out with the
    old password and a usable token, never a new password with old sessions alive; a login
    in between is ended by a second pass)."""
    tenant, user_id = user.tenant, user.user_id
    store = account_tokens.token_store(svc.account_tokens)
    fields: dict[str, Any] = {"tenant": tenant, "user_id": user_id, "identifier": user.identifier}
    ended = end_sessions(svc, tenant, user_id, None, KIND)
    with Operation(svc, ctx, session, "password_reset", **fields) as op:
        op.unit()
        used = guard_store(lambda: store.use_account_token(found.token_hash, KIND, op.now))
        if used is None:
            error = account_tokens.why_not(store.find_account_token(found.token_hash), KIND, op.now)
            op.refuse(error, "refused")
            raise error
        guard_store(lambda: svc.store.set_password_hash(tenant, user_id, password_hash))
        if session.user_id == user_id and session.tenant == tenant:
            session.transition(lambda r: reset_to_guest(r, now=op.now))
        op.audit("success", f"sessions_ended={ended}")
        verified = _prove_address(op, svc, user, used)
        access = end_access(op, svc, user)
        op.signal("password_reset", user_id=user_id, tenant=tenant)
    try:
        ended += end_sessions(svc, tenant, user_id, None, KIND)
    except StoreUnavailable:
        log.warning("sessions started during a password reset could not be ended")
    return PasswordResetDone(user_id, tenant, ended, access.with_sessions(ended), verified)


def _prove_address(op: Operation, svc: LoginServices, user: UserRecord, token: AccountToken) -> bool:
    """Mark the account's address verified when the reset link went to it (the token
    names the address it was mailed to) and it is still the account's, unverified."""
    address = token.payload.get("email")
    if user.email is None or user.email_verified_at is not None or address != user.email:
        return False
    email, now = user.email, op.now
    guard_store(lambda: svc.store.set_email(user.tenant, user.user_id, email, verified_at=now))
    op.audit("success", KIND, event="email_confirmed")
    op.signal("email_confirmed", user_id=user.user_id, tenant=user.tenant)
    return True
