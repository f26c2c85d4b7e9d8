"""The unit of work of the SQL adapter: one connection and one transaction per unit.

Every aggregate module of the adapter (users, factors, attempts, audit, identity links,
one-time tokens) runs its statements through :class:`SqlConnections`: in the open
:class:`UnitOfWork` when there is one (so a request that holds a row lock never needs a
second pooled connection), else in a transaction or a read of its own. Database failures
become :class:`~flask_authflow.errors.StoreBusy` (a lock wait gave up: try again) or
:class:`~flask_authflow.errors.StoreUnavailable` (fail closed).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, TypeVar

from flask import has_app_context
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from flask_authflow._clock import Clock
from flask_authflow._core.app_users import APP_OWNED, APP_WROTE
from flask_authflow._core.ports import SessionStore, SessionWrite
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError, ConfigurationError, StoreBusy, StoreUnavailable
from flask_authflow.storage._sql.engine import autocommit_reads, run_read, run_statement

__all__ = [
    "LOCK_TIMEOUT",
    "AuditFlush",
    "JoinedSessions",
    "LockingBegin",
    "SessionSave",
    "SqlConnections",
    "UnitOfWork",
    "locking_begin",
    "store_error",
    "watch_writes",
]

T = TypeVar("T")

#: How long a statement of the login path waits for a row lock another request holds
#: (PostgreSQL's ``lock_timeout``; SQLite waits its ``busy_timeout``). A burst of one
#: account's requests queues behind one lock: the ones that would wait longer are
#: answered "try again" (:class:`StoreBusy`) instead of holding a pooled connection.
LOCK_TIMEOUT = timedelta(seconds=2)

#: PostgreSQL's SQLSTATE of a statement that gave up waiting for a lock (lock_not_available).
_LOCK_NOT_AVAILABLE = "55P03"


def store_error(exc: SQLAlchemyError) -> StoreUnavailable:
    """The typed error of a database failure: :class:`StoreBusy` when the statement gave
    up waiting for a lock another request held, else :class:`StoreUnavailable`."""
    orig = getattr(exc, "orig", None)
    if isinstance(exc, OperationalError) and (
        getattr(orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE or "database is locked" in str(orig)
    ):
        return StoreBusy("another request of this account holds its lock: try again in a moment")
    return StoreUnavailable("the authentication database is unavailable")


def _flushed(session: Any, _context: Any) -> None:
    session.info[APP_WROTE] = True


def _ended(session: Any, transaction: Any) -> None:
    if transaction.parent is None:  # the outermost transaction: its writes are settled
        session.info.pop(APP_WROTE, None)


def watch_writes(scoped: Any) -> None:
    """Mark an application's Flask-SQLAlchemy session while its transaction holds flushed
    rows: account writes join only such a transaction (one that merely read something
    would never be committed by a view that writes nothing of its own)."""
    if not event.contains(scoped, "after_flush", _flushed):
        event.listen(scoped, "after_flush", _flushed)
        event.listen(scoped, "after_transaction_end", _ended)


#: How a transaction that takes an attempt counter's lock begins: ``begin(conn, lock_timeout)``.
LockingBegin = Callable[[Connection, timedelta], None]


def _begin_immediate(conn: Connection, lock_timeout: timedelta) -> None:
    """SQLite: ``BEGIN IMMEDIATE`` takes the write lock now (waiting at most ``busy_timeout``),
    so the reads that follow see the latest commit and a later write never has to upgrade
    a read snapshot (which SQLite refuses at once under contention)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _bound_lock_waits(conn: Connection, lock_timeout: timedelta) -> None:
    """PostgreSQL: waits for row locks are bounded by ``lock_timeout``, for this transaction only."""
    milliseconds = max(1, int(lock_timeout.total_seconds() * 1000))
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")


def _plain_begin(conn: Connection, lock_timeout: timedelta) -> None:
    """Other databases: the transaction begins with its first statement, as usual."""


_LOCKING_BEGINS: dict[str, LockingBegin] = {"sqlite": _begin_immediate, "postgresql": _bound_lock_waits}


def locking_begin(engine: Engine) -> LockingBegin:
    """The first statement of a transaction on ``engine`` that takes an attempt counter's lock."""
    return _LOCKING_BEGINS.get(engine.dialect.name, _plain_begin)


#: Writes the audit rows a unit buffered, in its transaction: ``flush(conn, records)``.
AuditFlush = Callable[[Connection, list[AuditRecord]], None]

#: Writes a login step's session in a unit's transaction: ``save(conn, write)`` (a SQL
#: session store's ``save_on``); False: the session was revoked meanwhile.
SessionSave = Callable[[Connection, SessionWrite], bool]
#: The session stores that write in a backend's units, and how: their ``save_on``, held
#: weakly as the stores are (see ``SqlAlchemyBackend.join_sessions``).
JoinedSessions = Mapping[SessionStore, "weakref.WeakMethod[SessionSave]"]


class UnitOfWork:
    """Writes and reads of several backend calls in one transaction on ONE connection (see
    :meth:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend.begin_unit`).

    The transaction starts with the first statement; :meth:`commit` ends it (an error then
    means nothing of it was written), :meth:`rollback` drops it. A statement that failed
    inside the unit spoils it: ``commit`` then rolls back and raises. Every read and write
    of the backend in the unit's context runs on its connection, so a request that holds a
    row lock never needs a second pooled connection.

    A unit begun while the library owns the application's Flask-SQLAlchemy transaction
    (``session``, see :meth:`~flask_authflow._core.app_users.AppUserHooks.owned`) runs in
    that transaction: the application hook's rows and the flow's writes commit once.

    Audit rows written in the unit are buffered (:meth:`queue_audit`) and written by one
    INSERT just before the commit, in the same transaction. A login step's session is
    written in it too (:meth:`save_session`) when its session store, on the same database,
    joined the backend's units (``sessions``).
    """

    __slots__ = (
        "_audit",
        "_audit_early",
        "_begin",
        "_conn",
        "_flush_audit",
        "_session",
        "_sessions",
        "_token",
        "_trans",
        "engine",
        "failed",
        "lock_timeout",
    )

    def __init__(
        self,
        engine: Engine,
        token: Any,
        lock_timeout: timedelta = LOCK_TIMEOUT,
        session: Any = None,
        sessions: JoinedSessions | None = None,
    ) -> None:
        self.engine = engine
        self._begin = locking_begin(engine)
        self.failed = False
        self.lock_timeout = lock_timeout
        self._conn: Connection | None = None
        self._trans: Any = None
        self._token = token
        self._session = session
        self._audit: list[AuditRecord] = []
        self._flush_audit: AuditFlush | None = None
        self._audit_early = True
        self._sessions: JoinedSessions = sessions if sessions is not None else {}

    def save_session(self, store: SessionStore, write: SessionWrite) -> bool:
        """Write a login step's session to ``store`` in the unit's transaction (see
        :meth:`flask_authflow._core.ports.UnitOfWork.save_session`); a failure spoils the unit."""
        joined = self._sessions.get(store)
        save = joined() if joined is not None else None
        if save is None:
            raise RuntimeError("this session store does not write in this backend's units of work")
        conn = self.connection()
        try:
            return save(conn, write)
        except BaseException:
            self.failed = True
            raise

    def queue_audit(self, record: AuditRecord, flush: AuditFlush, *, early: bool) -> None:
        """Write ``record`` with the unit's other audit rows, by ``flush``, at :meth:`commit`
        (or at :meth:`write_audit_now` if ``early``)."""
        self._audit.append(record)
        self._flush_audit = flush
        self._audit_early = early

    def write_audit_now(self) -> None:
        """Write the rows held for the commit now, unless they are chained (see
        :meth:`flask_authflow._core.ports.UnitOfWork.write_audit_now`)."""
        if not self._audit_early:
            return
        try:
            self._write_audit()
        except (SQLAlchemyError, StoreUnavailable) as exc:
            raise AuditWriteError() from exc

    def _write_audit(self) -> None:
        records, self._audit = self._audit, []
        if records and self._flush_audit is not None:
            try:
                self._flush_audit(self.connection(), records)
            except BaseException:
                self.failed = True
                raise

    def connection(self) -> Connection:
        if self._conn is None:
            try:
                if self._session is not None:
                    self._conn = self._session.connection()
                    return self._conn
                self._conn = self.engine.connect()
                self._trans = self._conn.begin()
                self._begin(self._conn, self.lock_timeout)
            except SQLAlchemyError as exc:
                self.failed = True
                raise store_error(exc) from exc
        return self._conn

    def _end(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            _UNIT.reset(token)
        conn, self._conn = self._conn, None
        if conn is not None and self._session is None:
            conn.close()

    def commit(self) -> None:
        """Write the unit's audit rows and commit every write of the unit;
        :class:`AuditWriteError` if that fails (nothing written)."""
        try:
            if self.failed:
                raise AuditWriteError("a write of the unit failed; nothing of it was kept")
            self._write_audit()
            if self._session is not None:
                self._session.commit()
            elif self._trans is not None:
                self._trans.commit()
        except (SQLAlchemyError, StoreUnavailable) as exc:
            self.failed = True
            raise AuditWriteError() from exc
        finally:
            if self.failed and self._session is not None:
                self._session.rollback()
            self._end()

    def rollback(self) -> None:
        """Drop every write of the unit (never raises)."""
        self._audit = []
        try:
            if self._session is not None:
                self._session.rollback()
            elif self._trans is not None and self._trans.is_active:
                self._trans.rollback()
        except SQLAlchemyError:
            pass  # a dead connection: the database dropped the transaction already
        finally:
            self._end()


#: The unit of work of the running context (thread, task), if one was begun.
_UNIT: ContextVar[UnitOfWork | None] = ContextVar("authflow_unit_of_work", default=None)


class SqlConnections:
    """How the aggregate modules of the SQL adapter reach the database (a base of
    :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`, which sets these
    attributes up)."""

    lock_timeout: timedelta
    clock: Clock
    _engine: Engine | None
    _reader: tuple[Engine, Engine] | None
    #: How a transaction that takes an attempt counter's lock begins on this engine.
    _locking_begin: LockingBegin = _plain_begin
    #: The Flask-SQLAlchemy ``db`` whose open transaction account writes join (see _account_tx).
    _app_db: Any
    #: The session stores that write a login step's session in the units of work (one per
    #: app that shares this backend; see ``join_sessions``), created when the first joins.
    _unit_sessions: weakref.WeakKeyDictionary[SessionStore, weakref.WeakMethod[SessionSave]] | None = None

    @property
    def engine(self) -> Engine:
        """The engine (for a Flask-SQLAlchemy ``db``: ``db.engine`` of the bound app)."""
        if self._engine is None:
            raise ConfigurationError(
                "this SqlAlchemyBackend(db) is not bound to an app yet: call db.init_app(app) and then "
                "authflow.init_app(app) (which binds it), or build it inside an app context"
            )
        return self._engine

    def _bind_engine(self, engine: Engine) -> None:
        """Run on ``engine`` from now on, with the statements of its database."""
        self._engine = engine
        self._use_dialect(engine)

    def _use_dialect(self, engine: Engine) -> None:
        """Pick, once per engine, how each aggregate talks to its database (an aggregate
        module with statements of its own for some database extends it)."""
        self._locking_begin = locking_begin(engine)

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
        unit = UnitOfWork(self.engine, None, self.lock_timeout, self._owned_session(), self._unit_sessions)
        unit._token = _UNIT.set(unit)
        return unit

    @contextmanager
    def unit_of_work(self) -> Iterator[UnitOfWork]:
        """:meth:`begin_unit` as a block: committed at its end, rolled back on an exception.

        .. deprecated:: 0.8
           Nothing uses it and the memory store has no such method; call :meth:`begin_unit`
           (the unit's ``commit()`` / ``rollback()``). It is removed in 0.9."""
        warnings.warn(
            "SqlAlchemyBackend.unit_of_work() is deprecated and will be removed in 0.9: use begin_unit()",
            DeprecationWarning,
            stacklevel=3,  # the caller of the with statement, past contextmanager's __enter__
        )
        unit = self.begin_unit()
        try:
            yield unit
        except BaseException:
            unit.rollback()
            raise
        unit.commit()

    def _owned_session(self) -> Any:
        """The application's Flask-SQLAlchemy session while a library flow owns its
        transaction on this backend's engine (``APP_OWNED``), else ``None``."""
        db = self._app_db
        if db is None or not has_app_context():
            return None
        session = db.session()
        if not session.info.get(APP_OWNED) or session.get_bind() is not self.engine:
            return None
        return session

    def _app_session(self) -> Any:
        """The application's Flask-SQLAlchemy session when a transaction of it is open on
        this backend's engine (a view that flushed its own rows), else ``None``."""
        db = self._app_db
        if db is None or self._unit() is not None or not has_app_context():
            return None
        session = db.session()  # the scoped session of this app context
        wrote = session.info.get(APP_WROTE) or session.new or session.dirty or session.deleted
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
            raise store_error(exc) from exc

    @contextmanager
    def _in_unit(self, unit: UnitOfWork) -> Iterator[Connection]:
        """The unit's connection; a failure spoils the unit (its transaction may be aborted)."""
        try:
            yield unit.connection()
        except BaseException as exc:
            unit.failed = True
            if isinstance(exc, SQLAlchemyError) and not isinstance(exc, IntegrityError):
                raise store_error(exc) from exc
            raise

    @contextmanager
    def _tx(self, *, locking: bool = False) -> Iterator[Connection]:
        """One transaction (or the open unit of work's); database failures become
        StoreUnavailable (fail closed). ``locking``: it takes an attempt counter's lock,
        so its wait is bounded (see :func:`locking_begin`)."""
        unit = self._unit()
        if unit is not None:
            with self._in_unit(unit) as conn:
                yield conn
            return
        try:
            with self.engine.begin() as conn:
                if locking:
                    self._locking_begin(conn, self.lock_timeout)
                yield conn
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise store_error(exc) from exc

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
            raise store_error(exc) from exc

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
