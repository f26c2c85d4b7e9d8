"""Account tokens: the mailed single-use tokens of sign-up, reset and change of e-mail.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

``authflow_account_tokens`` keeps the SHA-256 of each mailed token (the key) and of its
short code, its kind, tenant, user, payload, expiry, when it was used (or voided by a
newer token) and how many wrong codes were tried. A deleted user's tokens go with the
user. The downgrade drops the table.

A store of this version built with ``create_tables=True`` on an older database has
already created the table from the models (identical to this): the upgrade then leaves
it as it is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    if "authflow_account_tokens" in set(sa.inspect(op.get_bind()).get_table_names()):
        return
    op.create_table(
        "authflow_account_tokens",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("code_attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("token_hash", name="pk_authflow_account_tokens"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authflow_users.user_id"],
            name="fk_authflow_account_tokens_user_id_authflow_users",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_authflow_account_tokens_user", "authflow_account_tokens", ["tenant", "user_id", "kind"]
    )


def downgrade() -> None:
    op.drop_index("ix_authflow_account_tokens_user", table_name="authflow_account_tokens")
    op.drop_table("authflow_account_tokens")
