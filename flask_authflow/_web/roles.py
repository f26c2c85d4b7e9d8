"""Deprecated (goes in 0.9): the module functions that changed roles before 0.8.

Use ``authflow.roles`` (:class:`~flask_authflow.authz.Roles`): ``create``, ``delete``,
``grant`` / ``revoke`` a role to a user, ``grant_permission`` / ``revoke_permission``,
each with ``tenant=`` as a keyword. Each function here warns
(:class:`DeprecationWarning`) and does what the service does.
"""

from __future__ import annotations

import warnings

from flask import Flask

from flask_authflow._core.ports import Role, RoleStore
from flask_authflow._web import services
from flask_authflow._web.state import get_state

__all__ = [
    "add_user_role",
    "create_role",
    "delete_role",
    "grant_permission",
    "remove_user_role",
    "revoke_permission",
    "role_store",
]


def _moved(old: str, new: str) -> None:
    warnings.warn(
        f"flask_authflow.web.roles.{old} is deprecated and goes in 0.9: use authflow.roles.{new}",
        DeprecationWarning,
        stacklevel=3,
    )


def role_store(app: Flask | None = None) -> RoleStore:
    """Deprecated: ``authflow.roles.store``."""
    _moved("role_store()", "store")
    return get_state(app).backend


def create_role(tenant: str, name: str, description: str = "") -> Role:
    """Deprecated: ``authflow.roles.create(name, tenant=..., description=...)``."""
    _moved("create_role(tenant, name)", "create(name, tenant=...)")
    return services.roles().create(name, tenant=tenant, description=description)


def delete_role(tenant: str, name: str, *, force: bool = False) -> None:
    """Deprecated: ``authflow.roles.delete(name, tenant=..., force=...)``."""
    _moved("delete_role(tenant, name)", "delete(name, tenant=...)")
    services.roles().delete(name, tenant=tenant, force=force)


def add_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Deprecated: ``authflow.roles.grant(user_id, role, tenant=...)``."""
    _moved("add_user_role(tenant, user_id, role)", "grant(user_id, role, tenant=...)")
    return services.roles().grant(user_id, role, tenant=tenant)


def remove_user_role(tenant: str, user_id: str, role: str) -> bool:
    """Deprecated: ``authflow.roles.revoke(user_id, role, tenant=...)``."""
    _moved("remove_user_role(tenant, user_id, role)", "revoke(user_id, role, tenant=...)")
    return services.roles().revoke(user_id, role, tenant=tenant)


def grant_permission(tenant: str, role: str, permission: str) -> bool:
    """Deprecated: ``authflow.roles.grant_permission(role, permission, tenant=...)``."""
    _moved("grant_permission(tenant, role, permission)", "grant_permission(role, permission, tenant=...)")
    return services.roles().grant_permission(role, permission, tenant=tenant)


def revoke_permission(tenant: str, role: str, permission: str) -> bool:
    """Deprecated: ``authflow.roles.revoke_permission(role, permission, tenant=...)``."""
    _moved("revoke_permission(tenant, role, permission)", "revoke_permission(role, permission, tenant=...)")
    return services.roles().revoke_permission(role, permission, tenant=tenant)
