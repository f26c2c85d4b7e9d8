"""Roles in SQL: roles per tenant, the permissions they grant and the users who hold them.

Assignments and grants are inserted with ``ON CONFLICT DO NOTHING`` (SQLite and
PostgreSQL), so parallel calls that add the same row leave one row and no error; the
writes that first check a user or a role run in a transaction that takes the write lock
up front (``BEGIN IMMEDIATE`` on SQLite), so they never deadlock on a lock upgrade.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, Table, bindparam, delete, exists, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import Role
from flask_authflow._core.roles import check_description, check_name
from flask_authflow.errors import RoleExists, RoleInUse, RoleNotFound, UserNotFound
from flask_authflow.storage._sql.schema import (
    role_permissions_table,
    roles_table,
    user_roles_table,
    users_table,
)
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlRoles"]

_roles = roles_table.c
_grants = role_permissions_table.c
_held = user_roles_table.c

_ROLES_OF = (
    select(_held.role)
    .where(_held.tenant == bindparam("tenant"), _held.user_id == bindparam("user_id"))
    .order_by(_held.role)
)
# One query: the user's roles joined to what they grant.
_PERMISSIONS_OF = (
    select(_grants.permission)
    .distinct()
    .select_from(
        user_roles_table.join(
            role_permissions_table, (_grants.tenant == _held.tenant) & (_grants.role == _held.role)
        )
    )
    .where(_held.tenant == bindparam("tenant"), _held.user_id == bindparam("user_id"))
    .order_by(_grants.permission)
)


def _idempotent_inserts(table: Table) -> dict[str, Any]:
    """Per dialect: insert a row unless it is there; the row it returns says it was new."""
    first = next(iter(table.primary_key.columns))
    return {
        name: dialect_insert(table).on_conflict_do_nothing().returning(first)
        for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
    }


_ADD_ROW = {table.name: _idempotent_inserts(table) for table in (role_permissions_table, user_roles_table)}


class SqlRoles(SqlConnections):
    """The roles of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    #: Per table, the insert that skips an existing row on this engine's database (set
    #: by ``_use_dialect``; ``None``: a savepoint absorbs the duplicate).
    _role_inserts: Mapping[str, Any] = MappingProxyType({})

    def _use_dialect(self, engine: Engine) -> None:
        super()._use_dialect(engine)
        self._role_inserts = {
            name: by_dialect.get(engine.dialect.name) for name, by_dialect in _ADD_ROW.items()
        }

    def _add_row(self, conn: Connection, table: Table, row: dict[str, Any]) -> bool:
        statement = self._role_inserts.get(table.name)
        if statement is not None:
            return conn.execute(statement, row).first() is not None
        try:  # pragma: no cover - SQLite and PostgreSQL have upserts
            with conn.begin_nested():
                conn.execute(insert(table), row)
        except IntegrityError:  # pragma: no cover - see above
            return False
        return True  # pragma: no cover - see above

    @staticmethod
    def _need_role(conn: Connection, tenant: str, name: str) -> None:
        found = conn.execute(select(_roles.name).where(_roles.tenant == tenant, _roles.name == name)).first()
        if found is None:
            raise RoleNotFound()

    def create_role(self, tenant: str, name: str, description: str = "") -> Role:
        role = Role(check_tenant(tenant), check_name(name), check_description(description))
        try:
            with self._tx() as conn:
                conn.execute(
                    insert(roles_table).values(tenant=role.tenant, name=role.name, description=description)
                )
        except IntegrityError as exc:
            raise RoleExists() from exc
        return role

    def delete_role(self, tenant: str, name: str, *, force: bool = False) -> None:
        tenant, name = check_tenant(tenant), check_name(name)
        with self._tx(locking=True) as conn:
            self._need_role(conn, tenant, name)
            in_use = conn.execute(select(exists().where(_held.tenant == tenant, _held.role == name))).scalar()
            if in_use and not force:
                raise RoleInUse()
            conn.execute(delete(user_roles_table).where(_held.tenant == tenant, _held.role == name))
            conn.execute(delete(role_permissions_table).where(_grants.tenant == tenant, _grants.role == name))
            conn.execute(delete(roles_table).where(_roles.tenant == tenant, _roles.name == name))

    def list_roles(self, tenant: str) -> list[Role]:
        def read(conn: Connection) -> list[Role]:
            roles = conn.execute(
                select(roles_table).where(_roles.tenant == tenant).order_by(_roles.name)
            ).all()
            grants = conn.execute(
                select(_grants.role, _grants.permission)
                .where(_grants.tenant == tenant)
                .order_by(_grants.role, _grants.permission)
            ).all()
            granted: dict[str, list[str]] = {}
            for grant in grants:
                granted.setdefault(grant.role, []).append(grant.permission)
            return [Role(tenant, r.name, r.description, tuple(granted.get(r.name, ()))) for r in roles]

        return self._fetch(read)

    def grant_permission(self, tenant: str, role: str, permission: str) -> bool:
        row = {
            "tenant": check_tenant(tenant),
            "role": check_name(role),
            "permission": check_name(permission, "permission"),
        }
        with self._tx(locking=True) as conn:
            self._need_role(conn, row["tenant"], role)
            return self._add_row(conn, role_permissions_table, row)

    def revoke_permission(self, tenant: str, role: str, permission: str) -> bool:
        tenant, role = check_tenant(tenant), check_name(role)
        permission = check_name(permission, "permission")
        with self._tx(locking=True) as conn:
            self._need_role(conn, tenant, role)
            gone = conn.execute(
                delete(role_permissions_table).where(
                    _grants.tenant == tenant, _grants.role == role, _grants.permission == permission
                )
            )
        return bool(gone.rowcount)

    def add_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        row = {"tenant": check_tenant(tenant), "user_id": user_id, "role": check_name(role)}
        users = users_table.c
        with self._tx(locking=True) as conn:
            user = conn.execute(
                select(users.user_id).where(users.tenant == row["tenant"], users.user_id == user_id)
            ).first()
            if user is None:
                raise UserNotFound()
            self._need_role(conn, row["tenant"], role)
            return self._add_row(conn, user_roles_table, row)

    def remove_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        tenant, role = check_tenant(tenant), check_name(role)
        with self._tx(locking=True) as conn:
            self._need_role(conn, tenant, role)
            gone = conn.execute(
                delete(user_roles_table).where(
                    _held.tenant == tenant, _held.user_id == user_id, _held.role == role
                )
            )
        return bool(gone.rowcount)

    def roles_of(self, tenant: str, user_id: str) -> list[str]:
        params = {"tenant": tenant, "user_id": user_id}
        return list(self._fetch(lambda conn: conn.execute(_ROLES_OF, params).scalars().all()))

    def permissions_of(self, tenant: str, user_id: str) -> list[str]:
        params = {"tenant": tenant, "user_id": user_id}
        return list(self._fetch(lambda conn: conn.execute(_PERMISSIONS_OF, params).scalars().all()))
