"""Every ``authflow_*`` table, in SQLAlchemy Core, on one :data:`metadata`.

The stores (:mod:`~flask_authflow.storage._sql.backend`, the session store, the issuer key
store) and the migrations all take their tables from here; nothing else defines one.
:func:`add_tables_to` copies them into an application's metadata (Flask-SQLAlchemy's
``db.metadata``) so Alembic / Flask-Migrate autogenerate sees them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import TypeDecorator

from flask_authflow._clock import utc

__all__ = [
    "BACKEND_TABLES",
    "UTCDateTime",
    "account_tokens_table",
    "add_tables_to",
    "api_tokens_table",
    "attempts_table",
    "audit_chain_heads_table",
    "audit_table",
    "aware",
    "devices_table",
    "factors_table",
    "identity_links_table",
    "issuer_key_schedule_table",
    "issuer_keys_table",
    "lockouts_table",
    "logout_jtis_table",
    "metadata",
    "provider_tokens_table",
    "reservations_table",
    "role_permissions_table",
    "roles_table",
    "sessions_table",
    "user_roles_table",
    "users_table",
]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every dialect: the one time column type of every table.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as
    naive UTC there and made aware again on the way out. Comparisons in SQL stay correct
    on both because every value written is converted to UTC first.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)


def aware(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime (``None`` stays ``None``)."""
    return utc(value) if value is not None else None


_Id = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only
_Time = UTCDateTime()

users_table = Table(
    "authflow_users",
    metadata,
    Column("user_id", String(32), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("identifier", String(254), nullable=False),
    Column("created_at", _Time, nullable=False),
    Column("disabled", Boolean, nullable=False, default=False),
    # Revision 0004: the account's address (unique per tenant) and when it was verified.
    Column("email", String(254)),
    Column("email_verified_at", _Time),
    UniqueConstraint("tenant", "identifier", name="uq_authflow_users_tenant_identifier"),
    UniqueConstraint("tenant", "email", name="uq_authflow_users_tenant_email"),
)

#: Every factor of every user, the password included: confirmed ones and enrollments
#: waiting for proof of possession (``confirmed`` false). Revision 0002 added every column
#: after ``created_at``.
factors_table = Table(
    "authflow_factors",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("secret", Text, nullable=False),
    Column("created_at", _Time, nullable=False),
    # The stable id the application and sealed secrets name (unique across the store).
    Column("factor_id", String(64), nullable=False),
    # Only ever moved forward, by one conditional UPDATE (HOTP counter, TOTP step, ...).
    Column("counter", BigInteger, nullable=False, default=0, server_default=text("0")),
    # Public metadata as JSON text (a dict on the Python side).
    Column("data", Text, nullable=False, default="{}", server_default=text("'{}'")),
    # Found without the user (a WebAuthn credential id); unique per kind, NULL for most.
    Column("lookup", String(255)),
    Column("confirmed", Boolean, nullable=False, default=True, server_default=text("true")),
    Column("last_used_at", _Time),
    UniqueConstraint("factor_id", name="uq_authflow_factors_factor_id"),
)
# One password per user; other kinds (several security keys) may repeat.
Index(
    "uq_authflow_factors_password",
    factors_table.c.user_id,
    factors_table.c.kind,
    unique=True,
    sqlite_where=factors_table.c.kind == "password",
    postgresql_where=factors_table.c.kind == "password",
)
Index("ix_authflow_factors_user", factors_table.c.user_id)
# A lookup value names one factor of its kind (NULLs never collide).
Index("uq_authflow_factors_kind_lookup", factors_table.c.kind, factors_table.c.lookup, unique=True)

#: The attempt log: one row per failure (successes before revision 0011 too; since then a
#: success is the counter row's ``last_success_at`` in ``authflow_lockouts``).
attempts_table = Table(
    "authflow_attempts",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("at", _Time, nullable=False),
    Column("tenant", String(128), nullable=False),
    Column("subject", String(300), nullable=False),
    Column("factor", String(32), nullable=False),
    Column("success", Boolean, nullable=False),
    Column("client_ip", String(45)),
)
Index("ix_authflow_attempts_subject", attempts_table.c.tenant, attempts_table.c.subject, attempts_table.c.at)

lockouts_table = Table(
    "authflow_lockouts",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("subject", String(300), primary_key=True),
    Column("factor", String(32), primary_key=True),
    Column("failures", Integer, nullable=False, default=0),
    Column("window_start", _Time),
    Column("locked_until", _Time),
    # The key's latest success (escalation counts the failures after it; revision 0011).
    Column("last_success_at", _Time),
)

#: Attempts reserved before a credential check and not yet settled (see reserve_attempt).
reservations_table = Table(
    "authflow_attempt_reservations",
    metadata,
    Column("token", String(32), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("subject", String(300), nullable=False),
    Column("factor", String(32), nullable=False),
    Column("reserved_at", _Time, nullable=False),
)
Index(
    "ix_authflow_attempt_reservations_key",
    reservations_table.c.tenant,
    reservations_table.c.subject,
    reservations_table.c.factor,
)

audit_table = Table(
    "authflow_audit",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("time", _Time, nullable=False),
    Column("event", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("tenant", String(128)),
    Column("user_id", String(32)),
    Column("identifier", String(254)),
    Column("session_id", String(64)),
    Column("factor", String(32)),
    Column("client_ip", String(45)),
    Column("ip_source", String(16), nullable=False),
    Column("user_agent", String(512)),
    Column("request_id", String(128)),
    Column("reason", String(64)),
    Column("device_id", String(64)),  # revision 0007
    # revision 0010: the tamper-evident chain (NULL on rows written with the chain off)
    Column("seq", BigInteger),
    Column("mac", String(64)),
    Column("key_id", String(16)),
)
Index("ix_authflow_audit_time", audit_table.c.time)
Index("ix_authflow_audit_tenant_seq", audit_table.c.tenant, audit_table.c.seq)

#: Revision 0010: each audit chain's head (the tenant, ``""`` for rows without one; the
#: last row's seq and mac) and its checkpoint (where a purged chain resumes, MACed).
audit_chain_heads_table = Table(
    "authflow_audit_chain_heads",
    metadata,
    Column("chain", String(128), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("mac", String(64), nullable=False),
    Column("key_id", String(16)),
    Column("checkpoint_seq", BigInteger),
    Column("checkpoint_mac", String(64)),
    Column("checkpoint_key_id", String(16)),
    Column("checkpoint_sig", String(64)),
)

#: Provider identity (issuer, subject) -> local user (federated login, back-channel logout).
identity_links_table = Table(
    "authflow_identity_links",
    metadata,
    Column("issuer", String(255), primary_key=True),
    Column("subject", String(255), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("user_id", String(32), nullable=False),
    Column("created_at", _Time, nullable=False),
)
Index("ix_authflow_identity_links_user", identity_links_table.c.tenant, identity_links_table.c.user_id)

#: jti of back-channel logout tokens seen, until their exp: a replay is refused in every
#: process. One-time login tokens (``use_once``: an e-mail code's digest, a WebAuthn
#: challenge) share the table, under an ``issuer`` of ``one-time:<scope>``.
logout_jtis_table = Table(
    "authflow_logout_jtis",
    metadata,
    Column("issuer", String(255), primary_key=True),
    Column("jti", String(255), primary_key=True),
    Column("expires_at", _Time, nullable=False, index=True),
)

#: Roles per tenant (revision 0003 added the three role tables).
roles_table = Table(
    "authflow_roles",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("description", String(255), nullable=False, default="", server_default=text("''")),
)

#: The permissions a role grants.
role_permissions_table = Table(
    "authflow_role_permissions",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("role", String(64), primary_key=True),
    Column("permission", String(64), primary_key=True),
    ForeignKeyConstraint(
        ["tenant", "role"],
        ["authflow_roles.tenant", "authflow_roles.name"],
        name="fk_authflow_role_permissions_tenant_authflow_roles",
        ondelete="CASCADE",
    ),
)

#: The roles a user holds; the primary key keeps one row per (tenant, user, role).
user_roles_table = Table(
    "authflow_user_roles",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), primary_key=True),
    Column("role", String(64), primary_key=True),
    ForeignKeyConstraint(
        ["tenant", "role"],
        ["authflow_roles.tenant", "authflow_roles.name"],
        name="fk_authflow_user_roles_tenant_authflow_roles",
        ondelete="CASCADE",
    ),
)
# "Is this role in use?" without a scan.
Index("ix_authflow_user_roles_role", user_roles_table.c.tenant, user_roles_table.c.role)

#: Mailed single-use tokens (sign-up, e-mail verification, password reset, change of
#: e-mail): only digests of the token and of its short code (revision 0006).
account_tokens_table = Table(
    "authflow_account_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("tenant", String(128), nullable=False),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), nullable=False),
    Column("code_hash", String(64), nullable=False),
    Column("payload", Text, nullable=False, default="{}", server_default=text("'{}'")),
    Column("code_attempts", Integer, nullable=False, default=0, server_default=text("0")),
    Column("created_at", _Time, nullable=False),
    Column("expires_at", _Time, nullable=False),
    Column("used_at", _Time),
)
# "The user's live token of a kind" and "void the older ones" without a scan.
Index(
    "ix_authflow_account_tokens_user",
    account_tokens_table.c.tenant,
    account_tokens_table.c.user_id,
    account_tokens_table.c.kind,
)


#: Personal API tokens (revision 0008): the SHA-256 of each token, never the token; the
#: primary key is the token's public lookup id, so a verification is one indexed read.
api_tokens_table = Table(
    "authflow_api_tokens",
    metadata,
    Column("token_id", String(16), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), nullable=False),
    Column("name", String(64), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("scopes", Text, nullable=False),
    Column("created_at", _Time, nullable=False),
    Column("expires_at", _Time),
    Column("last_used_at", _Time),
    UniqueConstraint("tenant", "user_id", "name", name="uq_authflow_api_tokens_tenant_user_name"),
)


#: The devices (browsers) each user signed in from, and the trust given to them (revision 0007).
devices_table = Table(
    "authflow_devices",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), primary_key=True),
    Column("device_id", String(64), primary_key=True),
    Column("label", String(128), nullable=False),
    Column("place", String(128)),
    Column("first_seen_at", _Time, nullable=False),
    Column("last_seen_at", _Time, nullable=False),
    Column("trusted_until", _Time),
)


sessions_table = Table(
    "authflow_sessions",
    metadata,
    Column("sid_hash", String(64), primary_key=True),
    Column("tenant", String(255), nullable=True),
    Column("user_id", String(255), nullable=True),
    Column("state", String(32), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False, index=True),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("data", LargeBinary, nullable=False),
    # federation_key(issuer, sid) of a federated login: back-channel logout looks it up.
    Column("federation_key", String(64), nullable=True),
    Index("ix_authflow_sessions_tenant_user_id", "tenant", "user_id"),
    Index("ix_authflow_sessions_federation_key", "federation_key"),
)

#: The local issuer's signing keys; exactly one row is current (a partial unique index).
issuer_keys_table = Table(
    "authflow_issuer_keys",
    metadata,
    Column("kid", String(64), primary_key=True),
    Column("pem", Text, nullable=False),
    Column("alg", String(16), nullable=False),
    Column("is_current", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Index(
        "uq_authflow_issuer_keys_one_current",
        "is_current",
        unique=True,
        postgresql_where=text("is_current"),
        sqlite_where=text("is_current"),
    ),
)

#: Staged-rotation bookkeeping: when a key was staged, or when it stopped signing.
issuer_key_schedule_table = Table(
    "authflow_issuer_key_schedule",
    metadata,
    Column("kid", String(64), primary_key=True),
    Column("staged_at", UTCDateTime(), nullable=True),
    Column("retired_at", UTCDateTime(), nullable=True),
)

#: The tables of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`.
#: A user's tokens of one provider (federation's ``store_tokens``; revision 0005): the
#: access and refresh tokens sealed in ``sealed``, and the refresh claim (``claim`` until
#: ``claimed_until``) that lets one process at a time spend the refresh token.
provider_tokens_table = Table(
    "authflow_provider_tokens",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("user_id", String(32), ForeignKey("authflow_users.user_id", ondelete="CASCADE"), primary_key=True),
    Column("provider", String(32), primary_key=True),
    Column("sealed", Text, nullable=False),
    Column("token_type", String(32), nullable=False),
    Column("scopes", Text, nullable=False),
    Column("expires_at", _Time),
    Column("updated_at", _Time, nullable=False),
    Column("claim", String(64)),
    Column("claimed_until", _Time),
)

BACKEND_TABLES = [
    users_table,
    factors_table,
    attempts_table,
    lockouts_table,
    reservations_table,
    audit_table,
    audit_chain_heads_table,
    identity_links_table,
    logout_jtis_table,
    roles_table,
    role_permissions_table,
    user_roles_table,
    account_tokens_table,
    api_tokens_table,
    provider_tokens_table,
    devices_table,
]


def add_tables_to(target: MetaData) -> None:
    """Copy every ``authflow_*`` table into ``target`` (an application's metadata, such as
    Flask-SQLAlchemy's ``db.metadata``), so Alembic / Flask-Migrate autogenerate sees them.

    Tables ``target`` already has are left alone; the copies have the same names and
    columns, so the stores work on either.
    """
    for table in metadata.sorted_tables:
        if table.name not in target.tables:
            table.to_metadata(target)
