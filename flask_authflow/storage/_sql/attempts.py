"""Attempt counters, lockouts and reservations in SQL, and the attempt log.

Failure counting is one transaction per failure: ``INSERT ... ON CONFLICT DO NOTHING``
makes sure the counter row exists, then ``UPDATE ... SET failures = failures + 1``
(with the window restart in a ``CASE``) increments it in the database. On PostgreSQL
the UPDATE takes the row lock and re-reads the committed value, on SQLite the first
write takes the database lock, so two threads or two machines failing at once can
never lose a count.

A success is not a row of the log (since revision 0011): it resets the counter rows and
sets their ``last_success_at`` (never back) in one upsert, which also creates missing rows;
escalation counts the failures logged after it.

The statements are built once in two private modules: ``_attempt_key`` (the counter and
the reservation of one key, what a success sets) and ``_attempt_levels`` (the levels of one
check, host, network and account, reserved and settled together; a success of one key is
a settlement of one level); this module chooses per database how they run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from flask_authflow._clock import utc
from flask_authflow._core.ports import (
    PAIR_SEPARATOR,
    RESERVATION_TTL,
    AttemptKey,
    AttemptLevel,
    FailureCount,
    HolderUnusable,
    Reservation,
    level_token,
)
from flask_authflow.storage._sql._attempt_key import (
    ACTIVE_LOCK,
    COUNT_FAILURE,
    FAILURES_SINCE_SUCCESS,
    KEY_COLUMNS,
    KEY_VALUES,
    LOCK_COUNTER,
    SET_LOCK,
    SETTLE,
    counter_upserts,
    key_params,
    key_row,
    log_attempt,
    reserve_in_one_statement,
    reserve_in_steps,
)
from flask_authflow.storage._sql._attempt_levels import (
    DROP_STALE_LEVELS,
    HOLDER_ROW_LOCK,
    LEVELS_LOCK,
    SETTLE_LEVELS,
    level_tokens,
    levels_params,
    levels_state,
    lock_met,
    refusal,
    settle_levels_in_one_statement,
    settle_params,
    succeed_levels,
)
from flask_authflow.storage._sql.schema import attempts_table, aware, lockouts_table, reservations_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["ACTIVE_LOCK", "SqlAttempts", "forget_counters"]


def forget_counters(conn: Connection, *where: Any) -> None:
    """End the locks and forget the counts of the counter rows ``where`` selects. A row
    that remembers a success keeps it (cleared, not deleted): escalation and the failure cap
    count the failures after it, as they did when successes were rows of the attempt log."""
    t = lockouts_table.c
    conn.execute(delete(lockouts_table).where(*where, t.last_success_at.is_(None)))
    cleared = {"failures": 0, "window_start": None, "locked_until": None}
    conn.execute(update(lockouts_table).where(*where).values(cleared))


@dataclass(frozen=True, slots=True)
class _CounterSql:
    """How one database runs the attempt counter's statements (chosen once per engine)."""

    #: Creates the counter row unless it exists (``None``: a savepoint absorbs the duplicate).
    ensure: Any = None
    #: LOCK_COUNTER and COUNT_FAILURE as upserts that create the row if missing
    #: (``None``: the row is ensured first, then updated).
    lock: Any = None
    count: Any = None
    reserve: Callable[[Connection, AttemptKey, dict[str, Any]], Reservation] = reserve_in_steps
    #: A guarded success of the levels in one statement (``None``: in steps, see _settle_levels).
    settle_levels: Callable[[Connection, int, dict[str, Any]], datetime | None] | None = None
    #: The database's ``insert`` with ON CONFLICT (``None``: none; a success is then an UPDATE).
    upsert: Any = None
    #: Locks the counter rows of several keys in one statement (``None``: one by one).
    lock_rows: Any = None
    #: The transaction's first write locks the whole database (SQLite): no row locks needed.
    database_locked: bool = False


def _native(dialect_insert: Any, **strategies: Any) -> _CounterSql:
    """The statements of a database with ``INSERT ... ON CONFLICT`` (``dialect_insert``)."""
    ensure = dialect_insert(lockouts_table).values(**KEY_VALUES, failures=0).on_conflict_do_nothing()
    lock, count = counter_upserts(dialect_insert)
    return _CounterSql(ensure, lock, count, upsert=dialect_insert, **strategies)


def _lock_rows(dialect_insert: Any) -> Any:
    """An upsert of several counter rows that creates the missing ones and row-locks them
    all (ON CONFLICT DO UPDATE locks an existing row, as UPDATE does)."""
    return dialect_insert(lockouts_table).on_conflict_do_update(
        index_elements=KEY_COLUMNS, set_={"failures": lockouts_table.c.failures}
    )


#: Per database; any other runs the portable statements.
_COUNTER_SQL = {
    "sqlite": _native(sqlite.insert, database_locked=True),
    "postgresql": _native(
        postgresql.insert,
        reserve=reserve_in_one_statement,
        settle_levels=settle_levels_in_one_statement,
        lock_rows=_lock_rows(postgresql.insert),
    ),
}


class _Settled(NamedTuple):
    """How a settlement ended: the end of the lock that refused it, or whether its holder
    may still sign in (``usable``)."""

    until: datetime | None = None
    usable: bool = True


class SqlAttempts(SqlConnections):
    """The attempt counters of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

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
            conn.execute(self._counter_sql.ensure, key_params(key))
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
        return aware(self._fetch(lambda conn: conn.execute(LEVELS_LOCK, params).scalar()))

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
            **key_params(key),
            "tenant": key.tenant,
            "subject": key.subject,
            "now": now,
            "stale": now - RESERVATION_TTL,
            "max_failures": max_failures,
            "lock_end": now + lock_duration,
        }
        with self._tx(locking=True) as conn:
            sql = self._counter_sql
            failures, window_start = self._counter(conn, key, sql.lock, LOCK_COUNTER, params).one()
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
        params = levels_params(keys, now)
        with self._tx(locking=True) as conn:
            self._lock_levels(conn, keys)
            state = conn.execute(levels_state(len(keys)), params).one()
            refused = refusal(state, levels, now, window, lock_duration)
            if refused is not None:
                return Reservation(None, refused)
            if any(state[5 * i + 4] for i in range(len(keys))):
                conn.execute(DROP_STALE_LEVELS, params)
            token = uuid.uuid4().hex[:31]
            rows = [
                {"token": level_token(token, i), **key_row(key), "reserved_at": now}
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
            state = conn.execute(levels_state(len(keys)), levels_params(keys, now)).one()
            return refusal(state, levels, now, window, lock_duration)

    def _lock_levels(self, conn: Connection, keys: Sequence[AttemptKey]) -> None:
        sql = self._counter_sql
        if sql.database_locked:
            return
        if sql.lock_rows is not None:
            conn.execute(sql.lock_rows.values([{**key_row(key), "failures": 0} for key in keys]))
            return
        for key in keys:  # pragma: no cover - other databases
            self._ensure_counter(conn, key)
            conn.execute(LOCK_COUNTER, key_params(key))

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        with self._tx() as conn:
            conn.execute(SETTLE_LEVELS, {"tokens": level_tokens(token, len(keys))})

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
        holder: tuple[str, str] | None = None,
    ) -> datetime | None:
        """The counter rows locked in the levels' order (as a reservation locks them, so two
        requests of one account never wait for each other's rows in opposite orders: a
        deadlock), then, decided on the lock read after that, the reservations given back
        and (unlocked) the counters reset with their latest success, in the open unit of work
        if there is one. On SQLite (the write lock is the transaction's) one upsert when no
        reservation is given back, which also checks the ``holder``; on PostgreSQL the
        holder's row locked first (as an operator's disable or delete takes it), the rows'
        upsert and one statement. The client's address is the audit rows' (the attempt log
        holds failures)."""
        params = settle_params(keys, utc(now), client_ip, reservation, holder)
        with self._tx(locking=True) as conn:
            settled = self._settle_held(conn, keys, params)
        if not settled.usable:
            raise HolderUnusable()
        return settled.until

    def _settle_held(self, conn: Connection, keys: Sequence[AttemptKey], params: dict[str, Any]) -> _Settled:
        """settle_success's work in its transaction."""
        if "holder_id" in params and not self._counter_sql.database_locked:
            if conn.execute(HOLDER_ROW_LOCK, params).first() is None:
                if params["tokens"]:
                    conn.execute(SETTLE_LEVELS, {"tokens": params["tokens"]})
                return _Settled(usable=False)
        self._lock_levels(conn, keys)
        return self._settle_levels(conn, keys, params)

    def _settle_levels(
        self, conn: Connection, keys: Sequence[AttemptKey], params: dict[str, Any]
    ) -> _Settled:
        """A guarded success of ``keys`` (see settle_success), their rows locked."""
        one_statement = self._counter_sql.settle_levels
        if one_statement is not None:
            return _Settled(one_statement(conn, len(keys), params))
        if params["tokens"]:
            conn.execute(SETTLE_LEVELS, {"tokens": params["tokens"]})
        if self._succeed(conn, keys, params, guarded=True):
            return _Settled()
        until = lock_met(conn, params)
        if until is None and "holder_id" in params:
            return _Settled(usable=False)  # no lock refused it: the holder did
        return _Settled(until if until is not None else params["now"])  # (refused all the same)

    def _succeed(
        self, conn: Connection, keys: Sequence[AttemptKey], params: dict[str, Any], *, guarded: bool
    ) -> bool:
        """The success written on the counter rows of ``keys`` (unless locked, ``guarded``, or
        its holder may not sign in); whether it was."""
        upsert = self._counter_sql.upsert
        if upsert is None:  # pragma: no cover - other databases: the UPDATE needs the rows
            for key in keys:
                self._ensure_counter(conn, key)
        statement = succeed_levels(len(keys), upsert, guarded, "holder_id" in params)
        return bool(conn.execute(statement, params).rowcount == len(keys))

    @staticmethod
    def _settle(conn: Connection, token: str | None) -> None:
        if token is not None:
            conn.execute(SETTLE, {"token": token})

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
        params = {**key_params(key), "now": now, "window_opened": now - window}
        locked: datetime | None = None
        with self._tx(locking=True) as conn:
            self._settle(conn, reservation)
            # Counted in the database (one statement, under the row lock): never a lost update.
            count = self._counter_sql.count
            failures = self._counter(conn, key, count, COUNT_FAILURE, params).scalar_one()
            if failures >= max_failures:
                # Lock, and start counting afresh once the lock ends.
                locked = now + lock_duration
                conn.execute(SET_LOCK, {**params, "until": locked})
            log_attempt(conn, key, now=now, success=False, client_ip=client_ip)
        return FailureCount(int(failures), locked)

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        """The counter reset and its latest success moved (the row created if missing), and
        ``reservation`` settled, in one transaction."""
        params = settle_params([key], utc(now), client_ip, None)
        with self._tx(locking=True) as conn:
            self._settle(conn, reservation)
            self._succeed(conn, [key], params, guarded=False)

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        """``register_success``, unless a lock is active on the subject: then only the
        reservation is given back and the lock's end returned (see
        :meth:`AttemptStore.register_success_unless_locked
        <flask_authflow._core.ports.AttemptStore.register_success_unless_locked>`): a
        settlement of one level."""
        params = settle_params([key], utc(now), client_ip, None)
        params["tokens"] = [reservation] if reservation is not None else []
        with self._tx(locking=True) as conn:
            self._lock_levels(conn, [key])
            return self._settle_levels(conn, [key], params).until

    def set_lock(self, key: AttemptKey, until: datetime) -> None:
        with self._tx() as conn:
            self._ensure_counter(conn, key)
            conn.execute(update(lockouts_table).where(self._key(key)).values(locked_until=utc(until)))

    def clear_lock(self, tenant: str, subject: str) -> None:
        t = lockouts_table.c
        r = reservations_table.c
        pairs = subject + PAIR_SEPARATOR
        with self._tx() as conn:
            of_subject = or_(t.subject == subject, t.subject.startswith(pairs, autoescape=True))
            forget_counters(conn, t.tenant == tenant, of_subject)
            conn.execute(
                delete(reservations_table).where(
                    r.tenant == tenant,
                    or_(r.subject == subject, r.subject.startswith(pairs, autoescape=True)),
                )
            )

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        params = {**key_params(key), "since": utc(since)}
        with self._tx() as conn:
            return int(conn.execute(FAILURES_SINCE_SUCCESS, params).scalar_one())

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
