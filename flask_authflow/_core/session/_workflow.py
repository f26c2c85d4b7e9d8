"""Workflows: the longer ceremonies a session can be held in (sign-up, e-mail verification,
password reset, a required enrollment, an application's own), as pure transitions of the
record (re-exported by :mod:`flask_authflow._core.session`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from flask_authflow._core.session._record import AuthState, SessionRecord
from flask_authflow.errors import InvalidInput, InvalidTransition

#: The longest ``data`` a workflow carries, serialised as JSON (2 KiB).
WORKFLOW_DATA_LIMIT = 2048

_CUSTOM_WORKFLOW_RE = re.compile(r"custom:[a-z][a-z0-9_]{0,31}")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")


class WorkflowKind(str):
    """The kind of a workflow: ``signup``, ``email_verification``, ``password_reset``,
    ``required_enrollment`` (a login held until a factor is set up again, see
    ``flask_authflow.login._required_enrollment``), or an application's own
    ``custom:<name>`` (``name``: a-z, 0-9, ``_``, at most 32 characters).

    A kind is a string, but only a ``WorkflowKind`` is read as a kind by
    :func:`complete_workflow`: a plain string (what a request carries) is always a token.
    """

    __slots__ = ()

    SIGNUP: WorkflowKind
    EMAIL_VERIFICATION: WorkflowKind
    PASSWORD_RESET: WorkflowKind

    def __new__(cls, value: str) -> WorkflowKind:
        if isinstance(value, WorkflowKind):
            return value
        if not isinstance(value, str) or not (
            value in _BUILT_IN_KINDS or _CUSTOM_WORKFLOW_RE.fullmatch(value)
        ):
            raise InvalidInput(
                "a workflow kind is 'signup', 'email_verification', 'password_reset' or "
                "'custom:<name>' (name: a-z, 0-9, _, at most 32 characters)"
            )
        return str.__new__(cls, value)


_BUILT_IN_KINDS = frozenset({"signup", "email_verification", "password_reset", "required_enrollment"})
WorkflowKind.SIGNUP = WorkflowKind("signup")
WorkflowKind.EMAIL_VERIFICATION = WorkflowKind("email_verification")
WorkflowKind.PASSWORD_RESET = WorkflowKind("password_reset")

#: How long a workflow of each kind stays completable by default; ``custom:*`` kinds use
#: the entry ``"custom"``.
WORKFLOW_EXPIRY: Mapping[str, timedelta] = {
    "signup": timedelta(hours=24),
    "email_verification": timedelta(hours=24),
    "password_reset": timedelta(minutes=30),
    "required_enrollment": timedelta(minutes=30),
    "custom": timedelta(hours=1),
}


class WorkflowNotPending(InvalidTransition):
    """The session has no pending workflow (none was started, or it already ended)."""

    code = "workflow_not_pending"
    status = 409


class WorkflowExpired(InvalidTransition):
    """The workflow is past its expiry: it can no longer complete (it is ended)."""

    code = "workflow_expired"
    status = 410


class WorkflowTokenInvalid(InvalidTransition):
    """The token is not the pending workflow's."""

    code = "workflow_token_invalid"
    status = 401


def workflow_token_hash(token: str) -> str:
    """Hex SHA-256 of a workflow token: what the session record keeps of it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_workflow_data(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` as a workflow keeps it: a JSON object of at most :data:`WORKFLOW_DATA_LIMIT`
    bytes (string keys; strings, numbers, booleans, ``None``, lists and objects)."""
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise InvalidInput("workflow data is a mapping with string keys")
    try:
        text = json.dumps(dict(data), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        raise InvalidInput(
            "workflow data must be JSON: strings, numbers, booleans, None, lists, objects"
        ) from None
    if len(text.encode("utf-8")) > WORKFLOW_DATA_LIMIT:
        raise InvalidInput(f"workflow data is limited to {WORKFLOW_DATA_LIMIT} bytes of JSON")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def start_workflow(
    record: SessionRecord,
    *,
    kind: WorkflowKind,
    token: str,
    expires_at: datetime,
    now: datetime,
    data: Mapping[str, Any] | None = None,
) -> SessionRecord:
    """Guest or Authenticated → PendingWorkflow of ``kind``; the record keeps the hash of
    ``token`` only. Completing or aborting it returns to the state it came from."""
    if record.state not in (AuthState.GUEST, AuthState.AUTHENTICATED):
        raise InvalidTransition(f"cannot start a workflow from {record.state.value}")
    if expires_at <= now:
        raise InvalidTransition("a workflow must expire after it starts")
    workflow = {
        "kind": str(WorkflowKind(kind)),
        "token": workflow_token_hash(token),
        "data": check_workflow_data(data),
        "started_at": now.isoformat(),
        "expires_at": expires_at.isoformat(),
        "from": record.state.value,
    }
    return replace(record, state=AuthState.PENDING_WORKFLOW, workflow=workflow, flow=None)


def workflow_of(record: SessionRecord) -> Mapping[str, Any]:
    """The pending workflow of ``record``. :raises WorkflowNotPending: there is none."""
    if record.state is not AuthState.PENDING_WORKFLOW or record.workflow is None:
        raise WorkflowNotPending("no workflow is pending on this session")
    return record.workflow


def check_workflow_proof(workflow: Mapping[str, Any], proof: str) -> None:
    """``proof`` is the workflow's kind (a :class:`WorkflowKind`) or its token.

    :raises InvalidInput: a plain string that is not shaped like a token.
    :raises WorkflowTokenInvalid: another kind, or another token."""
    if isinstance(proof, WorkflowKind):
        if proof != workflow.get("kind"):
            raise WorkflowTokenInvalid(f"the pending workflow is not of kind {proof!r}")
        return
    if not isinstance(proof, str) or not _TOKEN_RE.fullmatch(proof):
        raise InvalidInput("a workflow token is 43 characters of A-Z, a-z, 0-9, '-' and '_'")
    if not hmac.compare_digest(workflow_token_hash(proof), str(workflow.get("token", ""))):
        raise WorkflowTokenInvalid("this token does not belong to the pending workflow")


def workflow_expired(workflow: Mapping[str, Any], now: datetime) -> bool:
    """Whether ``workflow`` is past its expiry at ``now``."""
    return now >= datetime.fromisoformat(str(workflow["expires_at"]))


def complete_workflow(record: SessionRecord, proof: str, *, now: datetime) -> SessionRecord:
    """PendingWorkflow → the state it was started from, once ``proof`` (see
    :func:`check_workflow_proof`) checked and before the expiry.

    :raises WorkflowNotPending, WorkflowTokenInvalid, WorkflowExpired, InvalidInput."""
    workflow = workflow_of(record)
    check_workflow_proof(workflow, proof)
    if workflow_expired(workflow, now):
        raise WorkflowExpired("this workflow has expired")
    return _leave_workflow(record, workflow)


def abort_workflow(record: SessionRecord) -> SessionRecord:
    """PendingWorkflow → the state it was started from, without completing it.

    :raises WorkflowNotPending: no workflow is pending."""
    return _leave_workflow(record, workflow_of(record))


def _leave_workflow(record: SessionRecord, workflow: Mapping[str, Any]) -> SessionRecord:
    if workflow.get("from") == AuthState.AUTHENTICATED.value and record.user_id is not None:
        return replace(record, state=AuthState.AUTHENTICATED, workflow=None)
    return replace(record, state=AuthState.GUEST, tenant=None, user_id=None, workflow=None)
