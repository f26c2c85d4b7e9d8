"""Account administration that ends sessions: disable, delete, change the password.

Every change that takes access away from a user revokes all of that user's sessions in
the same call, so a disabled, deleted or re-keyed account keeps no live cookie anywhere;
the session layer never re-creates a revoked session (see :doc:`/sessions`).
"""

from __future__ import annotations

from typing import Protocol

from .. import signals
from ..errors import UserNotFound
from ..session.stores import SessionStore
from .identifiers import check_tenant, normalise_identifier
from .stores import IdentityStore, UserRecord

__all__ = ["AccountAdmin", "AdminBackend"]


class AdminBackend(IdentityStore, Protocol):
    """What account administration needs from the identity store."""

    def set_password(self, tenant: str, identifier: str, password: str) -> None: ...

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord: ...


class AccountAdmin:
    """Disable, enable, delete a user or set their password, revoking their sessions.

    :param sender: what ``session_revoked`` is sent with (the Flask app, as Flask does).
    """

    def __init__(self, backend: AdminBackend, session_store: SessionStore, *, sender: object = None) -> None:
        self.backend = backend
        self.session_store = session_store
        self.sender = sender

    def _user(self, tenant: str, identifier: str) -> UserRecord:
        user = self.backend.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        return user

    def _revoke(self, user: UserRecord, reason: str) -> int:
        count = self.session_store.delete_user_sessions(user.tenant, user.user_id)
        signals.session_revoked.send(
            self.sender if self.sender is not None else self,
            user_id=user.user_id,
            tenant=user.tenant,
            reason=reason,
        )
        return count

    def create_user(self, tenant: str, identifier: str, password: str | None = None) -> UserRecord:
        """Create a user (with ``password``, or none for a passwordless account)."""
        return self.backend.create_user(check_tenant(tenant), identifier, password)

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

    def set_password(self, tenant: str, identifier: str, password: str) -> int:
        """Set a new password and end every session of the user."""
        user = self._user(tenant, identifier)
        self.backend.set_password(user.tenant, user.identifier, password)
        return self._revoke(user, "password_changed")
