"""An e-mail address per account.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

``authflow_users`` gains ``email`` (the address in its normalised form, unique per
tenant; several accounts without one are fine, as a unique constraint ignores NULLs)
and ``email_verified_at`` (when the owner proved they read mail there). The downgrade
drops both.

A store of this version built with ``create_tables=True`` on a database at 0003 creates
only missing tables, so the upgrade adds the columns whenever they are absent.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_CONSTRAINT = "uq_authflow_users_tenant_email"


def _columns() -> set[str]:
    return {column["name"] for column in sa.inspect(op.get_bind()).get_columns("authflow_users")}


def upgrade() -> None:
    if "email" in _columns():
        return
    with op.batch_alter_table("authflow_users") as batch:
        batch.add_column(sa.Column("email", sa.String(254), nullable=True))
        batch.add_column(sa.Column("email_verified_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_unique_constraint(_CONSTRAINT, ["tenant", "email"])


def downgrade() -> None:
    with op.batch_alter_table("authflow_users") as batch:
        batch.drop_constraint(_CONSTRAINT, type_="unique")
        batch.drop_column("email_verified_at")
        batch.drop_column("email")
