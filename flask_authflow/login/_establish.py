"""``establish``: log a user in whom the application proved some other way (sign-up, a
magic link, a federated login, a passkey), through the same state machine as a login."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    begin_flow,
    complete_login,
    reset_to_guest,
    start_login,
)
from flask_authflow._outcomes import Authenticated, FactorKind, FactorRequired, WorkflowPending
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AccountDisabled, AuthFlowError, InvalidInput, UserNotFound
from flask_authflow.login._challenges import StepUser, next_step
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    TRANSACTION_KEY,
    LoginServices,
    Operation,
    guard_store,
    new_transaction,
)
from flask_authflow.login._required_enrollment import hold
from flask_authflow.login._workflow import abandon

__all__ = ["Establish", "establish"]

#: What ``login_user(method=...)`` accepts: a short lowercase label ("signup", "magic_link",
#: "oidc:google"), stored in the session and the audit row.
_METHOD_RE = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,31}")  # the audit column holds 32


@dataclass(frozen=True, slots=True)
class Establish:
    """How ``establish`` logs the user in (see ``AuthnRequest.establish``)."""

    method: str
    skip_factors: bool = False
    pending_workflow: bool = False
    federation: Mapping[str, str] | None = None
    multi_factor: bool = False


def establish(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, tenant: str, user_id: str, how: Establish
) -> Authenticated | FactorRequired | WorkflowPending:
    """Log ``user_id`` in on ``session`` (see ``AuthnRequest.establish``)."""
    method = how.method
    if not isinstance(method, str) or not _METHOD_RE.fullmatch(method):
        raise InvalidInput(
            "method must be a short lowercase label such as 'signup', 'magic_link' or 'oidc:google'"
        )
    try:
        tenant = check_tenant(tenant)
    except InvalidInput as exc:
        Operation(svc, ctx, session, "login").refuse(exc, "error")
        raise
    with Operation(svc, ctx, session, "login", tenant=tenant, user_id=user_id) as op:
        user = _held_user(op, svc, tenant, user_id)
        if user is None or user.disabled:
            error: AuthFlowError = UserNotFound() if user is None else AccountDisabled()
            op.refuse(error, "refused", user_id=user_id if user is not None else None, factor=method)
            raise error
        enrolled = guard_store(lambda: svc.store.required_factors(tenant, user.user_id))
        # ``method`` stands in for the first step (the password); later steps remain.
        steps = svc.steps_for(tenant, user.user_id, [FactorKind.PASSWORD, *enrolled])
        remaining = [] if how.skip_factors or how.multi_factor else steps[1:]
        skipped = how.skip_factors and len(steps) > 1 and not how.multi_factor
        if session.workflow is not None:  # a login ends the workflow in progress first
            abandon(op, "new_login")
        if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
            op.end_previous_login()
        elif session.state is AuthState.AUTHENTICATING:  # an unfinished login: dropped, not a logout
            session.transition(lambda r: reset_to_guest(r, now=op.now))
        if remaining:
            return _next_factor(op, svc, user, remaining, how)
        return _complete(op, svc, user, how, skipped)


def _held_user(op: Operation, svc: LoginServices, tenant: str, user_id: str) -> UserRecord | None:
    """The account, read in the login's unit under its row lock (``None``: gone). An
    operator's disable or delete takes the same lock: it either finished before, and is
    seen here, or waits for this login's commit and then ends the session it wrote (a
    read before the unit could see the account still enabled and write a session after
    the disable had ended the user's sessions)."""
    op.unit()
    if not guard_store(lambda: svc.store.lock_user(tenant, user_id)):
        return None
    return guard_store(lambda: svc.store.get_user(tenant, user_id))


def _next_factor(
    op: Operation, svc: LoginServices, user: UserRecord, remaining: list[str], how: Establish
) -> FactorRequired:
    """``method`` passed the first step; the user's later steps remain."""
    flow = {LOGIN_IDENTIFIER_KEY: user.identifier, TRANSACTION_KEY: new_transaction()}
    federation = dict(how.federation) if how.federation else None

    def started(r: SessionRecord) -> SessionRecord:
        begun = start_login(r, tenant=user.tenant, user_id=user.user_id, factors=remaining, now=op.now)
        marked = replace(begun, factors_passed=(how.method,), auth_method=how.method, federation=federation)
        return begin_flow(marked, flow)

    op.session.transition(started)
    op.audit("next_factor", user_id=user.user_id, identifier=user.identifier, factor=how.method)
    return next_step(svc, op.now, op.session, StepUser(user.tenant, user.user_id, user.identifier))


def _complete(
    op: Operation, svc: LoginServices, user: UserRecord, how: Establish, skipped: bool
) -> Authenticated | WorkflowPending:
    op.session.transition(
        lambda r: complete_login(
            r,
            tenant=user.tenant,
            user_id=user.user_id,
            method=how.method,
            now=op.now,
            pending_workflow=how.pending_workflow,
            federation=how.federation,
        )
    )
    if not how.pending_workflow and (held := hold(op, svc, user.tenant, user.user_id)) is not None:
        return held  # a factor to set up before the login completes (audited by the hold)
    op.audit(
        "pending_workflow" if how.pending_workflow else "success",
        "factors_skipped" if skipped else None,
        user_id=user.user_id,
        identifier=user.identifier,
        factor=how.method,
    )
    if how.pending_workflow:  # the outcome names the state the session is really in
        return WorkflowPending(user.user_id, user.tenant)
    op.count("login_successes")
    op.signal("login_succeeded", user_id=user.user_id, tenant=user.tenant, step_up=False, method=how.method)
    return Authenticated(user.user_id, user.tenant)
