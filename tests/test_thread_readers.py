"""A thread's own SQLite connection for the per-request session read (``ThreadReaders``).

On a SQLite file behind a ``QueuePool`` a thread's first ``load`` goes through the pool;
from its second on, the thread reads on a pysqlite connection of its own, detached from
the pool. These tests hold that connection to what the pool gives: which engines get one,
that every read on it is a fresh snapshot (rows deleted, rewritten or inserted by another
engine, a raw connection or another process are seen at the next read), that
``engine.dispose()``, a fork and an error end it, that pool listeners keep every read on
the pool, that threads never share one, and that it leaves no read open.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import NullPool, QueuePool

from flask_authflow.clock import MockClock
from flask_authflow.errors import StoreUnavailable
from flask_authflow.session.crypto import SessionCrypto
from flask_authflow.session.model import SessionRecord, new_guest_record, sid_hash
from flask_authflow.stores.sqlalchemy import thread_readers
from flask_authflow.stores.sqlalchemy.session_store import SqlAlchemySessionStore
from flask_authflow.stores.sqlalchemy.thread_readers import ThreadReaders
from tests.test_session_stores import user_record

HOUR = timedelta(hours=1)


def file_store(path: Path, clock: MockClock) -> SqlAlchemySessionStore:
    return SqlAlchemySessionStore(
        f"sqlite:///{path}", crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None
    )


def close_store(store: SqlAlchemySessionStore) -> None:
    if store._readers is not None:
        store._readers.discard()  # this thread's own connection: dispose() does not know it
    store.engine.dispose()


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "a.db"


@pytest.fixture
def store(database: Path, clock: MockClock) -> Iterator[SqlAlchemySessionStore]:
    made = file_store(database, clock)
    yield made
    close_store(made)


@pytest.fixture
def other(
    database: Path, clock: MockClock, store: SqlAlchemySessionStore
) -> Iterator[SqlAlchemySessionStore]:
    """A second store on the same file: an engine and a pool of its own."""
    made = file_store(database, clock)
    yield made
    close_store(made)


@pytest.fixture
def pool_reads(store: SqlAlchemySessionStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the connections taken from ``store``'s engine (every read through the pool)."""
    taken: list[int] = []
    real = store.engine.raw_connection

    def counted() -> Any:
        taken.append(1)
        return real()

    monkeypatch.setattr(store.engine, "raw_connection", counted)
    return taken


def readers_of(store: SqlAlchemySessionStore) -> ThreadReaders:
    readers = store._readers
    assert readers is not None
    return readers


def held_connection(store: SqlAlchemySessionStore) -> sqlite3.Connection:
    """The connection this thread holds."""
    held = readers_of(store)._local.held
    assert held is not None
    connection = held.connection
    assert isinstance(connection, sqlite3.Connection)
    return connection


def saved(
    store: SqlAlchemySessionStore, clock: MockClock, record: SessionRecord | None = None
) -> SessionRecord:
    if record is None:
        record = user_record(clock)
    assert store.save(record, clock.now() + HOUR)
    return record


def hold(store: SqlAlchemySessionStore, record: SessionRecord) -> sqlite3.Connection:
    """Two loads of ``record`` on this thread: the first on the pool, the second keeps a
    connection. Returns that connection."""
    readers = readers_of(store)
    assert not readers.held_here()
    assert store.load(record.sid) == record
    assert not readers.held_here()
    assert store.load(record.sid) == record
    assert readers.held_here()
    return held_connection(store)


def delete_raw(database: Path, sid: str) -> None:
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sid_hash(sid),))
    db.close()


# --- which engines get them ------------------------------------------------------------------------

EngineMaker = Callable[[Path], Engine]

ENGINES: dict[str, tuple[EngineMaker, bool]] = {
    "memory-default": (lambda tmp: create_engine("sqlite://"), False),
    "memory-named": (lambda tmp: create_engine("sqlite:///:memory:"), False),
    # The pool SQLAlchemy will choose for such a URL: a memory database all the same.
    "memory-uri-queue-pool": (
        lambda tmp: create_engine(
            "sqlite:///file:tr-mem?mode=memory&cache=shared&uri=true", poolclass=QueuePool
        ),
        False,
    ),
    "file-null-pool": (lambda tmp: create_engine(f"sqlite:///{tmp / 'n.db'}", poolclass=NullPool), False),
    "file": (lambda tmp: create_engine(f"sqlite:///{tmp / 'f.db'}"), True),
    "file-uri": (lambda tmp: create_engine(f"sqlite:///file:{tmp / 'u.db'}?uri=true"), True),
}


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_only_a_sqlite_file_behind_a_queue_pool_gets_readers(tmp_path: Path, name: str) -> None:
    make, expected = ENGINES[name]
    engine = make(tmp_path)
    try:
        readers = ThreadReaders.of(engine)
        assert (readers is not None) is expected
        if readers is not None:
            assert isinstance(engine.pool, QueuePool)
            assert not readers.held_here()
    finally:
        engine.dispose()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_store_reads_on_its_shared_connection(url: str, clock: MockClock) -> None:
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None)
    try:
        assert store._readers is None
        record = saved(store, clock)
        for _ in range(3):
            assert store.load(record.sid) == record
        store.delete(record.sid)
        assert store.load(record.sid) is None
    finally:
        store.engine.dispose()


def test_a_null_pool_store_keeps_no_connection(database: Path, clock: MockClock) -> None:
    engine = create_engine(f"sqlite:///{database}", poolclass=NullPool)
    store = SqlAlchemySessionStore(engine, crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None)
    try:
        assert store._readers is None
        record = saved(store, clock)
        connects: list[int] = []
        event.listen(engine, "connect", lambda *args: connects.append(1))
        for _ in range(3):
            assert store.load(record.sid) == record
        assert len(connects) == 3  # a connection of its own for every read, as NullPool means
    finally:
        engine.dispose()


def test_only_the_sqlite_file_store_reads_on_thread_connections(database_url: str, clock: MockClock) -> None:
    store = SqlAlchemySessionStore(
        database_url, crypto=SessionCrypto(bytes(32)), clock=clock, purge_every=None
    )
    try:
        record = saved(store, clock)
        if store.engine.dialect.name == "postgresql":
            assert store._direct is not None  # psycopg reads directly, on its pool
            assert store._readers is None
            for _ in range(3):
                assert store.load(record.sid) == record
            assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        else:
            hold(store, record)
    finally:
        close_store(store)


# --- the first read and the ones after ---------------------------------------------------------------


def test_the_second_read_of_a_thread_keeps_a_connection(
    store: SqlAlchemySessionStore, clock: MockClock, pool_reads: list[int], no_core: list[str]
) -> None:
    user = saved(store, clock)
    guest = saved(store, clock, replace(new_guest_record(clock.now()), custom={"n": 1}))
    taken = len(pool_reads)
    readers = readers_of(store)
    assert store.load(user.sid) == user
    assert not readers.held_here()  # the first read went through the pool, which has it back
    assert len(pool_reads) == taken + 1
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert store.load(guest.sid) == guest
    assert readers.held_here()
    assert len(pool_reads) == taken + 2  # the connection the thread keeps, taken once
    own = held_connection(store)
    for _ in range(3):
        assert store.load(user.sid) == user
        assert store.load(guest.sid) == guest
        assert store.load(new_guest_record(clock.now()).sid) is None
    assert held_connection(store) is own
    assert len(pool_reads) == taken + 2  # none of them touched the pool
    assert not own.in_transaction
    # the held connection reads with the same bound time: expiry at the same instant
    clock.set(clock.now() + HOUR - timedelta(microseconds=1))
    assert store.load(user.sid) == user
    clock.set(clock.now() + timedelta(microseconds=1))
    assert store.load(user.sid) is None
    assert held_connection(store) is own
    assert len(pool_reads) == taken + 2
    assert no_core == []


# --- no stale reads -----------------------------------------------------------------------------------


DELETE_SCRIPT = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
with db:
    gone = db.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sys.argv[2],)).rowcount
db.close()
print(gone)
"""


@pytest.mark.parametrize("where", ["other-store", "raw-connection", "other-process"])
def test_a_row_deleted_elsewhere_is_gone_at_the_next_read(
    store: SqlAlchemySessionStore,
    other: SqlAlchemySessionStore,
    database: Path,
    clock: MockClock,
    where: str,
    no_core: list[str],
) -> None:
    record = saved(store, clock)
    kept = saved(store, clock, user_record(clock, user="bob"))
    own = hold(store, record)
    if where == "other-store":
        other.delete(record.sid)
    elif where == "raw-connection":
        delete_raw(database, record.sid)
    else:
        done = subprocess.run(
            [sys.executable, "-c", DELETE_SCRIPT, str(database), sid_hash(record.sid)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert done.stdout.strip() == "1"
    assert store.load(record.sid) is None
    assert store.load(kept.sid) == kept
    assert held_connection(store) is own  # read on the thread's connection, not the pool
    assert no_core == []


def test_a_row_rewritten_elsewhere_is_read_as_rewritten(
    store: SqlAlchemySessionStore, other: SqlAlchemySessionStore, clock: MockClock
) -> None:
    record = saved(store, clock, user_record(clock, cart=[1]))
    own = hold(store, record)
    rewritten = replace(record, user_id="bob", custom={"cart": [1, 2]})
    assert other.save(rewritten, clock.now() + HOUR, existing=True)
    assert store.load(record.sid) == rewritten
    # ...and a row whose expiry another store brought forward is over for this reader too
    assert other.save(rewritten, clock.now(), existing=True)
    assert store.load(record.sid) is None
    assert held_connection(store) is own


def test_a_row_inserted_elsewhere_is_found(
    store: SqlAlchemySessionStore, other: SqlAlchemySessionStore, clock: MockClock
) -> None:
    record = saved(store, clock)
    own = hold(store, record)
    later = user_record(clock, user="carol")
    assert store.load(later.sid) is None
    saved(other, clock, later)
    assert store.load(later.sid) == later
    assert held_connection(store) is own


def test_an_uncommitted_delete_elsewhere_is_not_seen_until_its_commit(
    store: SqlAlchemySessionStore, database: Path, clock: MockClock
) -> None:
    record = saved(store, clock)
    own = hold(store, record)
    writer = sqlite3.connect(database, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sid_hash(record.sid),))
        assert store.load(record.sid) == record  # no dirty read
        writer.execute("COMMIT")
        assert store.load(record.sid) is None
    finally:
        writer.close()
    assert held_connection(store) is own


# --- what ends a thread's connection -----------------------------------------------------------------


def test_dispose_closes_the_thread_connection_at_its_next_read(
    store: SqlAlchemySessionStore, clock: MockClock, no_core: list[str]
) -> None:
    record = saved(store, clock)
    old = hold(store, record)
    old_pool = store.engine.pool
    store.engine.dispose()
    assert store.engine.pool is not old_pool
    assert store.load(record.sid) == record
    assert store.load(record.sid) == record
    new = held_connection(store)
    assert new is not old
    assert new.execute("SELECT 1").fetchall() == [(1,)]
    with pytest.raises(sqlite3.ProgrammingError):
        old.execute("SELECT 1")
    assert readers_of(store)._local.held.pool is store.engine.pool  # taken from the new pool
    assert no_core == []


def in_forked_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``work`` in a forked child and return what it answered (its error, if any, makes
    the test fail here). The child reports through a pipe and never returns into pytest."""
    readable, writable = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads (-W error makes it fatal).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(readable)
            try:
                result = work()
                status = 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                result = {"error": repr(exc)}
            os.write(writable, json.dumps(result).encode())
        finally:
            os._exit(status)
    os.close(writable)
    chunks = []
    while chunk := os.read(readable, 65536):
        chunks.append(chunk)
    os.close(readable)
    _, wait_status = os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks))
    assert os.waitstatus_to_exitcode(wait_status) == 0, result
    assert isinstance(result, dict)
    return result


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reads_on_a_connection_it_opened(
    store: SqlAlchemySessionStore, clock: MockClock
) -> None:
    opened_by: dict[int, int] = {}  # id of each connection the engine opens -> the pid opening it

    def opened(dbapi_connection: Any, connection_record: Any) -> None:
        opened_by[id(dbapi_connection)] = os.getpid()

    event.listen(store.engine, "connect", opened)
    store.engine.dispose()  # every connection from now on is seen by the listener
    record = saved(store, clock)
    gone_in_child = saved(store, clock, user_record(clock, user="bob"))
    parents = hold(store, record)
    assert opened_by[id(parents)] == os.getpid()
    inherited_before = len(thread_readers._inherited)

    def in_child() -> dict[str, Any]:
        result: dict[str, Any] = {}
        result["first"] = store.load(record.sid) == record
        mine = held_connection(store)
        result["second"] = store.load(record.sid) == record
        result["kept"] = held_connection(store) is mine
        result["new"] = mine is not parents and id(mine) != id(parents)
        result["opened_here"] = opened_by.get(id(mine)) == os.getpid()
        result["inherited"] = any(kept is parents for kept in thread_readers._inherited)
        store.delete(gone_in_child.sid)
        result["deleted"] = store.load(gone_in_child.sid) is None
        return result

    result = in_forked_child(in_child)
    assert result == {
        "first": True,
        "second": True,
        "kept": True,
        "new": True,
        "opened_here": True,
        "inherited": True,
        "deleted": True,
    }
    # The parent is untouched: its connection is its own still, open, and reads fresh rows.
    assert len(thread_readers._inherited) == inherited_before
    assert held_connection(store) is parents
    assert parents.execute("SELECT 1").fetchall() == [(1,)]
    assert store.load(record.sid) == record
    assert store.load(gone_in_child.sid) is None  # the child's delete
    assert held_connection(store) is parents


def test_an_error_on_the_thread_connection_fails_closed_and_gives_it_up(
    store: SqlAlchemySessionStore, clock: MockClock, no_core: list[str]
) -> None:
    record = saved(store, clock)
    old = hold(store, record)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE authflow_sessions RENAME TO authflow_sessions_away"))
    with pytest.raises(StoreUnavailable) as raised:
        store.load(record.sid)
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    assert not readers_of(store).held_here()
    with pytest.raises(sqlite3.ProgrammingError):
        old.execute("SELECT 1")  # closed, not leaked
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    with pytest.raises(StoreUnavailable):
        store.load(record.sid)  # every read fails while the table is away
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE authflow_sessions_away RENAME TO authflow_sessions"))
    assert store.load(record.sid) == record
    assert store.load(record.sid) == record
    assert readers_of(store).held_here()
    assert held_connection(store) is not old
    assert no_core == []


@pytest.mark.parametrize("pool_event", ["checkout", "checkin"])
def test_pool_listeners_keep_every_read_on_the_pool(
    store: SqlAlchemySessionStore, clock: MockClock, pool_reads: list[int], pool_event: str
) -> None:
    record = saved(store, clock)
    seen: list[int] = []

    def listener(*args: Any) -> None:
        seen.append(1)

    event.listen(store.engine.pool, pool_event, listener)
    try:
        for count in range(1, 5):
            assert store.load(record.sid) == record
            assert len(seen) == count  # the listener saw every read
            assert not readers_of(store).held_here()
    finally:
        event.remove(store.engine.pool, pool_event, listener)
    taken = len(pool_reads)
    assert store.load(record.sid) == record  # no listener: the thread keeps a connection now
    assert readers_of(store).held_here()
    own = held_connection(store)
    for _ in range(3):
        assert store.load(record.sid) == record
    assert held_connection(store) is own
    assert len(pool_reads) == taken + 1  # taken once, then no pool
    assert len(seen) == 4


# --- threads ----------------------------------------------------------------------------------------


def test_each_thread_reads_on_a_connection_of_its_own(
    store: SqlAlchemySessionStore, clock: MockClock, no_core: list[str]
) -> None:
    record = saved(store, clock)
    mains = hold(store, record)
    readers = readers_of(store)
    together = threading.Barrier(2)
    connections: dict[str, sqlite3.Connection] = {}
    outcomes: dict[str, list[bool]] = {}

    def reader(name: str) -> None:
        answers = [readers.held_here()]
        together.wait(timeout=30)  # both threads run at once
        for _ in range(3):
            answers.append(store.load(record.sid) == record)
            answers.append(readers.held_here())
        connections[name] = held_connection(store)
        together.wait(timeout=30)  # both still hold theirs when the first ends
        outcomes[name] = answers

    threads = [threading.Thread(target=reader, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        # nothing held on arrival; the first read through the pool, then a connection kept
        assert outcomes == {name: [False, True, False, True, True, True, True] for name in ("a", "b")}
        assert connections["a"] is not connections["b"]
        assert len({id(mains), id(connections["a"]), id(connections["b"])}) == 3
        # the main thread's state is its own
        assert held_connection(store) is mains
        assert store.load(record.sid) == record
        assert held_connection(store) is mains
    finally:
        for connection in connections.values():
            connection.close()
    assert no_core == []


def test_a_thread_that_reads_once_keeps_nothing(store: SqlAlchemySessionStore, clock: MockClock) -> None:
    """A server that starts a thread per request: every read goes back to the pool."""
    record = saved(store, clock)
    held: list[bool] = []

    def one_request() -> None:
        assert store.load(record.sid) == record
        held.append(readers_of(store).held_here())

    for _ in range(5):
        thread = threading.Thread(target=one_request)
        thread.start()
        thread.join(timeout=60)
    assert held == [False] * 5
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert not readers_of(store).held_here()


# --- nothing left open ------------------------------------------------------------------------------


def checkpoint_busy(database: Path) -> int:
    """Whether a checkpoint that waits for every reader (TRUNCATE) is blocked, not waiting."""
    other = sqlite3.connect(database, timeout=0)
    try:
        busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        other.close()
    return int(busy)


def test_the_thread_connection_leaves_no_read_open(
    store: SqlAlchemySessionStore, database: Path, clock: MockClock
) -> None:
    record = saved(store, clock)
    own = hold(store, record)
    assert own.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    # The check can fail: a read transaction left open on the connection blocks it.
    own.execute("BEGIN")
    own.execute("SELECT count(*) FROM authflow_sessions").fetchall()
    saved(store, clock, user_record(clock, user="bob"))  # WAL frames the reader's snapshot predates
    assert checkpoint_busy(database) == 1
    own.execute("ROLLBACK")
    saved(store, clock, user_record(clock, user="carol"))
    for _ in range(3):
        assert store.load(record.sid) == record
        assert store.load(new_guest_record(clock.now()).sid) is None
    assert held_connection(store) is own
    assert not own.in_transaction
    assert checkpoint_busy(database) == 0


# --- what the review of these tests found -----------------------------------------------------------


def test_a_listener_added_later_takes_the_reads_back_to_the_pool(
    store: SqlAlchemySessionStore, clock: MockClock
) -> None:
    """A checkout listener added after the thread took its connection sees every read
    from then on: the held connection is given up (closed), not kept past the listener."""
    record = saved(store, clock)
    own = hold(store, record)
    seen: list[int] = []

    def listener(*args: Any) -> None:
        seen.append(1)

    event.listen(store.engine.pool, "checkout", listener)
    try:
        for count in range(1, 4):
            assert store.load(record.sid) == record
            assert len(seen) == count
            assert not readers_of(store).held_here()
    finally:
        event.remove(store.engine.pool, "checkout", listener)
    with pytest.raises(sqlite3.ProgrammingError):
        own.execute("SELECT 1")  # given up: closed, not left to the collector
    assert store.load(record.sid) == record  # no listener: a connection of its own again
    assert held_connection(store) is not own


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_not_handed_its_parents_pooled_connections(
    store: SqlAlchemySessionStore, clock: MockClock
) -> None:
    """The pool holds live connections the parent opened when it forks: the child's own
    connection and its pooled reads use connections the child opened."""
    opened_by: dict[int, int] = {}

    def opened(dbapi_connection: Any, connection_record: Any) -> None:
        opened_by[id(dbapi_connection)] = os.getpid()

    event.listen(store.engine, "connect", opened)
    store.engine.dispose()
    record = saved(store, clock)
    first, second = store.engine.raw_connection(), store.engine.raw_connection()
    first.close()
    second.close()  # two live connections of the parent wait in the pool
    assert store.engine.pool.checkedin() == 2  # type: ignore[attr-defined]
    hold(store, record)

    def in_child() -> dict[str, Any]:
        result: dict[str, Any] = {"loads": [store.load(record.sid) == record for _ in range(2)]}
        result["own_opened_here"] = opened_by.get(id(held_connection(store))) == os.getpid()
        pooled = store.engine.raw_connection()
        result["pooled_opened_here"] = opened_by.get(id(pooled.driver_connection)) == os.getpid()
        pooled.close()
        return result

    result = in_forked_child(in_child)
    assert result == {"loads": [True, True], "own_opened_here": True, "pooled_opened_here": True}
    assert store.load(record.sid) == record  # the parent is untouched


def test_a_thread_connection_is_closed_when_its_thread_ends(
    store: SqlAlchemySessionStore, clock: MockClock
) -> None:
    """Closed with the thread's storage, not left for the collector (Python 3.13's sqlite3
    warns about a connection collected unclosed)."""
    record = saved(store, clock)
    taken: list[sqlite3.Connection] = []

    def reader() -> None:
        taken.append(hold(store, record))

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join()
    [connection] = taken
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("SELECT 1")
