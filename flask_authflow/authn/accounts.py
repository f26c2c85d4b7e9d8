"""Account administration that ends sessions: disable, delete, change the password.

Every change that takes access away from a user revokes all of that user's sessions in
the same call, so a disabled, deleted or re-keyed account keeps no live cookie anywhere;
the session layer never re-creates a revoked session (see :doc:`/sessions`).

A new password (``create_user``, ``set_password``) must pass the :class:`PasswordPolicy`
given to :class:`AccountAdmin`; logins never check it, so older passwords keep working.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from .. import signals
from ..errors import UserNotFound
from ..session.model import sid_hash
from ..session.stores import SessionStore
from .identifiers import check_tenant, normalise_identifier
from .outcomes import FactorKind
from .password_policy import PasswordPolicy
from .stores import FactorConfig, IdentityStore, UserRecord

__all__ = ["AccountAdmin", "AdminBackend"]


class AdminBackend(IdentityStore, Protocol):
    """What account administration needs from the identity store."""

    def set_password(self, tenant: str, identifier: str, password: str) -> None: ...

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord: ...

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]: ...


class AccountAdmin:
    """Disable, enable, delete a user or set their password, revoking their sessions.

    :param sender: what ``session_revoked`` is sent with (the Flask app, as Flask does).
    :param policy: the :class:`PasswordPolicy` a new password must pass (``None``: no check;
        :func:`flask_authflow.state.account_admin` passes the app's policy).
    """

    def __init__(
        self,
        backend: AdminBackend,
        session_store: SessionStore,
        *,
        sender: object = None,
        policy: PasswordPolicy | None = None,
    ) -> None:
        self.backend = backend
        self.session_store = session_store
        self.sender = sender
        self.policy = policy

    def _user(self, tenant: str, identifier: str) -> UserRecord:
        user = self.backend.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        return user

    def _revoke(self, user: UserRecord, reason: str, keep_sid: str | None = None) -> int:
        return self.revoke_sessions(user.tenant, user.user_id, keep_sid=keep_sid, reason=reason)

    def _signal(self, tenant: str, user_id: str, reason: str) -> None:
        signals.session_revoked.send(
            self.sender if self.sender is not None else self,
            user_id=user_id,
            tenant=tenant,
            reason=reason,
        )

    def _revoke_others(self, tenant: str, user_id: str, keep_sid: str) -> int:
        count = 0
        for record in self.session_store.list_user_sessions(tenant, user_id):
            if record.sid != keep_sid:
                self.session_store.delete(record.sid)
                count += 1
        return count

    def revoke_sessions(
        self, tenant: str, user_id: str, *, keep_sid: str | None = None, reason: str = "revoked"
    ) -> int:
        """End every session of the user, except ``keep_sid`` when given ("log out all other
        sessions"); returns how many ended."""
        if keep_sid is None:
            count = self.session_store.delete_user_sessions(tenant, user_id)
        else:
            count = self._revoke_others(tenant, user_id, keep_sid)
        self._signal(tenant, user_id, reason)
        return count

    def revoke_session(
        self, tenant: str, user_id: str, session_hash: str, *, reason: str = "revoked"
    ) -> bool:
        """End the one session of this user whose id hashes to ``session_hash`` (the id pages
        and the CLI show, :func:`~flask_authflow.session.model.sid_hash`); ``False`` when the
        user has no such session. A session of another user is never touched."""
        for record in self.session_store.list_user_sessions(tenant, user_id):
            if hmac.compare_digest(sid_hash(record.sid), session_hash):
                self.session_store.delete(record.sid)
                self._signal(tenant, user_id, reason)
                return True
        return False

    def check_password(
        self, tenant: str, identifier: str, password: str, *, has_second_factor: bool = False
    ) -> None:
        """Refuse ``password`` for this user with :class:`~flask_authflow.errors.WeakPassword`
        when it breaks the policy (nothing is checked without a policy)."""
        if self.policy is not None:
            self.policy.check(
                password,
                username=normalise_identifier(identifier),
                tenant=tenant,
                has_second_factor=has_second_factor,
            )

    def create_user(self, tenant: str, identifier: str, password: str | None = None) -> UserRecord:
        """Create a user (with ``password``, or none for a passwordless account).

        The password must pass the policy for a user whose only factor it is
        (:class:`~flask_authflow.errors.WeakPassword` otherwise; nothing is created)."""
        tenant = check_tenant(tenant)
        if password is not None:
            self.check_password(tenant, identifier, password)
        return self.backend.create_user(tenant, identifier, password)

    def has_second_factor(self, user: UserRecord) -> bool:
        """True if ``user`` has an enrolled factor besides the password."""
        return any(
            factor.kind is not FactorKind.PASSWORD
            for factor in self.backend.list_factors(user.tenant, user.user_id)
        )

    def disable(self, tenant: str, identifier: str) -> int:
        """Disable the account (logins fail like a wrong password) and end its sessions."""
        user = self._user(tenant, identifier)
        self.backend.set_disabled(user.tenant, user.identifier, True)
        return self._revoke(user, "user_disabled")

    def enable(self, tenant: str, identifier: str) -> None:
        """Allow the account to log in again (no session is restored)."""
        user = self._user(tenant, identifier)
        self.backend.set_disabled(user.tenant, user.identifier, False)

    def delete(self, tenant: str, identifier: str) -> int:
        """Delete the account, its factors and counters, and end its sessions (audit rows stay)."""
        user = self._user(tenant, identifier)
        # Disable, revoke, then delete: no login can start a new session between the
        # revocation and the deletion, and a crash at any step leaves at worst a
        # disabled user without sessions, never sessions of a deleted user.
        self.backend.set_disabled(user.tenant, user.identifier, True)
        count = self._revoke(user, "user_deleted")
        self.backend.delete_user(user.tenant, user.identifier)
        return count

    def set_password(
        self, tenant: str, identifier: str, password: str, *, keep_sid: str | None = None
    ) -> int:
        """Set a new password and end every session of the user, except ``keep_sid`` when
        given (the session of a user who changes their own password); returns how many ended.

        The password must pass the policy (shorter passwords are allowed when the user has a
        second factor enrolled); :class:`~flask_authflow.errors.WeakPassword` otherwise, and
        nothing changes."""
        user = self._user(tenant, identifier)
        self.check_password(
            user.tenant, user.identifier, password, has_second_factor=self.has_second_factor(user)
        )
        self.backend.set_password(user.tenant, user.identifier, password)
        return self._revoke(user, "password_changed", keep_sid)
