"""Roles and permissions per tenant.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

``authflow_roles`` (tenant, name, description), ``authflow_role_permissions`` (the
permissions a role grants) and ``authflow_user_roles`` (the roles a user holds). A
deleted user's rows go with the user; a deleted role's permissions and assignments go
with the role. The downgrade drops the three tables.

A store of this version built with ``create_tables=True`` on a database at 0002 has
already created the three tables from the models (identical to these): the upgrade then
leaves them as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def _role_key(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant", "role"],
        ["authflow_roles.tenant", "authflow_roles.name"],
        name=f"fk_{table}_tenant_authflow_roles",
        ondelete="CASCADE",
    )


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "authflow_roles" not in existing:
        _roles()
    if "authflow_role_permissions" not in existing:
        _role_permissions()
    if "authflow_user_roles" not in existing:
        _user_roles()


def _roles() -> None:
    op.create_table(
        "authflow_roles",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.String(255), nullable=False, server_default=sa.text("''")),
        sa.PrimaryKeyConstraint("tenant", "name", name="pk_authflow_roles"),
    )


def _role_permissions() -> None:
    op.create_table(
        "authflow_role_permissions",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("permission", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "role", "permission", name="pk_authflow_role_permissions"),
        _role_key("authflow_role_permissions"),
    )


def _user_roles() -> None:
    op.create_table(
        "authflow_user_roles",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "user_id", "role", name="pk_authflow_user_roles"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authflow_users.user_id"],
            name="fk_authflow_user_roles_user_id_authflow_users",
            ondelete="CASCADE",
        ),
        _role_key("authflow_user_roles"),
    )
    op.create_index("ix_authflow_user_roles_role", "authflow_user_roles", ["tenant", "role"])


def downgrade() -> None:
    op.drop_index("ix_authflow_user_roles_role", table_name="authflow_user_roles")
    op.drop_table("authflow_user_roles")
    op.drop_table("authflow_role_permissions")
    op.drop_table("authflow_roles")
