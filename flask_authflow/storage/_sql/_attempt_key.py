"""The attempt counter's statements for one key (tenant, subject, factor): the counter row
locked and counted, a reservation taken (on SQLite in steps, on PostgreSQL in one statement:
data-modifying CTEs) and what a success sets on the counter row. Built once, at import.

(Private to :mod:`flask_authflow.storage._sql.attempts`, which runs them.)
"""

from __future__ import annotations

import uuid
from datetime import datetime
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
    update,
)
from sqlalchemy.engine import Connection

from flask_authflow._core.ports import AttemptKey, Reservation
from flask_authflow.storage._sql.schema import (
    UTCDateTime,
    attempts_table,
    aware,
    lockouts_table,
    reservations_table,
)

__all__ = [
    "ACTIVE_LOCK",
    "COUNT_FAILURE",
    "FAILURES_SINCE_SUCCESS",
    "KEY_COLUMNS",
    "KEY_VALUES",
    "LOCK_COUNTER",
    "NOW",
    "SETTLE",
    "SET_LOCK",
    "STALE",
    "SUCCEEDED",
    "counter_upserts",
    "key_params",
    "key_row",
    "log_attempt",
    "reserve_in_one_statement",
    "reserve_in_steps",
]


ACTIVE_LOCK = select(func.max(lockouts_table.c.locked_until)).where(
    lockouts_table.c.tenant == bindparam("tenant"),
    lockouts_table.c.subject == bindparam("subject"),
    lockouts_table.c.locked_until > bindparam("now", type_=UTCDateTime()),
)
_ATTEMPT_INSERT = insert(attempts_table)
# The attempt counter's statements, built once too: the counter row of one key ...
_OF_KEY = and_(
    lockouts_table.c.tenant == bindparam("key_tenant"),
    lockouts_table.c.subject == bindparam("key_subject"),
    lockouts_table.c.factor == bindparam("key_factor"),
)
NOW = bindparam("now", type_=UTCDateTime())
# ... locked (on PostgreSQL the row lock, on SQLite the database write lock) by a no-op
# UPDATE that also reads the count, so concurrent reservations of one key, from any
# process, are decided one after the other ...
LOCK_COUNTER = (
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
COUNT_FAILURE = (
    update(lockouts_table)
    .where(_OF_KEY)
    .values(
        failures=case((_RESTART, 1), else_=lockouts_table.c.failures + 1),
        window_start=case((_RESTART, NOW), else_=lockouts_table.c.window_start),
    )
    .returning(lockouts_table.c.failures)
)
SET_LOCK = (
    update(lockouts_table)
    .where(_OF_KEY)
    .values(failures=0, window_start=None, locked_until=bindparam("until", type_=UTCDateTime()))
)
#: What a success sets on a counter row: the count and its window forgotten (a lock stays),
#: and the latest success moved forward, never back (the processes' clocks may disagree).
SUCCEEDED: dict[str, Any] = {
    "failures": literal_column("0"),
    "window_start": null(),
    "last_success_at": case(
        (
            or_(lockouts_table.c.last_success_at.is_(None), lockouts_table.c.last_success_at < NOW),
            NOW,
        ),
        else_=lockouts_table.c.last_success_at,
    ),
}
_OF_RESERVED_KEY = and_(
    reservations_table.c.tenant == bindparam("key_tenant"),
    reservations_table.c.subject == bindparam("key_subject"),
    reservations_table.c.factor == bindparam("key_factor"),
)
_DROP_STALE_RESERVATIONS = delete(reservations_table).where(
    _OF_RESERVED_KEY, reservations_table.c.reserved_at <= bindparam("stale", type_=UTCDateTime())
)
_COUNT_RESERVATIONS = select(func.count()).select_from(reservations_table).where(_OF_RESERVED_KEY)
STALE = bindparam("stale", type_=UTCDateTime())
# What a reservation decides on, read in one round trip after the counter row is locked:
# the active lock on the subject, the reservations in flight, and the stale ones (whose
# process died mid-check: they no longer count, and are deleted when there are any).
_RESERVATION_STATE = select(
    ACTIVE_LOCK.scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at > STALE).scalar_subquery(),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at <= STALE).scalar_subquery(),
)
_RESERVE = insert(reservations_table)
SETTLE = delete(reservations_table).where(reservations_table.c.token == bindparam("token"))


# PostgreSQL: after the counter row is locked, the state read, the drop of stale
# reservations and the reservation itself in one statement (data-modifying CTEs). Its
# snapshot is taken once the lock is held, as the separate SELECT's was, so reservations
# committed by whoever held the lock before are counted. ``counted`` is the window's
# failures, read by the upsert that took the lock.
_PG_STATE = select(
    ACTIVE_LOCK.scalar_subquery().label("locked"),
    _COUNT_RESERVATIONS.where(reservations_table.c.reserved_at > STALE).scalar_subquery().label("in_flight"),
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
            NOW,
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

# Failures of a key after ``since`` and after its last success (escalation and the cap);
# the index on (tenant, subject, at) serves the count, the counter's primary key the success.
_OF_LOGGED_KEY = and_(
    attempts_table.c.tenant == bindparam("key_tenant"),
    attempts_table.c.subject == bindparam("key_subject"),
    attempts_table.c.factor == bindparam("key_factor"),
)
# The last success is its counter row's (revision 0011; successes were rows of the log before).
_LAST_SUCCESS = select(lockouts_table.c.last_success_at).where(_OF_KEY).scalar_subquery()
FAILURES_SINCE_SUCCESS = (
    select(func.count())
    .select_from(attempts_table)
    .where(
        _OF_LOGGED_KEY,
        attempts_table.c.success.is_(False),
        attempts_table.c.at > bindparam("since", type_=UTCDateTime()),
        or_(_LAST_SUCCESS.is_(None), attempts_table.c.at > _LAST_SUCCESS),
    )
)

KEY_COLUMNS = [lockouts_table.c.tenant, lockouts_table.c.subject, lockouts_table.c.factor]
KEY_VALUES: dict[str, Any] = {
    "tenant": bindparam("key_tenant"),
    "subject": bindparam("key_subject"),
    "factor": bindparam("key_factor"),
}


def counter_upserts(dialect_insert: Any) -> tuple[Any, Any]:
    """(lock, count): the counter statements as one upsert each, creating the row if missing.

    ``lock`` is LOCK_COUNTER, ``count`` is COUNT_FAILURE; ON CONFLICT DO UPDATE takes
    the row lock of an existing row on PostgreSQL, as their UPDATE does.
    """
    t = lockouts_table.c
    lock = (
        dialect_insert(lockouts_table)
        .values(**KEY_VALUES, failures=0)
        .on_conflict_do_update(index_elements=KEY_COLUMNS, set_={"failures": t.failures})
        .returning(t.failures, t.window_start)
    )
    count = (
        dialect_insert(lockouts_table)
        .values(**KEY_VALUES, failures=1, window_start=NOW)
        .on_conflict_do_update(
            index_elements=KEY_COLUMNS,
            set_={
                "failures": case((_RESTART, 1), else_=t.failures + 1),
                "window_start": case((_RESTART, NOW), else_=t.window_start),
            },
        )
        .returning(t.failures)
    )
    return lock, count


def key_row(key: AttemptKey) -> dict[str, str]:
    return {"tenant": key.tenant, "subject": key.subject, "factor": key.factor}


def key_params(key: AttemptKey) -> dict[str, str]:
    return {"key_tenant": key.tenant, "key_subject": key.subject, "key_factor": key.factor}


def log_attempt(
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


def reserve_in_steps(conn: Connection, key: AttemptKey, params: dict[str, Any]) -> Reservation:
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


def reserve_in_one_statement(conn: Connection, key: AttemptKey, params: dict[str, Any]) -> Reservation:
    """PostgreSQL: the rest of a reservation in one statement (a round trip fewer): see
    _PG_RESERVE_ATTEMPT."""
    token = uuid.uuid4().hex
    locked, granted = conn.execute(_PG_RESERVE_ATTEMPT, {**params, "token": token}).one()
    if locked is not None:
        return Reservation(None, aware(locked))
    return Reservation(token) if granted else Reservation(None, params["lock_end"])
