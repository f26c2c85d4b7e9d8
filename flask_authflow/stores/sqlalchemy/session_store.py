"""Session records in a SQL database (SQLite by default, PostgreSQL for several machines).

Each row holds the record encrypted with :class:`~flask_authflow.session.crypto.SessionCrypto`;
the only clear columns are the ones queries need (tenant, user, state, expiry). The row key
is the SHA-256 of the session id, never the id itself, so a reader of the database (a
backup, a replica) cannot replay a session cookie, and the envelope's associated data is
that same key, so a ciphertext copied to another row does not decrypt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Index,
    LargeBinary,
    String,
    Table,
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
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ...clock import Clock, SystemClock, utc
from ...errors import SessionDecryptError, SessionRecordError, StoreUnavailable
from ...session.crypto import SessionCrypto
from ...session.model import AuthState, SessionRecord, federation_key, record_federation_key, sid_hash
from ...session.stores import deserialize_record, serialize_record
from .base import EngineSource, UTCDateTime, metadata, resolve_engine

__all__ = ["SqlAlchemySessionStore", "sessions_table"]

log = logging.getLogger("flask_authflow.session")

T = TypeVar("T")


sessions_table = Table(
    "authflow_sessions",
    metadata,
    Column("sid_hash", String(64), primary_key=True),
    Column("tenant", String(255), nullable=True),
    Column("user_id", String(255), nullable=True),
    Column("state", String(32), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False, index=True),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("data", LargeBinary, nullable=False),
    # federation_key(issuer, sid) of a federated login: back-channel logout looks it up.
    Column("federation_key", String(64), nullable=True),
    Index("ix_authflow_sessions_tenant_user_id", "tenant", "user_id"),
    Index("ix_authflow_sessions_federation_key", "federation_key"),
)


_LOAD_QUERY = select(sessions_table.c.data).where(
    and_(
        sessions_table.c.sid_hash == bindparam("key"),
        sessions_table.c.expires_at > bindparam("now", type_=UTCDateTime()),
    )
)


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
    """A :class:`~flask_authflow.session.stores.SessionStore` on SQLAlchemy.

    :param engine_source: an :class:`~sqlalchemy.engine.Engine`, a database URL, or a
        Flask-SQLAlchemy ``db``.
    :param crypto: seals each record at rest (use a key of its own, not the cookie
        signing key; :func:`~flask_authflow.session.crypto.derive_key` can derive one).
    :param clock: the time used for expiry.
    :param create_tables: create ``authflow_sessions`` if it does not exist (turn off
        when the schema is managed by migrations).

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
    ) -> None:
        if not isinstance(crypto, SessionCrypto):
            raise TypeError("crypto must be a SessionCrypto")
        self.engine = resolve_engine(engine_source)
        # Reads of one row need no transaction: on a server database AUTOCOMMIT skips the
        # BEGIN/ROLLBACK round trips (about 2x on PostgreSQL) and shares the engine's pool.
        # pysqlite has no such round trips, and switching its isolation level on every
        # checkout costs more than it saves (measured: 4,000 vs 3,000 requests/s).
        self._read_engine = (
            self.engine
            if self.engine.dialect.name == "sqlite"
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._crypto = crypto
        self._clock: Clock = clock if clock is not None else SystemClock()
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
            log.warning("session store unavailable: %s", type(exc).__name__)
            raise StoreUnavailable("the session store is unavailable") from exc

    def _run(self, work: Callable[[Connection], T]) -> T:
        with self._guard(), self.engine.begin() as conn:
            return work(conn)

    # --- record <-> row ---------------------------------------------------------------------

    def _open(self, key: str, data: Any, expected_sid: str | None = None) -> SessionRecord | None:
        try:
            record = deserialize_record(self._crypto.decrypt(key, bytes(data)))
        except (SessionDecryptError, SessionRecordError) as exc:
            log.warning("session row %s… unreadable (%s); treated as absent", key[:8], type(exc).__name__)
            return None
        if sid_hash(record.sid) != key or (expected_sid is not None and record.sid != expected_sid):
            log.warning("session row %s… holds another session's record; treated as absent", key[:8])
            return None
        return record

    # --- SessionStore -----------------------------------------------------------------------

    def load(self, sid: str) -> SessionRecord | None:
        key = sid_hash(sid)
        params = {"key": key, "now": self._clock.now()}
        # The hot path of every request: one pre-built statement (SQLAlchemy caches its
        # compiled form) on a plain connection, no explicit transaction for a single read.
        with self._guard(), self._read_engine.connect() as conn:
            data = conn.execute(_LOAD_QUERY, params).scalar_one_or_none()
        if data is None:
            return None
        return self._open(key, data, expected_sid=sid)

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
        them was already gone.
        """
        key = sid_hash(record.sid)
        values: dict[str, Any] = {
            "tenant": record.tenant,
            "user_id": record.user_id,
            "state": record.state.value,
            "expires_at": utc(expires_at),
            "updated_at": self._clock.now(),
            "data": self._crypto.encrypt(key, serialize_record(record)),
            "federation_key": record_federation_key(record),
        }
        now = values["updated_at"]
        if existing:
            stmt = (
                update(sessions_table)
                .where(sessions_table.c.sid_hash == key, sessions_table.c.expires_at > now)
                .values(**values)
            )
            return bool(self._run(lambda conn: conn.execute(stmt).rowcount))
        old_keys = sorted({sid_hash(old) for old in replaces} - {key})

        def work(conn: Connection) -> bool:
            if old_keys:
                gone = conn.execute(
                    delete(sessions_table).where(
                        sessions_table.c.sid_hash.in_(old_keys), sessions_table.c.expires_at > now
                    )
                )
                if gone.rowcount != len(old_keys):
                    raise _Revoked
            self._upsert(conn, key, values)
            return True

        try:
            return self._run(work)
        except _Revoked:  # the transaction was rolled back: nothing deleted, nothing inserted
            return False

    def _upsert(self, conn: Connection, key: str, values: dict[str, Any]) -> None:
        name = conn.dialect.name
        upsert = _UPSERTS.get(name)
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
        stmt = delete(sessions_table).where(sessions_table.c.sid_hash == sid_hash(sid))
        self._run(lambda conn: conn.execute(stmt))

    def list_user_sessions(self, tenant: str, user_id: str) -> list[SessionRecord]:
        now = self._clock.now()
        query = (
            select(sessions_table.c.sid_hash, sessions_table.c.data)
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
        for key, data in rows:
            record = self._open(key, data)
            # The clear index columns are not authenticated: trust the decrypted record.
            if (
                record is not None
                and record.tenant == tenant
                and record.user_id == user_id
                and record.state is not AuthState.GUEST
            ):
                records.append(record)
        return records

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        """Delete every row of the user; returns how many live sessions were revoked."""
        of_user = and_(sessions_table.c.tenant == tenant, sessions_table.c.user_id == user_id)
        now = self._clock.now()

        def work(conn: Connection) -> int:
            live = conn.execute(delete(sessions_table).where(of_user, sessions_table.c.expires_at > now))
            conn.execute(delete(sessions_table).where(of_user))  # expired leftovers too
            return int(live.rowcount)

        return self._run(work)

    def delete_federated_sessions(self, issuer: str, provider_sid: str) -> int:
        """Delete the rows of every session of the provider session (``issuer``, ``sid``)."""
        of_sid = sessions_table.c.federation_key == federation_key(issuer, provider_sid)
        now = self._clock.now()

        def work(conn: Connection) -> int:
            live = conn.execute(delete(sessions_table).where(of_sid, sessions_table.c.expires_at > now))
            conn.execute(delete(sessions_table).where(of_sid))
            return int(live.rowcount)

        return self._run(work)

    def purge_expired(self) -> int:
        """Delete every expired row now; returns how many were deleted."""
        stmt = delete(sessions_table).where(sessions_table.c.expires_at <= self._clock.now())
        return int(self._run(lambda conn: conn.execute(stmt).rowcount))

    def __repr__(self) -> str:
        return f"<SqlAlchemySessionStore {self.engine.url.render_as_string(hide_password=True)}>"
