"""Session records in a SQL database (SQLite by default, PostgreSQL for several machines).

Each row holds the record encrypted with :class:`~flask_authflow._core.crypto.SessionCrypto`;
the only clear columns are the ones queries need (tenant, user, state, expiry). The row key
is the SHA-256 of the session id, never the id itself, so a reader of the database (a
backup, a replica) cannot replay a session cookie, and the envelope's associated data is
that same key, so a ciphertext copied to another row does not decrypt.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    and_,
    bindparam,
    delete,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from flask_authflow._clock import Clock, SystemClock, utc
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionTouch, SessionWrite
from flask_authflow._core.session import (
    AuthState,
    SessionRecord,
    federation_key,
    record_federation_key,
    sid_hash,
)
from flask_authflow.errors import StoreUnavailable
from flask_authflow.sessions._stores import RecordOpener, serialize_record, store_unavailable
from flask_authflow.storage._sql._session_read import (
    FOLDS,
    LOAD_QUERY,
    SQLITE_NO_WAIT_FOLD,
    TOUCH,
    Folded,
    fold_after_read,
    touch_now,
    try_touch,
)
from flask_authflow.storage._sql.engine import (
    EngineSource,
    autocommit_reads,
    renew_in_forked_child,
    resolve_engine,
    run_read,
    run_statement,
    run_transaction,
    sqlite_touch_engine,
)
from flask_authflow.storage._sql.schema import UTCDateTime, metadata, sessions_table

__all__ = ["FULL_PURGE_BATCH", "PURGE_BATCH", "SqlAlchemySessionStore", "sessions_table"]

log = logging.getLogger("flask_authflow.sessions")

T = TypeVar("T")


_NOW = bindparam("now", type_=UTCDateTime())
_BY_KEY = sessions_table.c.sid_hash == bindparam("key")
_LIVE = sessions_table.c.expires_at > _NOW
#: The columns a save writes, as parameters named like the columns (but for sid_hash).
_VALUE_COLUMNS = ("tenant", "user_id", "state", "expires_at", "updated_at", "data", "federation_key")
# The write path's statements, built once (SQLAlchemy caches their compiled form).
_UPDATE_LIVE = (
    update(sessions_table)
    .where(_BY_KEY, _LIVE)
    .values({name: bindparam(f"v_{name}", type_=sessions_table.c[name].type) for name in _VALUE_COLUMNS})
)
_DELETE_ONE = delete(sessions_table).where(_BY_KEY)
#: A rotation of one id: the live row of the old id moved to the new one, with its new
#: values, in one statement (no row: the old session was revoked, nothing is written).
_ROTATE_LIVE = (
    update(sessions_table)
    .where(sessions_table.c.sid_hash == bindparam("old_key"), _LIVE)
    .values(
        sid_hash=bindparam("new_key"),
        **{name: bindparam(f"v_{name}", type_=sessions_table.c[name].type) for name in _VALUE_COLUMNS},
    )
)
_DELETE_LIVE_OLD = delete(sessions_table).where(
    sessions_table.c.sid_hash.in_(bindparam("old_keys", expanding=True)), _LIVE
)
_OF_TENANT = sessions_table.c.tenant == bindparam("tenant")
_OF_USER = and_(_OF_TENANT, sessions_table.c.user_id == bindparam("user_id"))
_OF_FEDERATION = sessions_table.c.federation_key == bindparam("federation_key")


def _purge_batch(*, skip_locked: bool = False, of_tenant: bool = False) -> Any:
    """DELETE at most ``:batch`` expired rows (of ``:tenant`` only, with ``of_tenant``); with
    ``skip_locked`` (PostgreSQL) rows another purger holds are skipped, not waited for."""
    expired = select(sessions_table.c.sid_hash).where(sessions_table.c.expires_at <= _NOW)
    if of_tenant:
        expired = expired.where(_OF_TENANT)
    expired = expired.limit(bindparam("batch", type_=Integer()))
    if skip_locked:
        expired = expired.with_for_update(skip_locked=True)
    return delete(sessions_table).where(sessions_table.c.sid_hash.in_(expired.scalar_subquery()))


#: (every tenant, one tenant) purge statements: PostgreSQL's, and every other database's.
_PURGE_BATCH = {
    "postgresql": (_purge_batch(skip_locked=True), _purge_batch(skip_locked=True, of_tenant=True)),
}
_PORTABLE_PURGE_BATCH = (_purge_batch(), _purge_batch(of_tenant=True))
#: Per database, the statement a bulk revocation begins with (see _delete_where).
_REVOCATION_LOCKS = {"postgresql": text("LOCK TABLE authflow_sessions IN SHARE ROW EXCLUSIVE MODE")}
_DELETE_LIVE_OF_USER = delete(sessions_table).where(_OF_USER, _LIVE)
_DELETE_ALL_OF_USER = delete(sessions_table).where(_OF_USER)
_DELETE_LIVE_OF_TENANT = delete(sessions_table).where(_OF_TENANT, _LIVE)
_DELETE_ALL_OF_TENANT = delete(sessions_table).where(_OF_TENANT)
_DELETE_LIVE_OF_FEDERATION = delete(sessions_table).where(_OF_FEDERATION, _LIVE)
_DELETE_ALL_OF_FEDERATION = delete(sessions_table).where(_OF_FEDERATION)

#: How many expired rows one opportunistic purge deletes at most (one short transaction).
PURGE_BATCH = 500
#: Rows per transaction of a full purge (``purge_expired()``, ``flask authflow sessions purge``).
FULL_PURGE_BATCH = 5000


def _native_upsert(dialect_insert: Any) -> Any:
    """INSERT … ON CONFLICT (sid_hash) DO UPDATE, built once; values come as parameters."""
    stmt = dialect_insert(sessions_table)
    updated = {c.name: stmt.excluded[c.name] for c in sessions_table.c if c.name != "sid_hash"}
    return stmt.on_conflict_do_update(index_elements=["sid_hash"], set_=updated)


#: Dialects with a native upsert; others update, then insert.
_UPSERTS: dict[str, Any] = {
    "sqlite": _native_upsert(sqlite.insert),
    "postgresql": _native_upsert(postgresql.insert),
}


class _Revoked(Exception):
    """Raised inside a save transaction to roll it back: an id in ``replaces`` was gone."""


class SqlAlchemySessionStore:
    """A :class:`~flask_authflow._core.ports.SessionStore` on SQLAlchemy.

    :param engine_source: an :class:`~sqlalchemy.engine.Engine`, a database URL, or a
        Flask-SQLAlchemy ``db``.
    :param crypto: seals each record at rest (use a key of its own, not the cookie
        signing key; :func:`~flask_authflow._core.crypto.derive_key` can derive one).
    :param clock: the time used for expiry.
    :param create_tables: create ``authflow_sessions`` if it does not exist (turn off
        when the schema is managed by migrations).
    :param purge_every: every this many saves, delete up to ``purge_batch`` expired rows
        in one short transaction (``None`` turns it off: then run ``flask authflow
        sessions purge`` from cron). Expired rows are never loaded either way.
    :param purge_batch: the most rows one of those purges deletes.

    Every database failure is raised as :class:`~flask_authflow.errors.StoreUnavailable`
    so callers fail closed. A row that does not decrypt or decode (wrong key, tampering)
    is treated as absent and logged without any session data.
    """

    def __init__(
        self,
        engine_source: EngineSource,
        *,
        crypto: SessionCrypto,
        clock: Clock | None = None,
        create_tables: bool = True,
        purge_every: int | None = 256,
        purge_batch: int = PURGE_BATCH,
    ) -> None:
        if not isinstance(crypto, SessionCrypto):
            raise TypeError("crypto must be a SessionCrypto")
        if purge_every is not None and purge_every < 1:
            raise ValueError("purge_every must be a positive number of saves, or None")
        if purge_batch < 1:
            raise ValueError("purge_batch must be positive")
        self.engine = resolve_engine(engine_source)
        # Reads of one row need no transaction: on a server database AUTOCOMMIT skips the
        # BEGIN/ROLLBACK round trips and shares the engine's pool (see autocommit_reads).
        self._read_engine = autocommit_reads(self.engine)
        self._crypto = crypto
        self._opener = RecordOpener(crypto, log=log, what="row")
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._clock_given = clock is not None
        self._purge_every = purge_every
        self._purge_size = purge_batch
        # This database's statements, chosen once.
        dialect = self.engine.dialect.name
        self._purge_statement, self._purge_tenant_statement = _PURGE_BATCH.get(dialect, _PORTABLE_PURGE_BATCH)
        self._upsert_statement: Any = _UPSERTS.get(dialect)
        self._revocation_lock: Any = _REVOCATION_LOCKS.get(dialect)
        self._try_lock = dialect == "sqlite"  # a touch there must not queue for the write lock
        self._fold = FOLDS.get(dialect) or fold_after_read()
        # On a SQLite file opened from a URL, reads and touches run on a second pool whose
        # connections never wait for the write lock (see sqlite_touch_engine).
        self._touch_engine = sqlite_touch_engine(self.engine)
        self._saves = itertools.count(1)
        renew_in_forked_child(self.engine)  # (the engines made beside it are renewed with it)
        if create_tables:
            self.create_tables()

    def create_tables(self) -> None:
        """Create the sessions table (and its indexes) if missing.

        A table created by an earlier version lacks the ``federation_key`` column: it is
        added (with its index) so existing development databases keep working.
        """
        with self._guard():
            metadata.create_all(self.engine, tables=[sessions_table])
            columns = {column["name"] for column in inspect(self.engine).get_columns("authflow_sessions")}
            if "federation_key" not in columns:
                with self.engine.begin() as conn:
                    conn.execute(text("ALTER TABLE authflow_sessions ADD COLUMN federation_key VARCHAR(64)"))
                    conn.execute(
                        text(
                            "CREATE INDEX IF NOT EXISTS ix_authflow_sessions_federation_key "
                            "ON authflow_sessions (federation_key)"
                        )
                    )

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:  # driver errors, pool time-outs, anything from the engine
            # The message of the driver error may contain SQL and parameters: keep it out.
            raise store_unavailable(exc) from exc

    def _write_one(self, statement: Any, params: dict[str, Any]) -> int:
        """One idempotent write statement on its own: in AUTOCOMMIT on a server database
        (one round trip), retried once on a connection found dead (see run_statement)."""
        with self._guard():
            return run_statement(self.engine, self._read_engine, statement, params, idempotent=True)

    def _run(self, work: Callable[[Connection], T]) -> T:
        # One transaction; a connection found dead before the commit (a database restart)
        # is replaced and the transaction runs once more (see run_transaction).
        with self._guard():
            return run_transaction(self.engine, work)

    # --- record <-> row ---------------------------------------------------------------------

    def _open(self, key: str, data: Any, expected_sid: str | None = None) -> SessionRecord | None:
        return self._opener.open(key, data, expected_sid)

    # --- SessionStore -----------------------------------------------------------------------

    def load(self, sid: str) -> SessionRecord | None:
        key = sid_hash(sid)
        params = {"key": key, "now": self._clock.now()}
        # One pre-built statement on a pooled connection, no explicit transaction for a
        # single read; a pooled connection that died (a database restart) is replaced and
        # the read runs once more (run_read).
        with self._guard():
            row = run_read(self._read_engine, lambda conn: conn.execute(LOAD_QUERY, params).one_or_none())
        if row is None:
            return None
        record = self._open(key, row.data, expected_sid=sid)
        if record is None:
            return None
        touched = utc(row.updated_at)
        return replace(record, last_seen_at=touched) if touched > record.last_seen_at else record

    def load_touching(self, sid: str, touch: SessionTouch) -> tuple[SessionRecord, datetime | None] | None:
        """``load`` with the touch folded in (see ``_session_read``): one statement on
        PostgreSQL, the read and (when due) a touch that never waits on SQLite."""
        key = sid_hash(sid)
        params = {
            "key": key,
            "now": self._clock.now(),
            "due": utc(touch.due_by),
            "at": utc(touch.at),
            "exp": utc(touch.expires_at),
        }
        with self._guard():
            folded = self._read_folded(params)
        if folded is None:
            return None
        data, seen, replaced = folded
        record = self._open(key, data, expected_sid=sid)
        if record is None:
            return None
        return (replace(record, last_seen_at=seen) if seen > record.last_seen_at else record), replaced

    def _read_folded(self, params: dict[str, Any]) -> Folded:
        fast = self._touch_engine
        if fast is not None:
            try:
                with fast.connect() as conn:
                    return SQLITE_NO_WAIT_FOLD(conn, params)
            except OperationalError:
                # The read itself found the file locked (a connection recovering the WAL, or
                # in exclusive mode): read on the engine's own pool, which waits as configured.
                log.debug("session read retried on a waiting connection: the database is busy")
        return run_read(self._read_engine, lambda conn: self._fold(conn, params))

    def touch(self, record: SessionRecord, expires_at: datetime) -> bool:
        """One ``UPDATE`` of the live row's ``updated_at`` (the last-seen time) and
        ``expires_at``. On SQLite it does not wait for the database's write lock: while
        another connection writes, the touch is skipped (``False``); the session's next
        request touches it again."""
        params = {
            "key": sid_hash(record.sid),
            "now": self._clock.now(),
            "last_seen": utc(record.last_seen_at),
            "expires": utc(expires_at),
        }
        if not self._try_lock:
            return bool(self._write_one(TOUCH, params))
        if self._touch_engine is not None:
            with self._guard(), self._touch_engine.connect() as conn:
                return touch_now(conn, params)
        with self._guard(), self.engine.connect() as conn:
            return try_touch(conn, params)

    def save(
        self,
        record: SessionRecord,
        expires_at: datetime,
        *,
        replaces: Sequence[str] = (),
        existing: bool = False,
    ) -> bool:
        """Write ``record`` under the contract of :meth:`SessionStore.save`.

        An existing session is an ``UPDATE … WHERE sid_hash = ? AND expires_at > now``:
        a deleted (revoked) row is never re-created. A rotation deletes the live rows of
        ``replaces`` and inserts the new id in one transaction, rolled back if one of
        them was already gone (one id replaced: its live row updated to the new id).
        """
        key = sid_hash(record.sid)
        values = self._row_values(key, record, expires_at)
        now = self._clock.now()
        if existing:
            params = {"key": key, "now": now, **{f"v_{name}": value for name, value in values.items()}}
            # One statement (an update of the live row only: never a re-creation).
            written = bool(self._write_one(_UPDATE_LIVE, params))
        else:
            written = self._insert(key, values, sorted({sid_hash(old) for old in replaces} - {key}))
        if written and self._purge_every is not None and next(self._saves) % self._purge_every == 0:
            self._purge_some()
        return written

    def save_on(self, conn: Connection, write: SessionWrite) -> bool:
        """:meth:`save` of ``write`` on ``conn``, in its caller's transaction (a login step's
        unit of work, see :meth:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend.join_sessions`):
        the step's session is written with the credential it uses up, or neither. False
        (the session was revoked) leaves the transaction to be rolled back."""
        record = write.record
        key = sid_hash(record.sid)
        values = self._row_values(key, record, write.expires_at)
        now = self._clock.now()
        with self._guard():
            if write.existing:
                params = {"key": key, "now": now, **{f"v_{name}": value for name, value in values.items()}}
                return bool(conn.execute(_UPDATE_LIVE, params).rowcount)
            return self._replace(conn, key, values, sorted({sid_hash(old) for old in write.replaces} - {key}))

    def _row_values(self, key: str, record: SessionRecord, expires_at: datetime) -> dict[str, Any]:
        """The columns of ``record``'s row; its data sealed under the row's key."""
        return {
            "tenant": record.tenant,
            "user_id": record.user_id,
            "state": record.state.value,
            "expires_at": utc(expires_at),
            # The last-seen time, in the clear: a touch moves it without opening the record.
            "updated_at": utc(record.last_seen_at),
            "data": self._crypto.encrypt(key, serialize_record(record)),
            "federation_key": record_federation_key(record),
        }

    def _replace(self, conn: Connection, key: str, values: dict[str, Any], old_keys: list[str]) -> bool:
        """Delete the live rows of ``old_keys`` and write ``key``'s row on ``conn``; False,
        with nothing written, when one of the old rows was already gone (revoked). The
        usual rotation, of one id, is one UPDATE of the old row to the new id."""
        if len(old_keys) == 1:
            params = {"old_key": old_keys[0], "new_key": key, "now": self._clock.now()}
            params.update({f"v_{name}": value for name, value in values.items()})
            return bool(conn.execute(_ROTATE_LIVE, params).rowcount)
        if old_keys:
            gone = conn.execute(_DELETE_LIVE_OLD, {"old_keys": old_keys, "now": self._clock.now()})
            if gone.rowcount != len(old_keys):
                return False
        self._upsert(conn, key, values)
        return True

    def _insert(self, key: str, values: dict[str, Any], old_keys: list[str]) -> bool:
        upsert = self._upsert_statement
        if not old_keys and upsert is not None:  # a new session replacing nothing: one statement
            self._write_one(upsert, {"sid_hash": key, **values})
            return True

        def work(conn: Connection) -> bool:
            if not self._replace(conn, key, values, old_keys):
                raise _Revoked
            return True

        try:
            return self._run(work)
        except _Revoked:  # the transaction was rolled back: nothing deleted, nothing inserted
            return False

    def _purge_some(self) -> None:
        """The opportunistic purge: one bounded batch, never failing the save that ran it."""
        try:
            purged = self._purge_batch_once(self._purge_size)
        except StoreUnavailable:
            return  # logged by _guard; the next purge tries again
        if purged:
            log.debug("purged %d expired session row(s)", purged)

    def _purge_batch_once(self, batch: int, tenant: str | None = None) -> int:
        params = {"now": self._clock.now(), "batch": batch, "tenant": tenant}
        statement = self._purge_statement if tenant is None else self._purge_tenant_statement
        return int(self._run(lambda conn: conn.execute(statement, params).rowcount))

    def _upsert(self, conn: Connection, key: str, values: dict[str, Any]) -> None:
        upsert = self._upsert_statement
        if upsert is not None:
            conn.execute(upsert, {"sid_hash": key, **values})
            return
        # Any other dialect: update, then insert; a concurrent insert wins the race and
        # is overwritten by the retried update (last writer wins, as with the upsert).
        where = sessions_table.c.sid_hash == key
        if conn.execute(update(sessions_table).where(where).values(**values)).rowcount:
            return
        try:
            with conn.begin_nested():
                conn.execute(insert(sessions_table).values(sid_hash=key, **values))
        except IntegrityError:
            conn.execute(update(sessions_table).where(where).values(**values))

    def delete(self, sid: str) -> None:
        self._write_one(_DELETE_ONE, {"key": sid_hash(sid)})

    def list_user_sessions(self, tenant: str, user_id: str) -> list[SessionRecord]:
        now = self._clock.now()
        query = (
            select(sessions_table.c.sid_hash, sessions_table.c.data, sessions_table.c.updated_at)
            .where(
                and_(
                    sessions_table.c.tenant == tenant,
                    sessions_table.c.user_id == user_id,
                    sessions_table.c.expires_at > now,
                )
            )
            .order_by(sessions_table.c.sid_hash)
        )
        rows = self._run(lambda conn: conn.execute(query).all())
        records = []
        for key, data, touched in rows:
            record = self._open(key, data)
            if record is not None and utc(touched) > record.last_seen_at:
                record = replace(record, last_seen_at=utc(touched))
            # The clear index columns are not authenticated: trust the decrypted record.
            if (
                record is not None
                and record.tenant == tenant
                and record.user_id == user_id
                and record.state is not AuthState.GUEST
            ):
                records.append(record)
        return records

    def _delete_where(self, live: Any, everything: Any, params: dict[str, Any]) -> int:
        """Delete the rows ``everything`` selects (a bulk revocation); returns how many of
        them were live.

        On PostgreSQL the transaction first takes a SHARE ROW EXCLUSIVE lock on the table:
        session writes (not reads) wait for the revocation, and the revocation for writes
        in flight. Without it a rotation committing while the DELETE runs escapes: the
        DELETE waits on the old row, which the rotation deleted, and never sees the new
        row, which its snapshot predates (raced by several processes in
        tests/test_multiprocess_races.py). With it, the DELETE sees every rotation that
        committed before and every later one finds its old row gone. SQLite serialises
        writers by itself.
        """
        params = {**params, "now": self._clock.now()}

        def work(conn: Connection) -> int:
            if self._revocation_lock is not None:
                conn.execute(self._revocation_lock)
            gone = conn.execute(live, params)
            conn.execute(everything, params)  # expired leftovers too
            return int(gone.rowcount)

        return self._run(work)

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        """Delete every row of the user; returns how many live sessions were revoked."""
        return self._delete_where(
            _DELETE_LIVE_OF_USER, _DELETE_ALL_OF_USER, {"tenant": tenant, "user_id": user_id}
        )

    def delete_tenant_sessions(self, tenant: str) -> int:
        """Delete every row of every user of ``tenant`` (guests carry no tenant and stay);
        returns how many live sessions were revoked. One statement: a session saved
        concurrently either is deleted by it or, if it was loaded before, finds its row
        gone and is not written back."""
        return self._delete_where(_DELETE_LIVE_OF_TENANT, _DELETE_ALL_OF_TENANT, {"tenant": tenant})

    def delete_federated_sessions(self, issuer: str, provider_sid: str) -> int:
        """Delete the rows of every session of the provider session (``issuer``, ``sid``)."""
        return self._delete_where(
            _DELETE_LIVE_OF_FEDERATION,
            _DELETE_ALL_OF_FEDERATION,
            {"federation_key": federation_key(issuer, provider_sid)},
        )

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock when none was given at construction (``AuthFlow.init_app``
        calls it, so a store built at import time follows the app and a test's
        ``mock_clock``, as the backends do)."""
        if not self._clock_given:
            self._clock = clock

    def purge_expired(self, limit: int | None = None, *, tenant: str | None = None) -> int:
        """Delete expired rows now, in transactions of at most FULL_PURGE_BATCH rows (so
        live sessions are never blocked for long); at most ``limit`` rows when given, only
        those of ``tenant`` when given. Returns how many were deleted."""
        purged = 0
        while limit is None or purged < limit:
            batch = FULL_PURGE_BATCH if limit is None else min(FULL_PURGE_BATCH, limit - purged)
            deleted = self._purge_batch_once(batch, tenant)
            purged += deleted
            if deleted < batch:
                break
        return purged

    def database_engine(self) -> Engine:
        """The engine holding ``authflow_sessions``."""
        return self.engine

    def __repr__(self) -> str:
        return f"<SqlAlchemySessionStore {self.engine.url.render_as_string(hide_password=True)}>"
