"""Users, factors, attempt counters and audit rows in a SQL database (SQLAlchemy 2.x).

Failure counting is one transaction per failure: ``INSERT ... ON CONFLICT DO NOTHING``
makes sure the counter row exists, then ``UPDATE ... SET failures = failures + 1``
(with the window restart in a ``CASE``) increments it in the database. On PostgreSQL
the UPDATE takes the row lock and re-reads the committed value, on SQLite the first
write takes the database lock, so two threads or two machines failing at once can
never lose a count. Every database error becomes :class:`StoreUnavailable` (or
:class:`AuditWriteError` for audit rows): a login is refused, never waved through.
"""

from __future__ import annotations

import copy
import functools
import secrets
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from flask import has_app_context
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    Row,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    case,
    delete,
    event,
    exists,
    false,
    func,
    insert,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from flask_authflow.audit.sinks import AuditRecord
from flask_authflow.clock import Clock, SystemClock, utc
from flask_authflow.core.identifiers import check_tenant, normalise_identifier
from flask_authflow.core.ports import (
    RESERVATION_TTL,
    AttemptKey,
    FactorConfig,
    FailureCount,
    LoginFacts,
    Reservation,
    UserRecord,
)
from flask_authflow.errors import (
    AuditWriteError,
    ConfigurationError,
    StoreBusy,
    StoreUnavailable,
    UserExists,
    UserNotFound,
)
from flask_authflow.federation.links import IdentityLink
from flask_authflow.login.password import PasswordHasher
from flask_authflow.outcomes import FactorKind
from flask_authflow.storage.memory import check_factor_config, dump_factor_data, load_factor_data
from flask_authflow.storage.sql.base import (
    EngineSource,
    UTCDateTime,
    add_tables_to,
    autocommit_reads,
    is_flask_sqlalchemy,
    metadata,
    resolve_engine,
    run_read,
    run_statement,
)

if TYPE_CHECKING:
    from flask_authflow.core.session import AuthSession
    from flask_authflow.sessions.interface import AuthFlowSessionInterface

__all__ = [
    "AUDIT_PURGE_BATCH",
    "SqlAlchemyBackend",
    "UnitOfWork",
    "attempts_table",
    "audit_table",
    "factors_table",
    "lockouts_table",
    "users_table",
]

T = TypeVar("T")

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
    UniqueConstraint("tenant", "identifier", name="uq_authflow_users_tenant_identifier"),
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
)
Index("ix_authflow_audit_time", audit_table.c.time)

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

_TABLES = [
    users_table,
    factors_table,
    attempts_table,
    lockouts_table,
    reservations_table,
    audit_table,
    identity_links_table,
    logout_jtis_table,
]


def _aware(value: datetime | None) -> datetime | None:
    return utc(value) if value is not None else None


def _factor(row: Row[Any]) -> FactorConfig | None:
    """The factor of a row; ``None`` for a kind this process has not registered (it cannot
    be verified, so it is as good as absent)."""
    try:
        kind = FactorKind(row.kind)
    except ValueError:
        return None
    return FactorConfig(
        user_id=row.user_id,
        kind=kind,
        created_at=utc(row.created_at),
        secret=row.secret,
        factor_id=row.factor_id,
        counter=int(row.counter),
        data=load_factor_data(row.data),
        lookup=row.lookup,
        confirmed=bool(row.confirmed),
        last_used_at=_aware(row.last_used_at),
    )


def _factors(rows: Sequence[Row[Any]]) -> list[FactorConfig]:
    return [config for config in map(_factor, rows) if config is not None]


def _factor_key(tenant: str, user_id: str, factor_id: str = "") -> dict[str, Any]:
    """The parameters naming one factor in the statements that write factors (named
    ``key_*``: SQLAlchemy keeps column names for the SET and VALUES clauses)."""
    return {"key_tenant": tenant, "key_user_id": user_id, "key_factor_id": factor_id}


def _kinds(names: Sequence[str]) -> list[FactorKind]:
    """The distinct known kinds among ``names``, in their order, the password first."""
    kinds: list[FactorKind] = []
    for name in names:
        try:
            kind = FactorKind(name)
        except ValueError:
            continue
        if kind not in kinds:
            kinds.append(kind)
    if FactorKind.PASSWORD in kinds:
        kinds.remove(FactorKind.PASSWORD)
        kinds.insert(0, FactorKind.PASSWORD)
    return kinds


def _user(row: Row[Any]) -> UserRecord:
    return UserRecord(
        user_id=row.user_id,
        tenant=row.tenant,
        identifier=row.identifier,
        created_at=utc(row.created_at),
        disabled=bool(row.disabled),
    )


# The login path's reads, built once: constructing a select() costs more than running
# it on SQLite, and SQLAlchemy caches the compiled form of a reused statement.
_FIND_USER = select(users_table).where(
    users_table.c.tenant == bindparam("tenant"), users_table.c.identifier == bindparam("identifier")
)
# A user's factors (only when the user is in the tenant), oldest first; confirmed ones
# only unless pending ones are asked for.
_ALL_USER_FACTORS = (
    select(factors_table)
    .join(users_table, users_table.c.user_id == factors_table.c.user_id)
    .where(users_table.c.tenant == bindparam("tenant"), factors_table.c.user_id == bindparam("user_id"))
    .order_by(factors_table.c.created_at, factors_table.c.id)
)
_CONFIRMED = factors_table.c.confirmed == true()
_USER_FACTORS = _ALL_USER_FACTORS.where(_CONFIRMED)
_FACTOR_KINDS = _USER_FACTORS.with_only_columns(factors_table.c.kind)
_PASSWORD_HASH = _USER_FACTORS.where(factors_table.c.kind == FactorKind.PASSWORD.value)
_OF_KIND = factors_table.c.kind == bindparam("kind")
#: list_user_factors: (filtered by kind, pending included) -> statement.
_LIST_FACTORS = {
    (False, False): _USER_FACTORS,
    (True, False): _USER_FACTORS.where(_OF_KIND),
    (False, True): _ALL_USER_FACTORS,
    (True, True): _ALL_USER_FACTORS.where(_OF_KIND),
}
_GET_FACTOR = _ALL_USER_FACTORS.where(factors_table.c.factor_id == bindparam("factor_id"))
_FIND_FACTOR_BY_LOOKUP = (
    select(factors_table)
    .join(users_table, users_table.c.user_id == factors_table.c.user_id)
    .where(
        users_table.c.tenant == bindparam("tenant"),
        factors_table.c.kind == bindparam("kind"),
        factors_table.c.lookup == bindparam("lookup"),
        _CONFIRMED,
    )
)
_FACTOR_COLUMNS = (
    "factor_id",
    "kind",
    "secret",
    "created_at",
    "counter",
    "data",
    "lookup",
    "confirmed",
    "last_used_at",
)
# INSERT ... SELECT from the user's row: nothing is inserted (no row returned) when the
# user is not in the tenant, in the same statement as the insert.
_ADD_FACTOR = (
    insert(factors_table)
    .from_select(
        ["user_id", *_FACTOR_COLUMNS],
        select(
            users_table.c.user_id,
            *(bindparam(f"new_{name}", type_=factors_table.c[name].type) for name in _FACTOR_COLUMNS),
        ).where(
            users_table.c.tenant == bindparam("key_tenant"), users_table.c.user_id == bindparam("key_user_id")
        ),
    )
    .returning(factors_table.c.id)
)
# The user's row, locked until the transaction ends (PostgreSQL; on SQLite the first
# write takes the database lock): factor changes that replace others run one at a time.
_LOCK_USER = (
    select(users_table.c.user_id)
    .where(users_table.c.tenant == bindparam("key_tenant"), users_table.c.user_id == bindparam("key_user_id"))
    .with_for_update()
)
# One factor of a user who is in the tenant (correlated: still one statement).
_IN_TENANT = (
    exists()
    .where(users_table.c.user_id == factors_table.c.user_id, users_table.c.tenant == bindparam("key_tenant"))
    .correlate(factors_table)
)
_OF_FACTOR = and_(
    factors_table.c.factor_id == bindparam("key_factor_id"),
    factors_table.c.user_id == bindparam("key_user_id"),
    _IN_TENANT,
)
_USED_AT = bindparam("used_at", type_=UTCDateTime())
_ADVANCE_COUNTER = (
    update(factors_table)
    .where(_OF_FACTOR, _CONFIRMED, factors_table.c.counter < bindparam("new_counter", type_=BigInteger()))
    .values(counter=bindparam("new_counter", type_=BigInteger()), last_used_at=_USED_AT)
)
_EXPECTED_COUNTER = bindparam("expected_counter", type_=BigInteger())
_SWAP_SECRET = (
    update(factors_table)
    .where(_OF_FACTOR, _CONFIRMED, factors_table.c.counter == _EXPECTED_COUNTER)
    .values(
        secret=bindparam("new_secret", type_=Text()), counter=_EXPECTED_COUNTER + 1, last_used_at=_USED_AT
    )
)
_CONFIRM_FACTOR = (
    update(factors_table)
    .where(
        factors_table.c.factor_id == bindparam("key_factor_id"),
        factors_table.c.user_id == bindparam("key_user_id"),
        factors_table.c.confirmed == false(),
    )
    .values(confirmed=True)
    .returning(factors_table.c.kind)
)
_DELETE_OTHERS_OF_KIND = delete(factors_table).where(
    factors_table.c.user_id == bindparam("key_user_id"),
    factors_table.c.kind == bindparam("key_kind"),
    factors_table.c.factor_id != bindparam("key_factor_id"),
)
_DELETE_FACTOR = delete(factors_table).where(_OF_FACTOR, factors_table.c.kind != FactorKind.PASSWORD.value)
_CONFIRMED_OF_KIND = and_(
    factors_table.c.user_id == bindparam("key_user_id"),
    factors_table.c.kind == bindparam("key_kind"),
    _CONFIRMED,
)
_FIRST_ENROLLED_OF_KIND = select(func.min(factors_table.c.created_at)).where(_CONFIRMED_OF_KIND)
_DELETE_CONFIRMED_OF_KIND = delete(factors_table).where(_CONFIRMED_OF_KIND)
_INSERT_FACTOR = insert(factors_table)
_SET_PASSWORD = (
    update(factors_table)
    .where(
        factors_table.c.user_id == bindparam("key_user_id"),
        factors_table.c.kind == FactorKind.PASSWORD.value,
    )
    .values(secret=bindparam("password_hash", type_=Text()), confirmed=True)
)
_ACTIVE_LOCK = select(func.max(lockouts_table.c.locked_until)).where(
    lockouts_table.c.tenant == bindparam("tenant"),
    lockouts_table.c.subject == bindparam("subject"),
    lockouts_table.c.locked_until > bindparam("now", type_=UTCDateTime()),
)
_AUDIT_INSERT = insert(audit_table)
_RESET_COUNTER = (
    update(lockouts_table)
    .where(
        lockouts_table.c.tenant == bindparam("key_tenant"),
        lockouts_table.c.subject == bindparam("key_subject"),
        lockouts_table.c.factor == bindparam("key_factor"),
    )
    .values(failures=0, window_start=None)
)
_ATTEMPT_INSERT = insert(attempts_table)
_GET_USER = select(users_table).where(
    users_table.c.tenant == bindparam("tenant"), users_table.c.user_id == bindparam("user_id")
)

# The attempt counter's statements, built once too: the counter row of one key ...
_OF_KEY = and_(
    lockouts_table.c.tenant == bindparam("key_tenant"),
    lockouts_table.c.subject == bindparam("key_subject"),
    lockouts_table.c.factor == bindparam("key_factor"),
)
_NOW = bindparam("now", type_=UTCDateTime())
# ... locked (on PostgreSQL the row lock, on SQLite the database write lock) by a no-op
# UPDATE that also reads the count, so concurrent reservations of one key, from any
# process, are decided one after the other ...
_LOCK_COUNTER = (
    update(lockouts_table)
    .where(_OF_KEY)
    .values(failures=lockouts_table.c.failures)
    .returning(lockouts_table.c.failures, lockouts_table.c.window_start)
)
# ... and counted in the database: failures + 1, or 1 when the window restarts.
_RESTART = or_(
    lockouts_table.c.window_start.is_(None),
    lockouts_table.c.window_start <= bindparam("window_opened", type_=UTCDateTime()),
)
_COUNT_FAILURE = (
    update(lockouts_table)
    .where(_OF_KEY)
    .values(
        failures=case((_RESTART, 1), else_=lockouts_table.c.failures + 1),
        window_start=case((_RESTART, _NOW), else_=lockouts_table.c.window_start),
    )
    .returning(lockouts_table.c.failures)
)
_SET_LOCK = (
    update(lockouts_table)
    .where(_OF_KEY)
    .values(failures=0, window_start=None, locked_until=bindparam("until", type_=UTCDateTime()))
)
_OF_RESERVED_KEY = and_(
    reservations_table.c.tenant == bindparam("key_tenant"),
    reservations_table.c.subject == bindparam("key_subject"),
    reservations_table.c.factor == bindparam("key_factor"),
)
_DROP_STALE_RESERVATIONS = delete(reservations_table).where(
    _OF_RESERVED_KEY, reservations_table.c.reserved_at <= bindparam("stale", type_=UTCDateTime())
)
_COUNT_RESERVATIONS = select(func.count()).select_from(reservations_table).where(_OF_RESERVED_KEY)
_STALE = bindparam("stale", type_=UTCDateTime())
# What a reservation decides on, read in one round trip after the counter row is locked:
# the active lock on the subject, the reservations in flight, and the stale ones (whose
# process died mid-check: they no longer count, and are deleted when there are any).
_RESERVATION_STATE = select(
    _ACTIVE_LOCK.scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at > _STALE).scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at <= _STALE).scalar_subquery(),
)
_RESERVE = insert(reservations_table)
_SETTLE = delete(reservations_table).where(reservations_table.c.token == bindparam("token"))

# begin_login's three reads in one statement (find_user, required_factors, locked_until):
# one row per confirmed factor of the user, oldest first, each carrying the user's columns
# and the identifier's active lock; a single row of NULLs but the lock when there is no
# such user (or no factor). The anchor row makes the lock come back without a user.
_ANCHOR = select(literal(1).label("anchor")).subquery("anchor")
_LOGIN_FACTS: Any = (  # Any: its rows go to _user, typed for whole-table rows
    select(_ACTIVE_LOCK.scalar_subquery().label("locked_until"), *users_table.c, factors_table.c.kind)
    .select_from(
        _ANCHOR.outerjoin(
            users_table,
            and_(
                users_table.c.tenant == bindparam("tenant"),
                users_table.c.identifier == bindparam("identifier"),
            ),
        ).outerjoin(factors_table, and_(factors_table.c.user_id == users_table.c.user_id, _CONFIRMED))
    )
    .order_by(factors_table.c.created_at, factors_table.c.id)
)

# PostgreSQL: after the counter row is locked, the state read, the drop of stale
# reservations and the reservation itself in one statement (data-modifying CTEs). Its
# snapshot is taken once the lock is held, as the separate SELECT's was, so reservations
# committed by whoever held the lock before are counted. ``counted`` is the window's
# failures, read by the upsert that took the lock.
_PG_STATE = select(
    _ACTIVE_LOCK.scalar_subquery().label("locked"),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at > _STALE).scalar_subquery().label("in_flight"),
).cte("state")
_PG_DROP_STALE = _DROP_STALE_RESERVATIONS.cte("dropped")
_PG_RESERVE = (
    insert(reservations_table)
    .from_select(
        ["token", "tenant", "subject", "factor", "reserved_at"],
        select(
            bindparam("token", type_=String()),
            bindparam("key_tenant", type_=String()),
            bindparam("key_subject", type_=String()),
            bindparam("key_factor", type_=String()),
            _NOW,
        ).where(
            _PG_STATE.c.locked.is_(None),
            bindparam("counted", type_=Integer()) + _PG_STATE.c.in_flight
            < bindparam("max_failures", type_=Integer()),
        ),
    )
    .returning(reservations_table.c.token)
    .cte("reserved")
)
_PG_RESERVE_ATTEMPT = select(
    _PG_STATE.c.locked,
    select(func.count()).select_from(_PG_RESERVE).scalar_subquery().label("granted"),
).add_cte(_PG_DROP_STALE)

# PostgreSQL: a successful check settled in one statement, unless a lock is active on the
# subject (set by a parallel failure while the check ran): then only the reservation is
# given back. The statement returns the lock, if any.
# (Its parameters name no column of the tables it writes: SQLAlchemy would add such a
# column to the SET clause of the UPDATE in a CTE.)
_PG_LOCK = select(
    select(func.max(lockouts_table.c.locked_until))
    .where(
        lockouts_table.c.tenant == bindparam("key_tenant"),
        lockouts_table.c.subject == bindparam("key_subject"),
        lockouts_table.c.locked_until > _NOW,
    )
    .scalar_subquery()
    .label("until")
).cte("active_lock")
_UNLOCKED = select(_PG_LOCK.c.until).scalar_subquery().is_(None)
_PG_SETTLED = _SETTLE.cte("settled")
_PG_RESET = (
    update(lockouts_table)
    .where(_OF_KEY, _UNLOCKED)
    .values(failures=literal_column("0"), window_start=null())
    .cte("reset")
)
_PG_LOGGED = (
    insert(attempts_table)
    .from_select(
        ["at", "tenant", "subject", "factor", "success", "client_ip"],
        select(
            _NOW,
            bindparam("key_tenant", type_=String()),
            bindparam("key_subject", type_=String()),
            bindparam("key_factor", type_=String()),
            true(),
            bindparam("client_ip", type_=String()),
        ).where(_PG_LOCK.c.until.is_(None)),
    )
    .cte("logged")
)
_PG_SETTLE_SUCCESS = select(_PG_LOCK.c.until).add_cte(_PG_SETTLED, _PG_RESET, _PG_LOGGED)
_PURGE_AUDIT_BATCH = delete(audit_table).where(
    audit_table.c.id.in_(
        select(audit_table.c.id)
        .where(audit_table.c.time < bindparam("before", type_=UTCDateTime()))
        .order_by(audit_table.c.id)
        .limit(bindparam("batch", type_=Integer()))
        .scalar_subquery()
    )
)
#: Audit rows deleted per transaction by :meth:`SqlAlchemyBackend.purge_audit`.
AUDIT_PURGE_BATCH = 5000

_KEY_COLUMNS = [lockouts_table.c.tenant, lockouts_table.c.subject, lockouts_table.c.factor]
_KEY_VALUES: dict[str, Any] = {
    "tenant": bindparam("key_tenant"),
    "subject": bindparam("key_subject"),
    "factor": bindparam("key_factor"),
}


def _counter_upserts(dialect_insert: Any) -> tuple[Any, Any]:
    """(lock, count): the counter statements as one upsert each, creating the row if missing.

    ``lock`` is _LOCK_COUNTER, ``count`` is _COUNT_FAILURE; ON CONFLICT DO UPDATE takes
    the row lock of an existing row on PostgreSQL, as their UPDATE does.
    """
    t = lockouts_table.c
    lock = (
        dialect_insert(lockouts_table)
        .values(**_KEY_VALUES, failures=0)
        .on_conflict_do_update(index_elements=_KEY_COLUMNS, set_={"failures": t.failures})
        .returning(t.failures, t.window_start)
    )
    count = (
        dialect_insert(lockouts_table)
        .values(**_KEY_VALUES, failures=1, window_start=_NOW)
        .on_conflict_do_update(
            index_elements=_KEY_COLUMNS,
            set_={
                "failures": case((_RESTART, 1), else_=t.failures + 1),
                "window_start": case((_RESTART, _NOW), else_=t.window_start),
            },
        )
        .returning(t.failures)
    )
    return lock, count


def _dialect_upserts() -> dict[str, tuple[Any, Any]]:
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return {"postgresql": _counter_upserts(pg_insert), "sqlite": _counter_upserts(sqlite_insert)}


#: Dialects with a native upsert; others insert the row if missing, then update it.
_COUNTER_UPSERTS = _dialect_upserts()


def _one_time_inserts() -> dict[str, Any]:
    """Per dialect: insert a one-time token unless it is there (no error, so an open unit
    of work's transaction stays usable); the row it returns says that this call won."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    values: dict[str, Any] = {
        "issuer": bindparam("scope"),
        "jti": bindparam("token"),
        "expires_at": bindparam("expires_at"),
    }
    return {
        name: dialect_insert(logout_jtis_table)
        .values(**values)
        .on_conflict_do_nothing()
        .returning(logout_jtis_table.c.jti)
        for name, dialect_insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
    }


_USE_ONCE = _one_time_inserts()
_DROP_EXPIRED_ONE_TIME = delete(logout_jtis_table).where(
    logout_jtis_table.c.issuer == bindparam("scope"),
    logout_jtis_table.c.expires_at <= bindparam("now", type_=UTCDateTime()),
)


def _key_params(key: AttemptKey) -> dict[str, str]:
    return {"key_tenant": key.tenant, "key_subject": key.subject, "key_factor": key.factor}


#: How long a statement of the login path waits for a row lock another request holds
#: (PostgreSQL's ``lock_timeout``; SQLite waits its ``busy_timeout``). A burst of one
#: account's requests queues behind one lock: the ones that would wait longer are
#: answered "try again" (:class:`StoreBusy`) instead of holding a pooled connection.
LOCK_TIMEOUT = timedelta(seconds=2)

#: PostgreSQL's SQLSTATE of a statement that gave up waiting for a lock (lock_not_available).
_LOCK_NOT_AVAILABLE = "55P03"


def _store_error(exc: SQLAlchemyError) -> StoreUnavailable:
    """The typed error of a database failure: :class:`StoreBusy` when the statement gave
    up waiting for a lock another request held, else :class:`StoreUnavailable`."""
    orig = getattr(exc, "orig", None)
    if isinstance(exc, OperationalError) and (
        getattr(orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE or "database is locked" in str(orig)
    ):
        return StoreBusy("another request of this account holds its lock: try again in a moment")
    return StoreUnavailable("the authentication database is unavailable")


#: Set in ``Session.info`` while a transaction of an application's session has flushed rows.
_APP_WROTE = "authflow_transaction_wrote"


def _flushed(session: Any, _context: Any) -> None:
    session.info[_APP_WROTE] = True


def _ended(session: Any, transaction: Any) -> None:
    if transaction.parent is None:  # the outermost transaction: its writes are settled
        session.info.pop(_APP_WROTE, None)


def _watch_writes(scoped: Any) -> None:
    """Mark an application's Flask-SQLAlchemy session while its transaction holds flushed
    rows: account writes join only such a transaction (one that merely read something
    would never be committed by a view that writes nothing of its own)."""
    if not event.contains(scoped, "after_flush", _flushed):
        event.listen(scoped, "after_flush", _flushed)
        event.listen(scoped, "after_transaction_end", _ended)


def _open_transaction(conn: Connection, lock_timeout: timedelta) -> None:
    """The first statement of a transaction that takes the attempt counter's lock.

    SQLite: ``BEGIN IMMEDIATE`` takes the write lock now (waiting at most ``busy_timeout``),
    so the reads that follow see the latest commit and a later write never has to upgrade
    a read snapshot (which SQLite refuses at once under contention). PostgreSQL: waits for
    row locks are bounded by ``lock_timeout``, for this transaction only.
    """
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif dialect == "postgresql":
        milliseconds = max(1, int(lock_timeout.total_seconds() * 1000))
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")


class UnitOfWork:
    """Writes and reads of several backend calls in one transaction on ONE connection (see
    :meth:`SqlAlchemyBackend.begin_unit`).

    The transaction starts with the first statement; :meth:`commit` ends it (an error then
    means nothing of it was written), :meth:`rollback` drops it. A statement that failed
    inside the unit spoils it: ``commit`` then rolls back and raises. Every read and write
    of the backend in the unit's context runs on its connection, so a request that holds a
    row lock never needs a second pooled connection.
    """

    __slots__ = ("_conn", "_token", "_trans", "engine", "failed", "lock_timeout")

    def __init__(self, engine: Engine, token: Any, lock_timeout: timedelta = LOCK_TIMEOUT) -> None:
        self.engine = engine
        self.failed = False
        self.lock_timeout = lock_timeout
        self._conn: Connection | None = None
        self._trans: Any = None
        self._token = token

    def connection(self) -> Connection:
        if self._conn is None:
            self._conn = self.engine.connect()
            self._trans = self._conn.begin()
            try:
                _open_transaction(self._conn, self.lock_timeout)
            except SQLAlchemyError as exc:
                self.failed = True
                raise _store_error(exc) from exc
        return self._conn

    def _end(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            _UNIT.reset(token)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def commit(self) -> None:
        """Commit every write of the unit; :class:`AuditWriteError` if that fails (nothing written)."""
        try:
            if self.failed:
                raise AuditWriteError("a write of the unit failed; nothing of it was kept")
            if self._trans is not None:
                self._trans.commit()
        except SQLAlchemyError as exc:
            self.failed = True
            raise AuditWriteError() from exc
        finally:
            self._end()

    def rollback(self) -> None:
        """Drop every write of the unit (never raises)."""
        try:
            if self._trans is not None and self._trans.is_active:
                self._trans.rollback()
        except SQLAlchemyError:
            pass  # a dead connection: the database dropped the transaction already
        finally:
            self._end()


#: The unit of work of the running context (thread, task), if one was begun.
_UNIT: ContextVar[UnitOfWork | None] = ContextVar("authflow_unit_of_work", default=None)


def _log_attempt(
    conn: Connection, key: AttemptKey, *, now: datetime, success: bool, client_ip: str | None
) -> None:
    """One row of the attempt log, in the caller's transaction (with the counter change)."""
    conn.execute(
        _ATTEMPT_INSERT,
        {
            "at": now,
            "tenant": key.tenant,
            "subject": key.subject,
            "factor": key.factor,
            "success": success,
            "client_ip": client_ip,
        },
    )


class SqlAlchemyBackend:
    """Identity, factor, attempt and audit store on SQLite or PostgreSQL.

    :param engine_source: an ``Engine``, a database URL, or a Flask-SQLAlchemy ``db``.
    :param hasher: hashes passwords given to :meth:`create_user` / :meth:`set_password`.
    :param create_tables: create the ``authflow_*`` tables if missing (use migrations in production).
    :param lock_timeout: how long a login step waits for a lock on its account's attempt
        counter before it is answered :class:`~flask_authflow.errors.StoreBusy` (try again).
    """

    def __init__(
        self,
        engine_source: EngineSource,
        *,
        hasher: PasswordHasher | None = None,
        clock: Clock | None = None,
        create_tables: bool = True,
        lock_timeout: timedelta = LOCK_TIMEOUT,
    ) -> None:
        self._owns_engine = isinstance(engine_source, str)
        if not isinstance(lock_timeout, timedelta) or lock_timeout <= timedelta(0):
            raise ConfigurationError(f"lock_timeout must be a positive timedelta, got {lock_timeout!r}")
        #: How long a login step waits for its account's lock (2 s by default).
        self.lock_timeout = lock_timeout
        self._hasher = hasher
        self.clock: Clock = clock or SystemClock()
        self._clock_given = clock is not None
        self._create_tables = create_tables
        self._engine: Engine | None = None
        self._reader: tuple[Engine, Engine] | None = None
        self._db: Any = None
        #: The Flask-SQLAlchemy ``db`` whose open transaction account writes join (see _account_tx).
        self._app_db: Any = engine_source if is_flask_sqlalchemy(engine_source) else None
        if self._app_db is not None:
            _watch_writes(self._app_db.session)
        if is_flask_sqlalchemy(engine_source) and not has_app_context():
            # SqlAlchemyBackend(db) at import time, as with Flask-SQLAlchemy's own models:
            # the tables join db.metadata now (so db.create_all() and Alembic /
            # Flask-Migrate autogenerate see them); the engine is db.engine of the app
            # that AuthFlow.init_app binds (bind_app), inside that app's context.
            self._db = engine_source
            add_tables_to(engine_source.metadata)
            return
        if is_flask_sqlalchemy(engine_source):
            add_tables_to(engine_source.metadata)
        self._engine = resolve_engine(engine_source)
        if create_tables:
            metadata.create_all(self._engine, tables=_TABLES)

    @property
    def engine(self) -> Engine:
        """The engine (for a Flask-SQLAlchemy ``db``: ``db.engine`` of the bound app)."""
        if self._engine is None:
            raise ConfigurationError(
                "this SqlAlchemyBackend(db) is not bound to an app yet: call db.init_app(app) and then "
                "authflow.init_app(app) (which binds it), or build it inside an app context"
            )
        return self._engine

    def bind_app(self, app: Any) -> SqlAlchemyBackend:
        """The backend to use for ``app`` (``AuthFlow.init_app`` calls it; no application
        context is needed). On a Flask-SQLAlchemy ``db``: a copy bound to ``db.engine`` of
        that app, so one ``SqlAlchemyBackend(db)`` built at import time serves every app
        the factory creates (each test's app has its own database). Otherwise ``self``."""
        if self._db is None:
            return self
        if "sqlalchemy" not in app.extensions:
            raise ConfigurationError(
                "SqlAlchemyBackend(db): Flask-SQLAlchemy is not initialised on this app; call "
                "db.init_app(app) before authflow.init_app(app)"
            )
        bound = copy.copy(self)
        with app.app_context():
            bound._engine = resolve_engine(self._db)
        bound._db = None
        if self._create_tables:
            metadata.create_all(bound._engine, tables=_TABLES)
        return bound

    def adopt_defaults(self, *, hasher: PasswordHasher, clock: Clock) -> None:
        """Use the app's hasher and clock where none was given at construction
        (``AuthFlow.init_app`` calls it, so a backend built at import time follows the
        app, and a test's ``mock_clock``)."""
        if self._hasher is None:
            self._hasher = hasher
        if not self._clock_given:
            self.clock = clock

    @property
    def hasher(self) -> PasswordHasher:
        if self._hasher is None:
            self._hasher = PasswordHasher()
        return self._hasher

    def close(self) -> None:
        """Dispose of the engine if this backend created it from a URL."""
        if self._owns_engine:
            self.engine.dispose()

    def __repr__(self) -> str:
        if self._engine is None:
            return "<SqlAlchemyBackend (Flask-SQLAlchemy db, not bound yet)>"
        return f"<SqlAlchemyBackend {self._engine.url.render_as_string(hide_password=True)}>"

    def _unit(self) -> UnitOfWork | None:
        unit = _UNIT.get()
        return unit if unit is not None and unit.engine is self.engine else None

    def begin_unit(self) -> UnitOfWork:
        """Run the writes that follow (attempt settlement, audit rows, any ``_tx`` of this
        backend) in this context in one transaction, until ``commit()`` or ``rollback()``
        of the returned unit. The login service uses it so that the attempt row, the
        counter change and the audit rows of one credential check commit together.
        Reads run on the unit's connection too: one pooled connection per unit. Units do
        not nest."""
        if _UNIT.get() is not None:
            raise RuntimeError("a unit of work is already open in this context")
        unit = UnitOfWork(self.engine, None, self.lock_timeout)
        unit._token = _UNIT.set(unit)
        return unit

    @contextmanager
    def unit_of_work(self) -> Iterator[UnitOfWork]:
        """:meth:`begin_unit` as a block: committed at its end, rolled back on an exception."""
        unit = self.begin_unit()
        try:
            yield unit
        except BaseException:
            unit.rollback()
            raise
        unit.commit()

    def _app_session(self) -> Any:
        """The application's Flask-SQLAlchemy session when a transaction of it is open on
        this backend's engine (a view that flushed its own rows), else ``None``."""
        db = self._app_db
        if db is None or self._unit() is not None or not has_app_context():
            return None
        session = db.session()  # the scoped session of this app context
        wrote = session.info.get(_APP_WROTE) or session.new or session.dirty or session.deleted
        if not wrote or not session.in_transaction() or session.get_bind() is not self.engine:
            return None
        return session

    @contextmanager
    def _account_tx(self) -> Iterator[Connection]:
        """The transaction of a write that creates an account, a factor or an identity link:
        inside the application's open ``db.session`` transaction it runs on that
        transaction's connection and commits or rolls back with the application's own rows
        (a refused write, such as a taken identifier, leaves it to be rolled back);
        otherwise in a transaction of its own (:meth:`_tx`)."""
        session = self._app_session()
        if session is None:
            with self._tx() as conn:
                yield conn
            return
        try:
            yield session.connection()
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise _store_error(exc) from exc

    @contextmanager
    def _in_unit(self, unit: UnitOfWork) -> Iterator[Connection]:
        """The unit's connection; a failure spoils the unit (its transaction may be aborted)."""
        try:
            yield unit.connection()
        except BaseException as exc:
            unit.failed = True
            if isinstance(exc, SQLAlchemyError) and not isinstance(exc, IntegrityError):
                raise _store_error(exc) from exc
            raise

    @contextmanager
    def _tx(self, *, locking: bool = False) -> Iterator[Connection]:
        """One transaction (or the open unit of work's); database failures become
        StoreUnavailable (fail closed). ``locking``: it takes an attempt counter's lock,
        so its wait is bounded (see :func:`_open_transaction`)."""
        unit = self._unit()
        if unit is not None:
            with self._in_unit(unit) as conn:
                yield conn
            return
        try:
            with self.engine.begin() as conn:
                if locking:
                    _open_transaction(conn, self.lock_timeout)
                yield conn
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise _store_error(exc) from exc

    @property
    def _read_engine(self) -> Engine:
        engine = self.engine
        if self._reader is None or self._reader[0] is not engine:
            self._reader = (engine, autocommit_reads(engine))
        return self._reader[1]

    def _fetch(self, work: Callable[[Connection], T]) -> T:
        """Run a read (single statements, no transaction: the login path is latency-bound);
        a pooled connection found dead is replaced and the read runs once more. In an open
        unit of work the read runs on the unit's connection (never a second one)."""
        unit = self._unit()
        if unit is not None:
            with self._in_unit(unit) as conn:
                return work(conn)
        try:
            return run_read(self._read_engine, work)
        except SQLAlchemyError as exc:
            raise _store_error(exc) from exc

    # --- identities --------------------------------------------------------------------------

    def with_user_password(self, username: str, tenant: str, password: str) -> SqlAlchemyBackend:
        self.create_user(tenant, username, password)
        return self

    def create_user(self, tenant: str, identifier: str, password: str | None = None) -> UserRecord:
        """Add a user (and their password); :class:`UserExists` if the identifier is taken."""
        tenant = check_tenant(tenant)
        identifier = normalise_identifier(identifier)
        password_hash = self.hasher.hash(password) if password is not None else None
        user = UserRecord(uuid.uuid4().hex, tenant, identifier, utc(self.clock.now()))
        try:
            with self._account_tx() as conn:
                conn.execute(
                    insert(users_table).values(
                        user_id=user.user_id,
                        tenant=tenant,
                        identifier=identifier,
                        created_at=user.created_at,
                        disabled=False,
                    )
                )
                if password_hash is not None:
                    conn.execute(
                        _INSERT_FACTOR,
                        {
                            "user_id": user.user_id,
                            "kind": FactorKind.PASSWORD.value,
                            "secret": password_hash,
                            "created_at": user.created_at,
                            "factor_id": secrets.token_urlsafe(16),
                        },
                    )
        except IntegrityError as exc:
            raise UserExists() from exc
        return user

    def set_password(self, tenant: str, identifier: str, password: str) -> None:
        """Replace (or set) the password of an existing user; :class:`UserNotFound` otherwise."""
        user = self.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        self.set_password_hash(user.tenant, user.user_id, self.hasher.hash(password))

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None:
        with self._tx() as conn:
            result = conn.execute(
                update(users_table)
                .where(
                    users_table.c.tenant == tenant,
                    users_table.c.identifier == normalise_identifier(identifier),
                )
                .values(disabled=disabled)
            )
        if result.rowcount == 0:
            raise UserNotFound()

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user, factors, lockout counters and reservations in one transaction.

        Audit rows stay."""
        user = self.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        lock = lockouts_table.c
        with self._tx() as conn:
            conn.execute(delete(factors_table).where(factors_table.c.user_id == user.user_id))
            conn.execute(
                delete(lockouts_table).where(lock.tenant == user.tenant, lock.subject == user.identifier)
            )
            held = reservations_table.c
            conn.execute(
                delete(reservations_table).where(held.tenant == user.tenant, held.subject == user.identifier)
            )
            conn.execute(delete(identity_links_table).where(identity_links_table.c.user_id == user.user_id))
            gone = conn.execute(delete(users_table).where(users_table.c.user_id == user.user_id))
        if gone.rowcount == 0:
            raise UserNotFound()
        return user

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None:
        params = {"tenant": tenant, "identifier": identifier}
        row = self._fetch(lambda conn: conn.execute(_FIND_USER, params).first())
        return _user(row) if row is not None else None

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None:
        params = {"tenant": tenant, "user_id": user_id}
        row = self._fetch(lambda conn: conn.execute(_GET_USER, params).first())
        return _user(row) if row is not None else None

    def list_users(self, tenant: str | None = None) -> list[UserRecord]:
        query = select(users_table).order_by(users_table.c.tenant, users_table.c.identifier)
        if tenant is not None:
            query = query.where(users_table.c.tenant == tenant)
        return [_user(row) for row in self._fetch(lambda conn: conn.execute(query).all())]

    # --- factors -----------------------------------------------------------------------------

    def get_password_hash(self, tenant: str, user_id: str) -> str | None:
        params = {"tenant": tenant, "user_id": user_id}
        row = self._fetch(lambda conn: conn.execute(_PASSWORD_HASH, params).first())
        return str(row.secret) if row is not None else None

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None:
        """Set or replace the password (the factor keeps its id and enrollment time)."""
        now = utc(self.clock.now())
        params = {
            "tenant": tenant,
            "user_id": user_id,
            "key_user_id": user_id,
            "password_hash": password_hash,
        }
        for _ in range(2):  # a concurrent first insert wins the unique index; then we update
            try:
                with self._tx() as conn:
                    if conn.execute(_GET_USER, params).first() is None:
                        raise UserNotFound()
                    if conn.execute(_SET_PASSWORD, params).rowcount == 0:
                        conn.execute(
                            _INSERT_FACTOR,
                            {
                                "user_id": user_id,
                                "kind": FactorKind.PASSWORD.value,
                                "secret": password_hash,
                                "created_at": now,
                                "factor_id": secrets.token_urlsafe(16),
                            },
                        )
                return
            except IntegrityError:
                continue
        raise StoreUnavailable("could not store the password hash")

    def enroll_factor(self, tenant: str, user_id: str, kind: FactorKind, secret: str) -> None:
        """Enroll a confirmed factor of ``kind`` with ``secret``, replacing the user's
        confirmed factors of that kind in one transaction (it keeps the enrollment time of
        the first of them); pending enrollments are left alone. The password goes to
        :meth:`set_password_hash`. :class:`UserNotFound` if the user is not in ``tenant``."""
        kind = FactorKind(kind)
        if kind is FactorKind.PASSWORD:
            self.set_password_hash(tenant, user_id, secret)
            return
        params = {**_factor_key(tenant, user_id), "key_kind": kind.value}
        with self._account_tx() as conn:
            # The user's row lock makes parallel re-enrollments take turns (each leaves one).
            if conn.execute(_LOCK_USER, params).first() is None:
                raise UserNotFound()
            first = _aware(conn.execute(_FIRST_ENROLLED_OF_KIND, params).scalar())
            conn.execute(_DELETE_CONFIRMED_OF_KIND, params)
            conn.execute(
                _INSERT_FACTOR,
                {
                    "user_id": user_id,
                    "kind": kind.value,
                    "secret": secret,
                    "created_at": first or utc(self.clock.now()),
                    "factor_id": secrets.token_urlsafe(16),
                },
            )

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        params = {"tenant": tenant, "user_id": user_id}
        return _factors(self._fetch(lambda conn: conn.execute(_USER_FACTORS, params).all()))

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        params = {"tenant": tenant, "user_id": user_id}
        return _kinds(self._fetch(lambda conn: conn.execute(_FACTOR_KINDS, params).scalars().all()))

    def login_facts(self, tenant: str, identifier: str, now: datetime) -> LoginFacts:
        """``find_user``, ``required_factors`` of that user and ``locked_until`` of the
        identifier in one statement (see :class:`~flask_authflow.core.ports.LoginLookup`):
        one round trip for ``begin_login`` instead of three, whether the user exists or not."""
        params = {"tenant": tenant, "identifier": identifier, "subject": identifier, "now": utc(now)}
        rows = self._fetch(lambda conn: conn.execute(_LOGIN_FACTS, params).all())
        first = rows[0]  # the anchor row makes one row at least
        user = _user(first) if first.user_id is not None else None
        kinds = _kinds([row.kind for row in rows if row.kind is not None])
        return LoginFacts(user, kinds if user is not None else [], _aware(first.locked_until))

    # --- factor records (FactorRecordStore) --------------------------------------------------

    def _write_one(self, statement: Any, params: dict[str, Any]) -> int:
        """Run one conditional write, atomic by itself; returns its row count.

        In the open unit of work if there is one; otherwise committed on its own (AUTOCOMMIT
        on a server database: one round trip) and never retried, as a second run could not
        tell whether the first was applied. Database failures become StoreUnavailable."""
        if self._unit() is not None:
            with self._tx() as conn:
                return int(conn.execute(statement, params).rowcount)
        try:
            return run_statement(self.engine, self._read_engine, statement, params, idempotent=False)
        except SQLAlchemyError as exc:
            raise StoreUnavailable("the authentication database is unavailable") from exc

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        data = check_factor_config(config)
        kind = FactorKind(config.kind)
        params: dict[str, Any] = {
            **_factor_key(tenant, config.user_id),
            "new_factor_id": config.factor_id,
            "new_kind": kind.value,
            "new_secret": config.secret,
            "new_created_at": utc(config.created_at),
            "new_counter": config.counter,
            "new_data": dump_factor_data(data),
            "new_lookup": config.lookup,
            "new_confirmed": config.confirmed,
            "new_last_used_at": _aware(config.last_used_at),
        }
        try:
            with self._account_tx() as conn:
                inserted = conn.execute(_ADD_FACTOR, params).first() is not None
        except IntegrityError as exc:
            raise ValueError(
                "this factor id is already used, or the lookup (or the user's password) is enrolled already"
            ) from exc
        if not inserted:
            raise UserNotFound()

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        params = {"tenant": tenant, "user_id": user_id, "factor_id": factor_id}
        row = self._fetch(lambda conn: conn.execute(_GET_FACTOR, params).first())
        return None if row is None else _factor(row)

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        statement = _LIST_FACTORS[(kind is not None, include_pending)]
        params = {"tenant": tenant, "user_id": user_id, "kind": None if kind is None else str(kind)}
        return _factors(self._fetch(lambda conn: conn.execute(statement, params).all()))

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        params = {"tenant": tenant, "kind": str(kind), "lookup": lookup}
        row = self._fetch(lambda conn: conn.execute(_FIND_FACTOR_BY_LOOKUP, params).first())
        return None if row is None else _factor(row)

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        """One transaction under the user's row lock (PostgreSQL; the database lock on
        SQLite): of two parallel confirmations that replace the kind, the second finds its
        pending factor deleted by the first, so exactly one factor of the kind is left."""
        params = _factor_key(tenant, user_id, factor_id)
        with self._tx() as conn:
            if conn.execute(_LOCK_USER, params).first() is None:
                return False
            kind = conn.execute(_CONFIRM_FACTOR, params).scalar()
            if kind is None:
                return False
            if replace_kind:
                conn.execute(_DELETE_OTHERS_OF_KIND, {**params, "key_kind": kind})
        return True

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        if self._write_one(_DELETE_FACTOR, _factor_key(tenant, user_id, factor_id)) == 1:
            return True
        params = {"tenant": tenant, "user_id": user_id, "factor_id": factor_id}
        row = self._fetch(lambda conn: conn.execute(_GET_FACTOR, params).first())
        if row is not None and row.kind == FactorKind.PASSWORD.value:
            raise ValueError("the password is not deleted as a factor: set another one instead")
        return False

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        params = {
            **_factor_key(tenant, user_id, factor_id),
            "new_counter": new_counter,
            "used_at": utc(now),
        }
        return self._write_one(_ADVANCE_COUNTER, params) == 1

    def swap_factor_secret(
        self,
        tenant: str,
        user_id: str,
        factor_id: str,
        *,
        expected_counter: int,
        secret: str,
        now: datetime,
    ) -> bool:
        params = {
            **_factor_key(tenant, user_id, factor_id),
            "expected_counter": expected_counter,
            "new_secret": secret,
            "used_at": utc(now),
        }
        return self._write_one(_SWAP_SECRET, params) == 1

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        """Insert (``one-time:<scope>``, token) into the one-time token table (the one
        logout jtis use); the primary key lets one caller win in every process. Expired
        tokens of the scope go in passing. In the open unit of work, if there is one."""
        params = {"scope": f"one-time:{scope}", "token": token, "expires_at": utc(expires_at)}
        statement = _USE_ONCE.get(self.engine.dialect.name)
        try:
            with self._tx() as conn:
                conn.execute(_DROP_EXPIRED_ONE_TIME, {**params, "now": utc(self.clock.now())})
                if statement is not None:
                    return conn.execute(statement, params).first() is not None
                # Other databases: a savepoint absorbs the duplicate.
                with conn.begin_nested():  # pragma: no cover - SQLite and PostgreSQL have upserts
                    row = {"issuer": params["scope"], "jti": token, "expires_at": params["expires_at"]}
                    conn.execute(insert(logout_jtis_table).values(**row))
        except IntegrityError:  # pragma: no cover - see above
            return False
        return True

    # --- attempts and lockout ----------------------------------------------------------------

    @staticmethod
    def _key(key: AttemptKey) -> Any:
        t = lockouts_table.c
        return and_(t.tenant == key.tenant, t.subject == key.subject, t.factor == key.factor)

    def _ensure_counter(self, conn: Connection, key: AttemptKey) -> None:
        values = {"tenant": key.tenant, "subject": key.subject, "factor": key.factor, "failures": 0}
        dialect = conn.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            conn.execute(pg_insert(lockouts_table).values(**values).on_conflict_do_nothing())
        elif dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            conn.execute(sqlite_insert(lockouts_table).values(**values).on_conflict_do_nothing())
        else:  # pragma: no cover - other databases: a savepoint absorbs the duplicate
            try:
                with conn.begin_nested():
                    conn.execute(insert(lockouts_table).values(**values))
            except IntegrityError:
                pass

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        params = {"tenant": tenant, "subject": subject, "now": utc(now)}
        return _aware(self._fetch(lambda conn: conn.execute(_ACTIVE_LOCK, params).scalar()))

    def _counter(self, conn: Connection, key: AttemptKey, which: int, params: dict[str, Any]) -> Any:
        """Run the lock (``which=0``) or count (``which=1``) statement on the counter row of
        ``key``, creating the row first if missing; returns its RETURNING result."""
        upserts = _COUNTER_UPSERTS.get(conn.dialect.name)
        if upserts is not None:
            return conn.execute(upserts[which], params)
        self._ensure_counter(conn, key)
        return conn.execute((_LOCK_COUNTER, _COUNT_FAILURE)[which], params)

    def reserve_attempt(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
    ) -> Reservation:
        """Reserve under the counter row's lock: the upsert that opens the transaction takes
        the row lock on PostgreSQL and the database write lock on SQLite, so concurrent
        reservations for one key, from any process, are decided one after the other."""
        now = utc(now)
        params = {
            **_key_params(key),
            "tenant": key.tenant,
            "subject": key.subject,
            "now": now,
            "stale": now - RESERVATION_TTL,
        }
        with self._tx(locking=True) as conn:
            failures, window_start = self._counter(conn, key, 0, params).one()
            start = _aware(window_start)
            in_window = int(failures) if start is not None and start > now - window else 0
            if conn.dialect.name == "postgresql":
                # The rest in one statement (a round trip fewer): see _PG_RESERVE_ATTEMPT.
                token = uuid.uuid4().hex
                reserve = {**params, "token": token, "counted": in_window, "max_failures": max_failures}
                locked, granted = conn.execute(_PG_RESERVE_ATTEMPT, reserve).one()
                if locked is not None:
                    return Reservation(None, _aware(locked))
                return Reservation(token) if granted else Reservation(None, now + lock_duration)
            locked, in_flight, stale = conn.execute(_RESERVATION_STATE, params).one()
            until = _aware(locked)
            if until is not None:
                return Reservation(None, until)
            if stale:
                conn.execute(_DROP_STALE_RESERVATIONS, params)
            if in_window + int(in_flight) >= max_failures:
                return Reservation(None, now + lock_duration)
            token = uuid.uuid4().hex
            conn.execute(
                _RESERVE,
                {
                    "token": token,
                    "tenant": key.tenant,
                    "subject": key.subject,
                    "factor": key.factor,
                    "reserved_at": now,
                },
            )
        return Reservation(token)

    @staticmethod
    def _settle(conn: Connection, token: str | None) -> None:
        if token is not None:
            conn.execute(_SETTLE, {"token": token})

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        with self._tx() as conn:
            self._settle(conn, token)

    def register_failure(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> FailureCount:
        now = utc(now)
        params = {**_key_params(key), "now": now, "window_opened": now - window}
        locked: datetime | None = None
        with self._tx(locking=True) as conn:
            self._settle(conn, reservation)
            # Counted in the database (one statement, under the row lock): never a lost update.
            failures = self._counter(conn, key, 1, params).scalar_one()
            if failures >= max_failures:
                # Lock, and start counting afresh once the lock ends.
                locked = now + lock_duration
                conn.execute(_SET_LOCK, {**params, "until": locked})
            _log_attempt(conn, key, now=now, success=False, client_ip=client_ip)
        return FailureCount(int(failures), locked)

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        now = utc(now)
        with self._tx(locking=True) as conn:
            self._settle(conn, reservation)
            conn.execute(_RESET_COUNTER, _key_params(key))
            _log_attempt(conn, key, now=now, success=True, client_ip=client_ip)

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        """``register_success``, unless a lock is active on the subject: then only the
        reservation is given back and the lock's end returned (see
        :meth:`AttemptStore.register_success_unless_locked
        <flask_authflow.core.ports.AttemptStore.register_success_unless_locked>`). On PostgreSQL one
        statement, so the check for a lock set during the credential check costs no
        round trip of its own."""
        now = utc(now)
        params = {**_key_params(key), "now": now, "token": reservation, "client_ip": client_ip}
        with self._tx(locking=True) as conn:
            if conn.dialect.name == "postgresql":
                return _aware(conn.execute(_PG_SETTLE_SUCCESS, params).scalar())
            lock = {"tenant": key.tenant, "subject": key.subject, "now": now}
            until = _aware(conn.execute(_ACTIVE_LOCK, lock).scalar())
            self._settle(conn, reservation)
            if until is not None:
                return until
            conn.execute(_RESET_COUNTER, params)
            _log_attempt(conn, key, now=now, success=True, client_ip=client_ip)
        return None

    def set_lock(self, key: AttemptKey, until: datetime) -> None:
        with self._tx() as conn:
            self._ensure_counter(conn, key)
            conn.execute(update(lockouts_table).where(self._key(key)).values(locked_until=utc(until)))

    def clear_lock(self, tenant: str, subject: str) -> None:
        t = lockouts_table.c
        r = reservations_table.c
        with self._tx() as conn:
            conn.execute(delete(lockouts_table).where(t.tenant == tenant, t.subject == subject))
            conn.execute(delete(reservations_table).where(r.tenant == tenant, r.subject == subject))

    def failure_count(self, key: AttemptKey) -> int:
        """Failures counted in the current window (for tests and operators)."""
        query = select(lockouts_table.c.failures).where(self._key(key))
        return int(self._fetch(lambda conn: conn.execute(query).scalar()) or 0)

    def attempt_count(self, tenant: str, subject: str, *, success: bool | None = None) -> int:
        t = attempts_table.c
        query = (
            select(func.count()).select_from(attempts_table).where(t.tenant == tenant, t.subject == subject)
        )
        if success is not None:
            query = query.where(t.success == success)
        return int(self._fetch(lambda conn: conn.execute(query).scalar_one()))

    # --- audit -------------------------------------------------------------------------------

    # --- federation: identity links and the logout replay cache -----------------------------

    @staticmethod
    def _link(row: Row[Any]) -> IdentityLink:
        return IdentityLink(
            row.issuer, row.subject, row.tenant, row.user_id, _aware(row.created_at) or row.created_at
        )

    def link_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        now = self.clock.now()
        links = identity_links_table.c
        with self._account_tx() as conn:
            # Replace in one transaction: delete then insert is portable and atomic.
            conn.execute(delete(identity_links_table).where(links.issuer == issuer, links.subject == subject))
            conn.execute(
                insert(identity_links_table).values(
                    issuer=issuer, subject=subject, tenant=tenant, user_id=user_id, created_at=now
                )
            )
        return IdentityLink(issuer, subject, tenant, user_id, now)

    def find_link(self, issuer: str, subject: str) -> IdentityLink | None:
        links = identity_links_table.c
        query = select(identity_links_table).where(links.issuer == issuer, links.subject == subject)
        row = self._fetch(lambda conn: conn.execute(query).first())
        return None if row is None else self._link(row)

    def links_of_user(self, tenant: str, user_id: str) -> list[IdentityLink]:
        links = identity_links_table.c
        query = (
            select(identity_links_table)
            .where(links.tenant == tenant, links.user_id == user_id)
            .order_by(links.issuer, links.subject)
        )
        return [self._link(row) for row in self._fetch(lambda conn: conn.execute(query).all())]

    def unlink_identity(self, issuer: str, subject: str) -> bool:
        links = identity_links_table.c
        with self._tx() as conn:
            gone = conn.execute(
                delete(identity_links_table).where(links.issuer == issuer, links.subject == subject)
            )
        return bool(gone.rowcount)

    def remember_jti(self, issuer: str, jti: str, expires_at: datetime) -> bool:
        """Insert (issuer, jti); the primary key makes a second insert fail in every process."""
        now = self.clock.now()
        seen = logout_jtis_table.c
        try:
            with self._tx() as conn:
                # An expired entry of the same jti no longer counts; old rows go in passing.
                conn.execute(delete(logout_jtis_table).where(seen.expires_at <= now))
                conn.execute(insert(logout_jtis_table).values(issuer=issuer, jti=jti, expires_at=expires_at))
        except IntegrityError:
            return False
        return True

    def write(self, record: AuditRecord) -> None:
        """Insert one audit row (in the open unit of work, if one is, else on its own)."""
        values = record.to_dict()
        values["time"] = utc(record.time)
        unit = self._unit()
        try:
            if unit is not None:
                try:
                    unit.connection().execute(_AUDIT_INSERT, values)
                except BaseException:
                    unit.failed = True
                    raise
                return
            # One statement: in AUTOCOMMIT on a server database (one round trip), never
            # retried (a row that may have been written is not written twice).
            run_statement(self.engine, self._read_engine, _AUDIT_INSERT, values, idempotent=False)
        except SQLAlchemyError as exc:
            raise AuditWriteError() from exc

    def purge_audit(self, before: datetime) -> int:
        """Delete the audit rows written before ``before``, in transactions of at most
        ``AUDIT_PURGE_BATCH`` (5,000) rows, oldest first; returns how many were deleted.

        The caller decides the cut-off (``flask authflow audit purge`` never passes one
        younger than ``AUTHFLOW_AUDIT_RETENTION``)."""
        params = {"before": utc(before), "batch": AUDIT_PURGE_BATCH}
        purged = 0
        while True:
            with self._tx() as conn:
                deleted = int(conn.execute(_PURGE_AUDIT_BATCH, params).rowcount)
            purged += deleted
            if deleted < AUDIT_PURGE_BATCH:
                return purged

    @property
    def audit_rows(self) -> list[AuditRecord]:
        columns = [c for c in audit_table.c if c.name != "id"]
        query = select(*columns).order_by(audit_table.c.id)
        rows = self._fetch(lambda conn: conn.execute(query).all())
        return [AuditRecord(**{**row._asdict(), "time": utc(row.time)}) for row in rows]


def session_writer(
    backend: object, store: object, interface: AuthFlowSessionInterface
) -> Callable[[AuthSession, Any], Callable[[], None] | None] | None:
    """The writer a login service uses to keep a passed step's session in the step's unit
    of work (``AuthnService.session_writer``), when ``store`` is a SQL session store on
    the backend's own engine; else ``None`` (the session is written with the response)."""
    from flask_authflow.storage.sql.session_store import SqlAlchemySessionStore

    if not isinstance(backend, SqlAlchemyBackend) or not isinstance(store, SqlAlchemySessionStore):
        return None
    if store.engine is not backend.engine:
        return None

    def write(session: AuthSession, unit: UnitOfWork) -> Callable[[], None] | None:
        return interface.write_on(session, functools.partial(store.save_on, unit.connection()))

    return write
