"""``begin_step_up``: ask an Authenticated session to verify a factor again."""

from __future__ import annotations

from flask_authflow._core.session import AuthSession, begin_flow, step_kinds
from flask_authflow._outcomes import FactorKind, StepUpRequired
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import LoginNotStarted
from flask_authflow.login._challenges import StepUser, challenge_step, store_slots
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    STEP_UP_KEY,
    TRANSACTION_KEY,
    LoginServices,
    Operation,
    guard_store,
    lockout_subject,
    new_transaction,
)

__all__ = ["begin_step_up"]


def begin_step_up(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, *, strongest: bool = False
) -> StepUpRequired:
    """Ask an Authenticated session to re-verify a factor (see ``AuthnRequest.begin_step_up``)."""
    if not session.is_authenticated:
        error = LoginNotStarted("step-up needs an authenticated session")
        Operation(svc, ctx, session, "step_up_begin").refuse(error, "error")
        raise error
    tenant = session.tenant or ""
    user_id = session.user_id or ""
    with Operation(svc, ctx, session, "step_up_begin", tenant=tenant, user_id=user_id) as op:
        user = guard_store(lambda: svc.store.get_user(tenant, user_id))
        enrolled = guard_store(lambda: svc.store.required_factors(tenant, user_id))
        steps = svc.steps_for(tenant, user_id, enrolled)
        step = (steps[-1] if strongest else steps[0]) if steps else _without_steps(enrolled)
        flow: dict[str, str] = {STEP_UP_KEY: step, TRANSACTION_KEY: new_transaction()}
        if user is not None:
            flow[LOGIN_IDENTIFIER_KEY] = user.identifier
        session.transition(lambda r: begin_flow(r, flow))
        identifier = flow.get(LOGIN_IDENTIFIER_KEY)
        if svc.lockout.locked_until(tenant, lockout_subject(flow, user_id), op.now) is None:
            # A locked user gets no e-mail.
            who = StepUser(tenant, user_id, identifier, "step_up")
            _, slots = challenge_step(svc, op.now, session, step_kinds(step), who)
            store_slots(session, slots)
        op.audit("started", identifier=identifier, factor=step)
    return StepUpRequired(tuple(FactorKind(k) for k in step_kinds(step) if k in FactorKind))


def _without_steps(enrolled: list[FactorKind]) -> str:
    """The step of a user without password steps: a passkey-only account proves itself with
    its passkey again (a WebAuthn step, phishing-resistant); anyone else with the password."""
    if FactorKind.WEBAUTHN in enrolled and FactorKind.PASSWORD not in enrolled:
        return FactorKind.WEBAUTHN.value
    return FactorKind.PASSWORD.value
