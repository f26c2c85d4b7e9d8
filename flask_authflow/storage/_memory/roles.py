"""Roles, their permissions and who holds them, in memory."""

from __future__ import annotations

from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import Role
from flask_authflow._core.roles import check_description, check_name
from flask_authflow.errors import RoleExists, RoleInUse, RoleNotFound, UserNotFound
from flask_authflow.storage._memory.state import MemoryState, RoleState

__all__ = ["MemoryRoles"]


class MemoryRoles(MemoryState):
    """The roles of :class:`~flask_authflow.storage._memory.InMemoryBackend`. Each change goes
    through the unit's journal (the sets are replaced, never changed in place), so a
    rolled-back unit leaves the roles as they were."""

    def _known_role(self, tenant: str, name: str) -> RoleState:
        state = self._roles
        if (check_tenant(tenant), check_name(name)) not in state.roles:
            raise RoleNotFound()
        return state

    def create_role(self, tenant: str, name: str, description: str = "") -> Role:
        role = Role(check_tenant(tenant), check_name(name), check_description(description))
        with self._lock:
            state = self._roles
            if (role.tenant, role.name) in state.roles:
                raise RoleExists()
            self._put(state.roles, (role.tenant, role.name), description)
        return role

    def delete_role(self, tenant: str, name: str, *, force: bool = False) -> None:
        with self._lock:
            state = self._known_role(tenant, name)
            holders = [key for key, roles in state.held.items() if key[0] == tenant and name in roles]
            if holders and not force:
                raise RoleInUse()
            for key in holders:
                self._put(state.held, key, state.held[key] - {name})
            self._remove(state.grants, (tenant, name))
            self._remove(state.roles, (tenant, name))

    def list_roles(self, tenant: str) -> list[Role]:
        with self._lock:
            state = self._roles
            return [
                Role(t, name, description, tuple(sorted(state.grants.get((t, name), ()))))
                for (t, name), description in sorted(state.roles.items())
                if t == tenant
            ]

    def grant_permission(self, tenant: str, role: str, permission: str) -> bool:
        permission = check_name(permission, "permission")
        with self._lock:
            grants = self._known_role(tenant, role).grants
            held = grants.get((tenant, role), frozenset())
            new = permission not in held
            if new:
                self._put(grants, (tenant, role), held | {permission})
            return new

    def revoke_permission(self, tenant: str, role: str, permission: str) -> bool:
        permission = check_name(permission, "permission")
        with self._lock:
            grants = self._known_role(tenant, role).grants
            held = grants.get((tenant, role), frozenset())
            had = permission in held
            if had:
                self._put(grants, (tenant, role), held - {permission})
            return had

    def add_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        with self._lock:
            if self._user_of(check_tenant(tenant), user_id) is None:
                raise UserNotFound()
            holders = self._known_role(tenant, role).held
            held = holders.get((tenant, user_id), frozenset())
            new = role not in held
            if new:
                self._put(holders, (tenant, user_id), held | {role})
            return new

    def remove_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        with self._lock:
            holders = self._known_role(tenant, role).held
            held = holders.get((tenant, user_id), frozenset())
            had = role in held
            if had:
                self._put(holders, (tenant, user_id), held - {role})
            return had

    def roles_of(self, tenant: str, user_id: str) -> list[str]:
        with self._lock:
            return sorted(self._roles.held.get((tenant, user_id), ()))

    def permissions_of(self, tenant: str, user_id: str) -> list[str]:
        with self._lock:
            state = self._roles
            roles = state.held.get((tenant, user_id), ())
            return sorted({p for role in roles for p in state.grants.get((tenant, role), ())})
