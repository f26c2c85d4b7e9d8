"""Engines: resolution from an engine, a URL or a Flask-SQLAlchemy ``db``; SQLite's
pragmas and file mode; and disconnect handling.

All stores accept an :class:`~sqlalchemy.engine.Engine`, a database URL, or a
Flask-SQLAlchemy ``db`` object, so flask-authflow works with or without
Flask-SQLAlchemy. A connection that died under the pool (a database restart) is handled
as SQLAlchemy documents it: the error says ``connection_invalidated``, the pool has
been invalidated, and an operation that is safe to repeat runs once more.
"""

from __future__ import annotations

import logging
import os
import stat
import weakref
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from flask_authflow.errors import ConfigurationError, MissingExtraError

__all__ = [
    "POOL_RECYCLE_SECONDS",
    "EngineSource",
    "autocommit_reads",
    "is_disconnect",
    "is_flask_sqlalchemy",
    "renew_in_forked_child",
    "resolve_engine",
    "run_read",
    "run_statement",
    "run_transaction",
    "secure_sqlite_file",
    "sqlite_touch_engine",
]

log = logging.getLogger("flask_authflow.stores")

T = TypeVar("T")

#: Pooled connections of a server database are replaced after this many seconds, before
#: a firewall, a load balancer or the server's idle timeout drops them unseen.
POOL_RECYCLE_SECONDS = 1800


EngineSource = Any  # Engine | str | flask_sqlalchemy.SQLAlchemy


def is_flask_sqlalchemy(source: object) -> bool:
    """``source`` looks like a Flask-SQLAlchemy ``db`` (the extension object, not an engine)."""
    # Looked up on the class: db.engines is a property that needs an app context.
    return not isinstance(source, Engine | str) and all(
        hasattr(type(source), name) for name in ("init_app", "engines", "create_all")
    )


def _set_sqlite_pragmas(dbapi_connection: Any, *, wait_ms: int) -> bool:
    """Set a new SQLite connection's pragmas; ``True`` when the database is in WAL mode."""
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed during a write; busy_timeout waits instead of failing
    # at once when another connection holds the write lock.
    cursor.execute("PRAGMA journal_mode=WAL")
    row = cursor.fetchone()
    cursor.execute(f"PRAGMA busy_timeout={int(wait_ms)}")
    cursor.execute("PRAGMA foreign_keys=ON")
    # A session lookup among a million rows is a few B-tree pages; SQLite's default
    # 2 MB page cache per connection misses most of them (benchmarks/scale.py). A 32 MB
    # cache (negative = KiB) keeps the hot pages, and reads are memory-mapped up to 2 GB
    # (SQLite's usual ceiling): address space, not memory, served from the OS page cache.
    # With a 256 MB map, 10^6 sessions (a larger file) cost 3.6x a lookup among 10^3;
    # mapped whole, 1.1-1.2x.
    cursor.execute("PRAGMA cache_size=-32768")
    cursor.execute("PRAGMA mmap_size=2147418112")
    cursor.close()
    return row is not None and str(row[0]).lower() == "wal"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    _set_sqlite_pragmas(dbapi_connection, wait_ms=5000)


def _sqlite_touch_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # A connection of the session store's read-and-touch pool (see sqlite_touch_engine):
    # a write that would wait for another writer's lock fails at once (the touch is
    # skipped), and in WAL mode a commit is not synced to disk (an OS crash or power cut
    # may lose the last commits, never the database's integrity). Set once, at connect.
    if _set_sqlite_pragmas(dbapi_connection, wait_ms=0):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


#: Engines :func:`resolve_engine` made from the URL of a SQLite file: settings of our own.
_sqlite_file_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
#: The read-and-touch engine made for each of them (see sqlite_touch_engine).
_touch_engines: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
#: Engines :func:`resolve_engine` made from the URL of a server database: settings of our own.
_server_url_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
#: The AUTOCOMMIT engine made for each of them (see autocommit_reads).
_autocommit_engines: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


#: Engines a forked child gives a new pool (see renew_in_forked_child).
_renewed_in_child: weakref.WeakSet[Engine] = weakref.WeakSet()


def renew_in_forked_child(engine: Engine) -> None:
    """Give ``engine`` a new pool in a process forked from this one (gunicorn's
    ``--preload``), as SQLAlchemy advises: ``dispose(close=False)`` leaves the parent's
    connections open for the parent, and the child opens its own. Every engine
    :func:`resolve_engine` makes from the URL of a file or a server is registered; the
    session store registers the engine it was given. The engines made beside one (see
    ``_companion``) are renewed with it."""
    _renewed_in_child.add(engine)


def _after_fork_in_child() -> None:
    for engine in list(_renewed_in_child):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _companion(
    engine: Engine, made: weakref.WeakKeyDictionary[Engine, Engine], build: Callable[[], Engine]
) -> Engine:
    """The second engine ``build`` makes for ``engine`` (once; disposed with ``engine``)."""
    second = made.get(engine)
    if second is None:
        second = build()
        owner = os.getpid()
        # In a forked child (the engine renewed with close=False, see renew_in_forked_child),
        # the parent's connections are left open for the parent: closing one would end it
        # on the server for both processes.
        event.listen(engine, "engine_disposed", lambda _engine: second.dispose(close=os.getpid() == owner))
        made[engine] = second
    return second


def sqlite_touch_engine(engine: Engine) -> Engine | None:
    """A second engine on the SQLite file of ``engine`` for the session store's reads and
    last-seen touches: its connections are set once, at connect, not to wait for the write
    lock (``busy_timeout = 0``) and, in WAL mode, not to sync a commit
    (``synchronous = NORMAL``), so a touch runs no ``PRAGMA`` of its own.

    Only for an engine :func:`resolve_engine` made from a URL (its settings are ours);
    ``None`` for any other engine (an application's, or an in-memory database, which a
    second engine would not share). Disposing ``engine`` disposes this one too.
    """
    if engine not in _sqlite_file_engines:
        return None

    def build() -> Engine:
        touch = create_engine(engine.url)
        event.listen(touch, "connect", _sqlite_touch_pragmas)
        return touch

    return _companion(engine, _touch_engines, build)


def secure_sqlite_file(path: Path) -> None:
    """Make sure the SQLite database file at ``path`` is readable by its owner only.

    The folder must exist and be writable. The file holds password hashes, sealed
    sessions and issuer keys: a new file is created
    0600 before SQLite opens it (SQLite gives its -wal and -shm files the same mode); an
    existing file readable or writable by others is tightened when this process owns it,
    else start-up is refused.
    """
    folder = path.parent
    if not folder.is_dir():
        raise ConfigurationError(
            f"AUTHFLOW_DATABASE_URL: the folder of the SQLite database {path} does not exist: create it "
            "or point AUTHFLOW_DATABASE_URL at an existing, writable folder"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigurationError(
            f"AUTHFLOW_DATABASE_URL: the folder {folder} is not writable: SQLite needs to create its journal "
            "there; point AUTHFLOW_DATABASE_URL at a writable location"
        )
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigurationError(
            f"AUTHFLOW_DATABASE_URL: cannot create the SQLite database {path} ({exc.strerror})"
        ) from None
    else:
        os.close(fd)
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            info = file.stat()
        except FileNotFoundError:
            continue
        if stat.S_IMODE(info.st_mode) & 0o077 == 0:
            continue
        if info.st_uid != os.geteuid():
            raise ConfigurationError(
                f"AUTHFLOW_DATABASE_URL: {file} is readable by other users and not owned by this process: "
                f"run chmod 600 {file}"
            )
        os.chmod(file, 0o600)
        log.warning("tightened %s to mode 0600 (it holds password hashes and keys)", file)
    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigurationError(
            f"AUTHFLOW_DATABASE_URL: the SQLite database {path} is not readable and writable by this process"
        )


def _checked_url(source: str) -> URL:
    try:
        url = make_url(source)
    except ArgumentError:
        raise ConfigurationError(
            "AUTHFLOW_DATABASE_URL is not a database URL: use e.g. sqlite:////path/to/authflow.db "
            "or postgresql+psycopg://user@host/dbname"
        ) from None
    return url


def resolve_engine(source: EngineSource) -> Engine:
    """Turn an engine, a URL string or a Flask-SQLAlchemy ``db`` into an :class:`Engine`.

    A URL that does not parse or names an unknown driver, and a SQLite file in a folder
    this process cannot write, raise :class:`~flask_authflow.errors.ConfigurationError`
    naming ``AUTHFLOW_DATABASE_URL``.
    """
    if isinstance(source, Engine):
        return source
    if isinstance(source, str):
        url = _checked_url(source)
        on_file = url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")
        on_file = on_file and not (url.query.get("mode") == "memory" or str(url.database).startswith("file:"))
        if on_file:
            secure_sqlite_file(Path(str(url.database)).expanduser().absolute())
        if source.startswith("sqlite"):
            kwargs: dict[str, Any] = {}
            if source in ("sqlite://", "sqlite:///:memory:"):
                # One shared in-memory database for every thread.
                kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
            engine = create_engine(source, **kwargs)
            event.listen(engine, "connect", _sqlite_pragmas)
            if on_file:  # (an in-memory database is the process's own: nothing to renew)
                _sqlite_file_engines.add(engine)
                renew_in_forked_child(engine)
            return engine
        try:
            # No pre-ping (a round trip on every checkout): connections are recycled
            # before idle timeouts can drop them, and a connection found dead (a server
            # restart) invalidates the whole pool; reads then run once more
            # (run_read), so service resumes without a failed request.
            engine = create_engine(source, pool_recycle=POOL_RECYCLE_SECONDS)
        except ModuleNotFoundError as exc:
            if source.startswith("postgresql"):
                raise MissingExtraError("postgres", exc.name or "psycopg") from exc
            raise
        except (NoSuchModuleError, ArgumentError) as exc:
            raise ConfigurationError(
                f"AUTHFLOW_DATABASE_URL names a database SQLAlchemy cannot use ({type(exc).__name__}): "
                "use a sqlite:/// or postgresql+psycopg:// URL"
            ) from None
        _server_url_engines.add(engine)
        renew_in_forked_child(engine)
        return engine
    db_engine = getattr(source, "engine", None)  # Flask-SQLAlchemy's db.engine (needs an app context)
    if isinstance(db_engine, Engine):
        return db_engine
    raise TypeError(
        "expected a SQLAlchemy Engine, a database URL, or a Flask-SQLAlchemy db object, "
        f"got {type(source).__name__}"
    )


# --- connections that died under the pool -------------------------------------------------------


def is_disconnect(exc: BaseException) -> bool:
    """``exc`` says the connection was lost (server restart, network cut, idle timeout).

    SQLAlchemy has then invalidated the connection and every other connection the pool
    held before it, so the next checkout opens a fresh one.
    """
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def autocommit_reads(engine: Engine) -> Engine:
    """The engine to run single-statement reads (and statements committed on their own) on.

    On a server database, AUTOCOMMIT skips the BEGIN and ROLLBACK round trips around a
    read. For an engine :func:`resolve_engine` made from a URL, a second engine on the
    same URL whose connections are AUTOCOMMIT from the start (its own pool, disposed with
    ``engine``): switching a pooled connection to AUTOCOMMIT at checkout and back at
    checkin cost a protected GET on PostgreSQL about 40 µs, a tenth of it
    (benchmarks/README.rst). An application's engine keeps its settings and its one pool:
    the AUTOCOMMIT execution option on it. pysqlite has no such round trips, and
    switching its isolation level on every checkout costs more than it saves: SQLite
    keeps ``engine``.
    """
    if engine.dialect.name == "sqlite":
        return engine
    if engine in _server_url_engines:
        return _companion(engine, _autocommit_engines, lambda: _autocommit_engine(engine))
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def _autocommit_engine(engine: Engine) -> Engine:
    reads = create_engine(engine.url, isolation_level="AUTOCOMMIT", pool_recycle=POOL_RECYCLE_SECONDS)
    # A database restart kills the connections of both pools: a disconnect seen on either
    # replaces the other's connections too, as it replaces every connection of its own pool
    # (so a login's transaction after a restart its read found does not meet a dead one).
    event.listen(reads, "handle_error", partial(_renew_on_disconnect, engine))
    event.listen(engine, "handle_error", partial(_renew_on_disconnect, reads))
    return reads


def _renew_on_disconnect(other: Engine, context: ExceptionContext) -> None:
    if context.is_disconnect:
        other.dispose()  # its idle connections closed, those in use dropped when returned


def run_read(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run the read ``work(conn)``; if the pooled connection turns out dead, run it once more.

    Without a pre-ping, the first use of a connection after a database restart fails
    with a disconnect error; the pool has replaced its connections by then, so the
    second try reaches the database. Any other error (or a second failure) propagates.
    """
    try:
        with engine.connect() as conn:
            return work(conn)
    except DBAPIError as exc:
        if not is_disconnect(exc):
            raise
        log.info("database connection lost (%s); read retried on a new connection", type(exc.orig).__name__)
    with engine.connect() as conn:
        return work(conn)


def run_statement(
    engine: Engine, autocommit: Engine, statement: Any, params: dict[str, Any], *, idempotent: bool
) -> int:
    """Run one write ``statement``, committed on its own; returns its row count.

    ``autocommit`` is :func:`autocommit_reads` of ``engine``. On a server database the
    statement runs in AUTOCOMMIT: one round trip instead of three (BEGIN, the statement,
    COMMIT), and one statement is atomic by itself. SQLite (no such variant) gets a
    transaction of its own. When the pooled connection turns out dead, an ``idempotent``
    statement (the same outcome however often it runs) runs once more on a new
    connection; any other is not retried, as it may have been applied.
    """
    if autocommit is engine:
        with engine.begin() as conn:
            return int(conn.execute(statement, params).rowcount)
    try:
        with autocommit.connect() as conn:
            return int(conn.execute(statement, params).rowcount)
    except DBAPIError as exc:
        if not idempotent or not is_disconnect(exc):
            raise
        log.info(
            "database connection lost (%s); statement retried on a new connection", type(exc.orig).__name__
        )
    with autocommit.connect() as conn:
        return int(conn.execute(statement, params).rowcount)


def run_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work(conn)`` in one transaction, committed at the end.

    If the connection turns out dead *before* the commit (the database rolled the
    transaction back, nothing of it was written), the whole transaction runs once more
    on a new connection. A failure during the commit itself is never retried: the
    outcome is unknown, so the caller sees the error.
    """
    committing = False
    try:
        with engine.begin() as conn:
            result = work(conn)
            committing = True
        return result
    except DBAPIError as exc:
        if committing or not is_disconnect(exc):
            raise
        log.info(
            "database connection lost (%s); transaction retried on a new connection", type(exc.orig).__name__
        )
    with engine.begin() as conn:
        return work(conn)
