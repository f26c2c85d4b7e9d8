"""The last-seen touch: one small write folded into the read (one statement on PostgreSQL,
one script call on Redis), spread by jitter, never waiting on SQLite's lock.

Everything here is counted (statements, commands, writes), never timed.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import Engine, create_engine, event, select

from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore, SessionTouch
from flask_authflow._core.session import SessionRecord, new_guest_record, new_session_id, sid_hash
from flask_authflow.errors import StoreUnavailable
from flask_authflow.sessions._interface import AuthFlowSessionInterface
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._sql.engine import autocommit_reads
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore, sessions_table
from tests.test_session_interface import COOKIE, KEY, cookie_value, logged_in, make_app, raw_get, sid_of
from tests.test_session_stores import user_record

HOUR = timedelta(hours=1)
StoreMaker = Callable[[MockClock], SessionStore]


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreMaker]:
    """A maker of each kind of session store, on a fresh database."""
    made: list[Any] = []
    kind = request.param

    def make(clock: MockClock) -> SessionStore:
        crypto = SessionCrypto(bytes(range(32)))
        store: Any
        if kind == "memory":
            store = MemorySessionStore(clock=clock)
        elif kind == "redis":
            from flask_authflow.storage._redis_sessions import RedisSessionStore

            server = request.getfixturevalue("redis_server")
            store = RedisSessionStore(server.url(), crypto=crypto, clock=clock, prefix=f"t{id(clock)}:")
        else:
            url = (
                f"sqlite:///{tmp_path / 'touch.db'}"
                if kind == "sqlite"
                else request.getfixturevalue("postgres_server").new_database()
            )
            store = SqlAlchemySessionStore(url, crypto=crypto, clock=clock, purge_every=None)
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, SqlAlchemySessionStore):
            store.engine.dispose()


def _touched(record: SessionRecord, clock: MockClock) -> SessionRecord:
    return replace(record, last_seen_at=clock.now())


def _due(clock: MockClock, after: timedelta = timedelta(minutes=6)) -> SessionTouch:
    """The touch of a read at ``clock``'s time, of a session due ``after`` its last-seen time."""
    now = clock.now()
    return SessionTouch(at=now, due_by=now - after, expires_at=now + HOUR)


# --- the store operation --------------------------------------------------------------------------


def test_a_touch_moves_the_last_seen_time_and_the_expiry(make_store: StoreMaker) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock, note="kept")
    assert store.save(record, clock.now() + HOUR)
    clock.advance(timedelta(minutes=50))
    assert store.touch(_touched(record, clock), clock.now() + HOUR)
    loaded = store.load(record.sid)
    assert loaded == replace(record, last_seen_at=clock.now())  # everything else as saved
    clock.advance(timedelta(minutes=30))  # past the first expiry, within the new one
    assert store.load(record.sid) is not None
    clock.advance(timedelta(minutes=30))
    assert store.load(record.sid) is None


def test_a_touch_never_brings_back_a_deleted_or_expired_session(make_store: StoreMaker) -> None:
    clock = MockClock()
    store = make_store(clock)
    deleted, expired = user_record(clock), user_record(clock)
    store.save(deleted, clock.now() + HOUR)
    store.save(expired, clock.now() + timedelta(minutes=1))
    store.delete(deleted.sid)
    clock.advance(timedelta(minutes=2))
    assert not store.touch(_touched(deleted, clock), clock.now() + HOUR)
    assert not store.touch(_touched(expired, clock), clock.now() + HOUR)
    assert store.load(deleted.sid) is None and store.load(expired.sid) is None
    never_saved = replace(user_record(clock), sid=new_session_id())
    assert not store.touch(never_saved, clock.now() + HOUR)
    assert store.load(never_saved.sid) is None


def test_a_save_after_a_touch_wins(make_store: StoreMaker) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    clock.advance(timedelta(minutes=10))
    store.touch(_touched(record, clock), clock.now() + HOUR)
    clock.advance(timedelta(minutes=10))
    changed = replace(record, last_seen_at=clock.now(), custom={"n": 2})
    assert store.save(changed, clock.now() + HOUR, existing=True)
    assert store.load(record.sid) == changed


def test_a_due_read_touches_the_session_in_the_same_read(make_store: StoreMaker) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock, note="kept")
    saved_until = clock.now() + HOUR
    assert store.save(record, saved_until)
    clock.advance(timedelta(minutes=5))
    assert store.load_touching(record.sid, _due(clock)) == (record, None)  # not due: no write
    assert store.load(record.sid) == record
    clock.advance(timedelta(minutes=5))
    # Due: the record as it was stored, and the expiry the touch replaced.
    assert store.load_touching(record.sid, _due(clock)) == (record, saved_until)
    assert store.load(record.sid) == replace(record, last_seen_at=clock.now())  # nothing else moved
    assert store.load_touching(record.sid, _due(clock)) == (replace(record, last_seen_at=clock.now()), None)
    clock.advance(timedelta(minutes=55))  # past the first expiry, within the new one
    assert store.load(record.sid) is not None
    clock.advance(timedelta(minutes=10))
    assert store.load(record.sid) is None


def test_a_folded_touch_never_shortens_the_expiry_nor_brings_back_a_session(make_store: StoreMaker) -> None:
    clock = MockClock()
    store = make_store(clock)
    remembered, deleted, expired = user_record(clock), user_record(clock), user_record(clock)
    store.save(remembered, clock.now() + timedelta(days=30))
    store.save(deleted, clock.now() + HOUR)
    store.save(expired, clock.now() + timedelta(minutes=1))
    store.delete(deleted.sid)
    clock.advance(timedelta(minutes=10))
    assert store.load_touching(remembered.sid, _due(clock)) == (
        remembered,
        clock.now() + timedelta(days=30) - timedelta(minutes=10),
    )
    clock.advance(timedelta(days=2))  # the stored expiry (30 days) was later than the touch's (1 hour)
    assert store.load(remembered.sid) is not None
    for gone in (deleted, expired):
        assert store.load_touching(gone.sid, _due(clock)) is None
        assert store.load(gone.sid) is None
    never_saved = new_session_id()
    assert store.load_touching(never_saved, _due(clock)) is None
    assert store.load(never_saved) is None


def test_parallel_touches_and_a_revocation_leave_the_session_revoked(make_store: StoreMaker) -> None:
    """Separate touches and touches folded into reads, beside a revocation."""
    clock = MockClock()
    store = make_store(clock)
    for _ in range(5):
        record = user_record(clock)
        store.save(record, clock.now() + HOUR)
        clock.advance(timedelta(minutes=10))  # due
        barrier = threading.Barrier(5)

        def touch(fold: bool, record: SessionRecord = record, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            if fold:
                store.load_touching(record.sid, _due(clock))
            else:
                store.touch(_touched(record, clock), clock.now() + HOUR)

        def revoke(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            store.delete_user_sessions("acme", "alice")

        threads = [threading.Thread(target=touch, args=(i % 2 == 0,)) for i in range(4)]
        threads.append(threading.Thread(target=revoke))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.load(record.sid) is None


# --- one small statement --------------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlAlchemySessionStore]:
    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(KEY), clock=MockClock(), purge_every=None
    )
    yield store
    store.engine.dispose()


def _engines(store: SqlAlchemySessionStore) -> list[Engine]:
    """The store's engine, and its read-and-touch engine when it has one."""
    own = store._touch_engine
    return [store.engine] if own is None else [store.engine, own]


def _statements(store: SqlAlchemySessionStore) -> list[str]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()))

    for engine in _engines(store):
        event.listen(engine, "before_cursor_execute", record)
    return seen


def _writes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.upper().startswith(("UPDATE", "INSERT", "DELETE"))]


def _settings(engine: Engine) -> tuple[int, int]:
    """``busy_timeout`` and ``synchronous`` of a pooled connection of ``engine``."""
    with engine.connect() as conn:
        waits = conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
        syncs = conn.exec_driver_sql("PRAGMA synchronous").scalar_one()
    return int(waits), int(syncs)


def _url_store(path: Path, clock: MockClock) -> SqlAlchemySessionStore:
    return SqlAlchemySessionStore(
        f"sqlite:///{path}", crypto=SessionCrypto(KEY), clock=clock, purge_every=None
    )


def _given_engine_store(path: Path, clock: MockClock) -> SqlAlchemySessionStore:
    engine = create_engine(f"sqlite:///{path}")
    return SqlAlchemySessionStore(engine, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)


def test_the_sql_touch_is_one_update_of_two_clear_columns(sqlite_store: SqlAlchemySessionStore) -> None:
    clock = MockClock()
    sqlite_store.adopt_clock(clock)
    record = user_record(clock)
    sqlite_store.save(record, clock.now() + HOUR)
    with sqlite_store.engine.connect() as conn:
        sealed = conn.execute(select(sessions_table.c.data)).scalar_one()
    statements = _statements(sqlite_store)
    clock.advance(timedelta(minutes=10))
    assert sqlite_store.touch(_touched(record, clock), clock.now() + HOUR)
    (update,) = _writes(statements)
    assigned = update.partition(" SET ")[2].partition(" WHERE ")[0]
    assert sorted(part.split("=")[0].strip() for part in assigned.split(",")) == ["expires_at", "updated_at"]
    assert statements == [update]  # on the store's own file: no PRAGMA around it
    with sqlite_store.engine.connect() as conn:
        assert conn.execute(select(sessions_table.c.data)).scalar_one() == sealed  # not re-sealed


def test_a_sqlite_file_of_the_store_touches_on_connections_set_once(tmp_path: Path) -> None:
    """A store that opened its SQLite file from a URL reads and touches on connections set
    at connect not to wait for the write lock and not to sync a commit: no touch runs a
    PRAGMA, and the engine every other write uses still waits and syncs as configured."""
    clock = MockClock()
    sqlite_store = _url_store(tmp_path / "own.db", clock)
    record = user_record(clock)
    sqlite_store.save(record, clock.now() + HOUR)
    statements = _statements(sqlite_store)
    for _ in range(2):
        clock.advance(timedelta(minutes=10))
        assert sqlite_store.touch(_touched(record, clock), clock.now() + HOUR)
        clock.advance(timedelta(minutes=10))
        found = sqlite_store.load_touching(record.sid, _due(clock))
        assert found is not None and found[1] is not None
    assert not [s for s in statements if s.upper().startswith("PRAGMA")]
    assert len(_writes(statements)) == 4
    touching = sqlite_store._touch_engine
    assert touching is not None
    assert _settings(touching) == (0, 1)  # no wait; NORMAL (WAL mode)
    assert _settings(sqlite_store.engine) == (5000, 2)  # FULL, SQLite's default
    sqlite_store.engine.dispose()  # disposes the read-and-touch engine too
    assert touching.pool.checkedin() == 0


def test_an_engine_the_application_gave_keeps_its_settings_around_a_touch(tmp_path: Path) -> None:
    """On an engine the application gave (its settings are its own), a touch sets them
    around its UPDATE and restores them; they are read on a connection's first touch only."""
    clock = MockClock()
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    store = SqlAlchemySessionStore(engine, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
    assert store._touch_engine is None
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    assert store.touch(_touched(record, clock), clock.now() + HOUR)
    statements = _statements(store)
    clock.advance(timedelta(minutes=10))
    assert store.touch(_touched(record, clock), clock.now() + HOUR)
    pragmas = [s.upper() for s in statements if s.upper().startswith("PRAGMA")]
    assert pragmas and all("=" in pragma for pragma in pragmas)  # sets and restores, no reads
    assert len(_writes(statements)) == 1
    assert _settings(engine) == (5000, 2)
    with engine.connect() as conn:
        assert conn.execute(select(sessions_table.c.updated_at)).scalar_one() == clock.now()
    engine.dispose()


def test_an_in_memory_sqlite_database_touches_on_its_one_engine() -> None:
    """A second engine on ``sqlite://`` would open another (empty) database: the store
    keeps its one engine, and the touch sets and restores its settings there."""
    clock = MockClock()
    store = SqlAlchemySessionStore("sqlite://", crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
    assert store._touch_engine is None
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    clock.advance(timedelta(minutes=10))
    assert store.load_touching(record.sid, _due(clock)) == (record, record.created_at + HOUR)
    assert store.load(record.sid) == _touched(record, clock)
    store.engine.dispose()


def test_a_protected_get_that_touches_runs_the_read_and_one_small_update(tmp_path: Path) -> None:
    clock = MockClock()
    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 'app.db'}", crypto=SessionCrypto(KEY), clock=clock, purge_every=None
    )
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, touch_jitter=timedelta(0)), clock)
    value = cookie_value(logged_in(app))
    statements = _statements(store)
    checkouts: list[object] = []
    for engine in _engines(store):
        event.listen(engine, "checkout", lambda *args: checkouts.append(args[1]))
    assert raw_get(app, value).get_json()["state"] == "authenticated"
    assert _writes(statements) == []  # not due: a read only
    clock.advance(timedelta(minutes=6))
    statements.clear()
    checkouts.clear()
    response = raw_get(app, value)
    assert len(checkouts) == 1  # the read and its touch on one pooled connection
    assert response.get_json()["state"] == "authenticated"
    assert any(h.startswith(f"{COOKIE}=") for h in response.headers.getlist("Set-Cookie"))
    (update,) = _writes(statements)
    assert " data" not in update.partition(" WHERE ")[0]
    # The read (which brings the expiry the touch replaces), then the UPDATE: nothing else.
    assert [s.split()[0].upper() for s in statements] == ["SELECT", "UPDATE"]
    store.engine.dispose()


@pytest.mark.parametrize(
    ("make", "syncs_of_the_touch"),
    [(_url_store, 1), (_given_engine_store, 2)],  # NORMAL in WAL mode; the app's FULL journal kept
    ids=["own-file", "given-engine"],
)
def test_a_held_sqlite_write_lock_skips_the_touch_without_waiting(
    tmp_path: Path, make: Callable[[Path, MockClock], SqlAlchemySessionStore], syncs_of_the_touch: int
) -> None:
    path = tmp_path / "locked.db"
    clock = MockClock()
    store = make(path, clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, touch_jitter=timedelta(0)), clock)
    value = cookie_value(logged_in(app))
    waits: list[int] = []
    syncs: list[int] = []

    def busy_timeout_of_the_write(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            # The raw sqlite3 connection's own setting, read beside the statement.
            raw = cursor.connection
            waits.append(raw.execute("PRAGMA busy_timeout").fetchone()[0])
            syncs.append(raw.execute("PRAGMA synchronous").fetchone()[0])

    for engine in _engines(store):
        event.listen(engine, "before_cursor_execute", busy_timeout_of_the_write)
    with store.engine.connect() as conn:
        before = conn.execute(select(sessions_table.c.updated_at)).scalar_one()
    clock.advance(timedelta(minutes=6))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        response = raw_get(app, value)
        assert response.status_code == 200 and response.get_json()["state"] == "authenticated"
        assert response.headers.getlist("Set-Cookie") == []  # skipped: nothing changed
        assert waits == [0]  # the touch asked not to wait for the lock
    finally:
        other.rollback()
        other.close()
    with store.engine.connect() as conn:
        assert conn.execute(select(sessions_table.c.updated_at)).scalar_one() == before
    # The engine's own pooled connections wait (and sync) as configured for every other write.
    assert _settings(store.engine) == (5000, 2)
    response = raw_get(app, value)  # the lock is free: the next request touches
    assert len(response.headers.getlist("Set-Cookie")) == 1
    assert waits == [0, 0]
    assert syncs == [syncs_of_the_touch] * 2
    store.engine.dispose()


def _interrupt_every_statement(dbapi_connection: Any, *args: Any) -> None:
    # SQLite's progress handler: a non-zero return aborts the statement (OperationalError).
    dbapi_connection.set_progress_handler(lambda: 1, 1)


def test_a_read_refused_on_a_no_wait_connection_is_read_again_on_a_waiting_one(tmp_path: Path) -> None:
    """SQLite refusing the read itself on the read-and-touch engine (a file locked by a
    connection recovering the WAL, say) does not fail the request: the read runs again on
    the engine's own pool, which waits as configured. When that fails too, the store is
    unavailable: the request fails closed."""
    clock = MockClock()
    store = _url_store(tmp_path / "refused.db", clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, touch_jitter=timedelta(0)), clock)
    value = cookie_value(logged_in(app))
    touching = store._touch_engine
    assert touching is not None
    touching.dispose()  # new connections, each refusing every statement
    event.listen(touching, "connect", _interrupt_every_statement)
    clock.advance(timedelta(minutes=6))
    response = raw_get(app, value)
    assert response.status_code == 200 and response.get_json()["state"] == "authenticated"
    store.engine.dispose()
    event.listen(store.engine, "connect", _interrupt_every_statement)
    with pytest.raises(StoreUnavailable):
        store.load_touching(sid_of(value), _due(clock))
    store.engine.dispose()


def test_the_redis_touch_is_one_command(redis_server: Any) -> None:
    from flask_authflow.storage._redis_sessions import RedisSessionStore

    clock = MockClock()
    store = RedisSessionStore(redis_server.url(), crypto=SessionCrypto(KEY), clock=clock, prefix="one:")
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    store.touch(_touched(record, clock), clock.now() + HOUR)  # loads the script once
    sealed = store.client.hget(f"one:s:{sid_hash(record.sid)}", "d")
    commands: list[Any] = []
    execute = store.client.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        commands.append(args[0])
        return execute(*args, **options)

    store.client.execute_command = counting  # type: ignore[method-assign]
    clock.advance(timedelta(minutes=10))
    assert store.touch(_touched(record, clock), clock.now() + HOUR)
    assert commands == ["EVALSHA"]
    assert store.client.hget(f"one:s:{sid_hash(record.sid)}", "d") == sealed  # not re-sealed
    commands.clear()
    loaded = store.load(record.sid)
    assert commands == ["HMGET"] and loaded is not None and loaded.last_seen_at == clock.now()
    # The read of a request: one HMGET when not due (nearly every request), and the touch
    # script (which reads again and touches) only when due.
    clock.advance(timedelta(minutes=10))
    store.load_touching(record.sid, _due(clock))  # loads that script once
    for minutes, touched, sent in [(1, False, ["HMGET"]), (10, True, ["HMGET", "EVALSHA"])]:
        clock.advance(timedelta(minutes=minutes))
        commands.clear()
        found = store.load_touching(record.sid, _due(clock))
        assert commands == sent and found is not None and (found[1] is not None) is touched
    assert store.client.hget(f"one:s:{sid_hash(record.sid)}", "d") == sealed  # not re-sealed
    store.close()


def test_a_redis_record_from_before_the_folded_touch_is_touched_and_upgraded(redis_server: Any) -> None:
    """A record written without the last-seen and tenant-set fields (an earlier version) is
    still touched when due (a second call, which adds them); its next touch is the script's."""
    from flask_authflow.storage._redis_sessions import RedisSessionStore

    clock = MockClock()
    store = RedisSessionStore(redis_server.url(), crypto=SessionCrypto(KEY), clock=clock, prefix="old:")
    record = user_record(clock)
    key = f"old:s:{sid_hash(record.sid)}"
    store.save(record, clock.now() + HOUR)
    store.client.hdel(key, "l", "t")
    clock.advance(timedelta(minutes=10))
    assert store.load_touching(record.sid, _due(clock)) == (record, clock.now() + timedelta(minutes=50))
    assert store.client.hget(key, "t") is not None and store.client.hget(key, "l") is not None
    tenant_set = store.client.hget(key, "t")
    assert store.client.pttl(tenant_set) > (HOUR - timedelta(minutes=1)).total_seconds() * 1000
    commands: list[Any] = []
    execute = store.client.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        commands.append(args[0])
        return execute(*args, **options)

    store.client.execute_command = counting  # type: ignore[method-assign]
    clock.advance(timedelta(minutes=10))
    found = store.load_touching(record.sid, _due(clock))
    assert commands == ["HMGET", "EVALSHA"] and found is not None and found[1] is not None
    store.close()


# --- the touch in a request -----------------------------------------------------------------------


def test_a_cookie_from_another_user_agent_does_not_keep_the_session_alive() -> None:
    """The read touches before the binding is checked; a request the session does not
    serve (another User-Agent: a stolen cookie) puts the last-seen time back."""
    clock = MockClock()
    store = MemorySessionStore(clock=clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock, touch_jitter=timedelta(0)), clock)
    value = cookie_value(logged_in(app))
    logged_in_at = clock.now()
    for _ in range(6):  # a stale session presented every ten minutes by another client
        clock.advance(timedelta(minutes=10))
        assert raw_get(app, value, ua="Other/1.0").get_json()["state"] == "guest"
        stored = store.load(sid_of(value))
        assert stored is not None or clock.now() >= logged_in_at + HOUR
        assert stored is None or stored.last_seen_at == logged_in_at
    assert raw_get(app, value).get_json()["state"] == "guest"  # idle for an hour: over


def test_a_touch_near_the_absolute_end_keeps_the_session_end() -> None:
    """The folded touch writes at least now + the idle timeout; a session whose absolute
    lifetime ends before that gets its own end written again (one more small write)."""
    clock = MockClock()
    store = MemorySessionStore(clock=clock)
    interface = AuthFlowSessionInterface(
        store, KEY, clock=clock, ttl=timedelta(minutes=70), touch_jitter=timedelta(0)
    )
    app = make_app(interface, clock)
    value = cookie_value(logged_in(app))
    end = clock.now() + timedelta(minutes=70)
    clock.advance(timedelta(minutes=20))  # due; now + idle timeout is after the end
    response = raw_get(app, value)
    assert response.get_json()["state"] == "authenticated"
    (cookie,) = response.headers.getlist("Set-Cookie")
    assert f"Expires={end.strftime('%a, %d %b %Y %H:%M:%S GMT')}" in cookie
    clock.advance(timedelta(minutes=50))
    assert store.load(sid_of(value)) is None  # gone at its end, not ten minutes later


# --- jitter ---------------------------------------------------------------------------------------


def test_due_times_are_spread_over_the_jitter_and_fixed_per_session() -> None:
    interface = AuthFlowSessionInterface(MemorySessionStore(), KEY)
    assert (interface.touch_interval, interface.touch_jitter) == (timedelta(minutes=6), timedelta(minutes=3))
    sids = [new_session_id() for _ in range(2000)]
    dues = [interface.touch_due_after(sid) for sid in sids]
    assert all(timedelta(minutes=3) <= due <= timedelta(minutes=6) for due in dues)
    quarters = [0, 0, 0, 0]
    for due in dues:
        quarters[min(3, int((due - timedelta(minutes=3)) / timedelta(seconds=45)))] += 1
    assert all(count > 300 for count in quarters)  # about 500 each: no clustering
    assert [interface.touch_due_after(sid) for sid in sids[:10]] == dues[:10]
    no_jitter = AuthFlowSessionInterface(MemorySessionStore(), KEY, touch_jitter=timedelta(0))
    assert {no_jitter.touch_due_after(sid) for sid in sids[:50]} == {timedelta(minutes=6)}


def test_sessions_created_together_come_due_apart() -> None:
    clock = MockClock()
    store = MemorySessionStore(clock=clock)
    interface = AuthFlowSessionInterface(store, KEY, clock=clock)
    app: Flask = make_app(interface, clock)
    cookies = [cookie_value(logged_in(app)) for _ in range(40)]
    touched = 0
    clock.advance(timedelta(minutes=4, seconds=30))  # half way through the jitter
    for value in cookies:
        response = raw_get(app, value)
        assert response.get_json()["state"] == "authenticated"
        touched += len(response.headers.getlist("Set-Cookie"))
    expected = sum(
        interface.touch_due_after(value.rpartition(".")[0]) <= timedelta(minutes=4, seconds=30)
        for value in cookies
    )
    assert touched == expected and 0 < touched < len(cookies)
    clock.advance(timedelta(minutes=1, seconds=30))  # six minutes: every other one now
    assert sum(len(raw_get(app, value).headers.getlist("Set-Cookie")) for value in cookies) == 40 - touched


def test_the_jitter_share_comes_from_the_id_alone() -> None:
    interface = AuthFlowSessionInterface(MemorySessionStore(), KEY)
    sid = new_guest_record(MockClock().now()).sid
    share = zlib.crc32(sid.encode()) / 2**32
    assert interface.touch_due_after(sid) == interface.touch_interval - interface.touch_jitter * share


@pytest.mark.parametrize("jitter", [timedelta(seconds=-1), timedelta(minutes=7)])
def test_a_jitter_outside_the_interval_is_refused(jitter: timedelta) -> None:
    from flask_authflow.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        AuthFlowSessionInterface(MemorySessionStore(), KEY, touch_jitter=jitter)


# --- several processes on PostgreSQL --------------------------------------------------------------


def _touching_worker(url: str, sids: list[str], progress: Any, revoked: Any, stop: Any, out: Any) -> None:
    """Touch the sessions ``sids`` over and over until stopped; report (touches written,
    touches written although they started after the revocation was announced)."""
    from datetime import UTC, datetime

    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), create_tables=False, purge_every=None)
    written = late = 0
    fold = False
    deadline = time.monotonic() + 30
    while not stop.is_set() and time.monotonic() < deadline:
        for sid in sids:
            now = datetime.now(UTC)
            record = replace(new_guest_record(now), sid=sid, last_seen_at=now)
            announced = revoked.is_set()  # read before the touch starts
            fold = not fold
            if fold:  # folded into a read, or on its own
                found = store.load_touching(sid, SessionTouch(at=now, due_by=now, expires_at=now + HOUR))
                done = found is not None and found[1] is not None
            else:
                done = store.touch(record, now + HOUR)
            if done:
                written += 1
                late += announced
                with progress.get_lock():
                    progress.value += 1
    store.engine.dispose()
    out.put((written, late))


@pytest.mark.multiprocess
def test_touches_from_several_processes_never_bring_back_revoked_sessions(postgres_server: Any) -> None:
    from datetime import UTC, datetime

    from sqlalchemy import func

    from tests.parts import child_processes

    spawn = child_processes()
    url = postgres_server.new_database()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), purge_every=None)
    try:
        clock = MockClock(datetime.now(UTC))
        records = [user_record(clock) for _ in range(4)]
        for record in records:
            store.save(record, datetime.now(UTC) + HOUR)
        revoked, stop, out, progress = spawn.Event(), spawn.Event(), spawn.Queue(), spawn.Value("i", 0)
        sids = [record.sid for record in records]
        processes = [
            spawn.Process(target=_touching_worker, args=(url, sids, progress, revoked, stop, out))
            for _ in range(3)
        ]
        for process in processes:
            process.start()
        deadline = time.monotonic() + 60
        while progress.value < 30 and time.monotonic() < deadline:  # the workers are touching
            time.sleep(0.01)
        assert progress.value >= 30, "the workers never got going"
        assert store.delete_user_sessions("acme", "alice") == len(records)
        revoked.set()
        time.sleep(0.5)  # and keep trying for a while
        stop.set()
        reports = [out.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0
        assert all(late == 0 for _written, late in reports)
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(sessions_table)).scalar_one() == 0
        assert all(store.load(sid) is None for sid in sids)
    finally:
        store.engine.dispose()


def test_the_postgresql_read_is_one_round_trip_and_a_due_one_touches_in_one_more(
    postgres_server: Any,
) -> None:
    """The read of a request is one plain ``SELECT`` when the session is not due (nearly
    every request), and one statement more when due (the touch and the read again, as a
    CTE); neither runs in a transaction of its own: no BEGIN and no COMMIT or ROLLBACK
    round trips around them (the driver connection is in autocommit for each statement)."""
    from datetime import UTC, datetime

    store = SqlAlchemySessionStore(
        postgres_server.new_database(), crypto=SessionCrypto(KEY), purge_every=None
    )
    seen: list[tuple[str, bool]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((statement.lstrip().split()[0].upper(), bool(cursor.connection.autocommit)))

    try:
        clock = MockClock(datetime.now(UTC))
        store.adopt_clock(clock)
        session = user_record(clock)
        store.save(session, clock.now() + HOUR)
        # (Reads and the touch run on the AUTOCOMMIT engine made beside the store's own.)
        for engine in (store.engine, autocommit_reads(store.engine)):
            event.listen(engine, "before_cursor_execute", record)
        assert store.load(session.sid) is not None
        clock.advance(timedelta(minutes=10))
        assert store.touch(_touched(session, clock), clock.now() + HOUR)
        assert seen == [("SELECT", True), ("UPDATE", True)]
        seen.clear()
        touched = _touched(session, clock)
        clock.advance(timedelta(minutes=1))
        assert store.load_touching(session.sid, _due(clock)) == (touched, None)
        clock.advance(timedelta(minutes=10))
        found = store.load_touching(session.sid, _due(clock))
        assert found is not None and found[1] is not None
        assert seen == [("SELECT", True), ("SELECT", True), ("WITH", True)]
        assert store.load(session.sid) == _touched(session, clock)
    finally:
        store.engine.dispose()
