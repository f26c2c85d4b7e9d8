"""The memo of opened session records (``RecordOpener``) of the SQL and Redis stores.

Every request still reads the sealed row; only the decrypt + decode of bytes already
opened is skipped. These tests check that a hit needs no decrypt, and that nothing the
memo holds weakens a check: rewritten, tampered, foreign, revoked rows and mutable
application data behave as without it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, session
from sqlalchemy import select, update

from flask_authflow import AuthFlow, get_state, login_required
from flask_authflow.clock import MockClock
from flask_authflow.session.crypto import SessionCrypto
from flask_authflow.session.model import SessionRecord, begin_flow, sid_hash
from flask_authflow.session.stores import RecordOpener, serialize_record
from flask_authflow.stores.redis_session_store import RedisSessionStore
from flask_authflow.stores.sqlalchemy.session_store import SqlAlchemySessionStore, sessions_table
from flask_authflow.testing.pytest_plugin import login_test_client
from tests.concurrency import run_together
from tests.parts import RedisServer
from tests.test_session_interface import cookie_value, sid_of
from tests.test_session_stores import user_record

KEY = bytes(range(32))
HOUR = timedelta(hours=1)
PASSWORD = "plum tuesday kettle orbit 47"

Store = SqlAlchemySessionStore | RedisSessionStore


@pytest.fixture
def decrypts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Keys passed to ``SessionCrypto.decrypt`` (every store and opener), in order."""
    calls: list[str] = []
    original = SessionCrypto.decrypt

    def counting(self: SessionCrypto, key: str, data: bytes) -> bytes:
        calls.append(key)
        return original(self, key, data)

    monkeypatch.setattr(SessionCrypto, "decrypt", counting)
    return calls


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: MockClock) -> Iterator[Store]:
    if request.param == "sqlite":
        sql = SqlAlchemySessionStore(f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(KEY), clock=clock)
        yield sql
        sql.engine.dispose()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    prefix = f"memo-{secrets.token_hex(4)}:"
    red = RedisSessionStore(server.url(), crypto=SessionCrypto(KEY), clock=clock, prefix=prefix)
    yield red
    for key in red.client.scan_iter(match=prefix + "*"):
        red.client.delete(key)
    red.close()


def read_raw(store: Store, sid: str) -> bytes:
    if isinstance(store, SqlAlchemySessionStore):
        with store.engine.connect() as conn:
            return bytes(
                conn.execute(
                    select(sessions_table.c.data).where(sessions_table.c.sid_hash == sid_hash(sid))
                ).scalar_one()
            )
    value = store.client.hget(f"{store.prefix}s:{sid_hash(sid)}", "d")
    assert isinstance(value, bytes)
    return value


def write_raw(store: Store, sid: str, data: bytes) -> None:
    if isinstance(store, SqlAlchemySessionStore):
        with store.engine.begin() as conn:
            conn.execute(
                update(sessions_table).where(sessions_table.c.sid_hash == sid_hash(sid)).values(data=data)
            )
    else:
        store.client.hset(f"{store.prefix}s:{sid_hash(sid)}", "d", data)


def opener_of(store: Store) -> RecordOpener:
    opener = store._opener
    assert isinstance(opener, RecordOpener)
    return opener


def sealed_rows(
    crypto: SessionCrypto, clock: MockClock, count: int
) -> list[tuple[str, bytes, SessionRecord]]:
    """``count`` user records, each with its key (``sid_hash``) and sealed bytes, as a store holds them."""
    rows = []
    for _ in range(count):
        record = user_record(clock)
        key = sid_hash(record.sid)
        rows.append((key, crypto.encrypt(key, serialize_record(record)), record))
    return rows


def saved(store: Store, clock: MockClock, **custom: object) -> SessionRecord:
    record = user_record(clock, **custom)
    assert store.save(record, clock.now() + HOUR)
    return record


# --- hits ------------------------------------------------------------------------------------------


def test_a_hit_returns_the_record_without_decrypting_again(
    store: Store, clock: MockClock, decrypts: list[str]
) -> None:
    record = saved(store, clock)
    assert store.load(record.sid) == record
    assert decrypts == [sid_hash(record.sid)]
    for _ in range(3):
        assert store.load(record.sid) == record
    assert len(decrypts) == 1
    assert len(opener_of(store)) == 1


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_store_built_with_record_memo_zero_decrypts_every_read(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, clock: MockClock, decrypts: list[str]
) -> None:
    if kind == "sqlite":
        store: Store = SqlAlchemySessionStore(
            f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(KEY), clock=clock, record_memo=0
        )
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        prefix = f"memo-{secrets.token_hex(4)}:"
        store = RedisSessionStore(
            server.url(), crypto=SessionCrypto(KEY), clock=clock, prefix=prefix, record_memo=0
        )
    try:
        record = saved(store, clock)
        for _ in range(3):
            assert store.load(record.sid) == record
        assert decrypts == [sid_hash(record.sid)] * 3
        assert len(opener_of(store)) == 0
        with pytest.raises(ValueError, match="must not be negative"):
            type(store)(
                f"sqlite:///{tmp_path / 'n.db'}" if kind == "sqlite" else server.url(),
                crypto=SessionCrypto(KEY),
                record_memo=-1,
            )
    finally:
        if isinstance(store, SqlAlchemySessionStore):
            store.engine.dispose()
        else:
            store.delete(record.sid)
            store.close()


def test_a_rewritten_row_is_opened_afresh(store: Store, clock: MockClock, decrypts: list[str]) -> None:
    record = saved(store, clock)
    assert store.load(record.sid) == record
    clock.advance(timedelta(minutes=5))
    changed = replace(record, last_seen_at=clock.now(), device="phone")
    assert store.save(changed, clock.now() + HOUR, existing=True)
    assert store.load(changed.sid) == changed
    assert len(decrypts) == 2
    # the same content saved again is sealed with a new nonce: new bytes, opened afresh
    assert store.save(changed, clock.now() + HOUR, existing=True)
    assert store.load(changed.sid) == changed
    assert len(decrypts) == 3


def test_records_with_custom_data_or_flow_are_never_remembered(
    store: Store, clock: MockClock, decrypts: list[str]
) -> None:
    with_custom = saved(store, clock, cart=[1, 2])
    with_flow = begin_flow(user_record(clock, user="bob"), {"step_up": "totp"})
    assert store.save(with_flow, clock.now() + HOUR)
    for _ in range(3):
        loaded = store.load(with_custom.sid)
        assert loaded == with_custom
        assert loaded is not None
        loaded.custom["cart"].append(3)  # a view changing its copy in place
        assert store.load(with_flow.sid) == with_flow
    assert len(decrypts) == 6
    assert len(opener_of(store)) == 0


def test_a_tampered_row_is_refused_on_every_read(
    store: Store, clock: MockClock, decrypts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    record = saved(store, clock)
    data = bytearray(read_raw(store, record.sid))
    data[-1] ^= 1
    write_raw(store, record.sid, bytes(data))
    with caplog.at_level(logging.WARNING, logger="flask_authflow.session"):
        for _ in range(3):
            assert store.load(record.sid) is None
    assert len(decrypts) == 3
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 3
    assert len(opener_of(store)) == 0
    # the original bytes put back open again (and are remembered from then on)
    write_raw(store, record.sid, bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    assert store.load(record.sid) == record
    assert store.load(record.sid) == record
    assert len(decrypts) == 4


def test_another_sessions_record_is_refused_though_its_bytes_are_remembered(
    store: Store, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    record = saved(store, clock)
    key = sid_hash(record.sid)
    data = read_raw(store, record.sid)
    assert store._open(key, data, expected_sid=record.sid) == record
    assert store._open(key, data) == record
    assert len(opener_of(store)) == 1
    with caplog.at_level(logging.WARNING, logger="flask_authflow.session"):
        for _ in range(2):
            assert store._open(key, data, expected_sid="someone-else") is None
    assert sum("another session's record" in r.getMessage() for r in caplog.records) == 2


def test_a_foreign_record_is_never_remembered(
    clock: MockClock, decrypts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A record whose sid does not hash to the key it was sealed under (a bug or a forgery
    # with the key) is refused every time, not remembered.
    crypto = SessionCrypto(KEY)
    opener = RecordOpener(crypto, log=logging.getLogger("flask_authflow.session"))
    record = user_record(clock)
    wrong_key = sid_hash("another-sid")
    sealed = crypto.encrypt(wrong_key, serialize_record(record))
    with caplog.at_level(logging.WARNING, logger="flask_authflow.session"):
        for _ in range(3):
            assert opener.open(wrong_key, sealed) is None
    assert len(decrypts) == 3
    assert len(opener) == 0
    assert sum("another session's record" in r.getMessage() for r in caplog.records) == 3


def test_a_revoked_session_is_absent_though_its_bytes_were_remembered(store: Store, clock: MockClock) -> None:
    record = saved(store, clock)
    other = saved(store, clock)
    assert store.load(record.sid) == record
    assert store.load(other.sid) == other
    store.delete(record.sid)
    assert store.load(record.sid) is None
    assert store.delete_user_sessions("acme", "alice") == 1
    assert store.load(other.sid) is None
    assert len(opener_of(store)) == 2  # the entries are there; the rows are not


def test_an_expired_session_is_absent_though_its_bytes_were_remembered(
    store: Store, clock: MockClock
) -> None:
    record = saved(store, clock)
    assert store.load(record.sid) == record
    clock.advance(HOUR + timedelta(seconds=1))
    assert store.load(record.sid) is None


# --- the bound ---------------------------------------------------------------------------------------


def test_the_memo_is_bounded_and_evicts_the_least_recently_used(
    clock: MockClock, decrypts: list[str]
) -> None:
    crypto = SessionCrypto(KEY)
    opener = RecordOpener(crypto, log=logging.getLogger("flask_authflow.session"), memo_size=8)
    rows = sealed_rows(crypto, clock, 20)
    first_key, first_data, first = rows[0]
    for key, data, record in rows:
        assert opener.open(key, data, expected_sid=record.sid) == record
        assert opener.open(first_key, first_data) == first  # kept warm: never evicted
        assert len(opener) <= 8
    assert len(opener) == 8
    before = len(decrypts)
    assert before == len(rows)  # each row opened once: the warm one was never evicted
    assert opener.open(first_key, first_data) == first
    assert opener.open(rows[-1][0], rows[-1][1]) == rows[-1][2]
    assert len(decrypts) == before  # both still remembered
    assert opener.open(rows[1][0], rows[1][1]) == rows[1][2]  # evicted long ago
    assert len(decrypts) == before + 1


def test_large_rows_are_not_remembered(store: Store, clock: MockClock, decrypts: list[str]) -> None:
    record = replace(user_record(clock), device="x" * 8000)
    assert store.save(record, clock.now() + HOUR)
    assert len(read_raw(store, record.sid)) > 4096
    for _ in range(3):
        assert store.load(record.sid) == record
    assert len(decrypts) == 3
    assert len(opener_of(store)) == 0


def test_a_memo_of_size_zero_remembers_nothing(clock: MockClock, decrypts: list[str]) -> None:
    crypto = SessionCrypto(KEY)
    opener = RecordOpener(crypto, log=logging.getLogger("flask_authflow.session"), memo_size=0)
    record = user_record(clock)
    sealed = crypto.encrypt(sid_hash(record.sid), serialize_record(record))
    assert opener.open(sid_hash(record.sid), sealed) == record
    assert opener.open(sid_hash(record.sid), sealed) == record
    assert len(decrypts) == 2 and len(opener) == 0
    with pytest.raises(ValueError):
        RecordOpener(crypto, log=logging.getLogger("x"), memo_size=-1)


# --- threads ----------------------------------------------------------------------------------------


def test_threads_reading_concurrently_get_their_own_records(store: Store, clock: MockClock) -> None:
    records = [saved(store, clock, **({"n": i} if i % 3 == 0 else {})) for i in range(12)]

    def reader(offset: int) -> Callable[[], None]:
        def work() -> None:
            for i in range(150):
                record = records[(i + offset) % len(records)]
                assert store.load(record.sid) == record

        return work

    run_together([reader(n) for n in range(6)])
    assert len(opener_of(store)) == 8  # the records without custom data


def test_threads_sharing_a_small_memo_stay_correct(clock: MockClock) -> None:
    crypto = SessionCrypto(KEY)
    opener = RecordOpener(crypto, log=logging.getLogger("flask_authflow.session"), memo_size=4)
    rows = sealed_rows(crypto, clock, 16)
    sizes: list[int] = []

    def opener_of_rows(offset: int) -> Callable[[], None]:
        def work() -> None:
            for i in range(400):
                key, data, record = rows[(i * 7 + offset) % len(rows)]
                assert opener.open(key, data, expected_sid=record.sid) == record
                sizes.append(len(opener))

        return work

    run_together([opener_of_rows(n) for n in range(6)])
    assert max(sizes) <= 4


# --- an app ----------------------------------------------------------------------------------------


def _app(tmp_path: Path, hasher: Any) -> Flask:
    app = Flask(__name__)
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE="sql",
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'app.db'}",
    )
    AuthFlow(app, hasher=hasher)

    @app.get("/put")
    def put() -> str:
        session["cart"] = ["apple"]
        return "ok"

    @app.get("/mutate")
    def mutate() -> str:
        cart = session["cart"]
        cart.append("pear")  # in place: not marked modified, so not saved
        return ",".join(cart)

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "secret"

    @app.get("/read")
    def read() -> str:
        return ",".join(session.get("cart", []))

    return app


def test_in_place_mutation_of_custom_data_does_not_leak_into_the_next_request(
    tmp_path: Path, authflow_hasher: Any, decrypts: list[str]
) -> None:
    app = _app(tmp_path, authflow_hasher)
    client = login_test_client(app, "alice", password=PASSWORD)
    assert client.get("/put").text == "ok"
    store = get_state(app).session_store
    assert isinstance(store, SqlAlchemySessionStore)
    sid = sid_of(cookie_value(client))
    row = read_raw(store, sid)
    assert client.get("/mutate").text == "apple,pear"
    assert read_raw(store, sid) == row  # nothing was saved
    assert client.get("/read").text == "apple"
    assert client.get("/mutate").text == "apple,pear"
    assert client.get("/read").text == "apple"


def test_an_authenticated_session_is_opened_once_across_requests(
    tmp_path: Path, authflow_hasher: Any, decrypts: list[str]
) -> None:
    app = _app(tmp_path, authflow_hasher)
    client = login_test_client(app, "alice", password=PASSWORD)
    store = get_state(app).session_store
    assert isinstance(store, SqlAlchemySessionStore)
    sid = sid_of(cookie_value(client))
    assert client.get("/p").text == "secret"
    row = read_raw(store, sid)
    del decrypts[:]
    for _ in range(5):
        assert client.get("/p").text == "secret"
    assert read_raw(store, sid) == row  # no write in between (the last-seen refresh is coarse)
    assert decrypts == []
    # revoked: refused, though its bytes are remembered
    store.delete(sid)
    assert client.get("/p").status_code != 200
    assert store.load(sid) is None
