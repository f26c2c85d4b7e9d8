"""The SQL session store's read, with the last-seen touch folded into it.

A session whose stored last-seen time (the row's clear ``updated_at``) is at or before
its due time is touched by the read that finds it (see
:class:`~flask_authflow._core.ports.SessionTouch`): ``updated_at`` and ``expires_at``
move, the sealed record is not written. How the read and the touch share the work
depends on what costs on each database:

* PostgreSQL, a round trip per statement: the plain ``SELECT`` (one round trip, the
  whole cost of a session that is not due, nearly every request), then, only when due,
  one statement that touches and reads: a data-modifying CTE beside the ``SELECT``. A
  read that always carried the CTE cost every request 25-50 % more than the plain
  ``SELECT`` (measured on this machine), for a touch that falls due once in many
  requests. ``FOR UPDATE SKIP LOCKED`` skips a touch of a row another transaction is
  writing (that writer's commit moves the row anyway): a read never waits for a lock.
  That statement's ``SELECT`` sees the row as it was before the touch (the statement's
  snapshot), which is what the caller gets back.
* SQLite, in process (no round trip to save; what costs is a pool checkout, the write
  lock and the fsync): the ``SELECT`` (with the expiry a touch would replace), then, when
  due, the ``UPDATE`` (never to a shorter expiry) on the same pooled connection, with
  ``busy_timeout = 0`` (a touch that would wait for another writer's lock is skipped; the
  next request touches) and, in WAL mode, ``synchronous = NORMAL`` (no fsync: a last-seen
  time lost to an OS crash costs nothing, and the database stays intact). On a file the
  store opened from a URL, those are the settings of the connections of a second engine
  the reads and touches run on, set once at connect (:data:`SQLITE_NO_WAIT_FOLD`); on an
  engine the application gave, they are set around the ``UPDATE`` and restored.
* Any other database: the ``SELECT``, then the ``UPDATE`` on the same connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, func, select, update
from sqlalchemy.exc import OperationalError

from flask_authflow._clock import utc
from flask_authflow.storage._sql.schema import UTCDateTime, sessions_table

__all__ = [
    "FOLDS",
    "LOAD_QUERY",
    "SQLITE_NO_WAIT_FOLD",
    "TOUCH",
    "Fold",
    "Folded",
    "fold_after_read",
    "touch_now",
    "try_touch",
]

log = logging.getLogger("flask_authflow.sessions")

_c = sessions_table.c
_NOW = bindparam("now", type_=UTCDateTime())
_BY_KEY = _c.sid_hash == bindparam("key")
_LIVE = _c.expires_at > _NOW

#: The sealed record and the row's last write time: a touch moves only the latter, which
#: is then the session's last-seen time when later than the record's own.
LOAD_QUERY = select(_c.data, _c.updated_at).where(and_(_BY_KEY, _LIVE))
#: The expiry a touch replaces (read only when the session is due).
_EXPIRY = select(_c.expires_at).where(and_(_BY_KEY, _LIVE))
#: The read and the expiry a touch would replace, in one statement (SQLite's folds).
_READ_WITH_EXPIRY = select(_c.data, _c.updated_at, _c.expires_at).where(and_(_BY_KEY, _LIVE))

#: The touch on its own: the last-seen time and the expiry of a live row, nothing else.
TOUCH = (
    update(sessions_table)
    .where(_BY_KEY, _LIVE)
    .values(
        updated_at=bindparam("last_seen", type_=UTCDateTime()),
        expires_at=bindparam("expires", type_=UTCDateTime()),
    )
)

#: SQLite's touch after the read: never a shorter expiry than the row has (SQLite's
#: two-argument ``max`` is the larger of its arguments; its times compare as stored).
_TOUCH_NOT_SHORTER = (
    update(sessions_table)
    .where(_BY_KEY, _LIVE)
    .values(
        updated_at=bindparam("last_seen", type_=UTCDateTime()),
        expires_at=func.max(_c.expires_at, bindparam("expires", type_=UTCDateTime())),
    )
)

_DUE_ROW = (
    select(_c.sid_hash)
    .where(_BY_KEY, _LIVE, _c.updated_at <= bindparam("due", type_=UTCDateTime()))
    .with_for_update(skip_locked=True)
)
_TOUCHED = (
    update(sessions_table)
    .where(_c.sid_hash.in_(_DUE_ROW.scalar_subquery()))
    .values(
        updated_at=bindparam("at", type_=UTCDateTime()),
        expires_at=func.greatest(_c.expires_at, bindparam("exp", type_=UTCDateTime())),
    )
    .returning(_c.sid_hash)
    .cte("session_touch")
)
#: PostgreSQL's read and touch in one statement (see the module's docstring).
_READ_AND_TOUCH = select(
    _c.data, _c.updated_at, _c.expires_at, exists(select(_TOUCHED.c.sid_hash)).label("was_touched")
).where(_BY_KEY, _LIVE)

#: What a fold returns: the row's sealed data and last-seen time as they were before the
#: touch, and the expiry the touch replaced (``None``: no touch); ``None`` for no live row.
Folded = tuple[Any, datetime, datetime | None] | None
#: A fold runs on a pooled connection with ``key``, ``now``, ``due``, ``at`` and ``exp``.
Fold = Callable[[Connection, dict[str, Any]], Folded]

#: Where a pooled SQLite connection keeps the settings a touch restores (see _touch_restore).
_TOUCH_RESTORE = "authflow.touch_restore"


def _touch_restore(conn: Connection) -> tuple[int, int | None]:
    """The ``busy_timeout`` and (in WAL mode; ``None`` otherwise) the ``synchronous`` level a
    touch on ``conn`` restores after its statement.

    They are read once per pooled connection and kept in its ``info`` dictionary, which
    lives as long as the database connection: a touch then runs its statement between
    two settings and two restores, without three reads before them.
    """
    saved: tuple[int, int | None] | None = conn.info.get(_TOUCH_RESTORE)
    if saved is None:
        waits = int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0)
        wal = conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        syncs = int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0) if wal else None
        saved = conn.info[_TOUCH_RESTORE] = (waits, syncs)
    return saved


def touch_now(conn: Connection, params: dict[str, Any], statement: Any = TOUCH) -> bool:
    """``statement`` (:data:`TOUCH`) on SQLite's ``conn``, committed; ``False`` when the
    database is busy (``conn`` must not wait for the write lock: see :func:`try_touch`) or
    the row is gone."""
    try:
        touched = conn.execute(statement, params).rowcount
        conn.commit()
        return bool(touched)
    except OperationalError:  # SQLITE_BUSY: another connection holds the write lock
        conn.rollback()
        log.debug("session touch skipped: the database is busy")
        return False


def try_touch(conn: Connection, params: dict[str, Any], statement: Any = TOUCH) -> bool:
    """:func:`touch_now` on a connection of an engine the application gave (its settings are
    its own): ``busy_timeout`` set to 0 and (in WAL mode) ``synchronous`` to ``NORMAL``
    around the statement, then restored."""
    waits, syncs = _touch_restore(conn)
    conn.exec_driver_sql("PRAGMA busy_timeout = 0")
    if syncs is not None:
        conn.exec_driver_sql("PRAGMA synchronous = NORMAL")
    try:
        return touch_now(conn, params, statement)
    finally:
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {waits}")
        if syncs is not None:
            conn.exec_driver_sql(f"PRAGMA synchronous = {syncs}")


def _touch_waiting(conn: Connection, params: dict[str, Any]) -> bool:
    touched = conn.execute(TOUCH, params).rowcount
    conn.commit()
    return bool(touched)


def _try_touch_not_shorter(conn: Connection, params: dict[str, Any]) -> bool:
    return try_touch(conn, params, _TOUCH_NOT_SHORTER)


def _touch_not_shorter_now(conn: Connection, params: dict[str, Any]) -> bool:
    return touch_now(conn, params, _TOUCH_NOT_SHORTER)


def fold_after_read(
    touch: Callable[[Connection, dict[str, Any]], bool] = _touch_waiting,
    *,
    expiry_in_read: bool = False,
) -> Fold:
    """The read (the one statement of a session that is not due), then, when due, the
    expiry it replaces and ``touch`` on the same connection. With ``expiry_in_read`` the
    read brings the expiry too (no second ``SELECT``): for a touch that never shortens
    the expiry in its own statement (``max`` in SQL), so a save that extended it between
    the read and the touch keeps its extension."""
    read = _READ_WITH_EXPIRY if expiry_in_read else LOAD_QUERY

    def fold(conn: Connection, params: dict[str, Any]) -> Folded:
        row = conn.execute(read, params).one_or_none()
        if row is None:
            return None
        seen = utc(row.updated_at)
        if seen > params["due"]:
            return row.data, seen, None
        stored = row.expires_at if expiry_in_read else conn.execute(_EXPIRY, params).scalar_one_or_none()
        if stored is None:  # revoked since the read
            return row.data, seen, None
        replaced = utc(stored)
        written = {
            "key": params["key"],
            "now": params["now"],
            "last_seen": params["at"],
            "expires": max(replaced, params["exp"]),
        }
        return row.data, seen, replaced if touch(conn, written) else None

    return fold


def _read_then_touch_in_one_statement(conn: Connection, params: dict[str, Any]) -> Folded:
    """The plain read; when the session is due, the touch and the read again in one
    statement (``None`` when the row went meanwhile: revoked)."""
    row = conn.execute(LOAD_QUERY, params).one_or_none()
    if row is None:
        return None
    seen = utc(row.updated_at)
    if seen > params["due"]:
        return row.data, seen, None
    again = conn.execute(_READ_AND_TOUCH, params).one_or_none()
    if again is None:
        return None
    return again.data, utc(again.updated_at), utc(again.expires_at) if again.was_touched else None


#: The fold per database (others: :func:`fold_after_read` with a touch that waits).
FOLDS: dict[str, Fold] = {
    "postgresql": _read_then_touch_in_one_statement,
    "sqlite": fold_after_read(_try_touch_not_shorter, expiry_in_read=True),
}
#: SQLite's fold on a connection set at connect not to wait for the write lock (the
#: session store's own read-and-touch engine: ``engine.sqlite_touch_engine``).
SQLITE_NO_WAIT_FOLD: Fold = fold_after_read(_touch_not_shorter_now, expiry_in_read=True)
