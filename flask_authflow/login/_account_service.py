"""``authflow.accounts``: accounts created, listed, looked up, disabled, enabled, unlocked,
deleted and given a new password, in the shape of :mod:`flask_authflow._core.service`.

The work is :class:`~flask_authflow.login._accounts.AccountAdmin`'s: every change that
takes access away ends the user's sessions in the same call, each change commits once
with its audit row, a new password must pass the app's policy, the application's
``user_created`` / ``user_deleted`` hooks run in its transaction. An account is named
by its ``identifier`` (the name it signs in with); what belongs to an account (its
sessions, tokens, devices, factors, roles) is named by the account's ``user_id`` on the
other services.
"""

from __future__ import annotations

from datetime import datetime

from flask_authflow._core.identifiers import normalise_identifier
from flask_authflow._core.ports import UserRecord
from flask_authflow._core.service import TenantScoped
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._deprecated_accounts import AccountAdminAliases
from flask_authflow.login._operator_change import Unlocked
from flask_authflow.login._recovery import Ended

__all__ = ["Accounts"]


class Accounts(AccountAdminAliases, TenantScoped):
    """Create, list, get, disable, enable, unlock and delete accounts; set their password.

    :param admin: the app's account administration (its policy, hooks and login service).
    """

    def __init__(self, admin: AccountAdmin, *, default_tenant: str) -> None:
        super().__init__(default_tenant=default_tenant)
        self.admin = admin

    def create(
        self,
        identifier: str,
        password: str | None = None,
        *,
        tenant: str | None = None,
        email: str | None = None,
        email_verified_at: datetime | None = None,
        source: str = "admin",
    ) -> UserRecord:
        """Create an account (with ``password``, or none for a passwordless one) and the
        application's row through its ``user_created`` hook (told ``source``: ``"admin"``,
        ``"cli"``, ...).

        :raises ~flask_authflow.errors.WeakPassword: the password breaks the policy for a
            user whose only factor it is; nothing is created.
        :raises ~flask_authflow.errors.UserExists: the identifier is taken."""
        return self.admin.create_user(
            self._tenant(tenant),
            identifier,
            password,
            email=email,
            email_verified_at=email_verified_at,
            source=source,
        )

    def list(self, *, tenant: str | None = None) -> list[UserRecord]:
        """The tenant's accounts."""
        return self.admin.backend.list_users(self._tenant(tenant))

    def get(self, identifier: str, *, tenant: str | None = None) -> UserRecord | None:
        """The account that signs in as ``identifier``, or ``None``."""
        return self.admin.backend.find_user(self._tenant(tenant), normalise_identifier(identifier))

    def disable(self, identifier: str, *, tenant: str | None = None) -> int:
        """Disable the account (its logins fail like a wrong password) and end its sessions;
        how many ended. Audited ``account_disabled``.
        :raises ~flask_authflow.errors.UserNotFound: no such account."""
        return self.admin.disable(self._tenant(tenant), identifier)

    def enable(self, identifier: str, *, tenant: str | None = None) -> None:
        """Let the account sign in again (no session comes back); audited ``account_enabled``.
        :raises ~flask_authflow.errors.UserNotFound: no such account."""
        self.admin.enable(self._tenant(tenant), identifier)

    def unlock(self, identifier: str, *, tenant: str | None = None) -> Unlocked:
        """End the account's lockout and forget its counted failures (the full number of
        tries again), audited ``lockout_cleared``; what ended: ``was_locked`` and
        ``locked_until`` (when the lock would have ended).
        :raises ~flask_authflow.errors.UserNotFound: no such account."""
        return self.admin.unlock(self._tenant(tenant), identifier)

    def delete(self, identifier: str, *, tenant: str | None = None) -> int:
        """Delete the account, its factors, tokens and roles, and end its sessions (audit
        rows stay); how many sessions ended. Audited ``account_deleted``, in one commit with
        the account's removal and the application's ``user_deleted`` hook.
        :raises ~flask_authflow.errors.UserNotFound: no such account."""
        return self.admin.delete(self._tenant(tenant), identifier)

    def set_password(self, identifier: str, password: str, *, tenant: str | None = None) -> Ended:
        """Set a new password; every session, API token and pending mailed link of the
        account ends, and its lock is cleared (audited ``password_changed``); what ended.

        :raises ~flask_authflow.errors.WeakPassword: the password breaks the policy.
        :raises ~flask_authflow.errors.UserNotFound: no such account."""
        return self.admin.change_password(self._tenant(tenant), identifier, password)
