"""``begin_login``: start a password login for an identifier.

**No oracle.** An unknown identifier, a user of another tenant and a disabled account go
through the same steps as a real account: ``begin_login`` answers
``FactorRequired(PASSWORD)`` and moves the session to Authenticating for a *phantom* user
that can never authenticate; ``verify_factor`` then spends one Argon2 verify on a dummy
hash and answers ``InvalidCredential``. Outcomes, store round trips (one
:meth:`~flask_authflow._core.ports.LoginStore.login_facts` read whether the user exists or
not, the locks of the account and of this address's pairs included), lockout and timing
match those of a wrong password.
"""

from __future__ import annotations

from datetime import datetime

from flask_authflow._core.identifiers import check_tenant, normalise_identifier
from flask_authflow._core.ports import KnownSecret, LoginFacts
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    fail_login,
    start_login,
    step_kinds,
)
from flask_authflow._outcomes import FactorKind, FactorRequired, Locked, LoginOutcome
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import InvalidInput
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    TRANSACTION_KEY,
    LoginServices,
    Operation,
    guard_store,
    new_transaction,
    note_begin_read,
)
from flask_authflow.login._required_enrollment import KIND as REQUIRED_KIND
from flask_authflow.login._required_enrollment import NONE_REQUIRED_KEY, kinds_in
from flask_authflow.login._throttling import refuse_if_throttled
from flask_authflow.login._verification import UNVERIFIED_KEY

__all__ = ["begin_login"]


def begin_login(
    svc: LoginServices,
    ctx: AuditContext,
    identifier: str,
    tenant: str,
    session: AuthSession,
    *,
    defer_rows_to: list[AuditRecord] | None = None,
) -> LoginOutcome:
    """Start a login for ``identifier`` in ``tenant`` (see the module docstring).

    ``defer_rows_to``: when the password is asked, the audit rows go there instead of
    being written: the password step of the same request writes them in its own commit."""
    try:
        ident = normalise_identifier(identifier)
        tenant = check_tenant(tenant)
    except InvalidInput as exc:
        Operation(svc, ctx, session, "login_begin").refuse(exc, "error")
        raise
    with Operation(svc, ctx, session, "login_begin", tenant=tenant, identifier=ident) as op:
        refuse_if_throttled(op, svc, "login")
        if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
            op.end_previous_login()
        # The user, their factors and the locks: the account's, and this address's own on
        # the identifier (its host and network; others may still log in), in one read.
        pairs = svc.lockout.pairs(ident, op.ctx.client_ip)
        facts = guard_store(
            lambda: svc.store.login_facts(tenant, ident, op.now, pairs=pairs, token_kind=REQUIRED_KIND)
        )
        if facts.locked_until is not None:
            return _locked(op, facts, facts.locked_until)
        op.defer_rows_to = defer_rows_to
        return _start(op, svc, facts)


def _locked(op: Operation, facts: LoginFacts, until: datetime) -> Locked:
    op.session.transition(lambda r: fail_login(r, now=op.now))
    audit_user = facts.user.user_id if facts.user is not None else None
    op.audit("locked", "locked", user_id=audit_user)
    op.signal("login_failed", tenant=op.fields["tenant"], identifier=op.fields["identifier"], reason="locked")
    op.count("login_failures")
    return Locked(until)


def _start(op: Operation, svc: LoginServices, facts: LoginFacts) -> FactorRequired:
    """Authenticating for the user, or for the identifier's phantom (the same steps)."""
    tenant: str = op.fields["tenant"]
    ident: str = op.fields["identifier"]
    user = facts.user
    usable = user is not None and not user.disabled
    subject_id = user.user_id if usable and user is not None else svc.phantom_user_id(tenant, ident)
    steps = svc.steps_for(tenant, subject_id, facts.kinds) if usable else []
    if not steps or FactorKind.PASSWORD.value not in step_kinds(steps[0]):
        subject_id = svc.phantom_user_id(tenant, ident)
        steps = [FactorKind.PASSWORD.value]
    device = _device_decision(op, svc, subject_id if usable else None, len(steps) > 1)
    if device == "trusted_device":
        steps = steps[:1]  # the password is asked; the later steps are waived for this device
    flow: dict[str, object] = {LOGIN_IDENTIFIER_KEY: ident, TRANSACTION_KEY: new_transaction()}
    if usable and user is not None and user.email is not None and user.email_verified_at is None:
        flow[UNVERIFIED_KEY] = True
    required = kinds_in(facts.token_payload) if usable else ()
    if usable and not required:
        flow[NONE_REQUIRED_KEY] = True  # the login's last step need not read it again
    op.session.transition(
        lambda r: start_login(r, tenant=tenant, user_id=subject_id, factors=steps, now=op.now, flow=flow)
    )
    password = facts.password
    if password is not None and not (usable and user is not None and subject_id == user.user_id):
        password = KnownSecret(None)  # a phantom's: the dummy verify, as a wrong password's work
    note_begin_read(flow, required, password)
    reason = None if usable else ("disabled" if user is not None else "unknown_identifier")
    if usable and user is not None and subject_id != user.user_id:
        reason = "no_password"
    elif reason is None:
        reason = device
    op.audit("started", reason, user_id=user.user_id if user is not None else None, factor=steps[0])
    return FactorRequired(FactorKind.PASSWORD)


def _device_decision(
    op: Operation, svc: LoginServices, user_id: str | None, has_later_steps: bool
) -> str | None:
    """What the request's device means for this login, as the audit reason of its first row:
    ``trusted_device`` (a valid device cookie of this user, trusted and not expired: the
    later steps are waived), ``foreign_device`` (a valid cookie issued to another user:
    ignored), ``device_forged`` / ``device_expired`` / ``device_ua_mismatch`` (a cookie that
    was ignored), or ``None``."""
    ctx = op.ctx
    if ctx.device_refused is not None:
        return f"device_{ctx.device_refused}"
    if user_id is None or ctx.device_id is None or ctx.device_user is None:
        return None
    if ctx.device_user != user_id:
        return "foreign_device"
    trusted = svc.device_trusted
    if not has_later_steps or trusted is None:
        return None
    device_id, tenant = ctx.device_id, op.fields["tenant"]
    if guard_store(lambda: trusted(tenant, user_id, device_id, op.now)):
        return "trusted_device"
    return None
