"""The statements of one check's levels (host, network, account) reserved, admitted and
settled together, and the decision read from their state (:func:`refusal`). Per number of
levels they are built once (cached).

(Private to :mod:`flask_authflow.storage._sql.attempts`, which runs them.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    String,
    bindparam,
    delete,
    exists,
    false,
    func,
    literal_column,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.engine import Connection

from flask_authflow._core.ports import RESERVATION_TTL, AttemptKey, AttemptLevel, level_token
from flask_authflow.storage._sql._attempt_key import KEY_COLUMNS, NOW, STALE, SUCCEEDED
from flask_authflow.storage._sql.schema import aware, lockouts_table, reservations_table, users_table

__all__ = [
    "DROP_STALE_LEVELS",
    "HOLDER_ROW_LOCK",
    "LEVELS_LOCK",
    "SETTLE_LEVELS",
    "level_tokens",
    "levels_params",
    "levels_state",
    "lock_met",
    "refusal",
    "settle_levels_in_one_statement",
    "settle_params",
    "succeed_levels",
]


_SUBJECTS: Any = bindparam("subjects", expanding=True)
_TOKENS: Any = bindparam("tokens", expanding=True)
_l, _r = lockouts_table.c, reservations_table.c
#: The latest active lock on any of the subjects (any factor, as ``ACTIVE_LOCK``).
LEVELS_LOCK = select(func.max(_l.locked_until)).where(
    _l.tenant == bindparam("tenant"), _l.subject.in_(_SUBJECTS), _l.locked_until > NOW
)
SETTLE_LEVELS = delete(reservations_table).where(_r.token.in_(_TOKENS))
_u = users_table.c
#: The holder of a settlement may sign in: the user is there and not disabled.
_HOLDER_USABLE = (
    _u.tenant == bindparam("holder_tenant"),
    _u.user_id == bindparam("holder_id"),
    _u.disabled == false(),
)
#: PostgreSQL: the holder's row locked (an operator's disable or delete holds it too), if usable.
HOLDER_ROW_LOCK = select(_u.user_id).where(*_HOLDER_USABLE).with_for_update()


@cache
def _levels_table(count: int) -> Any:
    """The subjects of ``count`` levels (bound as ``s{i}``) as rows of one column ``subject``."""
    rows = [select(bindparam(f"s{i}", type_=String()).label("subject")) for i in range(count)]
    return union_all(*rows).subquery("levels")


def _active_lock() -> Any:
    """The latest end of an active lock on any subject of the settlement (``None``: none)."""
    return select(func.max(_l.locked_until)).where(
        _l.tenant == bindparam("key_tenant"), _l.subject.in_(_SUBJECTS), _l.locked_until > NOW
    )


@cache
def succeed_levels(count: int, dialect_insert: Any, guarded: bool, held: bool = False) -> Any:
    """The success of ``count`` levels in one statement: each counter row reset and its
    latest success moved (see ``SUCCEEDED``), the row created if missing (an upsert of
    ``dialect_insert``); ``guarded``, only while no lock is active on any of their subjects,
    and ``held``, only while the holder may sign in (``holder_tenant``, ``holder_id``; then
    its row count is ``count``, else 0). Without ``dialect_insert`` (a database without
    upserts: its rows were created first) an UPDATE. Its parameters name no column of
    ``authflow_lockouts`` (an INSERT or UPDATE would write such a parameter to its column)."""
    unlocked: Any = _active_lock().scalar_subquery().is_(None) if guarded else true()
    if held:
        unlocked = unlocked & exists().where(*_HOLDER_USABLE)
    if dialect_insert is None:  # pragma: no cover - other databases
        key = (_l.tenant == bindparam("key_tenant"), _l.factor == bindparam("key_factor"))
        return update(lockouts_table).where(*key, _l.subject.in_(_SUBJECTS), unlocked).values(SUCCEEDED)
    levels = _levels_table(count)
    rows = select(
        bindparam("key_tenant", type_=String()),
        levels.c.subject,
        bindparam("key_factor", type_=String()),
        literal_column("0"),
        NOW,
    ).where(unlocked)  # (a WHERE also keeps SQLite from reading ON CONFLICT as a join's ON)
    columns = ["tenant", "subject", "factor", "failures", "last_success_at"]
    return (
        dialect_insert(lockouts_table)
        .from_select(columns, rows)
        .on_conflict_do_update(index_elements=KEY_COLUMNS, set_=SUCCEEDED)
    )


@cache
def _pg_settle_levels(count: int) -> Any:
    """PostgreSQL: a success of ``count`` levels settled in one statement once their counter
    rows are locked (data-modifying CTEs; its snapshot is taken after the locks are held, so
    a lock committed by whoever held them before is seen): the reservations given back and,
    unless a lock is active on a subject, the counters reset and their latest success moved
    (the rows exist: the lock created them). It returns the lock's end, if any."""
    lock = select(_active_lock().scalar_subquery().label("until")).cte("active_lock")
    unlocked = select(lock.c.until).scalar_subquery().is_(None)
    settled = SETTLE_LEVELS.cte("settled")
    reset = (
        update(lockouts_table)
        .where(
            _l.tenant == bindparam("key_tenant"),
            _l.factor == bindparam("key_factor"),
            _l.subject.in_(_SUBJECTS),
            unlocked,
        )
        .values(SUCCEEDED)
        .cte("reset")
    )
    return select(lock.c.until).add_cte(settled, reset)


DROP_STALE_LEVELS = delete(reservations_table).where(
    _r.tenant == bindparam("tenant"),
    _r.factor == bindparam("factor"),
    _r.subject.in_(_SUBJECTS),
    _r.reserved_at <= STALE,
)


@cache
def levels_state(count: int) -> Any:
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
            _l.tenant == bindparam("tenant"), _l.subject == subject, _l.locked_until > NOW
        )
        columns += [
            lock.scalar_subquery().label(f"locked{i}"),
            select(_l.failures).where(*of_counter).scalar_subquery().label(f"failures{i}"),
            select(_l.window_start).where(*of_counter).scalar_subquery().label(f"window{i}"),
            reserved.where(_r.reserved_at > STALE).scalar_subquery().label(f"in_flight{i}"),
            reserved.where(_r.reserved_at <= STALE).scalar_subquery().label(f"stale{i}"),
        ]
    return select(*columns)


def levels_params(keys: Sequence[AttemptKey], now: datetime) -> dict[str, Any]:
    params: dict[str, Any] = {f"s{i}": key.subject for i, key in enumerate(keys)}
    params.update(tenant=keys[0].tenant, factor=keys[0].factor, subjects=[key.subject for key in keys])
    # (An UPDATE given a parameter named after a column would SET it: the reset gets these.)
    params.update(key_tenant=keys[0].tenant, key_factor=keys[0].factor)
    params.update(now=now, stale=now - RESERVATION_TTL)
    return params


def refusal(
    state: Any, levels: Sequence[AttemptLevel], now: datetime, window: timedelta, lock_duration: timedelta
) -> datetime | None:
    """Why one more check may not be counted, read from ``levels_state``: the end of the first
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


def level_tokens(token: str, count: int) -> list[str]:
    return [level_token(token, i) for i in range(count)]


def settle_params(
    keys: Sequence[AttemptKey],
    now: datetime,
    client_ip: str | None,
    reservation: str | None,
    holder: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The parameters of a settlement of ``keys`` (none named after a column of the lockouts)."""
    params: dict[str, Any] = {f"s{i}": key.subject for i, key in enumerate(keys)}
    tokens = level_tokens(reservation, len(keys)) if reservation is not None else []
    params.update(key_tenant=keys[0].tenant, key_factor=keys[0].factor)
    params["subjects"] = [key.subject for key in keys]
    params.update(now=now, client_ip=client_ip, tokens=tokens)
    if holder is not None:
        params.update(holder_tenant=holder[0], holder_id=holder[1])
    return params


def lock_met(conn: Connection, params: dict[str, Any]) -> datetime | None:
    """The end of the lock that refused a guarded success (``settle_params``), or ``None``
    when none is active (then the holder refused it): read on that path only."""
    lock = {"tenant": params["key_tenant"], "subjects": params["subjects"], "now": params["now"]}
    return aware(conn.execute(LEVELS_LOCK, lock).scalar())


def settle_levels_in_one_statement(conn: Connection, count: int, params: dict[str, Any]) -> datetime | None:
    """PostgreSQL: the same in one statement (see _pg_settle_levels)."""
    return aware(conn.execute(_pg_settle_levels(count), params).scalar())
