"""Changing roles as an application or an operator does: audited, signalled, no session ends.

Each function changes the app's :class:`~flask_authflow.core.ports.RoleStore` (the
backend), writes one audit row (event ``role_added``, ``role_removed``,
``role_deleted``, ``permission_granted`` or ``permission_revoked``, status ``success``,
the role name in ``reason``) and sends the ``roles_changed`` signal of
:mod:`flask_authflow.signals`.
Nothing is written or sent when nothing changed (the user already held the role). The
change and its audit row commit once, in the backend's unit of work (a unit already open
in this context is joined): if either write fails, neither is kept
(:class:`~flask_authflow.errors.StoreUnavailable`) and the signal is not sent. No
session ends: ``current_user.has_role()`` and the decorators read the roles once per
request, so the change applies from the user's next request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Flask, current_app

from flask_authflow import signals
from flask_authflow.audit.context import audit_context
from flask_authflow.core.ports import Role, RoleStore, one_unit
from flask_authflow.errors import AuditWriteError, AuthFlowError
from flask_authflow.web.state import get_state

__all__ = [
    "add_user_role",
    "create_role",
    "delete_role",
    "grant_permission",
    "remove_user_role",
    "revoke_permission",
    "role_store",
]

T = TypeVar("T")


def role_store(app: Flask | None = None) -> RoleStore:
    """The app's role store: its backend."""
    return get_state(app).backend


def _changed(
    change: Callable[[], T],
    done: Callable[[T], bool],
    event: str,
    tenant: str,
    role: str,
    *,
    user_id: str | None = None,
    permission: str | None = None,
) -> T:
    """Run ``change`` and (when ``done(result)``) write its audit row, in one unit of work;
    send ``roles_changed`` once both are kept."""
    state = get_state()
    with one_unit(state.service.store.begin_unit):
        result = change()
        if done(result):
            row = audit_context().row(
                state.clock.now(), event, "success", tenant=tenant, user_id=user_id, reason=role
            )
            try:
                state.service.audit_sink.write(row)
            except AuthFlowError:
                raise
            except Exception as exc:  # an application's sink: nothing unaudited
                raise AuditWriteError() from exc
    if done(result):
        signals.roles_changed.send(
            current_app._get_current_object(),  # type: ignore[attr-defined]
            tenant=tenant,
            user_id=user_id,
            role=role,
            permission=permission,
            action=event,
        )
    return result


def _true(value: object) -> bool:
    return value is not False


def create_role(tenant: str, name: str, description: str = "") -> Role:
    """Create a role (:class:`~flask_authflow.errors.RoleExists` if taken); not audited,
    as it gives nobody anything."""
    return role_store().create_role(tenant, name, description)


def delete_role(tenant: str, name: str, *, force: bool = False) -> None:
    """Delete a role (:class:`~flask_authflow.errors.RoleInUse` while users hold it,
    unless ``force``, which takes it from them)."""
    _changed(lambda: role_store().delete_role(tenant, name, force=force), _true, "role_deleted", tenant, name)


def add_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Give the user ``role``; false (nothing audited) if the user already held it."""
    return _changed(
        lambda: role_store().add_user_role(tenant, user_id, role),
        bool,
        "role_added",
        tenant,
        role,
        user_id=user_id,
    )


def remove_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Take ``role`` from the user; false (nothing audited) if the user did not hold it."""
    return _changed(
        lambda: role_store().remove_user_role(tenant, user_id, role),
        bool,
        "role_removed",
        tenant,
        role,
        user_id=user_id,
    )


def grant_permission(tenant: str, role: str, permission: str) -> bool:
    """Let ``role`` do ``permission``; false (nothing audited) if it already could."""
    return _changed(
        lambda: role_store().grant_permission(tenant, role, permission),
        bool,
        "permission_granted",
        tenant,
        role,
        permission=permission,
    )


def revoke_permission(tenant: str, role: str, permission: str) -> bool:
    """Take ``permission`` from ``role``; false (nothing audited) if it did not have it."""
    return _changed(
        lambda: role_store().revoke_permission(tenant, role, permission),
        bool,
        "permission_revoked",
        tenant,
        role,
        permission=permission,
    )
