"""One operator's change of an account: ONE :class:`~flask_authflow.login._operation.Operation`
with its own audit row (what :class:`~flask_authflow.login._accounts.AccountAdmin` runs).

As in :mod:`~flask_authflow.login._recovery`: the user's sessions end first, outside the
unit of work (a session store on another service cannot join it: a failure after that
leaves the user logged out and nothing else changed); then the change and its audit row
commit together, or nothing does, and the same call can be made again; then a second pass
ends a session a login started in between.

The audit events (each with the request's context; an unknown one from the command line):
``account_disabled``, ``account_deleted`` (reason ``sessions_ended=N``),
``account_enabled``, ``lockout_cleared`` (an unlock; reason ``locked_until=<time>`` or
``not_locked``), and for an operator's factor changes ``factor_enrolled``,
``factor_disabled``, ``recovery_codes_regenerated`` (with the factor's kind; reason
``sessions_ended=N``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import StoreUnavailable
from flask_authflow.login._operation import Operation, guard_store

if TYPE_CHECKING:
    from flask_authflow.login._service import AuthnService

__all__ = [
    "DELETE_EVENT",
    "DISABLE_EVENT",
    "ENABLE_EVENT",
    "UNLOCK_EVENT",
    "OperatorChange",
    "Unlocked",
    "account_locked_until",
    "lock_subjects",
]

log = logging.getLogger("flask_authflow.login")

T = TypeVar("T")

#: The audit events of an operator's account changes (see the module's text).
DISABLE_EVENT = "account_disabled"
ENABLE_EVENT = "account_enabled"
DELETE_EVENT = "account_deleted"
#: The event of an unlock, the one the recovery flows write when they clear a lock.
UNLOCK_EVENT = "lockout_cleared"


@dataclass(frozen=True, slots=True)
class Unlocked:
    """What :meth:`AccountAdmin.unlock <flask_authflow.login._accounts.AccountAdmin.unlock>` ended.

    :param locked_until: the end of the account-wide lock that was active (the later one of
        the identifier's and the user id's), or ``None``: the user was not locked, and only
        the failures counted were forgotten.
    """

    locked_until: datetime | None = None

    @property
    def was_locked(self) -> bool:
        """An account-wide lock was active."""
        return self.locked_until is not None


def lock_subjects(user: UserRecord) -> tuple[str, str]:
    """What the lockout counts the user's failures against: logins count them per
    normalised identifier; a step-up without one in the login flow per ``user:<id>``
    (see :func:`~flask_authflow.login._operation.lockout_subject`)."""
    return user.identifier, f"user:{user.user_id}"


#: ``locked_until(tenant, subject, now)``: an attempt store's, or the lockout's.
LockedUntil = Callable[[str, str, datetime], datetime | None]


def account_locked_until(locked_until: LockedUntil, user: UserRecord, now: datetime) -> datetime | None:
    """The end of the user's active account-wide lock (the later of its
    :func:`lock_subjects`'), or ``None``."""
    ends = [end for subject in lock_subjects(user) if (end := locked_until(user.tenant, subject, now))]
    return max(ends) if ends else None


#: Ends the user's sessions for ``reason`` (the ``session_revoked`` reason); how many ended.
EndSessions = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class OperatorChange:
    """What an operator's change of ``user`` runs with: the login service, the audit
    context and session of the request, and how the user's sessions end (``end_sessions``
    the first pass, ``end_late_sessions`` the second: it announces only what it ended)."""

    svc: AuthnService
    ctx: AuditContext
    session: AuthSession
    user: UserRecord
    end_sessions: EndSessions
    end_late_sessions: EndSessions

    def run(
        self,
        event: str,
        change: Callable[[Operation], T],
        *,
        ends_sessions: str | None = None,
        describe: Callable[[T], str | None] = lambda _: None,
        **fields: Any,
    ) -> tuple[T, int]:
        """Run ``change(op)`` in ONE Operation whose audit row is ``event`` (see the
        module's text). With ``ends_sessions`` (the ``session_revoked`` reason) the
        sessions end first and again after the commit, and the row's reason is
        ``sessions_ended=N``; else it is ``describe(answer)``. ``change``'s answer and how
        many sessions ended."""
        user = self.user
        ended = 0
        if ends_sessions is not None:
            ended = guard_store(lambda: self.end_sessions(ends_sessions))
        base: dict[str, Any] = {"tenant": user.tenant, "user_id": user.user_id, "identifier": user.identifier}
        with Operation(self.svc, self.ctx, self.session, event, **base, **fields) as op:
            op.unit()
            answer = change(op)
            op.audit("success", f"sessions_ended={ended}" if ends_sessions is not None else describe(answer))
        if ends_sessions is not None:
            ended += self._second_pass(ends_sessions)
        return answer, ended

    def _second_pass(self, reason: str) -> int:
        """A session a login started while the change ran (a failure is logged: the change
        is kept, and a login that completes re-reads the account, see ``_verify``)."""
        try:
            return guard_store(lambda: self.end_late_sessions(reason))
        except StoreUnavailable:
            log.warning("sessions started during a %s could not be ended", reason)
            return 0
