"""Sign-in by e-mailed code (``AUTHFLOW_LOGIN_BY_CODE``): the code is the login's first factor.

``request_login_code`` takes an identifier or an e-mail address and starts a login whose
first step is the kind ``login_code`` (later steps are the user's own: a user with TOTP is
asked for it after the code, as after a password). The code is made by the ``login_code``
factor (:class:`~flask_authflow.mfa._login_code.LoginCodeFactor`: the e-mail code's
generation, hashing and try counting), its digest kept in the session's flow slot, bound
to this login's transaction; the caller mails it (with a link) *after* the answer went
out. The code is then passed like any factor, with ``verify_factor``: the lockout counts
each wrong code per account and per address, a code dies after its tries or its lifetime,
and its single use is recorded in the store in the step's unit of work, so of parallel
uses exactly one wins.

**No oracle.** An unknown identifier, a disabled account and an account without a
verified address go through the same steps as a real one: the same store reads (one
``login_facts``, after one ``find_user_by_email`` when the input has an ``@``), a login
for a *phantom* user with a code made and hashed the same way, the same answer, and a mail
composed by the caller, with nobody to deliver it to (``LoginCodeRequest.to`` is
``None``). The phantom's login can never pass: a code presented for it is counted and
refused like a wrong code.

One :class:`~flask_authflow.login._operation.Operation` per request (audited
``login_begin`` with factor ``login_code``): its audit row and the session (when the
session store can join the unit of work) commit once, together.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from flask_authflow._core.factors import FactorContext
from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow._core.ports import LoginFacts, UserRecord
from flask_authflow._core.session import AuthSession, AuthState, begin_flow, start_login
from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorKind
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import InvalidInput
from flask_authflow.login._challenges import FACTOR_SLOT, StepUser, factor_context, store_slots
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    TRANSACTION_KEY,
    LoginServices,
    Operation,
    guard_store,
    new_transaction,
)
from flask_authflow.login._throttling import refuse_if_throttled
from flask_authflow.login._workflow import abandon

__all__ = ["MAX_INPUT_LENGTH", "CodeIssuer", "LoginCodeRequest", "request_login_code"]

#: The longest identifier or address accepted (the longest address is 254 characters).
MAX_INPUT_LENGTH = 254


class CodeIssuer(Protocol):
    """What the flow needs of the ``login_code`` factor: a new code for a login."""

    @property
    def expires_in(self) -> int: ...

    def issue(self, ctx: FactorContext) -> str: ...


@dataclass(frozen=True, slots=True)
class LoginCodeRequest:
    """What ``request_login_code`` made: the code for the mail and where it goes.

    ``to`` is ``None`` when no usable account matched: compose the mail anyway, send
    nothing. ``identifier`` (the account's, for the mail budget) likewise."""

    code: str
    to: str | None
    identifier: str | None
    tenant: str
    expires_in: int

    def __repr__(self) -> str:
        return f"<LoginCodeRequest deliver={self.to is not None}>"


def request_login_code(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, tenant: str, given: object, codes: CodeIssuer
) -> LoginCodeRequest:
    """Start a sign-in by code for the account ``given`` (an identifier or an address) names.

    Answers the same for every well-formed input (see the module's text).

    :raises InvalidInput: not a string, empty or too long; a bad tenant.
    :raises Throttled: the address made too many login requests."""
    try:
        tenant = check_tenant(tenant)
        if not isinstance(given, str) or not given.strip() or len(given) > MAX_INPUT_LENGTH:
            raise InvalidInput(N_("Enter your username or e-mail address."))
        ident = normalise_identifier(given)
    except InvalidInput as exc:
        Operation(svc, ctx, session, "login_begin", factor=FactorKind.LOGIN_CODE.value).refuse(exc, "error")
        raise
    kind = FactorKind.LOGIN_CODE.value
    with Operation(svc, ctx, session, "login_begin", tenant=tenant, identifier=ident, factor=kind) as op:
        refuse_if_throttled(op, svc, "login")
        facts = _find(svc, tenant, ident, given, op.now)
        _end_current(op)
        return _start(op, svc, codes, facts, ident)


def _find(svc: LoginServices, tenant: str, ident: str, given: str, now: datetime) -> LoginFacts:
    """The account of an address (when ``given`` has an ``@`` and one has it), else of the
    identifier: the same reads whether an account matches or not."""
    if "@" in given:
        try:
            address: str | None = normalise_email(given)
        except InvalidInput:
            address = None
        by_email = guard_store(lambda: svc.store.find_user_by_email(tenant, address or ident))
        if by_email is not None:
            ident = by_email.identifier
    return guard_store(lambda: svc.store.login_facts(tenant, ident, now))


def _end_current(op: Operation) -> None:
    """A sign-in on a session in another state ends that state first (as a login does)."""
    session = op.session
    if session.workflow is not None:
        abandon(op, "new_login")
    if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
        op.end_previous_login()
    # An unfinished login is replaced by this one (as ``begin_login`` does), not logged out.


def _usable(user: UserRecord | None) -> bool:
    """A code goes only to an enabled account's verified address."""
    return user is not None and not user.disabled and bool(user.email) and user.email_verified_at is not None


def _start(
    op: Operation, svc: LoginServices, codes: CodeIssuer, facts: LoginFacts, ident: str
) -> LoginCodeRequest:
    """Authenticating with ``login_code`` first, for the user or the identifier's phantom.

    A locked account's login starts as usual (``verify_factor`` answers ``Locked``), but no
    mail goes out for it."""
    tenant: str = op.fields["tenant"]
    user = facts.user
    real = _usable(user) and user is not None
    subject = user.user_id if real and user is not None else svc.phantom_user_id(tenant, ident)
    login_name = user.identifier if real and user is not None else ident
    later: list[str] = []
    if real:  # the code stands for the first step (the password); the user's later steps remain
        enrolled = [kind for kind in facts.kinds if kind is not FactorKind.PASSWORD]
        later = svc.steps_for(tenant, subject, [FactorKind.PASSWORD, *enrolled])[1:]
    steps = [FactorKind.LOGIN_CODE.value, *later]
    flow = {LOGIN_IDENTIFIER_KEY: login_name, TRANSACTION_KEY: new_transaction()}
    op.session.transition(
        lambda r: begin_flow(start_login(r, tenant=tenant, user_id=subject, factors=steps, now=op.now), flow)
    )
    fctx = factor_context(
        svc, op.now, op.session, FactorKind.LOGIN_CODE, StepUser(tenant, subject, login_name), factors=()
    )
    code = codes.issue(fctx)
    store_slots(op.session, {FACTOR_SLOT + FactorKind.LOGIN_CODE.value: fctx.flow_update or {}})
    # The audit row and the session (on a SQL session store of the backend's database)
    # commit together: a request refused at either keeps neither, and mails nothing.
    op.unit()
    op.write_session = True
    deliver = real and facts.locked_until is None
    reason = None
    if not real:
        reason = "unknown_identifier" if user is None else "no_usable_address"
    elif not deliver:
        reason = "locked"
    op.audit("sent" if deliver else "started", reason, user_id=user.user_id if user is not None else None)
    return LoginCodeRequest(
        code=code,
        to=user.email if deliver and user is not None else None,
        identifier=login_name if deliver else None,
        tenant=tenant,
        expires_in=codes.expires_in,
    )
