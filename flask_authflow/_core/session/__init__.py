"""The login state machine and the session object views see.

A session is one :class:`SessionRecord` (immutable, what the store keeps) wrapped in an
:class:`AuthSession` (what ``flask.session`` / ``current_session`` is during a request).
Every change of authentication state is a pure function from record to record
(``_record``, and ``_workflow`` for the longer ceremonies); :class:`AuthSession`
(``_auth_session``) applies them, rotates the session id and marks itself dirty. This
module re-exports the three.

The rule the whole library rests on: a record in :attr:`AuthState.AUTHENTICATED` has no
outstanding factor, so :attr:`AuthSession.is_authenticated` is never true while a
required factor is still to be verified (enforced in ``SessionRecord.__post_init__``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from flask_authflow._core.session import _record, _workflow
from flask_authflow._core.session._auth_session import (
    CUSTOM_DATA_LIMIT,
    AuthSession,
    SessionSnapshot,
    custom_serializer,
)
from flask_authflow._core.session._record import (
    AuthState,
    SessionRecord,
    begin_flow,
    clean_user_agent,
    clear_flow,
    complete_login,
    fail_login,
    federation_key,
    new_guest_record,
    new_session_id,
    pass_factor,
    record_federation_key,
    reset_to_guest,
    sid_hash,
    start_login,
    step_kinds,
    step_name,
    step_up,
)
from flask_authflow._core.session._workflow import (
    WORKFLOW_DATA_LIMIT,
    WorkflowExpired,
    WorkflowKind,
    WorkflowNotPending,
    WorkflowTokenInvalid,
    abort_workflow,
    complete_workflow,
    start_workflow,
    workflow_token_hash,
)

# the login feature's workflow flows use these three; they stay out of ``__all__``
from flask_authflow._core.session._workflow import (
    check_workflow_proof as check_workflow_proof,
)
from flask_authflow._core.session._workflow import (
    workflow_expired as workflow_expired,
)
from flask_authflow._core.session._workflow import (
    workflow_of as workflow_of,
)
from flask_authflow.errors import InvalidTransition

# The two documented constants are bound here, where the API reference reads their comments.

#: Longest User-Agent kept as a session's ``device`` (the rest is cut).
DEVICE_MAX_LENGTH: int = _record.DEVICE_MAX_LENGTH
#: How long a workflow of each kind stays completable by default; ``custom:*`` kinds use
#: the entry ``"custom"``.
WORKFLOW_EXPIRY: Mapping[str, timedelta] = _workflow.WORKFLOW_EXPIRY

__all__ = [
    "CUSTOM_DATA_LIMIT",
    "DEVICE_MAX_LENGTH",
    "WORKFLOW_DATA_LIMIT",
    "WORKFLOW_EXPIRY",
    "AuthSession",
    "AuthState",
    "InvalidTransition",
    "SessionRecord",
    "SessionSnapshot",
    "WorkflowExpired",
    "WorkflowKind",
    "WorkflowNotPending",
    "WorkflowTokenInvalid",
    "abort_workflow",
    "begin_flow",
    "clean_user_agent",
    "clear_flow",
    "complete_login",
    "complete_workflow",
    "custom_serializer",
    "fail_login",
    "federation_key",
    "new_guest_record",
    "new_session_id",
    "pass_factor",
    "record_federation_key",
    "reset_to_guest",
    "sid_hash",
    "start_login",
    "start_workflow",
    "step_kinds",
    "step_name",
    "step_up",
    "workflow_token_hash",
]
