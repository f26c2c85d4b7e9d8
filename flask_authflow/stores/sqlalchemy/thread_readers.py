"""SQLite connections of a thread's own for the session read on every request.

The session store reads one row per request. Through the engine's pool that read costs a
checkout and a checkin around the statement (the pool's bookkeeping, its events, the
reset of the connection on return); measured in a gunicorn worker on SQLite, those two
took 25 of the read's 65 µs. :class:`ThreadReaders` gives each thread that keeps reading
a connection of its own, taken from the pool once (so it is made by the engine: the
same driver arguments and ``connect`` listeners, such as the PRAGMAs) and then detached
from it.

What makes this the same read as through the pool:

* pysqlite begins no transaction for a ``SELECT`` in SQLAlchemy's default mode, and the
  caller fetches every row, so each read is a fresh snapshot of the database: a row
  deleted (a revoked session) or written by any connection, thread or process before
  the read started is seen as it is, exactly as on a pooled connection.
* Only a file database behind a :class:`~sqlalchemy.pool.QueuePool` (SQLAlchemy's
  choice for SQLite files) qualifies. An in-memory database lives in one connection
  that must be shared; ``NullPool`` means the application wants no connection kept.
* A thread's first read goes through the pool: a server that starts a thread per
  request (Werkzeug's development server) never opens a connection that one read would
  use. The second read on the same thread keeps a connection.

What ends a thread's connection:

* ``engine.dispose()``, which gives the engine a new pool: each thread's connection,
  taken from the old pool, is closed at its next read and a new one taken from the new
  pool.
* A fork: a connection opened before it is never used in the child, nor closed there
  (SQLite forbids carrying a connection across ``fork()``). The child gives the engine a
  new pool (``engine.dispose(close=False)``, SQLAlchemy's advice for a forked child), so
  it opens its own connections instead of being handed its parent's.
* The end of the thread (its thread-local storage goes, and the connection is closed
  with it).
* A ``checkout`` or ``checkin`` listener added to the pool: the connection is given up
  and every read goes through the pool while the listener is there.
* :meth:`ThreadReaders.discard` after an error: the caller then reads through the pool,
  which handles and reports the failure as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool

__all__ = ["ThreadReaders"]

#: Bumped in a child process after ``fork()``: connections made before it are not used.
_fork_generation = 0
#: Connections a child inherited from its parent: kept (never closed, never used), as
#: closing them in the child would touch the parent's SQLite state.
_inherited: list[Any] = []
#: The engines with thread readers: a child gives each a new pool (below).
_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1
    # SQLAlchemy's advice for a forked child: a new pool, the parent's connections left
    # unclosed. Else the replacement of a thread's connection, and any pooled read, could
    # be handed a connection the parent opened.
    for engine in list(_engines):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Held:
    """A thread's connection, the process generation and the pool it was taken in.

    Closed when the holder goes: at the end of its thread (whose thread-local storage is
    dropped), when its :class:`ThreadReaders` goes, or when it is replaced. Python 3.13's
    sqlite3 warns about a connection collected unclosed.
    """

    __slots__ = ("connection", "fork_generation", "pool")

    def __init__(self, connection: Any, pool: Any) -> None:
        self.connection = connection
        self.fork_generation = _fork_generation
        self.pool = pool

    def release(self) -> None:
        """Close the connection, or keep it unused if this process did not open it."""
        connection, self.connection = self.connection, None
        if connection is None:
            return
        if self.fork_generation == _fork_generation:
            _close(connection)
        else:
            _inherited.append(connection)

    def __del__(self) -> None:
        self.release()


class ThreadReaders:
    """One detached pysqlite connection per reading thread of a SQLite file engine."""

    __slots__ = ("_engine", "_local")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: per thread: ``held`` = its :class:`_Held` or None; ``seen`` = it has read once.
        self._local = threading.local()
        _engines.add(engine)

    @classmethod
    def of(cls, engine: Engine) -> ThreadReaders | None:
        """Readers for ``engine``, or None when its reads must stay on its pool."""
        dialect = engine.dialect
        if dialect.name != "sqlite" or dialect.driver != "pysqlite":
            return None
        if not isinstance(engine.pool, QueuePool) or engine.url.database in (None, "", ":memory:"):
            return None
        if engine.url.query.get("mode") == "memory":
            return None
        return cls(engine)

    def connection(self) -> Any | None:
        """This thread's pysqlite connection, or None: read through the pool this time.

        None is answered on a thread's first read, while the pool has checkout or checkin
        listeners (they see every read, as before; a connection held when one is added is
        given up), and when the pool cannot give a connection (the pool path then reports
        the failure).
        """
        local = self._local
        pool = self._engine.pool
        watched = pool.dispatch.checkout or pool.dispatch.checkin
        held: _Held | None = getattr(local, "held", None)
        if held is not None:
            if held.pool is pool and held.fork_generation == _fork_generation and not watched:
                return held.connection
            local.held = None
            held.release()
        elif not getattr(local, "seen", False):
            local.seen = True  # the first read of this thread: through the pool
            return None
        if watched:
            return None
        try:
            pooled = self._engine.raw_connection()
        except Exception:  # noqa: BLE001 - the pool path raises it again and reports it
            return None
        connection = pooled.driver_connection
        pooled.detach()
        local.held = _Held(connection, pool)
        return connection

    def discard(self) -> None:
        """Close this thread's connection (after an error on it)."""
        local = self._local
        held: _Held | None = getattr(local, "held", None)
        local.held = None
        if held is not None:
            held.release()

    def held_here(self) -> bool:
        """Whether this thread holds a connection (tests)."""
        return getattr(self._local, "held", None) is not None


def _close(connection: Any) -> None:
    # A connection that fails to close (the driver's error) is dropped all the same.
    with contextlib.suppress(Exception):
        connection.close()
