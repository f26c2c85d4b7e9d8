"""Personal API tokens.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

``authflow_api_tokens``: one row per token (its public lookup id as the primary key, the
SHA-256 of the token, the user, a name unique per user, scopes, creation, expiry and last
use). A deleted user's tokens go with the user. The downgrade drops the table.

A store of this version built with ``create_tables=True`` on an older database has
already created the table from the models (identical to this): the upgrade then leaves it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

#: UTCDateTime's column type: timestamptz on PostgreSQL, naive UTC text on SQLite.
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    if "authflow_api_tokens" in set(sa.inspect(op.get_bind()).get_table_names()):
        return
    op.create_table(
        "authflow_api_tokens",
        sa.Column("token_id", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.Column("expires_at", _Time, nullable=True),
        sa.Column("last_used_at", _Time, nullable=True),
        sa.PrimaryKeyConstraint("token_id", name="pk_authflow_api_tokens"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authflow_users.user_id"],
            name="fk_authflow_api_tokens_user_id_authflow_users",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("tenant", "user_id", "name", name="uq_authflow_api_tokens_tenant_user_name"),
    )


def downgrade() -> None:
    op.drop_table("authflow_api_tokens")
