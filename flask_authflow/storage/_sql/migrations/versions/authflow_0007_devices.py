"""Devices: the browsers each user signed in from, and the device of each audit row.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

``authflow_devices`` (tenant, user, device id, label, place, first and last seen, trusted
until); a deleted user's devices go with the user. ``authflow_audit`` gains a nullable
``device_id``. A store of this version built with ``create_tables=True`` on an older
database has already created ``authflow_devices`` from the models (identical to this):
the upgrade then leaves it as it is. The downgrade drops the column and the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

#: UTCDateTime's column type, as in the baseline.
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "authflow_devices" not in inspector.get_table_names():
        op.create_table(
            "authflow_devices",
            sa.Column("tenant", sa.String(128), nullable=False),
            sa.Column("user_id", sa.String(32), nullable=False),
            sa.Column("device_id", sa.String(64), nullable=False),
            sa.Column("label", sa.String(128), nullable=False),
            sa.Column("place", sa.String(128), nullable=True),
            sa.Column("first_seen_at", _Time, nullable=False),
            sa.Column("last_seen_at", _Time, nullable=False),
            sa.Column("trusted_until", _Time, nullable=True),
            sa.PrimaryKeyConstraint("tenant", "user_id", "device_id", name="pk_authflow_devices"),
            sa.ForeignKeyConstraint(
                ["user_id"],
                ["authflow_users.user_id"],
                name="fk_authflow_devices_user_id_authflow_users",
                ondelete="CASCADE",
            ),
        )
    if "device_id" not in {c["name"] for c in inspector.get_columns("authflow_audit")}:
        with op.batch_alter_table("authflow_audit") as batch:
            batch.add_column(sa.Column("device_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("authflow_audit") as batch:
        batch.drop_column("device_id")
    op.drop_table("authflow_devices")
