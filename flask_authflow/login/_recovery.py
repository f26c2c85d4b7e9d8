"""Recovery ends everything an attacker may have left behind.

A completed password reset (:mod:`~flask_authflow.login._password_reset`), a password
change (:func:`change_password`) and "log out everywhere" (:func:`logout_everywhere`)
each end, for the user:

* every session (but the one that asked, for a change or a log-out-everywhere: a reset
  ends that one too);
* every personal API token;
* every pending account token: reset links, a requested change of e-mail (its link to the
  new address), sign-up and e-mail verification links and their short codes (a later
  mail brings a new one);
* the account-wide lock and the (account, address) pair locks, with their counters (as
  ``flask authflow users unlock`` does; the failures logged still count for how long a
  later lock lasts).

Each flow is one :class:`~flask_authflow.login._operation.Operation`. The sessions end
first, outside its unit of work (a session store on another service cannot join it): a
failure after that leaves the user logged out and nothing else changed, never a new
password with old sessions alive. Then the flow's own change, the account tokens voided,
the API tokens deleted, the locks cleared and the audit rows commit together, or nothing
does. A second pass ends a session a login started in between.

Audit rows, each with the request's context (address, user agent, request id, device): the
flow's own (``password_reset``, ``password_changed``, ``logout_everywhere``; reason
``sessions_ended=N``), then for what was there to end ``api_tokens_revoked`` (reason: the
flow's event), ``account_tokens_voided`` (reason: ``kind=count`` pairs) and
``lockout_cleared``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import ApiTokenStore, UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AuthnError, StoreUnavailable, UserNotFound
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login._operation import LoginServices, Operation, guard_store
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._sign_in_ways import hold_user

__all__ = [
    "CHANGE_EVENT",
    "EVERYWHERE_EVENT",
    "Ended",
    "RecoveryServices",
    "change_password",
    "end_access",
    "end_sessions",
    "logout_everywhere",
]

log = logging.getLogger("flask_authflow.login")

#: The audit event (and ``session_revoked`` reason) of a password change.
CHANGE_EVENT = "password_changed"
#: The audit event (and ``session_revoked`` reason) of "log out everywhere".
EVERYWHERE_EVENT = "logout_everywhere"


class RecoveryServices(LoginServices, Protocol):
    """What the recovery flows need of the service beyond the login flows."""

    @property
    def hasher(self) -> PasswordHasher: ...
    @property
    def api_token_store(self) -> ApiTokenStore | None: ...


@dataclass(frozen=True, slots=True)
class Ended:
    """What a recovery flow ended for the user.

    :param sessions: sessions ended (the asking one included for a reset).
    :param api_tokens: personal API tokens deleted.
    :param account_tokens: pending account tokens voided, by kind (``password_reset``,
        ``email_change``, ``signup``, ``email_verification``); kinds with none are left out.
    :param lock_cleared: an account-wide lock was active and is cleared.
    """

    sessions: int = 0
    api_tokens: int = 0
    account_tokens: Mapping[str, int] = field(default_factory=dict)
    lock_cleared: bool = False

    @property
    def email_change(self) -> bool:
        """A pending change of e-mail was voided."""
        return self.account_tokens.get("email_change", 0) > 0

    def with_sessions(self, sessions: int) -> Ended:
        """This result with ``sessions`` sessions ended."""
        return Ended(sessions, self.api_tokens, dict(self.account_tokens), self.lock_cleared)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the views' and the command line's answers)."""
        return {
            "sessions_ended": self.sessions,
            "api_tokens_revoked": self.api_tokens,
            "account_tokens_voided": dict(self.account_tokens),
            "email_change_voided": self.email_change,
            "lock_cleared": self.lock_cleared,
        }


def end_sessions(svc: LoginServices, tenant: str, user_id: str, keep_sid: str | None, reason: str) -> int:
    """End the user's sessions but ``keep_sid`` (none when no session store is wired)."""
    revoke = svc.revoke_sessions
    return guard_store(lambda: revoke(tenant, user_id, keep_sid, reason)) if revoke else 0


def _end_late_sessions(
    svc: LoginServices, tenant: str, user_id: str, keep_sid: str | None, reason: str
) -> int:
    """The second pass: a session a login started while the flow ran."""
    try:
        return end_sessions(svc, tenant, user_id, keep_sid, reason)
    except StoreUnavailable:
        log.warning("sessions started during a %s could not be ended", reason)
        return 0


def end_access(op: Operation, svc: RecoveryServices, user: UserRecord) -> Ended:
    """In ``op``'s unit: void every pending account token of ``user``, delete its API
    tokens and clear its locks, adding an audit row for each that there was to end."""
    tenant, user_id, now = user.tenant, user.user_id, op.now
    tokens = account_tokens.token_store(svc.account_tokens)
    voided: dict[str, int] = {}
    for kind in sorted(account_tokens.KINDS):
        count = guard_store(partial(tokens.void_account_tokens, tenant, user_id, kind, now))
        if count:
            voided[kind] = count
    api_store = svc.api_token_store
    api = guard_store(lambda: api_store.delete_user_api_tokens(tenant, user_id)) if api_store else 0
    subjects = (user.identifier, f"user:{user_id}")
    locked = any(svc.lockout.locked_until(tenant, subject, now) is not None for subject in subjects)
    for subject in subjects:
        guard_store(partial(svc.store.clear_lock, tenant, subject))
    if api:
        op.audit("success", op.event, event="api_tokens_revoked", factor="api_token")
    if voided:
        detail = " ".join(f"{kind}={count}" for kind, count in voided.items())
        op.audit("success", detail, event="account_tokens_voided")
    if locked:
        op.audit("success", op.event, event="lockout_cleared")
    return Ended(0, api, voided, locked)


def _user(svc: LoginServices, tenant: str, user_id: str) -> UserRecord:
    user = guard_store(lambda: svc.store.get_user(check_tenant(tenant), user_id))
    if user is None:
        raise UserNotFound()
    return user


def _fields(user: UserRecord) -> dict[str, Any]:
    return {"tenant": user.tenant, "user_id": user.user_id, "identifier": user.identifier}


def change_password(
    svc: RecoveryServices,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    user_id: str,
    password: str,
    *,
    keep_sid: str | None = None,
    replaces: str | None = None,
) -> Ended:
    """Set the user's new ``password`` (checked by the caller against the policy) and end
    everything the module's text lists, but the session ``keep_sid``. ``replaces``: the
    hash the caller verified the current password against; the change happens only while
    it is still the stored one, checked again under the user's row lock in the unit, so of
    two parallel changes with the same current password exactly one wins.

    :raises UserNotFound: no such user. :raises PasswordReplaced: ``replaces`` is no longer
        the stored hash (nothing changed)."""
    user = _user(svc, tenant, user_id)
    password_hash = svc.hasher.hash(password)
    _still(svc, user, replaces)  # a lost race ends no session
    ended = end_sessions(svc, user.tenant, user.user_id, keep_sid, CHANGE_EVENT)
    with Operation(svc, ctx, session, CHANGE_EVENT, **_fields(user)) as op:
        op.unit()
        if replaces is not None:
            hold_user(svc, user.tenant, user.user_id)
            _still(svc, user, replaces)
        guard_store(lambda: svc.store.set_password_hash(user.tenant, user.user_id, password_hash))
        op.audit("success", f"sessions_ended={ended}")
        access = end_access(op, svc, user)
    ended += _end_late_sessions(svc, user.tenant, user.user_id, keep_sid, CHANGE_EVENT)
    return access.with_sessions(ended)


class PasswordReplaced(AuthnError):
    """The password changed since the caller verified the current one (a parallel change
    won): nothing changed; sign in with the new password."""

    code = "password_replaced"
    status = 409


def _still(svc: LoginServices, user: UserRecord, replaces: str | None) -> None:
    """:class:`PasswordReplaced` unless ``replaces`` is ``None`` or the stored hash."""
    if replaces is None:
        return
    stored = guard_store(lambda: svc.store.get_password_hash(user.tenant, user.user_id))
    if stored is None or not hmac.compare_digest(stored, replaces):
        raise PasswordReplaced("the password was changed meanwhile")


def logout_everywhere(
    svc: RecoveryServices,
    ctx: AuditContext,
    session: AuthSession,
    tenant: str,
    user_id: str,
    *,
    keep_sid: str | None = None,
) -> Ended:
    """Log out everywhere: end everything the module's text lists for the user, but the
    session ``keep_sid`` (the one that asked; ``None`` from the command line).

    :raises UserNotFound: no such user."""
    user = _user(svc, tenant, user_id)
    ended = end_sessions(svc, user.tenant, user.user_id, keep_sid, EVERYWHERE_EVENT)
    with Operation(svc, ctx, session, EVERYWHERE_EVENT, **_fields(user)) as op:
        op.unit()
        op.audit("success", f"sessions_ended={ended}")
        access = end_access(op, svc, user)
    ended += _end_late_sessions(svc, user.tenant, user.user_id, keep_sid, EVERYWHERE_EVENT)
    return access.with_sessions(ended)
