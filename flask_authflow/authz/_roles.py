"""``authflow.roles``: roles and their permissions, changed as an application or an operator
changes them: audited, signalled, no session ends.

Each change writes one audit row (event ``role_added``, ``role_removed``, ``role_deleted``,
``permission_granted`` or ``permission_revoked``, status ``success``, the role name in
``reason``) and sends :data:`flask_authflow.signals.roles_changed`. Nothing is written or
sent when nothing changed (the user already held the role). The change and its audit row
commit once, in the backend's unit of work (a unit already open in this context is
joined): if either write fails, neither is kept
(:class:`~flask_authflow.errors.StoreUnavailable`) and the signal is not sent. No session
ends: ``current_user.has_role()`` and the decorators read the roles once per request, so
the change applies from the user's next request. The calls follow the convention of
:mod:`flask_authflow._core.service` (``tenant=`` keyword, the app's default tenant).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TypeVar

from flask_authflow import signals
from flask_authflow._clock import Clock
from flask_authflow._core.ports import Role, RoleStore, UnitOfWork, one_unit
from flask_authflow._core.service import TenantScoped
from flask_authflow.audit._context import audit_context
from flask_authflow.audit._sinks import AuditSink
from flask_authflow.errors import AuditWriteError, AuthFlowError

__all__ = ["Roles"]

T = TypeVar("T")


def _true(value: object) -> bool:
    return value is not False


class Roles(TenantScoped):
    """Create, list, get and delete roles; grant and revoke them and their permissions.

    :param store: the app's role store (its backend).
    :param begin_unit: opens the backend's unit of work.
    :param audit_sink: where the audit rows go.
    :param clock: the time of the rows.
    :param sender: what ``roles_changed`` is sent with (the Flask app).
    """

    def __init__(
        self,
        store: RoleStore,
        *,
        begin_unit: Callable[[], UnitOfWork] | None,
        audit_sink: AuditSink,
        clock: Clock,
        sender: object,
        default_tenant: str,
    ) -> None:
        super().__init__(default_tenant=default_tenant)
        self.store = store
        self._begin_unit = begin_unit
        self._audit_sink = audit_sink
        self._clock = clock
        self._sender = sender

    def _changed(
        self,
        change: Callable[[], T],
        done: Callable[[T], bool],
        event: str,
        tenant: str,
        role: str,
        *,
        user_id: str | None = None,
        permission: str | None = None,
    ) -> T:
        """Run ``change`` and (when ``done(result)``) write its audit row, in one unit of
        work; send ``roles_changed`` once both are kept."""
        with one_unit(self._begin_unit):
            result = change()
            if done(result):
                row = audit_context().row(
                    self._clock.now(), event, "success", tenant=tenant, user_id=user_id, reason=role
                )
                try:
                    self._audit_sink.write(row)
                except AuthFlowError:
                    raise
                except Exception as exc:  # an application's sink: nothing unaudited
                    raise AuditWriteError() from exc
        if done(result):
            signals.roles_changed.send(
                self._sender, tenant=tenant, user_id=user_id, role=role, permission=permission, action=event
            )
        return result

    # --- the roles themselves ----------------------------------------------------------------

    def create(self, name: str, *, tenant: str | None = None, description: str = "") -> Role:
        """Create a role (:class:`~flask_authflow.errors.RoleExists` if taken); not audited,
        as it gives nobody anything."""
        return self.store.create_role(self._tenant(tenant), name, description)

    def list(self, *, tenant: str | None = None) -> list[Role]:
        """The tenant's roles, with their permissions."""
        return self.store.list_roles(self._tenant(tenant))

    def get(self, name: str, *, tenant: str | None = None) -> Role | None:
        """The role called ``name``, or ``None``."""
        return next((role for role in self.list(tenant=tenant) if role.name == name), None)

    def delete(self, name: str, *, tenant: str | None = None, force: bool = False) -> None:
        """Delete a role (:class:`~flask_authflow.errors.RoleInUse` while users hold it,
        unless ``force``, which takes it from them)."""
        tenant_name = self._tenant(tenant)
        self._changed(
            lambda: self.store.delete_role(tenant_name, name, force=force),
            _true,
            "role_deleted",
            tenant_name,
            name,
        )

    # --- who holds them ----------------------------------------------------------------------

    def of_user(self, user_id: str, *, tenant: str | None = None) -> builtins.list[str]:
        """The names of the roles the user holds."""
        return self.store.roles_of(self._tenant(tenant), user_id)

    def grant(self, user_id: str, role: str, *, tenant: str | None = None) -> bool:
        """Give the user ``role``; false (nothing audited) if the user already held it."""
        tenant_name = self._tenant(tenant)
        return self._changed(
            lambda: self.store.add_user_role(tenant_name, user_id, role),
            bool,
            "role_added",
            tenant_name,
            role,
            user_id=user_id,
        )

    def revoke(self, user_id: str, role: str, *, tenant: str | None = None) -> bool:
        """Take ``role`` from the user; false (nothing audited) if the user did not hold it."""
        tenant_name = self._tenant(tenant)
        return self._changed(
            lambda: self.store.remove_user_role(tenant_name, user_id, role),
            bool,
            "role_removed",
            tenant_name,
            role,
            user_id=user_id,
        )

    # --- what they allow ---------------------------------------------------------------------

    def grant_permission(self, role: str, permission: str, *, tenant: str | None = None) -> bool:
        """Let ``role`` do ``permission``; false (nothing audited) if it already could."""
        tenant_name = self._tenant(tenant)
        return self._changed(
            lambda: self.store.grant_permission(tenant_name, role, permission),
            bool,
            "permission_granted",
            tenant_name,
            role,
            permission=permission,
        )

    def revoke_permission(self, role: str, permission: str, *, tenant: str | None = None) -> bool:
        """Take ``permission`` from ``role``; false (nothing audited) if it did not have it."""
        tenant_name = self._tenant(tenant)
        return self._changed(
            lambda: self.store.revoke_permission(tenant_name, role, permission),
            bool,
            "permission_revoked",
            tenant_name,
            role,
            permission=permission,
        )
