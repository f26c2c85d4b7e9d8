"""What a factor sees of a login step, and the challenges of the step a session waits for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask_authflow._core.factors import FactorContext
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession, begin_flow
from flask_authflow._outcomes import FactorKind, FactorRequired
from flask_authflow.errors import AuthFlowError
from flask_authflow.login._operation import PHANTOM_PREFIX, TRANSACTION_KEY, LoginServices, guard_store, log

__all__ = [
    "FACTOR_SLOT",
    "StepUser",
    "challenge_step",
    "factor_context",
    "next_step",
    "required",
    "store_slots",
]

#: Prefix of a factor's slot in the session flow (``"factor:email_otp"``).
FACTOR_SLOT = "factor:"


@dataclass(frozen=True, slots=True)
class StepUser:
    """Whose step it is: the tenant, user id (or phantom id) and normalised identifier."""

    tenant: str
    user_id: str
    identifier: str | None
    purpose: str = "login"


def factor_context(
    svc: LoginServices,
    now: datetime,
    session: AuthSession,
    kind: FactorKind,
    who: StepUser,
    factors: tuple[FactorConfig, ...] | None = None,
) -> FactorContext:
    """The context a factor sees: the user's confirmed factors of ``kind`` and its flow slot."""
    store = svc.store
    if factors is None:
        if who.user_id.startswith(PHANTOM_PREFIX) or kind is FactorKind.PASSWORD:
            factors = ()
        else:
            factors = tuple(guard_store(lambda: store.list_user_factors(who.tenant, who.user_id, kind=kind)))
    flow = session.record.flow or {}
    slot = flow.get(FACTOR_SLOT + kind.value)
    transaction = flow.get(TRANSACTION_KEY)
    return FactorContext(
        tenant=who.tenant,
        user_id=who.user_id,
        now=now,
        store=store,
        factors=factors,
        flow=dict(slot) if isinstance(slot, Mapping) else {},
        transaction=transaction if isinstance(transaction, str) else session.sid,
        purpose=who.purpose,
        identifier=who.identifier,
    )


def challenge_step(
    svc: LoginServices,
    now: datetime,
    session: AuthSession,
    kinds: Sequence[str],
    who: StepUser,
    only: FactorKind | None = None,
) -> tuple[dict[FactorKind, Mapping[str, Any]], dict[str, Any]]:
    """Call ``challenge`` of the step's factors; returns their public answers and the flow
    slots to store. A factor whose challenge has side effects (an e-mail) is challenged on
    entry only when it is the step's only kind; otherwise on request (``only``)."""
    public: dict[FactorKind, Mapping[str, Any]] = {}
    slots: dict[str, Any] = {}
    for name in kinds:
        kind = FactorKind(name) if name in FactorKind else None
        factor = svc.factor(kind) if kind is not None else None
        if kind is None or factor is None or (only is not None and kind is not only):
            continue
        if only is None and len(kinds) > 1 and factor.challenge_on_request:
            public[kind] = {"on_request": True}
            continue
        ctx = factor_context(svc, now, session, kind, who)
        try:
            answer = factor.challenge(ctx)
        except AuthFlowError as exc:
            if only is not None:
                raise
            log.warning("challenge of factor %s failed: %s", kind.value, exc.code)
            answer = {"error": exc.code}
        if ctx.flow_update is not None:
            slots[FACTOR_SLOT + kind.value] = ctx.flow_update
        if answer is not None:
            public[kind] = answer
    return public, slots


def required(kinds: Sequence[str], public: Mapping[FactorKind, Mapping[str, Any]]) -> FactorRequired:
    """The outcome that asks for one of ``kinds``, with the factors' public answers."""
    known = tuple(FactorKind(k) for k in kinds if k in FactorKind)
    return FactorRequired(known[0], known, dict(public))


def store_slots(session: AuthSession, slots: Mapping[str, Any]) -> None:
    """Keep the factors' new flow slots in the session."""
    if slots:
        session.transition(lambda r: begin_flow(r, {**(r.flow or {}), **slots}))


def next_step(svc: LoginServices, now: datetime, session: AuthSession, who: StepUser) -> FactorRequired:
    """The outcome for the step the session now waits for, its factors challenged."""
    kinds = session.record.next_step
    public, slots = challenge_step(svc, now, session, kinds, who)
    store_slots(session, slots)
    return required(kinds, public)
