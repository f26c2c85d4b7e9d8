"""Factor records: ids, counters, metadata, lookups and pending enrollments.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-08

``authflow_factors`` gains ``factor_id`` (unique; rows already there get
``'legacy-' || id``), ``counter`` (0), ``data`` (``'{}'``), ``lookup`` (unique per kind),
``confirmed`` (true: every factor enrolled before this revision was in use) and
``last_used_at``.

SQLite cannot alter a column in place: ``batch_alter_table`` rebuilds the table there
(copying its rows, its foreign key and its plain index); the partial index of passwords
is dropped before and created again after, as a rebuild would lose its ``WHERE``. On
PostgreSQL the same steps are plain ``ALTER TABLE`` statements. The downgrade drops the
pending enrollments first (the older schema would take them for confirmed factors),
then the columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "authflow_factors"
#: UTCDateTime's column type, as in the baseline.
_Time = sa.DateTime(timezone=True)


def _password_index() -> None:
    # One password per user; other kinds (several security keys) may repeat.
    only_passwords = sa.text("kind = 'password'")
    op.create_index(
        "uq_authflow_factors_password",
        TABLE,
        ["user_id", "kind"],
        unique=True,
        sqlite_where=only_passwords,
        postgresql_where=only_passwords,
    )


def upgrade() -> None:
    op.drop_index("uq_authflow_factors_password", table_name=TABLE)
    with op.batch_alter_table(TABLE) as batch:
        batch.add_column(sa.Column("factor_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("counter", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
        batch.add_column(sa.Column("data", sa.Text(), nullable=False, server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("lookup", sa.String(255), nullable=True))
        batch.add_column(sa.Column("confirmed", sa.Boolean(), nullable=False, server_default=sa.text("true")))
        batch.add_column(sa.Column("last_used_at", _Time, nullable=True))
    # Every existing row gets an id of its own before the column becomes NOT NULL and unique.
    op.execute(sa.text("UPDATE authflow_factors SET factor_id = 'legacy-' || id WHERE factor_id IS NULL"))
    with op.batch_alter_table(TABLE) as batch:
        batch.alter_column("factor_id", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint("uq_authflow_factors_factor_id", ["factor_id"])
    _password_index()
    op.create_index("uq_authflow_factors_kind_lookup", TABLE, ["kind", "lookup"], unique=True)


def downgrade() -> None:
    factors = sa.table(TABLE, sa.column("confirmed", sa.Boolean()))
    op.execute(factors.delete().where(factors.c.confirmed == sa.false()))
    op.drop_index("uq_authflow_factors_kind_lookup", table_name=TABLE)
    op.drop_index("uq_authflow_factors_password", table_name=TABLE)
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_constraint("uq_authflow_factors_factor_id", type_="unique")
        for column in ("last_used_at", "confirmed", "lookup", "data", "counter", "factor_id"):
            batch.drop_column(column)
    _password_index()
