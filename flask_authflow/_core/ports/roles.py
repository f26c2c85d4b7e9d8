"""Roles and permissions per tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Role", "RoleStore"]


@dataclass(frozen=True, slots=True)
class Role:
    """A role of a tenant and the permissions it grants (sorted)."""

    tenant: str
    name: str
    description: str = ""
    permissions: tuple[str, ...] = ()


class RoleStore(Protocol):
    """Roles per tenant, the permissions they grant and the users who hold them.

    Names of roles and permissions are checked with
    :func:`~flask_authflow._core.roles.check_name` (``InvalidInput`` otherwise). A role
    that does not exist raises :class:`~flask_authflow.errors.RoleNotFound`; a user that
    does not exist in the tenant raises :class:`~flask_authflow.errors.UserNotFound`.
    Deleting a user removes the roles it held.
    """

    def create_role(self, tenant: str, name: str, description: str = "") -> Role:
        """Add a role; :class:`~flask_authflow.errors.RoleExists` if the name is taken."""
        ...

    def delete_role(self, tenant: str, name: str, *, force: bool = False) -> None:
        """Remove a role and its permissions; a role some user holds is refused
        (:class:`~flask_authflow.errors.RoleInUse`) unless ``force``, which also takes it
        from every user."""
        ...

    def list_roles(self, tenant: str) -> list[Role]:
        """The tenant's roles, by name, with their permissions."""
        ...

    def grant_permission(self, tenant: str, role: str, permission: str) -> bool:
        """Let ``role`` do ``permission``; false if it already could."""
        ...

    def revoke_permission(self, tenant: str, role: str, permission: str) -> bool:
        """Take ``permission`` from ``role``; false if it did not have it."""
        ...

    def add_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        """Give the user ``role``; false if the user already held it."""
        ...

    def remove_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        """Take ``role`` from the user; false if the user did not hold it."""
        ...

    def roles_of(self, tenant: str, user_id: str) -> list[str]:
        """The names of the roles the user holds, sorted."""
        ...

    def permissions_of(self, tenant: str, user_id: str) -> list[str]:
        """Every permission the user's roles grant, sorted, each once."""
        ...
