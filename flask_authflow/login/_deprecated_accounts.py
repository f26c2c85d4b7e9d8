"""The names ``authflow.accounts`` had before 0.8 (it was an ``AccountAdmin``): each warns
(:class:`DeprecationWarning`, naming what to use) and still works. Removed in 0.9."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask_authflow._core.ports import FactorConfig, UserRecord
    from flask_authflow.login._accounts import AccountAdmin
    from flask_authflow.login._recovery import Ended

__all__ = ["AccountAdminAliases"]


def _moved(old: str, new: str) -> None:
    warnings.warn(
        f"authflow.accounts.{old}(tenant, ...) is deprecated and goes in 0.9: use {new}",
        DeprecationWarning,
        stacklevel=3,
    )


class AccountAdminAliases:
    """``AccountAdmin``'s methods on ``authflow.accounts``, deprecated."""

    admin: AccountAdmin

    def create_user(
        self, tenant: str, identifier: str, password: str | None = None, **options: Any
    ) -> UserRecord:
        """Deprecated: :meth:`Accounts.create <flask_authflow.login.Accounts.create>`."""
        _moved("create_user", "authflow.accounts.create(identifier, password, tenant=...)")
        return self.admin.create_user(tenant, identifier, password, **options)

    def change_password(self, tenant: str, identifier: str, password: str, **options: Any) -> Ended:
        """Deprecated: :meth:`Accounts.set_password <flask_authflow.login.Accounts.set_password>`."""
        _moved("change_password", "authflow.accounts.set_password(identifier, password, tenant=...)")
        return self.admin.change_password(tenant, identifier, password, **options)

    def enroll_totp(self, tenant: str, identifier: str) -> str:
        """Deprecated: :meth:`Factors.create_totp <flask_authflow.login.Factors.create_totp>`."""
        _moved("enroll_totp", "authflow.factors.create_totp(user_id, tenant=...)")
        return self.admin.enroll_totp(tenant, identifier)

    def regenerate_recovery_codes(self, tenant: str, identifier: str) -> list[str]:
        """Deprecated: :meth:`Factors.create_recovery_codes
        <flask_authflow.login.Factors.create_recovery_codes>`."""
        _moved("regenerate_recovery_codes", "authflow.factors.create_recovery_codes(user_id, tenant=...)")
        return self.admin.regenerate_recovery_codes(tenant, identifier)

    def list_factors(
        self, tenant: str, identifier: str, *, include_pending: bool = False
    ) -> list[FactorConfig]:
        """Deprecated: :meth:`Factors.list <flask_authflow.login.Factors.list>`."""
        _moved("list_factors", "authflow.factors.list(user_id, tenant=...)")
        return self.admin.list_factors(tenant, identifier, include_pending=include_pending)

    def disable_factor(self, tenant: str, identifier: str, factor_id: str) -> bool:
        """Deprecated: :meth:`Factors.revoke <flask_authflow.login.Factors.revoke>`."""
        _moved("disable_factor", "authflow.factors.revoke(user_id, factor_id, tenant=...)")
        return self.admin.disable_factor(tenant, identifier, factor_id)

    def revoke_sessions(self, tenant: str, user_id: str, **options: Any) -> int:
        """Deprecated: :meth:`Sessions.revoke_all <flask_authflow.sessions.Sessions.revoke_all>`."""
        _moved("revoke_sessions", "authflow.sessions.revoke_all(user_id, tenant=...)")
        return self.admin.revoke_sessions(tenant, user_id, **options)

    def revoke_session(self, tenant: str, user_id: str, session_hash: str) -> bool:
        """Deprecated: :meth:`Sessions.revoke <flask_authflow.sessions.Sessions.revoke>`."""
        _moved("revoke_session", "authflow.sessions.revoke(user_id, session_hash, tenant=...)")
        return self.admin.revoke_session(tenant, user_id, session_hash)

    def logout_everywhere(self, tenant: str, user_id: str, **options: Any) -> Ended:
        """Deprecated: :meth:`Sessions.revoke_all <flask_authflow.sessions.Sessions.revoke_all>`."""
        _moved("logout_everywhere", "authflow.sessions.revoke_all(user_id, tenant=...)")
        return self.admin.logout_everywhere(tenant, user_id, **options)
