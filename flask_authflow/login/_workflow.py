"""Workflows: a longer ceremony (sign-up, e-mail verification, password reset, or an
application's own) that holds the session in ``pending_workflow`` until it completes.

``start`` moves a Guest or Authenticated session into PendingWorkflow with a single-use
token (the session keeps only its hash) and an expiry; ``complete`` checks the token (or,
for a caller that holds a :class:`~flask_authflow._core.session.WorkflowKind`, the kind)
and returns the session to the state it was started from; ``abort`` returns there without
completing. Each runs in the one :class:`~flask_authflow.login._operation.Operation`
template: audit rows ``workflow_started`` / ``workflow_completed`` / ``workflow_aborted``,
signals of the same names, counters of the same names, and the session written in the
step's unit of work, so that of parallel completions of one workflow exactly one wins.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from flask_authflow._core.session import (
    WORKFLOW_EXPIRY,
    AuthSession,
    WorkflowExpired,
    WorkflowKind,
    WorkflowNotPending,
    WorkflowTokenInvalid,
    abort_workflow,
    check_workflow_proof,
    complete_workflow,
    start_workflow,
    workflow_expired,
    workflow_of,
)
from flask_authflow._outcomes import WorkflowOutcome, WorkflowStarted
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import ConfigurationError, InvalidInput, LoginNotStarted
from flask_authflow.login._operation import LoginServices, Operation

__all__ = ["abandon", "abort", "complete", "expiry_for", "start"]

#: The longest a workflow may be given to complete.
MAX_EXPIRY = timedelta(days=30)


def expiry_for(kind: WorkflowKind, overrides: Mapping[str, Any] | None = None) -> timedelta:
    """How long a workflow of ``kind`` stays completable: ``overrides`` (kind, or
    ``"custom"`` for every ``custom:*`` kind, to seconds or a ``timedelta``), else
    :data:`~flask_authflow._core.session.WORKFLOW_EXPIRY`."""
    family = "custom" if kind.startswith("custom:") else str(kind)
    table = {**WORKFLOW_EXPIRY, **(overrides or {})}
    value = table.get(str(kind), table[family])
    try:
        expiry = _duration(value)
    except InvalidInput:
        raise ConfigurationError(
            f"the expiry of workflow {kind!r} must be a positive number of seconds"
        ) from None
    return expiry


def _duration(value: Any) -> timedelta:
    """A positive ``timedelta`` of at most :data:`MAX_EXPIRY` from seconds or a ``timedelta``."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidInput("expires_in is a number of seconds or a timedelta")
    expiry = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if not timedelta(0) < expiry <= MAX_EXPIRY:
        raise InvalidInput(f"expires_in must be positive and at most {MAX_EXPIRY.days} days")
    return expiry


def start(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    kind: str,
    data: Mapping[str, Any] | None = None,
    expires_in: float | timedelta | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> WorkflowStarted:
    """Start a workflow of ``kind`` on ``session`` (Guest or Authenticated).

    :raises InvalidInput: an unknown kind, data that is not small JSON, a bad expiry.
    :raises InvalidTransition: the session is logging in or already in a workflow."""
    checked = WorkflowKind(kind)
    expiry = expiry_for(checked, overrides) if expires_in is None else _duration(expires_in)
    token = secrets.token_urlsafe(32)
    user_id, tenant = session.user_id, session.tenant
    with Operation(svc, ctx, session, "workflow_started", tenant=tenant, user_id=user_id) as op:
        after = session.transition(
            lambda r: start_workflow(
                r, kind=checked, token=token, expires_at=op.now + expiry, now=op.now, data=data
            )
        )
        _record(op, "workflow_started", "success", checked, user_id, tenant)
    assert after.workflow is not None
    return WorkflowStarted(str(checked), token, op.now + expiry, dict(after.workflow["data"]))


def complete(svc: LoginServices, ctx: AuditContext, session: AuthSession, proof: str) -> WorkflowOutcome:
    """Complete the pending workflow with its token (or its :class:`WorkflowKind`).

    :raises WorkflowNotPending: none is pending (never started, completed or aborted,
        also by a parallel request). :raises InvalidInput: a malformed token.
    :raises WorkflowTokenInvalid: another workflow's token or kind.
    :raises WorkflowExpired: past its expiry (the workflow is ended, audited as aborted)."""
    user_id, tenant = session.user_id, session.tenant
    op = Operation(svc, ctx, session, "workflow_completed", tenant=tenant, user_id=user_id)
    try:
        workflow = workflow_of(session.record)
        check_workflow_proof(workflow, proof)
    except (WorkflowNotPending, WorkflowTokenInvalid, InvalidInput) as exc:
        op.refuse(exc, "refused")
        raise
    kind = WorkflowKind(str(workflow["kind"]))
    if workflow_expired(workflow, op.now):
        _end(svc, ctx, session, kind, "workflow_aborted", "expired", abort_workflow)
        raise WorkflowExpired("this workflow has expired")
    return _end(
        svc, ctx, session, kind, "workflow_completed", None, lambda r: complete_workflow(r, proof, now=op.now)
    )


def abort(svc: LoginServices, ctx: AuditContext, session: AuthSession) -> WorkflowOutcome:
    """End the pending workflow without completing it (back to the state it came from).

    :raises WorkflowNotPending: none is pending."""
    try:
        workflow = workflow_of(session.record)
    except WorkflowNotPending as exc:
        Operation(svc, ctx, session, "workflow_aborted", user_id=session.user_id).refuse(exc, "refused")
        raise
    kind = WorkflowKind(str(workflow["kind"]))
    return _end(svc, ctx, session, kind, "workflow_aborted", "aborted", abort_workflow)


def _end(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    kind: WorkflowKind,
    event: str,
    reason: str | None,
    change: Any,
) -> WorkflowOutcome:
    """Leave the workflow with ``change``, written in the step's unit of work: when a
    parallel request of the session ended it first, nothing is kept (WorkflowNotPending)."""
    user_id, tenant = session.user_id, session.tenant
    workflow = workflow_of(session.record)
    try:
        with Operation(svc, ctx, session, event, tenant=tenant, user_id=user_id) as op:
            op.unit()
            op.write_session = True
            after = session.transition(change)
            _record(op, event, "success", kind, user_id, tenant, reason)
    except LoginNotStarted:
        raise WorkflowNotPending("this workflow ended in another request") from None
    return WorkflowOutcome(
        kind=str(kind),
        completed=event == "workflow_completed",
        state=after.state.value,
        data=dict(workflow["data"]),
        user_id=after.user_id,
        tenant=after.tenant,
    )


def _record(
    op: Operation,
    event: str,
    status: str,
    kind: WorkflowKind,
    user_id: str | None,
    tenant: str | None,
    reason: str | None = None,
) -> None:
    """The audit row, signal and counter of one workflow step."""
    op.audit(status, f"{reason} kind={kind}" if reason else f"kind={kind}")
    op.signal(event, kind=str(kind), user_id=user_id, tenant=tenant)
    op.count(event.replace("workflow_", "workflows_"))


def abandon(op: Operation, reason: str) -> None:
    """Inside another step's operation (a login): end the session's pending workflow, with
    its ``workflow_aborted`` row, signal and counter recorded by ``op``."""
    session = op.session
    kind = WorkflowKind(str(workflow_of(session.record)["kind"]))
    user_id, tenant = session.user_id, session.tenant
    session.transition(abort_workflow)
    op.rows.append(op.row("success", f"{reason} kind={kind}", event="workflow_aborted", user_id=user_id))
    op.signal("workflow_aborted", kind=str(kind), user_id=user_id, tenant=tenant)
    op.count("workflows_aborted")
