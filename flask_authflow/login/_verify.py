"""``verify_factor`` and ``challenge``: the factor steps of a login or a step-up.

Every credential is verified first and counted after, in the step's one unit of work
with its audit rows (see ``flask_authflow.login._lockout``): a failure is counted and
answered only while every lockout level has room, so a burst of parallel guesses cannot
learn more answers than the policy allows (the rest are answered ``Locked``). A one-time
credential is used up in that same commit, or not at all: a parallel request that used it
first makes this one count as ``replayed``. A lock set while the check ran wins over a
success. **Fail closed**: if the attempt store cannot count a failure, the
attempt is refused with :class:`~flask_authflow.errors.StoreUnavailable`; it never
succeeds by default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask_authflow._core.factors import Accepted, Factor, FactorCheck, Rejected, RejectReason
from flask_authflow._core.ports import HolderUnusable
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    SessionSnapshot,
    begin_flow,
    clear_flow,
    fail_login,
    pass_factor,
)
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuthFlowError, FactorNotRegistered, InvalidInput, LoginNotStarted
from flask_authflow.login._challenges import (
    FACTOR_SLOT,
    StepUser,
    challenge_step,
    factor_context,
    next_step,
    required,
    store_slots,
)
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    PHANTOM_PREFIX,
    LoginServices,
    Operation,
    begin_read_for,
    guard_store,
    lockout_subject,
)
from flask_authflow.login._required_enrollment import hold, known_kinds
from flask_authflow.login._throttling import refuse_if_throttled
from flask_authflow.login._verification import UNVERIFIED_KEY, EmailNotVerified, refuse_unverified

__all__ = ["challenge", "verify_factor"]


@dataclass(frozen=True, slots=True)
class _Step:
    """The step a session waits for, as a credential of ``expected`` meets it."""

    who: StepUser
    expected: str
    in_step: bool
    subject: str
    phantom: bool
    step_up: bool
    first_step: bool

    @classmethod
    def of(cls, record: SessionRecord, kind_name: str) -> _Step:
        flow = record.flow or {}
        step = record.pending_step
        in_step = kind_name in step
        user_id = record.user_id or ""
        identifier = flow.get(LOGIN_IDENTIFIER_KEY)
        step_up = record.state is AuthState.AUTHENTICATED
        who = StepUser(
            record.tenant or "",
            user_id,
            identifier if isinstance(identifier, str) else None,
            "step_up" if step_up else "login",
        )
        return cls(
            who=who,
            expected=kind_name if in_step else step[0],
            in_step=in_step,
            subject=lockout_subject(flow, user_id),
            phantom=user_id.startswith(PHANTOM_PREFIX),
            step_up=step_up,
            first_step=not step_up and not record.factors_passed,
        )

    def keep_trying(
        self, now: datetime, update: dict[str, Any] | None
    ) -> Callable[[SessionRecord], SessionRecord]:
        """A failed step-up keeps the login but forgets the step-up; a failure at the first
        step ends the login (but a sign-in code's); at a later step the login waits for
        another try."""
        slot_key = FACTOR_SLOT + self.expected

        def change(r: SessionRecord) -> SessionRecord:
            if r.state is AuthState.AUTHENTICATED:
                return clear_flow(r)
            # A mistyped sign-in code keeps its login (the code has its own tries), for a
            # phantom too: the answers stay the same whether the account exists or not.
            if (self.first_step or self.phantom) and self.expected != FactorKind.LOGIN_CODE.value:
                return fail_login(r, now=now)
            if update is None:
                return r
            return begin_flow(r, {**(r.flow or {}), slot_key: update})

        return change


def _end(now: datetime) -> Callable[[SessionRecord], SessionRecord]:
    def end(r: SessionRecord) -> SessionRecord:
        return clear_flow(r) if r.state is AuthState.AUTHENTICATED else fail_login(r, now=now)

    return end


def verify_factor(
    svc: LoginServices,
    ctx: AuditContext,
    credential: FactorCredential,
    session: AuthSession,
    *,
    carried: Sequence[AuditRecord] = (),
    carried_since: SessionSnapshot | None = None,
) -> FactorOutcome:
    """Check the credential for the step the session waits for (credential first, then the session).

    Any kind of the pending step passes it; a kind outside the step is refused
    (``InvalidCredential``, audited ``unexpected_factor``), never a skip. A wrong credential
    ends the login at its first step (the password), and keeps it at a later step so the
    user can retry within the lockout policy; the session id rotates after each passed step.
    ``carried``: the audit rows of this request's ``begin_login``, written with this step's
    (``carried_since``: the session before it, put back when they cannot be written).
    """
    record = session.record
    if not record.pending_step:
        return _no_login(svc, ctx, credential, session, carried, carried_since)
    step = _Step.of(record, credential.kind.value)
    who = step.who
    factor = svc.factor(credential.kind) if step.in_step else None
    fields: dict[str, Any] = {
        "tenant": who.tenant,
        "user_id": who.user_id,
        "identifier": who.identifier,
        "factor": step.expected,
    }
    with Operation(
        svc, ctx, session, "factor_verify", carried=carried, carried_since=carried_since, **fields
    ) as op:
        if factor is not None:
            try:
                factor.check_input(credential)
            except InvalidInput as exc:
                op.refuse(exc, "error")
                raise
        refuse_if_throttled(op, svc, "factor")  # before any check (no Argon2 for a throttled request)
        op.count("login_attempts")
        if factor is not None and factor.expensive:
            # Verify first, count after: Argon2 runs with no lock held, after a read of the
            # locks (refused at once if a level is locked already).
            locked = _locked_before_check(op, svc, step)
            if locked is not None:
                return _locked(op, step, locked, "locked")
        else:
            # A cheap check runs in the step's unit (on SQLite under its write lock).
            op.unit()
        # Either way the settlement decides atomically, under the counters' locks, whether
        # the answer may be given (see _settle and _failed): one commit per step.
        checked, update = _check(op, svc, step, factor, credential)
        return _settle(op, svc, step, checked, update)


def _no_login(
    svc: LoginServices,
    ctx: AuditContext,
    credential: FactorCredential,
    session: AuthSession,
    carried: Sequence[AuditRecord],
    carried_since: SessionSnapshot | None,
) -> InvalidCredential:
    """A credential for a session that waits for no step: refused and audited."""
    kind = credential.kind.value
    with Operation(
        svc, ctx, session, "factor_verify", carried=carried, carried_since=carried_since, factor=kind
    ) as op:
        op.count("login_attempts", "login_failures")
        op.audit("failure", "no_login_in_progress")
    return InvalidCredential()


def _locked_before_check(op: Operation, svc: LoginServices, step: _Step) -> datetime | None:
    """An active lock on a level of the step's subject, read before an expensive check; no
    read when ``begin_login`` read them for this login in this request."""
    if begin_read_for(op.session.record.flow) is not None:
        return None
    return svc.lockout.levels_locked_until(step.who.tenant, step.subject, op.ctx.client_ip, op.now)


def _check(
    op: Operation, svc: LoginServices, step: _Step, factor: Factor | None, credential: FactorCredential
) -> tuple[FactorCheck, dict[str, Any] | None]:
    """Run the factor's check (after the reservation); its answer and its new flow slot."""
    if not step.in_step:
        return Rejected(RejectReason.WRONG_KIND), None
    if factor is None:
        return Rejected("unsupported_factor"), None
    ctx = factor_context(svc, op.now, op.session, credential.kind, step.who)
    begun = begin_read_for(op.session.record.flow) if credential.kind is FactorKind.PASSWORD else None
    if begun is not None:
        ctx.known_secret = begun.password  # read by this request's begin_login, with the user
    checked = guard_store(lambda: factor.verify(ctx, credential))
    return checked, ctx.flow_update


def _settle(
    op: Operation, svc: LoginServices, step: _Step, checked: FactorCheck, update: dict[str, Any] | None
) -> FactorOutcome:
    """Settle the check in the step's unit: a success (unless a level is locked), or a
    failure counted (while every level has room)."""
    lockout, who = svc.lockout, step.who
    ok = bool(checked) and not step.phantom
    commit = checked.commit if isinstance(checked, Accepted) else None  # makes it single-use
    op.unit()
    if ok and commit is not None and not guard_store(commit):
        # The single-use update in the settlement's unit: the code is used up exactly when
        # the step passes and its rows are written; a parallel request used it first.
        ok, checked = False, Rejected(RejectReason.REPLAYED)
    if ok:
        # The locks re-checked under the counters' locks (one statement on PostgreSQL);
        # found, nothing of the success is kept: a code used up above stays usable.
        try:
            locked_now = lockout.success_unless_locked(
                who.tenant,
                step.subject,
                step.expected,
                op.now,
                op.ctx.client_ip,
                reservation=op.hand_off(),
                holder=None if step.step_up else who.user_id,
            )
        except HolderUnusable:
            # Disabled or deleted while the check ran: the settlement re-read the account
            # under the lock an operator's disable or delete takes (either it finished
            # before, and is seen there, or it waits for this step's commit and then ends
            # the session it wrote). Refused as a wrong password; a used-up code stays usable.
            locked_now, ok, checked = None, False, Rejected("disabled")
        if ok and locked_now is None:
            return _passed(op, svc, step)
        if commit is not None:
            op.discard_writes()
        if locked_now is not None:
            return _locked(op, step, locked_now, "locked_during_check")
    reason = "invalid_credential"
    if step.phantom:
        reason = "unknown_identifier"
    elif isinstance(checked, Rejected):
        reason = checked.code
    return _failed(op, svc, step, reason, update)


def _locked(op: Operation, step: _Step, until: datetime, reason: str) -> Locked:
    """Refuse the attempt as locked: no credential check was counted for it."""
    op.session.transition(_end(op.now))
    op.audit("locked", reason)
    op.count("login_failures")
    op.signal("login_failed", tenant=step.who.tenant, identifier=step.who.identifier, reason="locked")
    return Locked(until)


def _passed(op: Operation, svc: LoginServices, step: _Step) -> FactorOutcome:
    """The step passed: the session moves on (its id rotates), written in the step's unit."""
    expected, who, now = step.expected, step.who, op.now
    flow = op.session.record.flow  # before the flow ends with the step
    begun = begin_read_for(flow)
    known = begun.required if begun is not None else known_kinds(flow)
    if step.first_step and (flow or {}).get(UNVERIFIED_KEY):
        try:  # a sign-up that has not confirmed its address yet: told so, nothing kept
            refuse_unverified(svc, who.tenant, who.user_id)
        except EmailNotVerified as exc:
            op.refuse(exc, "refused")
            raise

    def advance(r: SessionRecord) -> SessionRecord:
        after = pass_factor(r, expected, now=now)
        if after.state is AuthState.AUTHENTICATED:
            return clear_flow(after)
        rest = {k: v for k, v in (after.flow or {}).items() if not k.startswith(FACTOR_SLOT)}
        return begin_flow(after, rest)

    after = op.session.transition(advance)
    op.write_session = True  # with the credential it used up, or not at all
    op.signal("factor_verified", user_id=who.user_id, tenant=who.tenant, factor=expected)
    if not step.step_up and after.state is AuthState.AUTHENTICATED:  # a factor to set up again first?
        if (held := hold(op, svc, who.tenant, who.user_id, known=known)) is not None:
            return held
    if after.state is AuthState.AUTHENTICATED:
        op.audit("success", "step_up" if step.step_up else None)
        op.count("login_successes")
        op.signal("login_succeeded", user_id=who.user_id, tenant=who.tenant, step_up=step.step_up)
        return Authenticated(who.user_id, who.tenant)
    op.audit("success", "next_factor")
    return next_step(svc, now, op.session, StepUser(who.tenant, who.user_id, who.identifier))


def _failed(
    op: Operation, svc: LoginServices, step: _Step, reason: str, update: dict[str, Any] | None
) -> FactorOutcome:
    """Count the failure (settling the reservation); the threshold locks the subject."""
    lockout, who = svc.lockout, step.who
    token = op.hand_off()
    op.unit()
    if token is None:
        # Verified first: counted, and answered, only if every level still has room, decided
        # under the levels' locks that the unit holds until it commits the count. A guess
        # past the limit is answered "locked", whatever it was.
        refused = lockout.admit(who.tenant, step.subject, step.expected, op.now, op.ctx.client_ip)
        if refused is not None:
            svc.throttle.failure()
            return _locked(op, step, refused, "locked_during_check")

    def count_failure() -> object:
        return lockout.failure(
            who.tenant, step.subject, step.expected, op.now, op.ctx.client_ip, reservation=token
        )

    result = lockout.failure(
        who.tenant, step.subject, step.expected, op.now, op.ctx.client_ip, reservation=token
    )
    op.recount_with(count_failure)
    op.count("login_failures")
    svc.throttle.failure()  # the failure-rate guard
    outcome: FactorOutcome
    if result.locked_until is not None:
        op.session.transition(_end(op.now))
        op.audit("locked", reason)
        op.count("lockouts")
        outcome = Locked(result.locked_until)
    else:
        op.session.transition(step.keep_trying(op.now, update))
        op.audit("failure", reason)
        outcome = InvalidCredential()
    failed = "locked" if result.locked_until else "invalid_credential"
    op.signal("login_failed", tenant=who.tenant, identifier=who.identifier, reason=failed)
    return outcome


def challenge(
    svc: LoginServices, ctx: AuditContext, kind: FactorKind, session: AuthSession
) -> FactorRequired:
    """(Re)issue the challenge of ``kind`` for the pending step ("send me a code by e-mail",
    "use my security key"). The step must accept ``kind``.

    :raises LoginNotStarted: no step is pending, or ``kind`` does not pass it.
    :raises FactorNotRegistered: no factor of ``kind`` is registered.
    """
    record = session.record
    kinds = record.pending_step
    if kind.value not in kinds or (record.user_id or "").startswith(PHANTOM_PREFIX):
        raise LoginNotStarted(f"no pending step accepts {kind.value!r}")
    if svc.factor(kind) is None:
        raise FactorNotRegistered(f"no factor of kind {kind.value!r} is registered")
    ident = (record.flow or {}).get(LOGIN_IDENTIFIER_KEY)
    who = StepUser(
        record.tenant or "",
        record.user_id or "",
        ident if isinstance(ident, str) else None,
        "step_up" if record.state is AuthState.AUTHENTICATED else "login",
    )
    fields: dict[str, Any] = {"tenant": record.tenant, "user_id": record.user_id, "factor": kind.value}
    with Operation(svc, ctx, session, "factor_challenge", refuse_on=(AuthFlowError,), **fields) as op:
        # The mail server is down, no sender is configured: refused, recorded, undone.
        public, slots = challenge_step(svc, op.now, session, kinds, who, only=kind)
        store_slots(session, slots)
        answer: Mapping[str, Any] = public.get(kind, {})
        error = answer.get("error")
        refused = isinstance(error, str)
        op.audit("refused" if refused else "sent", error if refused else None)
    return required(kinds, public)
