"""Provider tokens kept for calling the provider's APIs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

``authflow_provider_tokens`` holds, per (tenant, user, provider), the provider's access
and refresh tokens sealed with the factor-secret key, their expiry, scopes and type, and
the refresh claim (``claim`` until ``claimed_until``) that lets one process at a time
refresh the row. A deleted user's rows go with the user. The downgrade drops the table.

A store of this version built with ``create_tables=True`` on a database at the previous
revision has already created the table from the models (identical to this one): the
upgrade then leaves it as it is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

#: UTCDateTime's column type: timestamptz on PostgreSQL, naive UTC text on SQLite.
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    if "authflow_provider_tokens" in set(sa.inspect(op.get_bind()).get_table_names()):
        return
    op.create_table(
        "authflow_provider_tokens",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("token_type", sa.String(32), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("expires_at", _Time, nullable=True),
        sa.Column("updated_at", _Time, nullable=False),
        sa.Column("claim", sa.String(64), nullable=True),
        sa.Column("claimed_until", _Time, nullable=True),
        sa.PrimaryKeyConstraint("tenant", "user_id", "provider", name="pk_authflow_provider_tokens"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authflow_users.user_id"],
            name="fk_authflow_provider_tokens_user_id_authflow_users",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("authflow_provider_tokens")
