"""Attempt counters, lockouts and reservations in SQL, and the attempt log.

Failure counting is one transaction per failure: ``INSERT ... ON CONFLICT DO NOTHING``
makes sure the counter row exists, then ``UPDATE ... SET failures = failures + 1``
(with the window restart in a ``CASE``) increments it in the database. On PostgreSQL
the UPDATE takes the row lock and re-reads the committed value, on SQLite the first
write takes the database lock, so two threads or two machines failing at once can
never lose a count.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from flask_authflow.clock import utc
from flask_authflow.core.ports import (
    PAIR_SEPARATOR,
    RESERVATION_TTL,
    AttemptKey,
    AttemptLevel,
    FailureCount,
    Reservation,
    level_token,
)
from flask_authflow.storage.sql.schema import (
    UTCDateTime,
    attempts_table,
    aware,
    lockouts_table,
    reservations_table,
)
from flask_authflow.storage.sql.uow import SqlConnections

__all__ = ["ACTIVE_LOCK", "SqlAttempts"]

ACTIVE_LOCK = select(func.max(lockouts_table.c.locked_until)).where(
    lockouts_table.c.tenant == bindparam("tenant"),
    lockouts_table.c.subject == bindparam("subject"),
    lockouts_table.c.locked_until > bindparam("now", type_=UTCDateTime()),
)
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
    ACTIVE_LOCK.scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at > _STALE).scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at <= _STALE).scalar_subquery(),
)
_RESERVE = insert(reservations_table)
_SETTLE = delete(reservations_table).where(reservations_table.c.token == bindparam("token"))


# PostgreSQL: after the counter row is locked, the state read, the drop of stale
# reservations and the reservation itself in one statement (data-modifying CTEs). Its
# snapshot is taken once the lock is held, as the separate SELECT's was, so reservations
# committed by whoever held the lock before are counted. ``counted`` is the window's
# failures, read by the upsert that took the lock.
_PG_STATE = select(
    ACTIVE_LOCK.scalar_subquery().label("locked"),
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

# Failures of a key after ``since`` and after its last success (escalation and the cap);
# the index on (tenant, subject, at) serves both parts.
_OF_LOGGED_KEY = and_(
    attempts_table.c.tenant == bindparam("key_tenant"),
    attempts_table.c.subject == bindparam("key_subject"),
    attempts_table.c.factor == bindparam("key_factor"),
)
_LAST_SUCCESS = (
    select(func.max(attempts_table.c.at))
    .where(_OF_LOGGED_KEY, attempts_table.c.success.is_(true()))
    .scalar_subquery()
)
_FAILURES_SINCE_SUCCESS = (
    select(func.count())
    .select_from(attempts_table)
    .where(
        _OF_LOGGED_KEY,
        attempts_table.c.success.is_(False),
        attempts_table.c.at > bindparam("since", type_=UTCDateTime()),
        or_(_LAST_SUCCESS.is_(None), attempts_table.c.at > _LAST_SUCCESS),
    )
)

_KEY_COLUMNS = [lockouts_table.c.tenant, lockouts_table.c.subject, lockouts_table.c.factor]
_KEY_VALUES: dict[str, Any] = {
    "tenant": bindparam("key_tenant"),
    "subject": bindparam("key_subject"),
    "factor": bindparam("key_factor"),
}


# --- the levels of one check (host, network, account), reserved and settled together ------------

_SUBJECTS: Any = bindparam("subjects", expanding=True)
_TOKENS: Any = bindparam("tokens", expanding=True)
_l, _r = lockouts_table.c, reservations_table.c
#: The latest active lock on any of the subjects (any factor, as ``ACTIVE_LOCK``).
_LEVELS_LOCK = select(func.max(_l.locked_until)).where(
    _l.tenant == bindparam("tenant"), _l.subject.in_(_SUBJECTS), _l.locked_until > _NOW
)
_SETTLE_LEVELS = delete(reservations_table).where(_r.token.in_(_TOKENS))
_RESET_LEVELS = (
    update(lockouts_table)
    .where(
        _l.tenant == bindparam("key_tenant"), _l.factor == bindparam("key_factor"), _l.subject.in_(_SUBJECTS)
    )
    .values(failures=0, window_start=None)
)


@cache
def _levels_table(count: int) -> Any:
    """The subjects of ``count`` levels (bound as ``s{i}``) as rows of one column ``subject``."""
    rows = [select(bindparam(f"s{i}", type_=String()).label("subject")) for i in range(count)]
    return union_all(*rows).subquery("levels")


@cache
def _log_levels_unless_locked(count: int) -> Any:
    """The successes of ``count`` levels logged in one statement, unless a lock is active on
    any of their subjects: its row count says which (``count`` rows, or none). Its
    parameters name no column of ``authflow_lockouts`` (see _PG_SETTLE_SUCCESS)."""
    return _log_successes(count, _active_lock().scalar_subquery().is_(None))


def _active_lock() -> Any:
    """The latest end of an active lock on any subject of the settlement (``None``: none)."""
    return select(func.max(_l.locked_until)).where(
        _l.tenant == bindparam("key_tenant"), _l.subject.in_(_SUBJECTS), _l.locked_until > _NOW
    )


def _log_successes(count: int, condition: Any) -> Any:
    """One INSERT ... SELECT of a success row per level of ``count``, while ``condition``."""
    levels = _levels_table(count)
    return insert(attempts_table).from_select(
        ["at", "tenant", "subject", "factor", "success", "client_ip"],
        select(
            _NOW,
            bindparam("key_tenant", type_=String()),
            levels.c.subject,
            bindparam("key_factor", type_=String()),
            true(),
            bindparam("client_ip", type_=String()),
        ).where(condition),
    )


@cache
def _pg_settle_levels(count: int) -> Any:
    """PostgreSQL: a success of ``count`` levels settled in one statement once their counter
    rows are locked (data-modifying CTEs; its snapshot is taken after the locks are held, so
    a lock committed by whoever held them before is seen): the reservations given back and,
    unless a lock is active on a subject, the counters reset and the successes logged. It
    returns the lock's end, if any."""
    lock = select(_active_lock().scalar_subquery().label("until")).cte("active_lock")
    unlocked = select(lock.c.until).scalar_subquery().is_(None)
    settled = _SETTLE_LEVELS.cte("settled")
    reset = (
        update(lockouts_table)
        .where(
            _l.tenant == bindparam("key_tenant"),
            _l.factor == bindparam("key_factor"),
            _l.subject.in_(_SUBJECTS),
            unlocked,
        )
        .values(failures=literal_column("0"), window_start=null())
        .cte("reset")
    )
    logged = _log_successes(count, unlocked).cte("logged")
    return select(lock.c.until).add_cte(settled, reset, logged)


_DROP_STALE_LEVELS = delete(reservations_table).where(
    _r.tenant == bindparam("tenant"),
    _r.factor == bindparam("factor"),
    _r.subject.in_(_SUBJECTS),
    _r.reserved_at <= _STALE,
)


@cache
def _levels_state(count: int) -> Any:
    """What a reservation of ``count`` levels decides on, in one read: per level ``i`` (the
    subject bound as ``s{i}``) its active lock, the failures and window start of its counter,
    its reservations in flight and its stale ones."""
    columns: list[Any] = []
    for i in range(count):
        subject: Any = bindparam(f"s{i}")
        of_counter = (
            _l.tenant == bindparam("tenant"),
            _l.subject == subject,
            _l.factor == bindparam("factor"),
        )
        of_reserved = (
            _r.tenant == bindparam("tenant"),
            _r.subject == subject,
            _r.factor == bindparam("factor"),
        )
        reserved = select(func.count()).select_from(reservations_table).where(*of_reserved)
        lock = select(func.max(_l.locked_until)).where(
            _l.tenant == bindparam("tenant"), _l.subject == subject, _l.locked_until > _NOW
        )
        columns += [
            lock.scalar_subquery().label(f"locked{i}"),
            select(_l.failures).where(*of_counter).scalar_subquery().label(f"failures{i}"),
            select(_l.window_start).where(*of_counter).scalar_subquery().label(f"window{i}"),
            reserved.where(_r.reserved_at > _STALE).scalar_subquery().label(f"in_flight{i}"),
            reserved.where(_r.reserved_at <= _STALE).scalar_subquery().label(f"stale{i}"),
        ]
    return select(*columns)


def _levels_params(keys: Sequence[AttemptKey], now: datetime) -> dict[str, Any]:
    params: dict[str, Any] = {f"s{i}": key.subject for i, key in enumerate(keys)}
    params.update(tenant=keys[0].tenant, factor=keys[0].factor, subjects=[key.subject for key in keys])
    # (An UPDATE given a parameter named after a column would SET it: the reset gets these.)
    params.update(key_tenant=keys[0].tenant, key_factor=keys[0].factor)
    params.update(now=now, stale=now - RESERVATION_TTL)
    return params


def _refusal(
    state: Any, levels: Sequence[AttemptLevel], now: datetime, window: timedelta, lock_duration: timedelta
) -> datetime | None:
    """Why one more check may not be counted, read from ``_levels_state``: the end of the first
    active lock, or of the lock a level without room would get; ``None`` when all have room."""
    for i, level in enumerate(levels):
        locked, failures, start, in_flight = state[5 * i : 5 * i + 4]
        if locked is not None:
            return aware(locked)
        opened = aware(start)
        counted = int(failures or 0) if opened is not None and opened > now - window else 0
        if counted + int(in_flight) >= level.max_failures:
            return now + lock_duration
    return None


def _level_tokens(token: str, count: int) -> list[str]:
    return [level_token(token, i) for i in range(count)]


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


def _key_row(key: AttemptKey) -> dict[str, str]:
    return {"tenant": key.tenant, "subject": key.subject, "factor": key.factor}


def _key_params(key: AttemptKey) -> dict[str, str]:
    return {"key_tenant": key.tenant, "key_subject": key.subject, "key_factor": key.factor}


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


def _reserve_in_steps(conn: Connection, key: AttemptKey, params: dict[str, Any]) -> Reservation:
    """The reservation decided after the counter row is locked: the active lock, the
    reservations in flight and the stale ones read in one statement, then the insert."""
    locked, in_flight, stale = conn.execute(_RESERVATION_STATE, params).one()
    until = aware(locked)
    if until is not None:
        return Reservation(None, until)
    if stale:
        conn.execute(_DROP_STALE_RESERVATIONS, params)
    if params["counted"] + int(in_flight) >= params["max_failures"]:
        return Reservation(None, params["lock_end"])
    token = uuid.uuid4().hex
    conn.execute(
        _RESERVE,
        {
            "token": token,
            "tenant": key.tenant,
            "subject": key.subject,
            "factor": key.factor,
            "reserved_at": params["now"],
        },
    )
    return Reservation(token)


def _reserve_in_one_statement(conn: Connection, key: AttemptKey, params: dict[str, Any]) -> Reservation:
    """PostgreSQL: the rest of a reservation in one statement (a round trip fewer): see
    _PG_RESERVE_ATTEMPT."""
    token = uuid.uuid4().hex
    locked, granted = conn.execute(_PG_RESERVE_ATTEMPT, {**params, "token": token}).one()
    if locked is not None:
        return Reservation(None, aware(locked))
    return Reservation(token) if granted else Reservation(None, params["lock_end"])


def _settle_success_in_steps(conn: Connection, key: AttemptKey, params: dict[str, Any]) -> datetime | None:
    """A success settled unless a lock is active: the lock read, the reservation given
    back, then (unlocked) the counter reset and the attempt logged."""
    lock = {"tenant": key.tenant, "subject": key.subject, "now": params["now"]}
    until = aware(conn.execute(ACTIVE_LOCK, lock).scalar())
    if params["token"] is not None:
        conn.execute(_SETTLE, {"token": params["token"]})
    if until is not None:
        return until
    conn.execute(_RESET_COUNTER, params)
    _log_attempt(conn, key, now=params["now"], success=True, client_ip=params["client_ip"])
    return None


def _settle_success_in_one_statement(
    conn: Connection, key: AttemptKey, params: dict[str, Any]
) -> datetime | None:
    """PostgreSQL: the same in one statement (see _PG_SETTLE_SUCCESS), so the check for a
    lock set during the credential check costs no round trip of its own."""
    return aware(conn.execute(_PG_SETTLE_SUCCESS, params).scalar())


def _settle_params(
    keys: Sequence[AttemptKey], now: datetime, client_ip: str | None, reservation: str | None
) -> dict[str, Any]:
    """The parameters of a settlement of ``keys`` (none named after a column of the lockouts)."""
    params: dict[str, Any] = {f"s{i}": key.subject for i, key in enumerate(keys)}
    tokens = _level_tokens(reservation, len(keys)) if reservation is not None else []
    params.update(key_tenant=keys[0].tenant, key_factor=keys[0].factor)
    params["subjects"] = [key.subject for key in keys]
    params.update(now=now, client_ip=client_ip, tokens=tokens)
    return params


def _settle_levels_in_steps(conn: Connection, count: int, params: dict[str, Any]) -> datetime | None:
    """A success settled under the write lock the transaction holds (SQLite; the counter rows'
    locks elsewhere): the reservations given back, the successes logged unless a lock is
    active (one statement: its row count says), then the counters reset; found locked,
    the lock's end is read (that path only)."""
    if params["tokens"]:
        conn.execute(_SETTLE_LEVELS, {"tokens": params["tokens"]})
    if conn.execute(_log_levels_unless_locked(count), params).rowcount != count:
        lock = {"tenant": params["key_tenant"], "subjects": params["subjects"], "now": params["now"]}
        until = aware(conn.execute(_LEVELS_LOCK, lock).scalar())
        return until if until is not None else params["now"]  # (never None: refused all the same)
    conn.execute(_RESET_LEVELS, {k: params[k] for k in ("key_tenant", "key_factor", "subjects")})
    return None


def _settle_levels_in_one_statement(conn: Connection, count: int, params: dict[str, Any]) -> datetime | None:
    """PostgreSQL: the same in one statement (see _pg_settle_levels)."""
    return aware(conn.execute(_pg_settle_levels(count), params).scalar())


@dataclass(frozen=True, slots=True)
class _CounterSql:
    """How one database runs the attempt counter's statements (chosen once per engine)."""

    #: Creates the counter row unless it exists (``None``: a savepoint absorbs the duplicate).
    ensure: Any = None
    #: _LOCK_COUNTER and _COUNT_FAILURE as upserts that create the row if missing
    #: (``None``: the row is ensured first, then updated).
    lock: Any = None
    count: Any = None
    reserve: Callable[[Connection, AttemptKey, dict[str, Any]], Reservation] = _reserve_in_steps
    settle_success: Callable[[Connection, AttemptKey, dict[str, Any]], datetime | None] = (
        _settle_success_in_steps
    )
    settle_levels: Callable[[Connection, int, dict[str, Any]], datetime | None] = _settle_levels_in_steps
    #: Locks the counter rows of several keys in one statement (``None``: one by one).
    lock_rows: Any = None
    #: The transaction's first write locks the whole database (SQLite): no row locks needed.
    database_locked: bool = False


def _native(dialect_insert: Any, **strategies: Any) -> _CounterSql:
    """The statements of a database with ``INSERT ... ON CONFLICT`` (``dialect_insert``)."""
    ensure = dialect_insert(lockouts_table).values(**_KEY_VALUES, failures=0).on_conflict_do_nothing()
    lock, count = _counter_upserts(dialect_insert)
    return _CounterSql(ensure, lock, count, **strategies)


def _lock_rows(dialect_insert: Any) -> Any:
    """An upsert of several counter rows that creates the missing ones and row-locks them
    all (ON CONFLICT DO UPDATE locks an existing row, as UPDATE does)."""
    return dialect_insert(lockouts_table).on_conflict_do_update(
        index_elements=_KEY_COLUMNS, set_={"failures": lockouts_table.c.failures}
    )


#: Per database; any other runs the portable statements.
_COUNTER_SQL = {
    "sqlite": _native(sqlite.insert, database_locked=True),
    "postgresql": _native(
        postgresql.insert,
        reserve=_reserve_in_one_statement,
        settle_success=_settle_success_in_one_statement,
        settle_levels=_settle_levels_in_one_statement,
        lock_rows=_lock_rows(postgresql.insert),
    ),
}


class SqlAttempts(SqlConnections):
    """The attempt counters of :class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend`."""

    @staticmethod
    def _key(key: AttemptKey) -> Any:
        t = lockouts_table.c
        return and_(t.tenant == key.tenant, t.subject == key.subject, t.factor == key.factor)

    _counter_sql: _CounterSql = _CounterSql()

    def _use_dialect(self, engine: Engine) -> None:
        super()._use_dialect(engine)
        self._counter_sql = _COUNTER_SQL.get(engine.dialect.name, _CounterSql())

    def _ensure_counter(self, conn: Connection, key: AttemptKey) -> None:
        if self._counter_sql.ensure is not None:
            conn.execute(self._counter_sql.ensure, _key_params(key))
            return
        values = {"tenant": key.tenant, "subject": key.subject, "factor": key.factor, "failures": 0}
        try:  # pragma: no cover - other databases: a savepoint absorbs the duplicate
            with conn.begin_nested():
                conn.execute(insert(lockouts_table).values(**values))
        except IntegrityError:  # pragma: no cover
            pass

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        params = {"tenant": tenant, "subject": subject, "now": utc(now)}
        return aware(self._fetch(lambda conn: conn.execute(ACTIVE_LOCK, params).scalar()))

    def locked_until_any(self, tenant: str, subjects: Sequence[str], now: datetime) -> datetime | None:
        params = {"tenant": tenant, "subjects": list(subjects), "now": utc(now)}
        return aware(self._fetch(lambda conn: conn.execute(_LEVELS_LOCK, params).scalar()))

    def _counter(
        self, conn: Connection, key: AttemptKey, upsert: Any, update: Any, params: dict[str, Any]
    ) -> Any:
        """Run ``upsert`` on the counter row of ``key`` (the lock or count statement of the
        database), or where there is none, create the row if missing and run ``update``;
        returns its RETURNING result."""
        if upsert is not None:
            return conn.execute(upsert, params)
        self._ensure_counter(conn, key)
        return conn.execute(update, params)

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
            "max_failures": max_failures,
            "lock_end": now + lock_duration,
        }
        with self._tx(locking=True) as conn:
            sql = self._counter_sql
            failures, window_start = self._counter(conn, key, sql.lock, _LOCK_COUNTER, params).one()
            start = aware(window_start)
            params["counted"] = int(failures) if start is not None and start > now - window else 0
            return sql.reserve(conn, key, params)

    def reserve_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> Reservation:
        """All levels in one transaction: their counter rows locked (on SQLite the database
        write lock does it), their state read in one statement, their reservations inserted
        in one; refused, nothing is inserted."""
        now = utc(now)
        keys = [level.key for level in levels]
        params = _levels_params(keys, now)
        with self._tx(locking=True) as conn:
            self._lock_levels(conn, keys)
            state = conn.execute(_levels_state(len(keys)), params).one()
            refused = _refusal(state, levels, now, window, lock_duration)
            if refused is not None:
                return Reservation(None, refused)
            if any(state[5 * i + 4] for i in range(len(keys))):
                conn.execute(_DROP_STALE_LEVELS, params)
            token = uuid.uuid4().hex[:31]
            rows = [
                {"token": level_token(token, i), **_key_row(key), "reserved_at": now}
                for i, key in enumerate(keys)
            ]
            conn.execute(insert(reservations_table).values(rows))
            return Reservation(token)

    def admit_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> datetime | None:
        """The levels' counter rows locked in their order (as a reservation and a settlement
        lock them: never a deadlock), their state read in one statement; nothing written.
        Its locks are held to the end of the open unit of work (see the port)."""
        now = utc(now)
        keys = [level.key for level in levels]
        with self._tx(locking=True) as conn:
            self._lock_levels(conn, keys)
            state = conn.execute(_levels_state(len(keys)), _levels_params(keys, now)).one()
            return _refusal(state, levels, now, window, lock_duration)

    def _lock_levels(self, conn: Connection, keys: Sequence[AttemptKey]) -> None:
        sql = self._counter_sql
        if sql.database_locked:
            return
        if sql.lock_rows is not None:
            conn.execute(sql.lock_rows.values([{**_key_row(key), "failures": 0} for key in keys]))
            return
        for key in keys:  # pragma: no cover - other databases
            self._ensure_counter(conn, key)
            conn.execute(_LOCK_COUNTER, _key_params(key))

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        with self._tx() as conn:
            conn.execute(_SETTLE_LEVELS, {"tokens": _level_tokens(token, len(keys))})

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> datetime | None:
        """The counter rows locked in the levels' order (as a reservation locks them, so two
        requests of one account never wait for each other's rows in opposite orders: a
        deadlock), then, decided on the lock read after that, the reservations given back
        and (unlocked) the counters reset and the successes logged, in the open unit of work
        if there is one: two statements (on SQLite the write lock is the transaction's)."""
        params = _settle_params(keys, utc(now), client_ip, reservation)
        with self._tx(locking=True) as conn:
            self._lock_levels(conn, keys)
            return self._counter_sql.settle_levels(conn, len(keys), params)

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
            count = self._counter_sql.count
            failures = self._counter(conn, key, count, _COUNT_FAILURE, params).scalar_one()
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
        statement (see _settle_success_in_one_statement)."""
        now = utc(now)
        params = {**_key_params(key), "now": now, "token": reservation, "client_ip": client_ip}
        with self._tx(locking=True) as conn:
            return self._counter_sql.settle_success(conn, key, params)

    def set_lock(self, key: AttemptKey, until: datetime) -> None:
        with self._tx() as conn:
            self._ensure_counter(conn, key)
            conn.execute(update(lockouts_table).where(self._key(key)).values(locked_until=utc(until)))

    def clear_lock(self, tenant: str, subject: str) -> None:
        t = lockouts_table.c
        r = reservations_table.c
        pairs = subject + PAIR_SEPARATOR
        with self._tx() as conn:
            conn.execute(
                delete(lockouts_table).where(
                    t.tenant == tenant,
                    or_(t.subject == subject, t.subject.startswith(pairs, autoescape=True)),
                )
            )
            conn.execute(
                delete(reservations_table).where(
                    r.tenant == tenant,
                    or_(r.subject == subject, r.subject.startswith(pairs, autoescape=True)),
                )
            )

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        params = {**_key_params(key), "since": utc(since)}
        with self._tx() as conn:
            return int(conn.execute(_FAILURES_SINCE_SUCCESS, params).scalar_one())

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
