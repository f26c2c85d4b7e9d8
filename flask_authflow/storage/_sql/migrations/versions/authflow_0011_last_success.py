"""A success is the counter row's ``last_success_at``, no longer a row of the attempt log.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29

``authflow_lockouts`` gains ``last_success_at``: the latest success of its key (tenant,
subject, factor), what escalation and the failure cap count failures after. A login step
then settles a success in one statement (the counters reset and the success written
together) instead of an INSERT into ``authflow_attempts`` and an UPDATE.

The upgrade backfills the column from the newest success row of each key, creating the
counter row (no failures, no lock) where a key had successes but no counter: every lock,
count and "failures since the last success" reads the same before and after. The success
rows already logged stay (nothing reads them any more). The downgrade logs a success row
at ``last_success_at`` for every key whose newest logged success is older (the successes
settled under this revision), so the older code reads the same last success, then drops
the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

_KEY = ("tenant", "subject", "factor")


def _tables() -> tuple[sa.Table, sa.Table]:
    """The two tables as this revision leaves them (only the columns it reads or writes)."""
    meta = sa.MetaData()
    attempts = sa.Table(
        "authflow_attempts",
        meta,
        *(sa.Column(name, sa.String()) for name in _KEY),
        sa.Column("at", sa.DateTime(timezone=True)),
        sa.Column("success", sa.Boolean()),
        sa.Column("client_ip", sa.String()),
    )
    lockouts = sa.Table(
        "authflow_lockouts",
        meta,
        *(sa.Column(name, sa.String()) for name in _KEY),
        sa.Column("failures", sa.Integer()),
        sa.Column("last_success_at", sa.DateTime(timezone=True)),
    )
    return attempts, lockouts


def _same_key(attempts: sa.Table, lockouts: sa.Table) -> list[sa.ColumnElement[bool]]:
    return [attempts.c[name] == lockouts.c[name] for name in _KEY]


def backfill(connection: sa.Connection) -> None:
    """``last_success_at`` from the newest success row of each key (idempotent)."""
    attempts, lockouts = _tables()
    successes = attempts.c.success.is_(sa.true())
    newest = sa.select(sa.func.max(attempts.c.at)).where(successes, *_same_key(attempts, lockouts))
    connection.execute(
        sa.update(lockouts)
        .where(lockouts.c.last_success_at.is_(None))
        .values(last_success_at=newest.scalar_subquery())
    )
    has_counter = sa.select(lockouts.c.failures).where(*_same_key(attempts, lockouts)).exists()
    missing = (
        sa.select(*(attempts.c[name] for name in _KEY), sa.literal(0), sa.func.max(attempts.c.at))
        .where(successes, ~has_counter)
        .group_by(*(attempts.c[name] for name in _KEY))
    )
    connection.execute(sa.insert(lockouts).from_select([*_KEY, "failures", "last_success_at"], missing))


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "last_success_at" not in {c["name"] for c in inspector.get_columns("authflow_lockouts")}:
        with op.batch_alter_table("authflow_lockouts") as batch:
            batch.add_column(sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True))
    backfill(op.get_bind())


def downgrade() -> None:
    attempts, lockouts = _tables()
    logged = sa.select(attempts.c.at).where(
        attempts.c.success.is_(sa.true()),
        attempts.c.at >= lockouts.c.last_success_at,
        *_same_key(attempts, lockouts),
    )
    missing = sa.select(
        *(lockouts.c[name] for name in _KEY), sa.true(), lockouts.c.last_success_at, sa.null()
    ).where(lockouts.c.last_success_at.is_not(None), ~logged.exists())
    op.get_bind().execute(sa.insert(attempts).from_select([*_KEY, "success", "at", "client_ip"], missing))
    with op.batch_alter_table("authflow_lockouts") as batch:
        batch.drop_column("last_success_at")
