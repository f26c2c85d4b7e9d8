"""The tamper-evident audit chain.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29

``authflow_audit`` gains ``seq``, ``mac`` and ``key_id`` (NULL on the rows written before:
``flask authflow audit verify`` reports them as the unchained prefix, not as a break) and
an index on ``(tenant, seq)``. ``authflow_audit_chain_heads`` holds each chain's head (the
last row's ``seq`` and ``mac``; a writer moves it with a compare-and-swap) and its purge
checkpoint. Head rows are created by the first chained write of each tenant. The downgrade
drops both.

A store of this version built with ``create_tables=True`` on an older database has
already created the table from the models (identical to this): the upgrade then leaves it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "seq" not in {c["name"] for c in inspector.get_columns("authflow_audit")}:
        with op.batch_alter_table("authflow_audit") as batch:
            batch.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column("mac", sa.String(64), nullable=True))
            batch.add_column(sa.Column("key_id", sa.String(16), nullable=True))
            batch.create_index("ix_authflow_audit_tenant_seq", ["tenant", "seq"])
    if "authflow_audit_chain_heads" in inspector.get_table_names():
        return
    op.create_table(
        "authflow_audit_chain_heads",
        sa.Column("chain", sa.String(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("mac", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(16), nullable=True),
        sa.Column("checkpoint_seq", sa.BigInteger(), nullable=True),
        sa.Column("checkpoint_mac", sa.String(64), nullable=True),
        sa.Column("checkpoint_key_id", sa.String(16), nullable=True),
        sa.Column("checkpoint_sig", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("chain", name="pk_authflow_audit_chain_heads"),
    )


def downgrade() -> None:
    op.drop_table("authflow_audit_chain_heads")
    with op.batch_alter_table("authflow_audit") as batch:
        batch.drop_index("ix_authflow_audit_tenant_seq")
        batch.drop_column("key_id")
        batch.drop_column("mac")
        batch.drop_column("seq")
