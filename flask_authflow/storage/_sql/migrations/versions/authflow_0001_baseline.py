"""Baseline: every flask-authflow table as of the first release with migrations.

Revision ID: 0001
Revises:
Create Date: 2026-11-24

Users, factors, the attempt log, lockout counters and in-flight attempt reservations,
audit rows, federated identity links, the back-channel logout jti cache, sessions (with
their federation key) and the local issuer's keys with their rotation schedule.

Databases created before migrations existed (by ``create_all`` in the store
constructors) are adopted by :func:`adopt`: the tables those versions had not created
yet are created, ``authflow_sessions`` gains ``federation_key`` when it lacks it, and the
result is stamped with this revision.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

#: UTCDateTime's column type: timestamptz on PostgreSQL, naive UTC text on SQLite.
_Time = sa.DateTime(timezone=True)
#: SQLite autoincrements INTEGER PRIMARY KEY only.
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _users() -> sa.Table:
    table = op.create_table(
        "authflow_users",
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("identifier", sa.String(254), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_authflow_users"),
        sa.UniqueConstraint("tenant", "identifier", name="uq_authflow_users_tenant_identifier"),
    )
    return table


def _factors() -> sa.Table:
    table = op.create_table(
        "authflow_factors",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_authflow_factors"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["authflow_users.user_id"],
            name="fk_authflow_factors_user_id_authflow_users",
            ondelete="CASCADE",
        ),
    )
    # One password per user; other kinds (several security keys) may repeat.
    only_passwords = sa.text("kind = 'password'")
    op.create_index(
        "uq_authflow_factors_password",
        "authflow_factors",
        ["user_id", "kind"],
        unique=True,
        sqlite_where=only_passwords,
        postgresql_where=only_passwords,
    )
    op.create_index("ix_authflow_factors_user", "authflow_factors", ["user_id"])
    return table


def _attempts() -> sa.Table:
    table = op.create_table(
        "authflow_attempts",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("at", _Time, nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("factor", sa.String(32), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("client_ip", sa.String(45), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_authflow_attempts"),
    )
    op.create_index("ix_authflow_attempts_subject", "authflow_attempts", ["tenant", "subject", "at"])
    return table


def _lockouts() -> sa.Table:
    table = op.create_table(
        "authflow_lockouts",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("factor", sa.String(32), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_start", _Time, nullable=True),
        sa.Column("locked_until", _Time, nullable=True),
        sa.PrimaryKeyConstraint("tenant", "subject", "factor", name="pk_authflow_lockouts"),
    )
    return table


def _attempt_reservations() -> sa.Table:
    table = op.create_table(
        "authflow_attempt_reservations",
        sa.Column("token", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("factor", sa.String(32), nullable=False),
        sa.Column("reserved_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("token", name="pk_authflow_attempt_reservations"),
    )
    op.create_index(
        "ix_authflow_attempt_reservations_key",
        "authflow_attempt_reservations",
        ["tenant", "subject", "factor"],
    )
    return table


def _audit() -> sa.Table:
    table = op.create_table(
        "authflow_audit",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("time", _Time, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("user_id", sa.String(32), nullable=True),
        sa.Column("identifier", sa.String(254), nullable=True),
        sa.Column("session_id", sa.String(64), nullable=True),
        sa.Column("factor", sa.String(32), nullable=True),
        sa.Column("client_ip", sa.String(45), nullable=True),
        sa.Column("ip_source", sa.String(16), nullable=False),
        sa.Column("user_agent", sa.String(512), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_authflow_audit"),
    )
    op.create_index("ix_authflow_audit_time", "authflow_audit", ["time"])
    return table


def _identity_links() -> sa.Table:
    table = op.create_table(
        "authflow_identity_links",
        sa.Column("issuer", sa.String(255), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("issuer", "subject", name="pk_authflow_identity_links"),
    )
    op.create_index("ix_authflow_identity_links_user", "authflow_identity_links", ["tenant", "user_id"])
    return table


def _logout_jtis() -> sa.Table:
    table = op.create_table(
        "authflow_logout_jtis",
        sa.Column("issuer", sa.String(255), nullable=False),
        sa.Column("jti", sa.String(255), nullable=False),
        sa.Column("expires_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("issuer", "jti", name="pk_authflow_logout_jtis"),
    )
    op.create_index("ix_authflow_logout_jtis_expires_at", "authflow_logout_jtis", ["expires_at"])
    return table


def _sessions_federation_key_index() -> None:
    op.create_index("ix_authflow_sessions_federation_key", "authflow_sessions", ["federation_key"])


def _sessions() -> sa.Table:
    table = op.create_table(
        "authflow_sessions",
        sa.Column("sid_hash", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=True),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("expires_at", _Time, nullable=False),
        sa.Column("updated_at", _Time, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        # federation_key(issuer, sid) of a federated login: back-channel logout looks it up.
        sa.Column("federation_key", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("sid_hash", name="pk_authflow_sessions"),
    )
    op.create_index("ix_authflow_sessions_expires_at", "authflow_sessions", ["expires_at"])
    op.create_index("ix_authflow_sessions_tenant_user_id", "authflow_sessions", ["tenant", "user_id"])
    _sessions_federation_key_index()
    return table


def _issuer_keys() -> sa.Table:
    table = op.create_table(
        "authflow_issuer_keys",
        sa.Column("kid", sa.String(64), nullable=False),
        sa.Column("pem", sa.Text(), nullable=False),
        sa.Column("alg", sa.String(16), nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("kid", name="pk_authflow_issuer_keys"),
    )
    # At most one current key: two processes rotating at once cannot both win.
    current = sa.text("is_current")
    op.create_index(
        "uq_authflow_issuer_keys_one_current",
        "authflow_issuer_keys",
        ["is_current"],
        unique=True,
        sqlite_where=current,
        postgresql_where=current,
    )
    return table


def _issuer_key_schedule() -> sa.Table:
    table = op.create_table(
        "authflow_issuer_key_schedule",
        sa.Column("kid", sa.String(64), nullable=False),
        sa.Column("staged_at", _Time, nullable=True),
        sa.Column("retired_at", _Time, nullable=True),
        sa.PrimaryKeyConstraint("kid", name="pk_authflow_issuer_key_schedule"),
    )
    return table


#: Table name -> what creates it (with its indexes), in creation order.
TABLES: dict[str, Callable[[], sa.Table]] = {
    "authflow_users": _users,
    "authflow_factors": _factors,
    "authflow_attempts": _attempts,
    "authflow_lockouts": _lockouts,
    "authflow_attempt_reservations": _attempt_reservations,
    "authflow_audit": _audit,
    "authflow_identity_links": _identity_links,
    "authflow_logout_jtis": _logout_jtis,
    "authflow_sessions": _sessions,
    "authflow_issuer_keys": _issuer_keys,
    "authflow_issuer_key_schedule": _issuer_key_schedule,
}


def upgrade() -> None:
    for create in TABLES.values():
        create()


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)


def adopt(existing: dict[str, set[str]]) -> list[str]:
    """Bring a database created before migrations to this revision's schema.

    ``existing`` maps each ``authflow_*`` table present to its column names. Earlier
    versions created their tables with ``create_all`` on every start, and their tables
    differed from this revision in one way only: tables added later, and the
    ``federation_key`` column (and its index) of ``authflow_sessions``. Returns what was
    done, one line per step.
    """
    done: list[str] = []
    sessions = existing.get("authflow_sessions")
    if sessions is not None and "federation_key" not in sessions:
        op.add_column("authflow_sessions", sa.Column("federation_key", sa.String(64), nullable=True))
        _sessions_federation_key_index()
        done.append("added authflow_sessions.federation_key")
    for name, create in TABLES.items():
        if name not in existing:
            create()
            done.append(f"created {name}")
    return done


def expected_columns() -> dict[str, set[str]]:
    """The column names of each table of this revision, from its definitions above run
    offline (nothing touches a database). Call it outside a migration: it installs its
    own ``op``."""
    offline = MigrationContext.configure(
        dialect_name="sqlite", opts={"as_sql": True, "output_buffer": io.StringIO()}
    )
    with Operations.context(offline):
        return {name: {column.name for column in create().columns} for name, create in TABLES.items()}
