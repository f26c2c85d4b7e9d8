"""Session stores: the in-memory store and the SQLAlchemy store (SQLite and PostgreSQL)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
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
from sqlalchemy import Engine, event, select, text, update
from sqlalchemy.exc import DBAPIError

from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import MaintainedSessionStore, SessionStore
from flask_authflow._core.session import (
    AuthState,
    SessionRecord,
    begin_flow,
    new_guest_record,
    new_session_id,
    pass_factor,
    sid_hash,
    start_login,
)
from flask_authflow.errors import SessionDecryptError, SessionRecordError, StoreUnavailable
from flask_authflow.sessions._stores import (
    RECORD_SCHEMA,
    MemorySessionStore,
    deserialize_record,
    serialize_record,
)
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore, sessions_table
from tests.parts import free_port
from tests.protocols import missing_members

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
MARKER = "plaintext-marker-7f3a"

StoreFactory = Callable[[MockClock], MaintainedSessionStore]


def user_record(
    clock: MockClock, user: str = "alice", tenant: str = "acme", **custom: object
) -> SessionRecord:
    now = clock.now()
    record = start_login(new_guest_record(now), tenant=tenant, user_id=user, factors=["password"], now=now)
    record = pass_factor(record, "password", now=now)
    return replace(record, fingerprint="fp", custom=custom)


class StoreContract:
    """What every SessionStore must do; subclasses provide ``make_store``."""

    @pytest.fixture
    def clock(self) -> MockClock:
        return MockClock()

    @pytest.fixture
    def store(self, make_store: StoreFactory, clock: MockClock) -> MaintainedSessionStore:
        return make_store(clock)

    def test_is_a_session_store(self, store: SessionStore) -> None:
        assert missing_members(store, SessionStore) == []

    def test_save_and_load(self, store: SessionStore, clock: MockClock) -> None:
        record = begin_flow(user_record(clock, cart=["apple", ("pear", 2)], note=MARKER), {"nonce": "n"})
        store.save(record, clock.now() + timedelta(hours=1))
        loaded = store.load(record.sid)
        assert loaded == record
        assert loaded is not None and loaded.custom["cart"][1] == ("pear", 2)

    def test_load_unknown(self, store: SessionStore) -> None:
        assert store.load("no-such-session-id-000000000000000000000000") is None

    def test_save_replaces(self, store: SessionStore, clock: MockClock) -> None:
        record = user_record(clock, n=1)
        store.save(record, clock.now() + timedelta(hours=1))
        store.save(replace(record, custom={"n": 2}), clock.now() + timedelta(hours=1))
        loaded = store.load(record.sid)
        assert loaded is not None and loaded.custom == {"n": 2}
        assert [r.sid for r in store.list_user_sessions("acme", "alice")] == [record.sid]

    def test_save_moves_the_user_index(self, store: SessionStore, clock: MockClock) -> None:
        record = user_record(clock)
        store.save(record, clock.now() + timedelta(hours=1))
        as_guest = replace(new_guest_record(clock.now(), sid=record.sid), custom={"k": 1})
        store.save(as_guest, clock.now() + timedelta(hours=1))
        assert store.list_user_sessions("acme", "alice") == []
        assert store.delete_user_sessions("acme", "alice") == 0
        assert store.load(record.sid) == as_guest

    def test_save_replacing_rotated_ids(self, store: SessionStore, clock: MockClock) -> None:
        before = user_record(clock)
        other = user_record(clock, user="bob")
        store.save(before, clock.now() + timedelta(hours=1))
        store.save(other, clock.now() + timedelta(hours=1))
        rotated = replace(before, sid=new_session_id())
        assert store.save(rotated, clock.now() + timedelta(hours=1), replaces=[before.sid]) is True
        assert store.load(before.sid) is None  # the pre-rotation id is dead
        assert store.load(rotated.sid) == rotated
        assert store.load(other.sid) == other  # nobody else's session is touched
        assert [r.sid for r in store.list_user_sessions("acme", "alice")] == [rotated.sid]

    def test_delete(self, store: SessionStore, clock: MockClock) -> None:
        record = user_record(clock)
        store.save(record, clock.now() + timedelta(hours=1))
        store.delete(record.sid)
        assert store.load(record.sid) is None
        store.delete(record.sid)  # already gone: no error
        store.delete("never-existed")

    def test_expiry(self, store: SessionStore, clock: MockClock) -> None:
        record = user_record(clock)
        store.save(record, clock.now() + timedelta(minutes=10))
        clock.advance(timedelta(minutes=10) - timedelta(seconds=1))
        assert store.load(record.sid) == record
        clock.advance(timedelta(seconds=1))
        assert store.load(record.sid) is None
        assert store.list_user_sessions("acme", "alice") == []

    def test_list_user_sessions(self, store: SessionStore, clock: MockClock) -> None:
        a1, a2 = user_record(clock), user_record(clock)
        other_tenant = user_record(clock, tenant="globex")
        bob = user_record(clock, user="bob")
        expired = user_record(clock)
        guest = replace(new_guest_record(clock.now()), custom={"k": 1})
        for record in (a1, a2, other_tenant, bob, guest):
            store.save(record, clock.now() + timedelta(hours=1))
        store.save(expired, clock.now() + timedelta(minutes=1))
        clock.advance(timedelta(minutes=2))
        assert {r.sid for r in store.list_user_sessions("acme", "alice")} == {a1.sid, a2.sid}
        assert [r.sid for r in store.list_user_sessions("acme", "bob")] == [bob.sid]
        assert [r.sid for r in store.list_user_sessions("globex", "alice")] == [other_tenant.sid]
        assert store.list_user_sessions("acme", "nobody") == []

    def test_delete_user_sessions(self, store: MaintainedSessionStore, clock: MockClock) -> None:
        a1, a2, bob = user_record(clock), user_record(clock), user_record(clock, user="bob")
        other_tenant = user_record(clock, tenant="globex")
        expired = user_record(clock)
        for record in (a1, a2, bob, other_tenant):
            store.save(record, clock.now() + timedelta(hours=2))
        store.save(expired, clock.now() + timedelta(minutes=1))
        clock.advance(timedelta(minutes=5))
        assert store.delete_user_sessions("acme", "alice") == 2  # live sessions only
        assert store.purge_expired() == 0  # the expired row went too
        assert store.load(a1.sid) is None and store.load(a2.sid) is None
        assert store.load(bob.sid) == bob
        assert store.load(other_tenant.sid) == other_tenant
        assert store.delete_user_sessions("acme", "alice") == 0

    def test_purge_expired(self, store: MaintainedSessionStore, clock: MockClock) -> None:
        live = user_record(clock)
        store.save(live, clock.now() + timedelta(hours=2))
        for _ in range(3):
            store.save(user_record(clock, user="gone"), clock.now() + timedelta(hours=1))
        assert store.purge_expired() == 0
        clock.advance(timedelta(hours=1))
        assert store.purge_expired() == 3
        assert store.purge_expired() == 0
        assert store.load(live.sid) == live

    def test_purge_expired_of_one_tenant(self, store: MaintainedSessionStore, clock: MockClock) -> None:
        live = user_record(clock)
        store.save(live, clock.now() + timedelta(hours=2))
        for user, tenant in (("a", "acme"), ("b", "acme"), ("a", "globex")):
            store.save(user_record(clock, user=user, tenant=tenant), clock.now() + timedelta(hours=1))
        clock.advance(timedelta(hours=1))
        assert store.purge_expired(tenant="acme") == 2
        assert store.purge_expired(tenant="acme") == 0
        assert store.purge_expired(tenant="initech") == 0
        assert store.purge_expired() == 1  # globex's
        assert store.load(live.sid) == live

    def test_saved_record_does_not_alias_callers_data(self, store: SessionStore, clock: MockClock) -> None:
        cart: list[str] = ["apple"]
        record = user_record(clock, cart=cart)
        store.save(record, clock.now() + timedelta(hours=1))
        cart.append("mutated after save")
        loaded = store.load(record.sid)
        assert loaded is not None and loaded.custom["cart"] == ["apple"]
        loaded.custom["cart"].append("mutated after load")
        again = store.load(record.sid)
        assert again is not None and again.custom["cart"] == ["apple"]


class TestMemorySessionStore(StoreContract):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        return lambda clock: MemorySessionStore(clock=clock)

    def test_expired_records_are_dropped_in_bulk(self) -> None:
        clock = MockClock()
        store = MemorySessionStore(clock=clock, purge_every=10)
        for _ in range(9):
            store.save(user_record(clock), clock.now() + timedelta(minutes=1))
        clock.advance(timedelta(minutes=5))
        assert store.count() == 9
        store.save(user_record(clock), clock.now() + timedelta(minutes=1))  # 10th save purges
        assert store.count() == 1

    def test_thread_safety(self) -> None:
        clock = MockClock()
        store = MemorySessionStore(clock=clock)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(200):
                    record = user_record(clock)
                    store.save(record, clock.now() + timedelta(hours=1))
                    assert store.load(record.sid) == record
                    store.list_user_sessions("acme", "alice")
                    store.delete(record.sid)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.count() == 0
        assert store.list_user_sessions("acme", "alice") == []

    def test_repr(self) -> None:
        assert repr(MemorySessionStore()) == "<MemorySessionStore sessions=0>"


class TestSqlAlchemySessionStore(StoreContract):
    @pytest.fixture
    def make_store(self, database_url: str) -> Iterator[StoreFactory]:
        made: list[SqlAlchemySessionStore] = []

        def make(clock: MockClock, crypto: SessionCrypto | None = None) -> SqlAlchemySessionStore:
            store = SqlAlchemySessionStore(database_url, crypto=crypto or SessionCrypto(KEY), clock=clock)
            made.append(store)
            return store

        yield make
        for store in made:
            store.engine.dispose()

    @staticmethod
    def raw_rows(engine: Engine) -> list[dict[str, object]]:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(select(sessions_table))]

    def test_encrypted_at_rest(self, store: SqlAlchemySessionStore, clock: MockClock) -> None:
        record = user_record(clock, note=MARKER)
        store.save(record, clock.now() + timedelta(hours=1))
        (row,) = self.raw_rows(store.engine)
        assert row["sid_hash"] == hashlib.sha256(record.sid.encode()).hexdigest() == sid_hash(record.sid)
        assert (row["tenant"], row["user_id"], row["state"]) == ("acme", "alice", "authenticated")
        data = bytes(row["data"])  # type: ignore[call-overload]
        assert MARKER.encode() not in data
        assert record.sid.encode() not in data
        for value in row.values():
            assert record.sid not in str(value)
            assert MARKER not in str(value)
        # sealed for this row's key: it opens under that associated data only
        assert deserialize_record(SessionCrypto(KEY).decrypt(sid_hash(record.sid), data)) == record
        with pytest.raises(SessionDecryptError):
            SessionCrypto(KEY).decrypt(sid_hash("another-session-id"), data)

    def test_row_moved_to_another_session_is_absent(
        self, store: SqlAlchemySessionStore, clock: MockClock
    ) -> None:
        victim, attacker = user_record(clock, note="victim"), user_record(clock, user="mallory")
        for record in (victim, attacker):
            store.save(record, clock.now() + timedelta(hours=1))
        with store.engine.begin() as conn:
            data = conn.execute(
                select(sessions_table.c.data).where(sessions_table.c.sid_hash == sid_hash(victim.sid))
            ).scalar_one()
            conn.execute(
                update(sessions_table)
                .where(sessions_table.c.sid_hash == sid_hash(attacker.sid))
                .values(data=data)
            )
        assert store.load(attacker.sid) is None
        assert store.load(victim.sid) == victim

    def test_tampered_row_is_absent_and_logged(
        self, store: SqlAlchemySessionStore, clock: MockClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        record = user_record(clock, note=MARKER)
        store.save(record, clock.now() + timedelta(hours=1))
        (row,) = self.raw_rows(store.engine)
        data = bytearray(row["data"])  # type: ignore[call-overload]
        data[-1] ^= 0x01
        with store.engine.begin() as conn:
            conn.execute(update(sessions_table).values(data=bytes(data)))
        with caplog.at_level(logging.WARNING, logger="flask_authflow.sessions"):
            assert store.load(record.sid) is None
            assert store.list_user_sessions("acme", "alice") == []
        assert "unreadable" in caplog.text
        assert record.sid not in caplog.text and MARKER not in caplog.text

    def test_tampered_index_columns_do_not_change_listing(
        self, store: SqlAlchemySessionStore, clock: MockClock
    ) -> None:
        record = user_record(clock)
        store.save(record, clock.now() + timedelta(hours=1))
        with store.engine.begin() as conn:
            conn.execute(update(sessions_table).values(user_id="bob"))
        assert store.list_user_sessions("acme", "bob") == []

    def test_wrong_key_is_absent(
        self, make_store: Callable[..., SqlAlchemySessionStore], clock: MockClock
    ) -> None:
        writer = make_store(clock, SessionCrypto(KEY))
        record = user_record(clock)
        writer.save(record, clock.now() + timedelta(hours=1))
        assert make_store(clock, SessionCrypto(OTHER_KEY)).load(record.sid) is None

    def test_previous_at_rest_key_still_reads(
        self, make_store: Callable[..., SqlAlchemySessionStore], clock: MockClock
    ) -> None:
        record = user_record(clock)
        make_store(clock, SessionCrypto(KEY)).save(record, clock.now() + timedelta(hours=1))
        rotated = make_store(clock, SessionCrypto(OTHER_KEY).with_previous_key(KEY))
        assert rotated.load(record.sid) == record
        rotated.save(record, clock.now() + timedelta(hours=1))  # re-sealed under the new key
        assert make_store(clock, SessionCrypto(OTHER_KEY)).load(record.sid) == record

    def test_create_tables_is_idempotent(
        self, make_store: Callable[..., SqlAlchemySessionStore], clock: MockClock
    ) -> None:
        first = make_store(clock)
        record = user_record(clock)
        first.save(record, clock.now() + timedelta(hours=1))
        assert make_store(clock).load(record.sid) == record

    def test_repr_hides_password(self, store: SqlAlchemySessionStore) -> None:
        assert "SqlAlchemySessionStore" in repr(store)
        assert KEY.hex() not in repr(store)


# --- store down -----------------------------------------------------------------------------------


# --- the SQL store's read: fresh, fork-safe, seen by listeners, fail closed --------------------------

HOUR = timedelta(hours=1)

DELETE_SCRIPT = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
with db:
    gone = db.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sys.argv[2],)).rowcount
db.close()
print(gone)
"""


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def file_store(sqlite_file: Path) -> Iterator[SqlAlchemySessionStore]:
    """A SQL store on a SQLite file (what the default configuration uses)."""
    made = SqlAlchemySessionStore(
        f"sqlite:///{sqlite_file}", crypto=SessionCrypto(KEY), clock=MockClock(), purge_every=None
    )
    yield made
    made.engine.dispose()


def _clock_of(store: SqlAlchemySessionStore) -> MockClock:
    clock = store._clock
    assert isinstance(clock, MockClock)
    return clock


def _saved(store: SqlAlchemySessionStore, user: str = "alice") -> SessionRecord:
    clock = _clock_of(store)
    record = user_record(clock, user=user)
    assert store.save(record, clock.now() + HOUR)
    return record


@pytest.mark.parametrize("where", ["other-store", "raw-connection", "other-process"])
def test_a_row_deleted_elsewhere_is_gone_at_the_next_read(
    file_store: SqlAlchemySessionStore, sqlite_file: Path, where: str
) -> None:
    """A session revoked by another worker, connection or process is never served again,
    although this store read it just before (nothing is remembered between reads)."""
    record, kept = _saved(file_store), _saved(file_store, user="bob")
    for _ in range(2):
        assert file_store.load(record.sid) == record
    if where == "other-store":
        other = SqlAlchemySessionStore(
            f"sqlite:///{sqlite_file}", crypto=SessionCrypto(KEY), purge_every=None
        )
        other.delete(record.sid)
        other.engine.dispose()
    elif where == "raw-connection":
        with contextlib.closing(sqlite3.connect(sqlite_file)) as db, db:
            db.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sid_hash(record.sid),))
    else:
        done = subprocess.run(
            [sys.executable, "-c", DELETE_SCRIPT, str(sqlite_file), sid_hash(record.sid)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert done.stdout.strip() == "1"
    assert file_store.load(record.sid) is None
    assert file_store.load(kept.sid) == kept


def test_a_row_rewritten_or_inserted_elsewhere_is_read_as_it_is_now(database_url: str) -> None:
    clock = MockClock()
    one, two = (
        SqlAlchemySessionStore(database_url, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
        for _ in range(2)
    )
    try:
        record = user_record(clock, cart=[1])
        assert one.save(record, clock.now() + HOUR)
        assert one.load(record.sid) == record
        rewritten = replace(record, user_id="bob", custom={"cart": [1, 2]})
        assert two.save(rewritten, clock.now() + HOUR, existing=True)
        assert one.load(record.sid) == rewritten
        assert two.save(rewritten, clock.now(), existing=True)  # its expiry brought forward
        assert one.load(record.sid) is None
        later = user_record(clock, user="carol")
        assert one.load(later.sid) is None
        assert two.save(later, clock.now() + HOUR)
        assert one.load(later.sid) == later
    finally:
        one.engine.dispose()
        two.engine.dispose()


def test_an_uncommitted_delete_elsewhere_is_not_seen_until_its_commit(
    file_store: SqlAlchemySessionStore, sqlite_file: Path
) -> None:
    record = _saved(file_store)
    assert file_store.load(record.sid) == record
    with contextlib.closing(sqlite3.connect(sqlite_file, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM authflow_sessions WHERE sid_hash = ?", (sid_hash(record.sid),))
        assert file_store.load(record.sid) == record  # no dirty read
        writer.execute("COMMIT")
        assert file_store.load(record.sid) is None


def in_forked_child(work: Callable[[], dict[str, object]]) -> dict[str, object]:
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
def test_a_forked_child_reads_on_connections_it_opened(file_store: SqlAlchemySessionStore) -> None:
    """The pool holds live connections the parent opened when it forks (gunicorn's
    --preload): the child's reads use connections the child opened, and the parent's
    stay usable in the parent."""
    opened_by: dict[int, int] = {}

    def opened(dbapi_connection: Any, connection_record: Any) -> None:
        opened_by[id(dbapi_connection)] = os.getpid()

    event.listen(file_store.engine, "connect", opened)
    file_store.engine.dispose()
    record, gone_in_child = _saved(file_store), _saved(file_store, user="bob")
    first, second = file_store.engine.raw_connection(), file_store.engine.raw_connection()
    first.close()
    second.close()  # two live connections of the parent wait in the pool
    assert file_store.engine.pool.checkedin() == 2  # type: ignore[attr-defined]

    def in_child() -> dict[str, object]:
        result: dict[str, object] = {"loads": [file_store.load(record.sid) == record for _ in range(2)]}
        pooled = file_store.engine.raw_connection()
        result["pooled_opened_here"] = opened_by.get(id(pooled.driver_connection)) == os.getpid()
        pooled.close()
        file_store.delete(gone_in_child.sid)
        result["deleted"] = file_store.load(gone_in_child.sid) is None
        return result

    result = in_forked_child(in_child)
    assert result == {"loads": [True, True], "pooled_opened_here": True, "deleted": True}
    assert file_store.load(record.sid) == record  # the parent is untouched
    assert file_store.load(gone_in_child.sid) is None  # the child's delete


def test_threads_reading_at_once_each_get_their_own_record(file_store: SqlAlchemySessionStore) -> None:
    records = [_saved(file_store, user=f"user{number}") for number in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(records))

    def reader(record: SessionRecord) -> None:
        try:
            barrier.wait()
            for _ in range(50):
                assert file_store.load(record.sid) == record
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(record,)) for record in records]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_statement_listeners_and_echo_see_the_read(
    file_store: SqlAlchemySessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The read is an ordinary Core statement: tracing (engine events) and logging see it."""
    record = _saved(file_store)
    seen: list[str] = []
    event.listen(file_store.engine, "after_cursor_execute", lambda *args: seen.append(args[2]))
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine.Engine")
    assert file_store.load(record.sid) == record
    assert len(seen) == 1 and "FROM authflow_sessions" in seen[0]
    assert "FROM authflow_sessions" in caplog.text


def test_a_driver_error_fails_closed_and_keeps_the_pool_usable(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = MockClock()
    store = SqlAlchemySessionStore(database_url, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
    try:
        record = user_record(clock)
        assert store.save(record, clock.now() + HOUR)
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE authflow_sessions RENAME TO authflow_sessions_away"))
        with caplog.at_level(logging.WARNING, logger="flask_authflow.sessions"):
            with pytest.raises(StoreUnavailable):
                store.load(record.sid)
        assert "session store unavailable: " in caplog.text
        assert record.sid not in caplog.text and sid_hash(record.sid) not in caplog.text
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE authflow_sessions_away RENAME TO authflow_sessions"))
        assert store.load(record.sid) == record
    finally:
        store.engine.dispose()


def test_a_failing_connect_fails_closed(file_store: SqlAlchemySessionStore) -> None:
    record = _saved(file_store)
    file_store.engine.dispose()

    def refuse(dbapi_connection: Any, connection_record: Any) -> None:
        raise sqlite3.OperationalError("unable to open database file")

    event.listen(file_store.engine, "connect", refuse)
    with pytest.raises(StoreUnavailable) as raised:
        file_store.load(record.sid)
    assert isinstance(raised.value.__cause__, DBAPIError)
    event.remove(file_store.engine, "connect", refuse)
    assert file_store.load(record.sid) == record


def test_a_connection_that_died_in_the_pool_is_replaced_and_the_read_runs_again(
    file_store: SqlAlchemySessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLAlchemy's optimistic disconnect handling: the dead connection is invalidated
    (with the rest of the pool) and the read runs once more on a new one."""
    record = _saved(file_store)
    closed: list[int] = []

    def close_once(dbapi_connection: Any, connection_record: Any, proxy: Any) -> None:
        if not closed:  # the connection dies between checkout and the read
            closed.append(1)
            dbapi_connection.close()

    event.listen(file_store.engine.pool, "checkout", close_once)
    with caplog.at_level(logging.INFO):
        assert file_store.load(record.sid) == record
    assert closed == [1]
    assert "read retried on a new connection" in caplog.text
    assert file_store.load(record.sid) == record


def dead_urls(tmp_path: Path) -> list[str]:
    return [
        f"sqlite:///{tmp_path / 'authflow.db'}",
        f"postgresql+psycopg://authflow@127.0.0.1:{free_port()}/authflow?connect_timeout=2",
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["sqlite-missing-dir", "postgresql-dead-port"])
def test_store_down_raises_store_unavailable(tmp_path: Path, which: int) -> None:
    url = dead_urls(tmp_path)[which]
    clock = MockClock()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), clock=clock, create_tables=False)
    if which == 0:  # the database file turns into something SQLite cannot open
        (tmp_path / "authflow.db").unlink()
        (tmp_path / "authflow.db").mkdir()
    with pytest.raises(StoreUnavailable):
        SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), clock=clock)
    record = user_record(clock)
    calls: list[Callable[[], object]] = [
        lambda: store.load(record.sid),
        lambda: store.save(record, clock.now() + timedelta(hours=1)),
        lambda: store.delete(record.sid),
        lambda: store.list_user_sessions("acme", "alice"),
        lambda: store.delete_user_sessions("acme", "alice"),
        store.purge_expired,
    ]
    try:
        for call in calls:
            with pytest.raises(StoreUnavailable):
                call()
    finally:
        store.engine.dispose()


def test_store_down_after_start(database_url: str) -> None:
    clock = MockClock()
    store = SqlAlchemySessionStore(database_url, crypto=SessionCrypto(KEY), clock=clock)
    record = user_record(clock)
    store.save(record, clock.now() + timedelta(hours=1))
    with store.engine.begin() as conn:
        sessions_table.drop(conn)  # the database no longer serves the table
    try:
        with pytest.raises(StoreUnavailable):
            store.load(record.sid)
    finally:
        store.engine.dispose()


def test_sql_store_needs_a_session_crypto() -> None:
    with pytest.raises(TypeError):
        SqlAlchemySessionStore("sqlite://", crypto=KEY)  # type: ignore[arg-type]


# --- record serialisation -------------------------------------------------------------------------


def test_serialize_round_trip_every_state() -> None:
    clock = MockClock()
    now = clock.now()
    guest = new_guest_record(now)
    authenticating = start_login(guest, tenant="t", user_id="u", factors=["password", "totp"], now=now)
    records = [
        guest,
        replace(guest, custom={"k": [1, 2]}),
        authenticating,
        begin_flow(pass_factor(authenticating, "password", now=now), {"a": "b"}),
        replace(user_record(clock), last_seen_at=now + timedelta(minutes=3)),
    ]
    for record in records:
        data = serialize_record(record)
        assert json.loads(data)["v"] == RECORD_SCHEMA
        assert deserialize_record(data) == record


def _doc(**changes: object) -> bytes:
    doc = json.loads(serialize_record(user_record(MockClock())))
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[]",
        b"null",
        _doc(v=RECORD_SCHEMA + 1),
        _doc(v=None),
        _doc(state="superuser"),
        _doc(sid=""),
        _doc(sid=5),
        _doc(created_at="yesterday"),
        _doc(created_at=None),
        _doc(factors_pending="password"),
        _doc(factors_pending=["totp"]),  # authenticated with a pending factor
        _doc(user_id=None),
        _doc(user_id=7),
        _doc(custom="{not tagged json"),
        _doc(custom='"a string"'),
        _doc(flow="[1, 2]"),
    ],
)
def test_deserialize_rejects_malformed(data: bytes) -> None:
    with pytest.raises(SessionRecordError):
        deserialize_record(data)


def test_deserialized_state_is_typed() -> None:
    record = deserialize_record(serialize_record(user_record(MockClock())))
    assert record.state is AuthState.AUTHENTICATED
    assert record.created_at.tzinfo is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.postgres
def test_a_forked_child_leaves_the_parents_read_connections_open(postgres_server: Any) -> None:
    """On PostgreSQL the reads run on a second engine made beside the store's (AUTOCOMMIT
    from the start): a forked child renews both pools without closing the parent's
    connections (closing one would end it on the server for the parent too), reads on
    connections of its own, and the parent's pooled read connection still answers."""
    from sqlalchemy import text

    from flask_authflow.storage._sql.engine import autocommit_reads

    store = SqlAlchemySessionStore(
        postgres_server.new_database(), crypto=SessionCrypto(KEY), clock=MockClock(), purge_every=None
    )
    reads = autocommit_reads(store.engine)
    try:
        record = _saved(store)
        assert store.load(record.sid) == record  # a parent's connection now waits in the read pool
        with reads.connect() as conn:  # (the one pooled connection, back in the pool after)
            parent_pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        assert reads.pool.checkedin() == 1  # type: ignore[attr-defined]

        def in_child() -> dict[str, object]:
            with reads.connect() as conn:
                backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            return {"loaded": store.load(record.sid) == record, "own_connection": backend != parent_pid}

        assert in_forked_child(in_child) == {"loaded": True, "own_connection": True}
        # The parent's pooled connection was not closed by the child: the same server process.
        raw = reads.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone() == (parent_pid,)
        finally:
            raw.close()
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        store.engine.dispose()
