"""Required enrollment: a user who must set up a factor again before a login completes.

An account can carry a *requirement* to enroll factors of some kinds: an import that could
not carry a user's authenticator (its secret could not be opened) leaves one, so the
account is never easier to enter than it was; a policy that demands a second factor can
leave one too. The requirement is stored as an account token of kind
``required_enrollment`` (its token is thrown away: it is never mailed, and a reset or
"log out everywhere" does not void it), whose payload names the kinds: each of them must
be set up. ``AUTHFLOW_MFA_REQUIRED`` adds a requirement that is not stored but computed
at each sign-in (:mod:`flask_authflow.login._mfa_policy`): *one* factor of the counting
kinds, for a user who has none. Both combine: the held session lists both, and completes
when every stored kind and one counting kind (the same enrollment may be both) are set up.

When a login of such a user passes its last step, the session does **not** become
Authenticated: it moves to PendingWorkflow (workflow kind ``required_enrollment``, started
"from Guest", so that aborting or leaving it ends as a guest) and the outcome is
:class:`~flask_authflow._outcomes.WorkflowPending`. In that state only the enrollment of the
required kinds (and logout) is possible, for :data:`HOLD` at most. Each confirmed
enrollment of a required kind is crossed off; when none is left, the requirement is used
up and the session becomes Authenticated through the state machine (its id rotates), with
a ``login`` audit row ``success`` / ``required_enrollment`` in the same unit of work.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from flask_authflow._core.ports import AccountToken, AccountTokenStore
from flask_authflow._core.session import (
    AuthState,
    SessionRecord,
    workflow_expired,
    workflow_token_hash,
)
from flask_authflow._outcomes import FactorKind, WorkflowPending
from flask_authflow.errors import StepUpNeeded
from flask_authflow.login._mfa_policy import missing_kinds
from flask_authflow.login._operation import LoginServices, Operation, guard_store

__all__ = [
    "HOLD",
    "KIND",
    "NONE_REQUIRED_KEY",
    "enrolled",
    "enrolling_user",
    "hold",
    "kinds_in",
    "known_kinds",
    "pending_kinds",
    "require",
    "required_kinds",
]

#: The account-token kind of a requirement, and the workflow kind of a held session.
KIND: Final = "required_enrollment"
#: How long a held session may take to enroll (then the user signs in again).
HOLD: Final = timedelta(minutes=30)
#: A requirement does not lapse by itself.
_FOREVER: Final = timedelta(days=365 * 100)
#: Key of a login's flow: ``begin_login`` found no stored requirement for its user, so the
#: login's last step does not read it again. Safe because a requirement is only ever stored
#: with the account it is for (the import creates both in one unit of work; an existing
#: account's requirement only shrinks): one cannot appear while a login of the user runs.
NONE_REQUIRED_KEY: Final = "no_required_enrollment"


def _tokens(svc: LoginServices) -> AccountTokenStore | None:
    # Only a backend with account tokens can hold a requirement (both built-in ones have them).
    return svc.account_tokens


def require(
    store: AccountTokenStore, tenant: str, user_id: str, kinds: Iterable[str], now: datetime, reason: str
) -> AccountToken:
    """Leave a requirement to enroll ``kinds`` on the user (replacing an earlier one); the
    caller's unit of work keeps it with the rest of its writes. ``reason`` (``"import"``,
    ``"policy"``) is kept for the audit trail."""
    wanted = sorted({FactorKind(kind).value for kind in kinds})
    if not wanted:
        raise ValueError("a required enrollment names at least one factor kind")
    digest = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
    record = AccountToken(
        token_hash=digest,
        kind=KIND,
        tenant=tenant,
        user_id=user_id,
        code_hash=hashlib.sha256(secrets.token_bytes(32)).hexdigest(),
        created_at=now,
        expires_at=now + _FOREVER,
        payload={"kinds": wanted, "reason": reason},
    )
    store.issue_account_token(record)
    return record


def _live(svc: LoginServices, tenant: str, user_id: str, now: datetime) -> AccountToken | None:
    store = _tokens(svc)
    if store is None:
        return None
    return guard_store(lambda: store.live_account_token(tenant, user_id, KIND, now))


def kinds_in(payload: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The kinds a requirement's payload names (empty: none, or no requirement)."""
    kinds = payload.get("kinds") if payload is not None else None
    return tuple(str(kind) for kind in kinds) if isinstance(kinds, list) else ()


def known_kinds(flow: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The stored kinds a login's flow knows its user must enroll: empty when its
    ``begin_login`` found none (see :data:`NONE_REQUIRED_KEY`), else ``None`` (read them)."""
    return () if flow is not None and flow.get(NONE_REQUIRED_KEY) is True else None


def required_kinds(svc: LoginServices, tenant: str, user_id: str, now: datetime) -> tuple[str, ...]:
    """The kinds the user must still enroll (empty: none)."""
    live = _live(svc, tenant, user_id, now)
    return kinds_in(live.payload if live is not None else None)


def _policy_kinds(op: Operation, svc: LoginServices, tenant: str, user_id: str) -> tuple[str, ...]:
    """The counting kinds ``AUTHFLOW_MFA_REQUIRED`` wants one of (empty: none wanted)."""
    requirement = svc.mfa_requirement
    if requirement is None:
        return ()
    passed = op.session.record.factors_passed

    def decide() -> tuple[str, ...]:
        enrolled = [kind.value for kind in svc.store.required_factors(tenant, user_id)]
        return missing_kinds(requirement, tenant, user_id, enrolled, passed)

    return guard_store(decide)  # a store (or policy) that cannot answer refuses the login


def hold(
    op: Operation, svc: LoginServices, tenant: str, user_id: str, *, known: tuple[str, ...] | None = None
) -> WorkflowPending | None:
    """In a login step that just made the session Authenticated: hold it in the required
    enrollment instead when the user has one, stored or by policy (``None``: nothing
    required). Every sign-in passes here: the factor steps and ``establish``. ``known``: the
    stored kinds ``begin_login`` read for this login in this request (no second read)."""
    kinds = known if known is not None else required_kinds(svc, tenant, user_id, op.now)
    any_of = _policy_kinds(op, svc, tenant, user_id)
    if not kinds and not any_of:
        return None
    op.session.transition(lambda r: _held(r, kinds, any_of, op.now))
    stored = f" kinds={','.join(kinds)}" if kinds else ""
    op.audit("pending_workflow", f"{KIND}{stored}{' policy' if any_of else ''}")
    op.signal("workflow_started", kind=KIND, user_id=user_id, tenant=tenant)
    return WorkflowPending(user_id, tenant)


def _held(record: SessionRecord, kinds: Iterable[str], any_of: Iterable[str], now: datetime) -> SessionRecord:
    """Authenticated → PendingWorkflow of the required enrollment, begun "from Guest":
    each of ``kinds`` (stored) and one of ``any_of`` (the policy) to set up."""
    workflow = {
        "kind": KIND,
        "token": workflow_token_hash(secrets.token_urlsafe(32)),  # never completed by a token
        "data": {"kinds": list(kinds), "any_of": list(any_of)},
        "started_at": now.isoformat(),
        "expires_at": (now + HOLD).isoformat(),
        "from": AuthState.GUEST.value,
    }
    return replace(
        record, state=AuthState.PENDING_WORKFLOW, workflow=workflow, flow=None, authenticated_at=None
    )


def pending_kinds(record: SessionRecord, now: datetime) -> tuple[str, ...]:
    """The kinds a session held in a required enrollment may enroll now (empty: the
    session is not held, or the hold expired)."""
    workflow = record.workflow
    if record.state is not AuthState.PENDING_WORKFLOW or workflow is None or record.user_id is None:
        return ()
    if workflow.get("kind") != KIND or workflow.get("from") != AuthState.GUEST.value:
        return ()  # an application's workflow, or one started by a caller without a login
    if workflow_expired(workflow, now):
        return ()
    kinds, any_of = _wanted(record)
    return tuple(dict.fromkeys((*kinds, *any_of)))


def _wanted(record: SessionRecord) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A held session's (stored kinds, policy's counting kinds)."""
    data = (record.workflow or {}).get("data") or {}
    found = [data.get("kinds"), data.get("any_of")]
    kinds, any_of = (tuple(str(k) for k in v) if isinstance(v, list) else () for v in found)
    return kinds, any_of


def enrolling_user(record: SessionRecord, kind: FactorKind, now: datetime) -> tuple[str, str]:
    """``(tenant, user_id)`` of a held session that may enroll ``kind``.

    :raises StepUpNeeded: the session is not held for ``kind`` (or the hold expired)."""
    if kind.value not in pending_kinds(record, now) or record.tenant is None or record.user_id is None:
        raise StepUpNeeded("adding a factor needs an authenticated session")
    return record.tenant, record.user_id


def enrolled(op: Operation, svc: LoginServices, kind: FactorKind) -> bool:
    """Inside the operation of a confirmed enrollment: cross ``kind`` off the held session's
    requirement; when none is left, use the requirement up and make the session
    Authenticated (in ``op``'s unit of work, audited). True when the session became
    Authenticated."""
    record = op.session.record
    if kind.value not in pending_kinds(record, op.now) or record.tenant is None or record.user_id is None:
        return False
    tenant, user_id, now = record.tenant, record.user_id, op.now
    kinds, any_of = _wanted(record)
    left_any = () if kind.value in any_of else any_of
    op.unit()
    if kind.value in kinds and not _cross_off(op, svc, kind, tenant, user_id, left_any):
        return False
    if kinds and kind.value not in kinds:  # a counting kind only: the stored kinds remain
        op.session.transition(lambda r: _held(r, kinds, left_any, now))
        return False
    if left_any:  # the stored kinds are set up; one counting kind is still wanted
        op.session.transition(lambda r: _held(r, (), left_any, now))
        return False
    op.session.transition(lambda r: _finish(r, kind, now))
    op.write_session = True
    op.audit("success", KIND, event="login", factor=kind.value)
    op.count("login_successes")
    op.signal("login_succeeded", user_id=user_id, tenant=tenant, step_up=False)
    return True


def _cross_off(
    op: Operation, svc: LoginServices, kind: FactorKind, tenant: str, user_id: str, left_any: tuple[str, ...]
) -> bool:
    """Cross ``kind`` off the stored requirement; true when none is left (it is used up)."""
    now = op.now
    store = _tokens(svc)
    live = _live(svc, tenant, user_id, now)
    if store is None or live is None:
        return False  # used up by a parallel request meanwhile: that one completes the login
    left = [k for k in required_kinds(svc, tenant, user_id, now) if k != kind.value]
    if left:
        guard_store(lambda: require(store, tenant, user_id, left, now, str(live.payload.get("reason", ""))))
        op.session.transition(lambda r: _held(r, left, left_any, now))
        return False
    return guard_store(lambda: store.use_account_token(live.token_hash, KIND, now)) is not None


def _finish(record: SessionRecord, kind: FactorKind, now: datetime) -> SessionRecord:
    """PendingWorkflow (required enrollment) → Authenticated."""
    passed = (*record.factors_passed, kind.value)
    return replace(
        record, state=AuthState.AUTHENTICATED, workflow=None, authenticated_at=now, factors_passed=passed
    )
