"""The per-request reads made cheaper: the session read on the driver itself
(``SqlAlchemySessionStore._load_direct``) and the remembered loopback check.

On psycopg 3 and pysqlite the per-request ``load`` runs the compiled ``_LOAD_QUERY`` over a
raw connection of the engine's pool instead of through SQLAlchemy Core. These tests hold it
to Core's answers (the same rows, the same bound parameters, expiry at the same boundary),
check that it steps aside for whoever watches the statements, that a driver error fails
closed, and that the connection goes back to the pool with nothing open on it.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from flask_authflow import extension
from flask_authflow.audit.client_ip import parse_ip
from flask_authflow.clock import MockClock
from flask_authflow.errors import StoreUnavailable
from flask_authflow.session.crypto import SessionCrypto
from flask_authflow.session.model import SessionRecord, new_guest_record, sid_hash
from flask_authflow.stores.sqlalchemy import session_store as module
from flask_authflow.stores.sqlalchemy.base import UTCDateTime
from flask_authflow.stores.sqlalchemy.session_store import SqlAlchemySessionStore
from tests.test_session_stores import user_record

HOUR = timedelta(hours=1)
MICROSECOND = timedelta(microseconds=1)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def store(database_url: str, clock: MockClock) -> Iterator[SqlAlchemySessionStore]:
    made = SqlAlchemySessionStore(
        database_url, crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None
    )
    yield made
    made.engine.dispose()


@pytest.fixture
def core_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the loads that went through SQLAlchemy Core."""
    seen: list[int] = []
    real = module.run_read

    def counted(*args: Any) -> Any:
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(module, "run_read", counted)
    return seen


def core_load(store: SqlAlchemySessionStore, sid: str) -> SessionRecord | None:
    """What the load answers through SQLAlchemy Core (the direct read switched off)."""
    direct = store._direct
    store._direct = None
    try:
        return store.load(sid)
    finally:
        store._direct = direct


def test_both_drivers_read_directly(store: SqlAlchemySessionStore) -> None:
    assert store._direct is not None
    assert store._direct.autocommit is (store.engine.dialect.name == "postgresql")


def test_the_direct_read_answers_what_core_answers_up_to_the_expiry(
    store: SqlAlchemySessionStore, clock: MockClock, core_reads: list[int]
) -> None:
    start = clock.now()
    live = user_record(clock)
    ends = replace(new_guest_record(start), custom={"n": 1})
    store.save(live, start + 2 * HOUR)
    store.save(ends, start + HOUR)
    unknown = new_guest_record(start).sid

    def both(sid: str) -> SessionRecord | None:
        before = len(core_reads)
        direct = store.load(sid)
        assert len(core_reads) == before  # it was the direct read
        core = core_load(store, sid)
        assert len(core_reads) == before + 1
        assert direct == core
        return direct

    assert both(live.sid) == live
    assert both(ends.sid) == ends
    assert both(unknown) is None
    clock.set(start + HOUR - MICROSECOND)  # the last microsecond of ``ends``
    assert both(ends.sid) == ends
    clock.set(start + HOUR)  # expires_at == now: over
    assert both(ends.sid) is None
    assert both(live.sid) == live


def test_now_is_bound_exactly_as_core_binds_it(store: SqlAlchemySessionStore, clock: MockClock) -> None:
    clock.set(clock.now() + timedelta(seconds=7, microseconds=123))  # a fraction to format
    record = new_guest_record(clock.now())
    store.save(record, clock.now() + HOUR)
    bound: list[Any] = []
    listener = lambda conn, cursor, statement, parameters, context, many: bound.append(  # noqa: E731
        (statement, parameters)
    )
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        assert store.load(record.sid) == record  # through Core: a listener is there
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    [(statement, parameters)] = bound
    assert store._direct is not None
    assert statement == store._direct.sql
    assert store._direct.arguments({"key": sid_hash(record.sid), "now": clock.now()}) == parameters
    if store.engine.dialect.name == "sqlite":
        # SQLAlchemy's SQLite DATETIME text of the naive UTC time
        assert parameters[1] == clock.now().replace(tzinfo=None).isoformat(" ", "microseconds")


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 1, tzinfo=UTC),  # no fraction: Core still writes .000000
        datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC),  # a three-digit year, padded
        datetime(2026, 5, 5, 1, 2, 3, 999999, tzinfo=timezone(timedelta(hours=5))),  # not UTC
        datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
        datetime(2026, 1, 1, 12),  # naive: taken as UTC
        datetime.max.replace(tzinfo=UTC),
        datetime.min.replace(tzinfo=UTC),
    ],
)
def test_the_sqlite_time_text_is_cores(value: datetime) -> None:
    """The direct read formats ``now`` itself on SQLite: the text Core's two chained
    processors (UTCDateTime, then SQLite's DATETIME) make of the same value."""
    dialect = create_engine("sqlite://").dialect
    core = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert core is not None
    ours = module._bind_processor(UTCDateTime(), dialect)
    assert ours is not None and ours is not core
    assert ours(value) == core(value)


@pytest.mark.parametrize("watch", ["listener", "echo", "logging", "execute_listener"])
def test_whoever_watches_the_statements_sees_the_read(
    store: SqlAlchemySessionStore,
    clock: MockClock,
    core_reads: list[int],
    watch: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = new_guest_record(clock.now())
    store.save(record, clock.now() + HOUR)
    assert store.load(record.sid) == record
    assert core_reads == []
    seen: list[str] = []
    engine = store.engine
    own = None
    if watch == "listener":
        event.listen(engine, "after_cursor_execute", lambda *args: seen.append(args[2]))
    elif watch == "execute_listener":
        event.listen(engine, "before_execute", lambda conn, clause, *args: seen.append(str(clause)))
    elif watch == "echo":
        # An engine of its own (its own logger): echo leaves a handler on the engine's logger.
        own = create_engine(engine.url, echo=True, logging_name=f"direct-{secrets.token_hex(4)}")
        store = SqlAlchemySessionStore(own, crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None)
    else:
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine.Engine")
    caplog.clear()
    try:
        assert store.load(record.sid) == record
    finally:
        if own is not None:
            own.dispose()
    assert core_reads == [1]
    if watch in ("listener", "execute_listener"):
        assert len(seen) == 1 and "FROM authflow_sessions" in seen[0]
    else:
        assert "FROM authflow_sessions" in caplog.text


def test_the_connection_goes_back_to_the_pool_with_nothing_open(
    store: SqlAlchemySessionStore, clock: MockClock, no_core: list[str]
) -> None:
    record = new_guest_record(clock.now())
    store.save(record, clock.now() + HOUR)
    resets: list[bool] = []
    checkouts: list[int] = []
    dialect = store.engine.dialect.name

    def on_reset(dbapi_connection: Any, record: Any, state: Any) -> None:
        if dialect == "sqlite":
            resets.append(dbapi_connection.in_transaction)
        else:
            resets.append(dbapi_connection.info.transaction_status != 0)  # 0 = IDLE

    event.listen(store.engine.pool, "reset", on_reset)
    event.listen(store.engine.pool, "checkout", lambda *args: checkouts.append(1))
    for _ in range(3):
        assert store.load(new_guest_record(clock.now()).sid) is None
        assert store.load(record.sid) == record
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert len(checkouts) == 6  # pool events fire for the direct read
    assert resets == [False] * 6  # reset (rolled back) on return, with no transaction left open
    if dialect == "sqlite":
        # No read left open either: a checkpoint that must wait for every reader completes.
        database = store.engine.url.database
        assert database is not None
        with sqlite3.connect(database) as other:
            busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
    assert no_core == []


def test_a_driver_error_fails_closed_and_keeps_the_pool_usable(
    store: SqlAlchemySessionStore, clock: MockClock, no_core: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    record = new_guest_record(clock.now())
    store.save(record, clock.now() + HOUR)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE authflow_sessions RENAME TO authflow_sessions_away"))
    with caplog.at_level(logging.WARNING, logger="flask_authflow.session"):
        with pytest.raises(StoreUnavailable) as raised:
            store.load(record.sid)
    assert isinstance(raised.value.__cause__, store.engine.dialect.loaded_dbapi.Error)
    assert "session store unavailable: " in caplog.text
    assert record.sid not in caplog.text and sid_hash(record.sid) not in caplog.text
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE authflow_sessions_away RENAME TO authflow_sessions"))
    assert store.load(record.sid) == record
    assert no_core == []


def test_the_error_is_the_one_core_raises(store: SqlAlchemySessionStore, clock: MockClock) -> None:
    """Direct or through Core, a missing table is StoreUnavailable from the same driver error."""
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE authflow_sessions"))
    sid = new_guest_record(clock.now()).sid
    with pytest.raises(StoreUnavailable) as direct:
        store.load(sid)
    direct_cause = direct.value.__cause__
    store._direct = None
    with pytest.raises(StoreUnavailable) as core:
        store.load(sid)
    core_cause: Any = core.value.__cause__
    assert type(direct_cause) is type(core_cause.orig)
    assert str(direct_cause) == str(core_cause.orig)


def test_a_failing_connect_fails_closed(tmp_path: Path, clock: MockClock, no_core: list[str]) -> None:
    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 'a.db'}", crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None
    )
    try:
        record = new_guest_record(clock.now())
        store.save(record, clock.now() + HOUR)
        store.engine.dispose()

        def refuse(dbapi_connection: Any, connection_record: Any) -> None:
            raise sqlite3.OperationalError("unable to open database file")

        event.listen(store.engine, "connect", refuse)
        with pytest.raises(StoreUnavailable) as raised:
            store.load(record.sid)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        event.remove(store.engine, "connect", refuse)
        assert store.load(record.sid) == record
    finally:
        store.engine.dispose()


def test_a_closed_sqlite_connection_is_replaced_through_core(
    tmp_path: Path, clock: MockClock, core_reads: list[int]
) -> None:
    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 'a.db'}", crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None
    )
    try:
        record = new_guest_record(clock.now())
        store.save(record, clock.now() + HOUR)
        closed: list[int] = []

        def close_once(dbapi_connection: Any, connection_record: Any, proxy: Any) -> None:
            if not closed:  # the connection dies between checkout and the read
                closed.append(1)
                dbapi_connection.close()

        event.listen(store.engine.pool, "checkout", close_once)
        assert store.load(record.sid) == record  # invalidated, then read through Core anew
        assert core_reads == [1]
        assert store.load(record.sid) == record
        assert core_reads == [1]  # the new connection reads directly again
    finally:
        store.engine.dispose()


# --- the loopback check of every request on a plain-HTTP server on this machine ---------------------


@pytest.mark.parametrize(
    "address",
    [
        *(None, "", "127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1", "::1%lo", "10.0.0.1"),
        *("::ffff:10.0.0.1", " 127.0.0.1", "127.1", "localhost", "127.0.0.1, 10.0.0.1", "1" * 65),
        "::1" + " " * 62,
    ],
)
def test_the_remembered_loopback_answer_is_the_parsers(address: str | None) -> None:
    expected = (ip := parse_ip(address)) is not None and ip.is_loopback
    assert extension._is_loopback(address) is expected
    assert extension._is_loopback(address) is expected  # remembered: the same answer


def test_the_loopback_memory_is_bounded_and_keeps_no_long_strings() -> None:
    cached = extension._is_loopback_text
    assert cached.cache_info().maxsize is not None
    before = cached.cache_info().currsize
    assert not extension._is_loopback("127.0.0.1" + " " * 200)  # an X-Forwarded-For hop of junk
    assert cached.cache_info().currsize == before
