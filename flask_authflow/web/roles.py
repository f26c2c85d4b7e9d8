"""Changing roles as an application or an operator does: audited, signalled, no session ends.

Each function changes the app's :class:`~flask_authflow.core.ports.RoleStore` (the
backend), writes one audit row (event ``role_added``, ``role_removed``,
``role_deleted``, ``permission_granted`` or ``permission_revoked``, status ``success``,
the role name in ``reason``) and sends the ``roles_changed`` signal of
:mod:`flask_authflow.signals`.
Nothing is written or sent when nothing changed (the user already held the role). No
session ends: ``current_user.has_role()`` and the decorators read the roles once per
request, so the change applies from the user's next request.
"""

from __future__ import annotations

from flask import Flask, current_app

from flask_authflow import signals
from flask_authflow.audit.context import audit_context
from flask_authflow.core.ports import Role, RoleStore
from flask_authflow.web.state import AuthFlowState, get_state

__all__ = [
    "add_user_role",
    "create_role",
    "delete_role",
    "grant_permission",
    "remove_user_role",
    "revoke_permission",
    "role_store",
]


def role_store(app: Flask | None = None) -> RoleStore:
    """The app's role store: its backend."""
    return get_state(app).backend


def _record(
    state: AuthFlowState,
    event: str,
    tenant: str,
    role: str,
    *,
    user_id: str | None = None,
    permission: str | None = None,
) -> None:
    row = audit_context().row(
        state.clock.now(), event, "success", tenant=tenant, user_id=user_id, reason=role
    )
    state.service.audit_sink.write(row)
    signals.roles_changed.send(
        current_app._get_current_object(),  # type: ignore[attr-defined]
        tenant=tenant,
        user_id=user_id,
        role=role,
        permission=permission,
        action=event,
    )


def create_role(tenant: str, name: str, description: str = "") -> Role:
    """Create a role (:class:`~flask_authflow.errors.RoleExists` if taken); not audited,
    as it gives nobody anything."""
    return role_store().create_role(tenant, name, description)


def delete_role(tenant: str, name: str, *, force: bool = False) -> None:
    """Delete a role (:class:`~flask_authflow.errors.RoleInUse` while users hold it,
    unless ``force``, which takes it from them)."""
    role_store().delete_role(tenant, name, force=force)
    _record(get_state(), "role_deleted", tenant, name)


def add_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Give the user ``role``; false (nothing audited) if the user already held it."""
    added = role_store().add_user_role(tenant, user_id, role)
    if added:
        _record(get_state(), "role_added", tenant, role, user_id=user_id)
    return added


def remove_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Take ``role`` from the user; false (nothing audited) if the user did not hold it."""
    removed = role_store().remove_user_role(tenant, user_id, role)
    if removed:
        _record(get_state(), "role_removed", tenant, role, user_id=user_id)
    return removed


def grant_permission(tenant: str, role: str, permission: str) -> bool:
    """Let ``role`` do ``permission``; false (nothing audited) if it already could."""
    granted = role_store().grant_permission(tenant, role, permission)
    if granted:
        _record(get_state(), "permission_granted", tenant, role, permission=permission)
    return granted


def revoke_permission(tenant: str, role: str, permission: str) -> bool:
    """Take ``permission`` from ``role``; false (nothing audited) if it did not have it."""
    revoked = role_store().revoke_permission(tenant, role, permission)
    if revoked:
        _record(get_state(), "permission_revoked", tenant, role, permission=permission)
    return revoked
