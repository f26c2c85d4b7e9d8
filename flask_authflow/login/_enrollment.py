"""Adding and removing a user's factors: ``begin_enrollment``, ``confirm_enrollment``,
``disable_factor`` and ``user_factors``; ``check_password_change``.

A change needs a fresh authentication whose last factor is of the user's strongest step
(a password step-up alone does not let a stolen session with a known password remove the
second factor); it ends the user's other sessions and gives this one a new id. So does a
change of the password of a user with a second factor (``check_password_change``).

A begun enrollment waits as a pending factor; the store keeps at most one per kind and
user (a new start replaces the older one in the same transaction), so repeated starts
leave no pile of pending rows.

**One transaction per change** (the manual's Security page, "Transactions"): the pending factor and
its ``started`` row; the confirmed factor, its proving code marked used and its ``success``
row; the deleted factor and its row: each commits once in the step's unit of work, or
nothing of it does (503, and the same request works again). The user's other sessions end
first, outside that unit (the session store may be another service): a later failure
leaves them ended, the factor unchanged. A refused proof is recorded on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from flask_authflow._core.factors import Accepted, EnrollContext, EnrollmentStart, Rejected, RejectReason
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    begin_flow,
    clear_flow,
    step_kinds,
)
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import EnrollmentError, StepUpNeeded, UserNotFound
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.login import _sign_in_ways as sign_in_ways
from flask_authflow.login._operation import LoginServices, Operation, guard_store, log, write_rows

__all__ = [
    "ENROLLMENT_TTL",
    "begin_enrollment",
    "check_password_change",
    "confirm_enrollment",
    "disable_factor",
    "user_factors",
]

#: Prefix of an enrollment's slot in the session flow (``"enroll:webauthn"``).
_ENROLL_SLOT = "enroll:"
#: How long a begun enrollment waits for its proof of possession.
ENROLLMENT_TTL = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class _Fresh:
    """The user of a session fresh enough to change factors."""

    tenant: str
    user_id: str
    now: datetime


def _fresh_user(
    svc: LoginServices, session: AuthSession, action: str, kind: FactorKind | None = None
) -> _Fresh:
    """:raises StepUpNeeded: not authenticated, or the last authentication is older than the
    service's ``freshness``, or its last factor is not of the user's strongest step. A
    login held for a required enrollment of ``kind`` may add that factor."""
    now = svc.clock.now()
    record = session.record
    if kind is not None and record.state is AuthState.PENDING_WORKFLOW:
        return _Fresh(*required_enrollment.enrolling_user(record, kind, now), now)
    if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
        raise StepUpNeeded(f"{action} needs an authenticated session")
    if record.authenticated_at is None or now - record.authenticated_at > svc.freshness:
        raise StepUpNeeded(f"{action} needs a fresh authentication: verify your identity again")
    tenant, user_id = record.tenant, record.user_id
    enrolled = guard_store(lambda: svc.store.required_factors(tenant, user_id))
    steps = svc.steps_for(tenant, user_id, enrolled)
    last = record.factors_passed[-1] if record.factors_passed else None
    # A login that proved the user another way and passed nothing since (a passkey, a
    # federated login, ``login_user``) counts as it is.
    other_way = len(record.factors_passed) == 1 and last == record.auth_method and last not in FactorKind
    # A second factor verified last counts even if it was removed since (the strongest
    # step may have become the password).
    second_factor = last is not None and last in FactorKind and last != FactorKind.PASSWORD.value
    if steps and last not in step_kinds(steps[-1]) and not other_way and not second_factor:
        raise StepUpNeeded(f"{action} needs your second factor again (a step-up of the strongest step)")
    return _Fresh(tenant, user_id, now)


def check_password_change(svc: LoginServices, session: AuthSession) -> None:
    """Refuse a change of the password unless the session may make it: for a user whose
    strongest login step is more than the password, a fresh authentication whose last factor
    is of that step (as a change of factors needs); for a password-only user, nothing here
    (the current password, asked for with the new one, is the strongest step).

    :raises StepUpNeeded: not authenticated, or the strongest step is needed again."""
    record = session.record
    if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
        raise StepUpNeeded("changing the password needs an authenticated session")
    tenant, user_id = record.tenant, record.user_id
    enrolled = guard_store(lambda: svc.store.required_factors(tenant, user_id))
    steps = svc.steps_for(tenant, user_id, enrolled)
    if not steps or set(step_kinds(steps[-1])) <= {FactorKind.PASSWORD.value}:
        return
    _fresh_user(svc, session, "changing the password")


def _enroll_context(
    svc: LoginServices, session: AuthSession, kind: FactorKind, fresh: _Fresh
) -> EnrollContext:
    user = guard_store(lambda: svc.store.get_user(fresh.tenant, fresh.user_id))
    if user is None or user.disabled:
        raise UserNotFound()
    slot = (session.record.flow or {}).get(_ENROLL_SLOT + kind.value)
    return EnrollContext(
        tenant=fresh.tenant,
        user_id=fresh.user_id,
        account_name=user.identifier,
        issuer_name=svc.site_name,
        now=fresh.now,
        store=svc.store,
        flow=dict(slot) if isinstance(slot, Mapping) else {},
    )


def _store_enroll_slot(session: AuthSession, kind: FactorKind, update: dict[str, Any] | None) -> None:
    """Keep the enrollment's new slot (``{}`` ends it; ``None`` leaves it as it was)."""
    if update is None:
        return
    key = _ENROLL_SLOT + kind.value

    def change(r: SessionRecord) -> SessionRecord:
        flow = {k: v for k, v in (r.flow or {}).items() if k != key}
        if update:
            flow[key] = update
        return begin_flow(r, flow) if flow else clear_flow(r)

    session.transition(change)


def begin_enrollment(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    kind: FactorKind,
    params: Mapping[str, Any] | None = None,
) -> EnrollmentStart:
    """Start adding a factor of ``kind`` (see ``AuthnRequest.begin_enrollment``)."""
    fresh = _fresh_user(svc, session, "adding a factor", kind)
    enrollment = svc.enrollment(kind)
    enroll_ctx = _enroll_context(svc, session, kind, fresh)
    fields: dict[str, Any] = {"tenant": fresh.tenant, "user_id": fresh.user_id, "factor": kind.value}
    with Operation(svc, ctx, session, "factor_enroll", now=fresh.now, **fields) as op:
        op.unit()  # the pending factor and its audit row commit together
        start = guard_store(lambda: enrollment.begin(enroll_ctx, dict(params or {})))
        _store_enroll_slot(session, kind, enroll_ctx.flow_update)
        op.audit("started")
    return start


def confirm_enrollment(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    kind: FactorKind,
    factor_id: str,
    credential: FactorCredential,
) -> FactorConfig:
    """Finish an enrollment with the user's proof (see ``AuthnRequest.confirm_enrollment``)."""
    fresh = _fresh_user(svc, session, "adding a factor", kind)
    enrollment = svc.enrollment(kind)
    factor = svc.factor(kind)
    if factor is not None:
        factor.check_input(credential)
    enroll_ctx = _enroll_context(svc, session, kind, fresh)
    store, tenant, user_id, now = svc.store, fresh.tenant, fresh.user_id, fresh.now
    fields: dict[str, Any] = {"tenant": tenant, "user_id": user_id, "factor": kind.value}
    op = Operation(svc, ctx, session, "factor_enrolled", now=now, **fields)

    def refuse(reason: str, slot: dict[str, Any] | None = None) -> EnrollmentError:
        # The enrollment's slot as the factor left it (a try counted); ``{}`` ends it.
        _store_enroll_slot(session, kind, slot)
        write_rows(svc, [op.row("failure", reason, event="factor_enroll")])
        return EnrollmentError(
            "the code or response did not match: try again"
            if reason == RejectReason.INVALID.value
            else "the enrollment could not be confirmed: start again"
        )

    config = guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
    if config is None or config.kind is not kind or config.confirmed:
        raise refuse("no_pending_factor", {})
    if now - config.created_at > ENROLLMENT_TTL:
        guard_store(lambda: store.delete_factor(tenant, user_id, factor_id))
        raise refuse("expired", {})
    checked = guard_store(lambda: enrollment.confirm(enroll_ctx, factor_id, credential))
    if not checked:
        raise refuse(checked.code if isinstance(checked, Rejected) else "invalid", enroll_ctx.flow_update)
    replace_kind = enrollment.replaces_kind
    with op:  # one unit: the factor confirmed, its proving code marked used, the audit row
        revoked = _end_other_sessions(op, svc)
        op.unit()
        if guard_store(lambda: store.confirm_factor(tenant, user_id, factor_id, replace_kind=replace_kind)):
            # An enrollment's commit runs once the factor counts (it marks the proving code used).
            proved = checked.commit if isinstance(checked, Accepted) else None
            if proved is not None and not guard_store(proved):
                log.warning("the code that proved a new %s factor could not be marked used", kind.value)
            _store_enroll_slot(session, kind, {})
            _after_factor_change(op, kind, revoked, credit=True)
            required_enrollment.enrolled(op, svc, kind)  # a held login completes once all are set up
            config = replace(config, confirmed=True)
    if not config.confirmed:  # a parallel change took the pending factor: nothing was kept
        raise refuse("no_pending_factor", {})
    confirmed = guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
    return confirmed if confirmed is not None else config


def disable_factor(svc: LoginServices, ctx: AuditContext, session: AuthSession, factor_id: str) -> bool:
    """Remove one of the session's user's factors (see ``AuthnRequest.disable_factor``)."""
    fresh = _fresh_user(svc, session, "removing a factor")
    store, tenant, user_id = svc.store, fresh.tenant, fresh.user_id
    config = guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
    if config is None or config.kind is FactorKind.PASSWORD:
        return False
    fields: dict[str, Any] = {"tenant": tenant, "user_id": user_id, "factor": config.kind.value}
    deleted = False
    op = Operation(svc, ctx, session, "factor_disabled", now=fresh.now, **fields)
    way_in = sign_in_ways.is_way_in(config)  # a passkey: the account must keep a way to sign in
    if way_in and not sign_in_ways.has_way_in(svc, tenant, user_id, without=factor_id):
        raise _last_way(op)  # told before anything ends
    with op:
        revoked = _end_other_sessions(op, svc)
        op.unit()  # the factor deleted and its audit row, together
        if way_in:
            sign_in_ways.hold_user(svc, tenant, user_id)  # parallel removals take turns
        deleted = guard_store(lambda: store.delete_factor(tenant, user_id, factor_id))
        if deleted and way_in and not sign_in_ways.has_way_in(svc, tenant, user_id):
            raise _last_way(op)  # the unit rolls back: the factor stays
        if deleted:
            _after_factor_change(op, config.kind, revoked)
    return deleted


def _last_way(op: Operation) -> sign_in_ways.LastSignInWay:
    """Refuse a removal that would leave the account no way to sign in (audited, nothing kept)."""
    error = sign_in_ways.LastSignInWay()
    op.refuse(error, "refused")
    return error


def _end_other_sessions(op: Operation, svc: LoginServices) -> int:
    """End the user's other sessions, before the step's unit of work begins (the session
    store may be another service, and on SQLite the unit holds the write lock): a later
    failure leaves them ended and the factors unchanged."""
    session, revoke = op.session, svc.revoke_sessions
    tenant, user_id = op.fields["tenant"], op.fields["user_id"]
    if revoke is None:
        return 0
    return guard_store(lambda: revoke(tenant, user_id, session.sid, op.event))


def _after_factor_change(op: Operation, kind: FactorKind, revoked: int, *, credit: bool = False) -> None:
    """Rotate this session's id and audit (``revoked``: the other sessions ended). With
    ``credit`` the factor counts as verified in this login (confirming it proved
    possession), so adding another factor right after needs no further step-up."""
    session = op.session
    sid = session.sid
    if credit:
        session.transition(lambda r: replace(r, factors_passed=(*r.factors_passed, kind.value)))
    if session.sid == sid:
        session.rotate_id()
    op.audit("success", f"revoked_sessions={revoked}" if revoked else None)


def user_factors(svc: LoginServices, session: AuthSession) -> list[FactorConfig]:
    """The session's user's confirmed factors (for an account page); empty for a guest."""
    record = session.record
    if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
        return []
    tenant, user_id = record.tenant, record.user_id
    return guard_store(lambda: svc.store.list_factors(tenant, user_id))
