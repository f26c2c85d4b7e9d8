"""The Redis session store, against a real redis-server.

The same contract as the memory and SQL stores (``StoreContract`` of
tests/test_session_stores.py and the no-resurrection checks of
tests/test_session_revocation.py run here on :class:`RedisSessionStore`), then what is
Redis's own: records sealed under the key's hash, index sets and their housekeeping, the
key's TTL, races decided by the Lua scripts, outages, configuration, and an app end to
end with ``AUTHFLOW_SESSION_STORE = "redis"``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, inspect, text

from flask_authflow import current_session, get_state, login_required
from flask_authflow._clock import MockClock, SystemClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore
from flask_authflow._core.session import (
    SessionRecord,
    complete_login,
    new_guest_record,
    new_session_id,
    sid_hash,
)
from flask_authflow._web.config import load_config
from flask_authflow._web.state import account_admin
from flask_authflow.errors import (
    ConfigurationError,
    MissingExtraError,
    SessionDecryptError,
    StoreUnavailable,
)
from flask_authflow.sessions._stores import deserialize_record
from flask_authflow.storage._redis_sessions import RedisSessionStore
from flask_authflow.testing._pytest_plugin import login_test_client
from tests import test_session_revocation as revocation
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.parts import RedisServer, free_port, start_redis
from tests.protocols import missing_members
from tests.test_session_interface import cookie_value, set_cookies, sid_of
from tests.test_session_stores import MARKER, StoreContract, user_record

pytestmark = pytest.mark.redis

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
HOUR = timedelta(hours=1)
ISSUER = "https://op.example"
PASSWORD = "plum tuesday kettle orbit 47"

_prefixes = itertools.count()


def _prefix() -> str:
    """A key prefix of this test alone: tests share one redis-server."""
    return f"t{next(_prefixes)}-{secrets.token_hex(3)}:"


def _drop_prefix(client: redis.Redis, prefix: str) -> None:
    for key in client.scan_iter(match=prefix.replace("*", "\\*") + "*"):
        client.delete(key)


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of the test server (to look at and tamper with what the store wrote)."""
    client = redis.Redis.from_url(redis_server.url())
    yield client
    client.close()


@pytest.fixture
def make_store(redis_server: RedisServer, raw: redis.Redis) -> Iterator[Callable[..., RedisSessionStore]]:
    """Stores on the test server; every call of one test shares one key prefix."""
    prefix = _prefix()
    made: list[RedisSessionStore] = []

    def make(clock: Any = None, crypto: SessionCrypto | None = None) -> RedisSessionStore:
        store = RedisSessionStore(
            redis_server.url(), crypto=crypto or SessionCrypto(KEY), clock=clock, prefix=prefix
        )
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    _drop_prefix(raw, prefix)


# --- the contract every store meets ----------------------------------------------------------------


class TestRedisSessionStore(StoreContract):
    """tests/test_session_stores.py's contract, on Redis (``make_store`` above)."""


# tests/test_session_revocation.py's no-resurrection checks, on Redis (collected here too,
# with this module's ``make_store``).
test_saving_an_existing_session_after_its_deletion_creates_nothing = (
    revocation.test_saving_an_existing_session_after_its_deletion_creates_nothing
)
test_existing_save_of_a_live_session_updates_it = revocation.test_existing_save_of_a_live_session_updates_it
test_existing_save_of_an_expired_session_creates_nothing = (
    revocation.test_existing_save_of_an_expired_session_creates_nothing
)
test_rotation_from_a_revoked_id_creates_nothing = revocation.test_rotation_from_a_revoked_id_creates_nothing
test_rotation_is_all_or_nothing = revocation.test_rotation_is_all_or_nothing
test_refresh_racing_revoke_never_resurrects_threads = (
    revocation.test_refresh_racing_revoke_never_resurrects_threads
)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def store(make_store: Callable[..., RedisSessionStore], clock: MockClock) -> RedisSessionStore:
    return make_store(clock)


def record_key(store: RedisSessionStore, sid: str) -> str:
    return f"{store.prefix}s:{sid_hash(sid)}"


def federated_record(clock: MockClock, user: str = "alice", provider_sid: str = "op-sid-1") -> SessionRecord:
    return complete_login(
        new_guest_record(clock.now()),
        tenant="acme",
        user_id=user,
        method="oidc",
        now=clock.now(),
        federation={"issuer": ISSUER, "sid": provider_sid},
    )


# --- at rest ----------------------------------------------------------------------------------------


def test_is_a_session_store_and_names_its_server(store: RedisSessionStore, redis_server: RedisServer) -> None:
    assert missing_members(store, SessionStore) == []
    assert repr(store) == f"<RedisSessionStore 127.0.0.1:{redis_server.port}/0 prefix={store.prefix!r}>"


def test_encrypted_at_rest_under_the_hash_of_the_id(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    record = user_record(clock, note=MARKER)
    store.save(record, clock.now() + HOUR)
    keys = sorted(k.decode() for k in raw.scan_iter(match=f"{store.prefix}*"))
    user_index = f"{store.prefix}u:{hashlib.sha256(b'4:acme' + bytes([10]) + b'alice').hexdigest()}"
    tenant_index = f"{store.prefix}t:{hashlib.sha256(b'acme').hexdigest()}"
    assert keys == [record_key(store, record.sid), tenant_index, user_index]
    assert raw.smembers(user_index) == {sid_hash(record.sid).encode()}
    assert raw.smembers(tenant_index) == {user_index.encode()}
    fields = raw.hgetall(record_key(store, record.sid))
    # The sealed record, its expiry, its last-seen time (for the read's folded touch) and the
    # index sets it is in (the user's, and the tenant's set that user set is in).
    assert set(fields) == {b"d", b"e", b"l", b"u", b"t"}
    assert (fields[b"u"], fields[b"t"]) == (user_index.encode(), tenant_index.encode())
    assert int(fields[b"l"]) == int(record.last_seen_at.timestamp()) * 1_000_000
    for value in [*keys, *(v.decode("latin-1") for v in fields.values())]:
        assert record.sid not in value and MARKER not in value
    data = fields[b"d"]
    assert deserialize_record(SessionCrypto(KEY).decrypt(sid_hash(record.sid), data)) == record
    with pytest.raises(SessionDecryptError):
        SessionCrypto(KEY).decrypt(sid_hash("another-session-id"), data)
    # the expiry the clock decides, in microseconds
    assert int(fields[b"e"]) == int((clock.now() + HOUR).timestamp()) * 1_000_000


def test_value_moved_to_another_session_is_absent(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    victim, attacker = user_record(clock, note="victim"), user_record(clock, user="mallory")
    for record in (victim, attacker):
        store.save(record, clock.now() + HOUR)
    stolen = raw.hget(record_key(store, victim.sid), "d")
    raw.hset(record_key(store, attacker.sid), "d", stolen)
    assert store.load(attacker.sid) is None
    assert store.list_user_sessions("acme", "mallory") == []
    assert store.load(victim.sid) == victim


def test_tampered_value_is_absent_and_logged(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    record = user_record(clock, note=MARKER)
    store.save(record, clock.now() + HOUR)
    data = bytearray(raw.hget(record_key(store, record.sid), "d"))
    data[-1] ^= 0x01
    raw.hset(record_key(store, record.sid), "d", bytes(data))
    with caplog.at_level(logging.WARNING, logger="flask_authflow.sessions"):
        assert store.load(record.sid) is None
        assert store.list_user_sessions("acme", "alice") == []
    assert "unreadable" in caplog.text
    assert record.sid not in caplog.text and MARKER not in caplog.text


def test_wrong_key_is_absent_and_a_previous_key_still_reads(
    make_store: Callable[..., RedisSessionStore], clock: MockClock
) -> None:
    record = user_record(clock)
    make_store(clock, SessionCrypto(KEY)).save(record, clock.now() + HOUR)
    assert make_store(clock, SessionCrypto(OTHER_KEY)).load(record.sid) is None
    rotated = make_store(clock, SessionCrypto(OTHER_KEY).with_previous_key(KEY))
    assert rotated.load(record.sid) == record
    assert rotated.save(record, clock.now() + HOUR, existing=True)  # re-sealed under the new key
    assert make_store(clock, SessionCrypto(OTHER_KEY)).load(record.sid) == record


def test_tampered_index_does_not_change_listing(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    alice, bob = user_record(clock), user_record(clock, user="bob")
    for record in (alice, bob):
        store.save(record, clock.now() + HOUR)
    bob_index = raw.hget(record_key(store, bob.sid), "u")
    # Someone with write access to Redis files alice's session under bob.
    raw.sadd(bob_index, sid_hash(alice.sid))
    raw.hset(record_key(store, alice.sid), "u", bob_index)
    assert raw.scard(bob_index) == 2
    assert store.list_user_sessions("acme", "bob") == [bob]  # the decrypted record says alice


# --- indexes ----------------------------------------------------------------------------------------


def test_revoking_a_user_removes_records_and_index(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    a1, a2, bob = user_record(clock), user_record(clock), user_record(clock, user="bob")
    for record in (a1, a2, bob):
        store.save(record, clock.now() + HOUR)
    assert store.delete_user_sessions("acme", "alice") == 2
    assert store.load(a1.sid) is None and store.load(a2.sid) is None
    assert store.load(bob.sid) == bob
    remaining = {k.decode() for k in raw.scan_iter(match=f"{store.prefix}*")}
    bob_index = raw.hget(record_key(store, bob.sid), "u")
    (tenant_index,) = raw.scan_iter(match=f"{store.prefix}t:*")
    assert remaining == {record_key(store, bob.sid), bob_index.decode(), tenant_index.decode()}
    assert raw.smembers(tenant_index) == {bob_index}  # alice's set is forgotten
    # a late save of a revoked session finds nothing to update
    assert store.save(a1, clock.now() + HOUR, existing=True) is False
    assert raw.exists(record_key(store, a1.sid)) == 0


def test_revoking_a_tenant_ends_its_sessions_and_nothing_else(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    acme = [user_record(clock), user_record(clock), user_record(clock, user="bob")]
    other = user_record(clock, tenant="globex")  # same user id, another tenant
    guest = replace(new_guest_record(clock.now()), custom={"cart": [1, 2]})
    stale = user_record(clock, user="carol")
    store.save(stale, clock.now() + timedelta(minutes=1))
    for record in (*acme, other, guest):
        store.save(record, clock.now() + HOUR)
    clock.advance(timedelta(minutes=2))  # carol's session is over (not counted as revoked)
    loaded = store.load(acme[0].sid)
    assert loaded is not None

    assert store.delete_tenant_sessions("acme") == len(acme)
    assert [store.load(r.sid) for r in acme] == [None] * len(acme)
    assert store.load(other.sid) == other
    assert store.load(guest.sid) == guest
    assert store.list_user_sessions("acme", "alice") == []
    assert store.list_user_sessions("globex", "alice") == [other]
    assert store.delete_tenant_sessions("acme") == 0
    # carol's expired record went too; what is left is globex's and the guest's
    left = {k.decode() for k in raw.scan_iter(match=f"{store.prefix}*")}
    assert {k for k in left if k.startswith(f"{store.prefix}s:")} == {
        record_key(store, other.sid),
        record_key(store, guest.sid),
    }
    assert len(left) == 4  # and globex's user set and tenant set
    # a request that loaded a session before the revocation cannot save it back
    assert store.save(replace(loaded, custom={"late": True}), clock.now() + HOUR, existing=True) is False
    assert (
        store.save(replace(loaded, sid=new_session_id()), clock.now() + HOUR, replaces=[loaded.sid]) is False
    )
    assert store.list_user_sessions("acme", "alice") == []


def test_federated_sessions_are_found_by_their_provider_session(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    first, second = federated_record(clock), federated_record(clock, user="bob")
    other_op_session = federated_record(clock, provider_sid="op-sid-2")
    local = user_record(clock)
    for record in (first, second, other_op_session, local):
        store.save(record, clock.now() + HOUR)
    fed_key = hashlib.sha256(f"{ISSUER}\nop-sid-1".encode()).hexdigest()
    index = f"{store.prefix}f:{fed_key}"
    assert raw.smembers(index) == {sid_hash(first.sid).encode(), sid_hash(second.sid).encode()}
    assert store.delete_federated_sessions(ISSUER, "op-sid-1") == 2
    assert raw.exists(index) == 0
    assert store.load(first.sid) is None and store.load(second.sid) is None
    assert store.load(other_op_session.sid) == other_op_session
    assert store.load(local.sid) == local
    assert [r.sid for r in store.list_user_sessions("acme", "bob")] == []
    assert store.delete_federated_sessions(ISSUER, "op-sid-1") == 0
    # a session that left its federated login (logout to guest) leaves the index too
    store.save(new_guest_record(clock.now(), sid=other_op_session.sid), clock.now() + HOUR, existing=True)
    assert store.delete_federated_sessions(ISSUER, "op-sid-2") == 0
    assert store.load(other_op_session.sid) is not None


def test_rotation_moves_the_index_entries(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    before = federated_record(clock)
    store.save(before, clock.now() + HOUR)
    after = replace(before, sid=new_session_id())
    assert store.save(after, clock.now() + HOUR, replaces=[before.sid]) is True
    members = {m for k in raw.scan_iter(match=f"{store.prefix}[uf]:*") for m in raw.smembers(k)}
    assert members == {sid_hash(after.sid).encode()}
    assert raw.exists(record_key(store, before.sid)) == 0


def test_listing_drops_members_redis_expired(
    make_store: Callable[..., RedisSessionStore], raw: redis.Redis
) -> None:
    store = make_store(SystemClock())
    now = SystemClock().now()
    short = [user_record(MockClock(now)) for _ in range(3)]
    for record in short:
        store.save(record, now + timedelta(milliseconds=50))
    live = user_record(MockClock(now))
    store.save(live, now + HOUR)
    index = raw.hget(record_key(store, live.sid), "u")
    assert raw.scard(index) == 4
    time.sleep(0.2)  # Redis expires the three short-lived keys
    assert [r.sid for r in store.list_user_sessions("acme", "alice")] == [live.sid]
    assert raw.smembers(index) == {sid_hash(live.sid).encode()}


def test_saves_keep_an_index_from_piling_up_expired_members(
    make_store: Callable[..., RedisSessionStore], raw: redis.Redis
) -> None:
    store = make_store(SystemClock())
    now = SystemClock().now()
    store.save(user_record(MockClock(now)), now + HOUR)  # keeps the index set alive
    for _ in range(30):
        store.save(user_record(MockClock(now)), now + timedelta(milliseconds=30))
    time.sleep(0.15)
    later = SystemClock().now()
    for _ in range(30):
        store.save(user_record(MockClock(later)), later + HOUR)
    (index,) = raw.scan_iter(match=f"{store.prefix}u:*")
    # 31 live members; without the per-save housekeeping the 30 dead ones would all remain
    assert 31 <= raw.scard(index) < 46


# --- time -------------------------------------------------------------------------------------------


def test_key_lives_for_the_remaining_lifetime_by_the_stores_clock(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock
) -> None:
    # The mock clock is months behind Redis's: an absolute expiry would be born expired.
    record = federated_record(clock)
    store.save(record, clock.now() + timedelta(minutes=30))
    ttls = [raw.pttl(k) for k in raw.scan_iter(match=f"{store.prefix}*")]
    assert len(ttls) == 4  # record, user set, tenant set, federation set
    assert all(30 * 60_000 - 5_000 < ttl <= 30 * 60_000 for ttl in ttls)
    clock.advance(timedelta(minutes=20))
    store.save(record, clock.now() + timedelta(minutes=30), existing=True)  # a refresh
    assert 30 * 60_000 - 5_000 < raw.pttl(record_key(store, record.sid)) <= 30 * 60_000
    clock.advance(timedelta(minutes=30))
    assert store.load(record.sid) is None  # over by the clock, whatever Redis still holds


def test_redis_removes_the_keys_when_the_session_is_over(
    make_store: Callable[..., RedisSessionStore], raw: redis.Redis
) -> None:
    store = make_store(SystemClock())
    now = SystemClock().now()
    record = federated_record(MockClock(now))
    store.save(record, now + timedelta(milliseconds=300))
    assert store.load(record.sid) == record
    assert len(list(raw.scan_iter(match=f"{store.prefix}*"))) == 4
    deadline = time.monotonic() + 5
    while list(raw.scan_iter(match=f"{store.prefix}*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(raw.scan_iter(match=f"{store.prefix}*")) == []  # the record and its three sets
    assert store.load(record.sid) is None
    assert store.purge_expired() == 0  # nothing left for a purge


def test_purge_touches_only_its_own_prefix(redis_server: RedisServer, raw: redis.Redis) -> None:
    clock = MockClock()
    prefixes = ["a*[b]?:", "a-plain:"]
    stores = [
        RedisSessionStore(redis_server.url(), crypto=SessionCrypto(KEY), clock=clock, prefix=p)
        for p in prefixes
    ]
    try:
        records = [user_record(clock) for _ in stores]
        for store, record in zip(stores, records, strict=True):
            store.save(record, clock.now() + timedelta(minutes=1))
            assert all(other.load(record.sid) is None for other in stores if other is not store)
        clock.advance(timedelta(minutes=2))
        assert stores[0].purge_expired() == 1
        assert raw.exists(f"a-plain:s:{sid_hash(records[1].sid)}") == 1
        assert stores[1].purge_expired() == 1
    finally:
        for store in stores:
            store.close()
        for prefix in prefixes:
            _drop_prefix(raw, prefix)


# --- races decided by the scripts -------------------------------------------------------------------


def test_concurrent_rotations_of_one_id_create_one_session(
    store: RedisSessionStore, clock: MockClock
) -> None:
    for _ in range(10):
        before = user_record(clock)
        store.save(before, clock.now() + HOUR)
        candidates = [replace(before, sid=new_session_id()) for _ in range(6)]
        results = run_together(
            [
                lambda r=r, old=before.sid: store.save(r, clock.now() + HOUR, replaces=[old])  # type: ignore[misc]
                for r in candidates
            ]
        )
        assert sorted(results) == [False] * 5 + [True]
        (winner,) = [r for r, ok in zip(candidates, results, strict=True) if ok]
        assert [store.load(r.sid) for r in candidates] == [
            winner if r is winner else None for r in candidates
        ]
        assert store.load(before.sid) is None
        store.delete(winner.sid)
    assert store.list_user_sessions("acme", "alice") == []


def test_refreshes_racing_a_revocation_never_resurrect(store: RedisSessionStore, clock: MockClock) -> None:
    records = [user_record(clock) for _ in range(20)]
    for record in records:
        store.save(record, clock.now() + HOUR)
    loaded = [store.load(r.sid) for r in records]

    def refresh_all() -> int:
        written = 0
        for _ in range(5):
            for record in loaded:
                assert record is not None
                written += store.save(record, clock.now() + HOUR, existing=True)
        return written

    results = run_together([refresh_all, refresh_all, lambda: store.delete_user_sessions("acme", "alice")])
    assert 0 < results[2] <= 20
    assert [store.load(r.sid) for r in records] == [None] * 20
    assert store.list_user_sessions("acme", "alice") == []
    # nothing a refresh wrote after the revocation survives, and nothing is left behind
    assert list(store.client.scan_iter(match=f"{store.prefix}*")) == []


# --- outages ----------------------------------------------------------------------------------------


def _every_call(store: RedisSessionStore, clock: MockClock) -> list[Callable[[], object]]:
    record = user_record(clock)
    return [
        lambda: store.load(record.sid),
        lambda: store.save(record, clock.now() + HOUR),
        lambda: store.save(record, clock.now() + HOUR, existing=True),
        lambda: store.delete(record.sid),
        lambda: store.list_user_sessions("acme", "alice"),
        lambda: store.delete_user_sessions("acme", "alice"),
        lambda: store.delete_federated_sessions(ISSUER, "op-sid-1"),
        store.purge_expired,
    ]


def test_nothing_listening_raises_store_unavailable_quickly() -> None:
    clock = MockClock()
    store = RedisSessionStore(f"redis://127.0.0.1:{free_port()}/0", crypto=SessionCrypto(KEY), clock=clock)
    try:
        started = time.monotonic()
        for call in _every_call(store, clock):
            with pytest.raises(StoreUnavailable):
                call()
        assert time.monotonic() - started < 5  # refused at once, no seconds of back-off
    finally:
        store.close()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test alone, to stop in the middle of it."""
    server = start_redis()
    yield server
    server.stop()


def test_server_stopped_after_start(own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    clock = MockClock()
    store = RedisSessionStore(own_server.url(), crypto=SessionCrypto(KEY), clock=clock)
    try:
        record = user_record(clock)
        store.save(record, clock.now() + HOUR)
        assert store.load(record.sid) == record
        own_server.stop()
        with caplog.at_level(logging.WARNING, logger="flask_authflow.sessions"):
            for call in _every_call(store, clock):
                with pytest.raises(StoreUnavailable):
                    call()
        assert "session store unavailable" in caplog.text
        assert record.sid not in caplog.text and str(own_server.port) not in caplog.text
    finally:
        store.close()


@pytest.mark.authflow_stores("sql")  # the configured stores: sessions in redis
def test_app_answers_a_guest_while_redis_is_down(own_server: RedisServer, app_factory: AppFactory) -> None:
    app = app_factory(
        AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_REDIS_URL=own_server.url(), AUTHFLOW_DATABASE_URL="sqlite://"
    )
    store = get_state(app).session_store
    assert isinstance(store, RedisSessionStore)

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "protected"

    @app.get("/whoami")
    def whoami() -> str:
        return current_session.state.value

    @app.post("/note")
    def note() -> str:
        current_session["note"] = "kept?"
        return "noted"

    try:
        client = login_test_client(app, "alice")
        assert client.get("/p").text == "protected"
        own_server.stop()
        response = client.get("/whoami")
        assert (response.status_code, response.text) == (200, "guest")  # fail closed: a guest
        assert set_cookies(response) == []  # the cookie is kept for when Redis is back
        denied = client.get("/p")  # never served: 401 as a guest, or 503 naming the outage
        assert denied.status_code in (401, 503) and denied.text != "protected"
        refused = client.post("/note")
        assert refused.status_code == 503  # a change that cannot be kept is not answered as done
        assert set_cookies(refused) == []
    finally:
        store.close()


# --- the load's connection: redis-py's client, its pool and its retry policy ----------------------


def _killing_checkouts(
    store: RedisSessionStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch, times: int
) -> list[int]:
    """The next ``times`` connections the pool hands out are killed by the server right
    after the pool's own checks (a drop the pool cannot see); returns their client ids."""
    pool = store.client.connection_pool
    real = pool.get_connection
    killed: list[int] = []

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        conn = real(*args, **kwargs)
        if len(killed) < times:
            conn.send_command("CLIENT", "ID")
            client_id = int(conn.read_response())
            assert raw.client_kill_filter(_id=client_id) == 1
            killed.append(client_id)
        return conn

    monkeypatch.setattr(pool, "get_connection", get_connection)
    return killed


def test_a_dropped_connection_is_retried_once(
    store: RedisSessionStore, raw: redis.Redis, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    assert store.load(record.sid) == record
    pool = store.client.connection_pool
    # Killed between two requests: the pool notices on checkout and reconnects.
    [before] = [c for c in raw.client_list() if c["cmd"] == "hmget"]
    raw.client_kill_filter(_id=int(before["id"]))
    assert store.load(record.sid) == record
    # Killed after the checkout: the read fails, reconnects and is sent once more.
    killed = _killing_checkouts(store, raw, monkeypatch, times=1)
    assert store.load(record.sid) == record
    assert len(killed) == 1
    assert int(store.client.client_id()) != killed[0]
    assert store.load(record.sid) == record
    assert pool._in_use_connections == set()  # every connection went back to the pool


def _failing_reads(store: RedisSessionStore, monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[int]:
    """Every connection the pool hands out drops with ``error`` when its answer is read;
    returns the list that counts those reads."""
    pool = store.client.connection_pool
    real = pool.get_connection
    reads: list[int] = []

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        conn = real(*args, **kwargs)

        def failing(*args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            conn.disconnect()
            raise error

        monkeypatch.setattr(conn, "read_response", failing)
        return conn

    monkeypatch.setattr(pool, "get_connection", get_connection)
    return reads


def test_a_connection_dropped_twice_fails_closed(
    store: RedisSessionStore,
    clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    reads = _failing_reads(store, monkeypatch, redis.ConnectionError("Connection closed by server."))
    with caplog.at_level(logging.WARNING, logger="flask_authflow.sessions"):
        with pytest.raises(StoreUnavailable):
            store.load(record.sid)
    assert reads == [1, 1]  # once, then once more: no further retries
    assert "session store unavailable: ConnectionError" in caplog.text
    assert store.client.connection_pool._in_use_connections == set()
    monkeypatch.undo()
    assert store.load(record.sid) == record


def test_a_timeout_is_not_retried(
    store: RedisSessionStore, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that does not answer fails the request after one timeout, not two."""
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    reads = _failing_reads(store, monkeypatch, redis.TimeoutError("Timeout reading from socket"))
    with pytest.raises(StoreUnavailable):
        store.load(record.sid)
    assert reads == [1]


def test_a_server_down_fails_the_read_closed(own_server: RedisServer) -> None:
    clock = MockClock()
    store = RedisSessionStore(own_server.url(), crypto=SessionCrypto(KEY), clock=clock)
    try:
        record = user_record(clock)
        store.save(record, clock.now() + HOUR)
        assert store.load(record.sid) == record
        own_server.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as raised:
            store.load(record.sid)
        assert isinstance(raised.value.__cause__, redis.ConnectionError)
        assert time.monotonic() - started < 5
        assert store.client.connection_pool._in_use_connections == set()
    finally:
        store.close()


@pytest.mark.parametrize("wrapping", ["functools", "replaced", "instance"])
def test_tracing_sees_the_read(
    store: RedisSessionStore, clock: MockClock, monkeypatch: pytest.MonkeyPatch, wrapping: str
) -> None:
    """The load is a command of the client: tracing that wraps execute_command
    (OpenTelemetry and ddtrace via wrapt, Sentry by replacing it) sees it."""
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    seen: list[Any] = []
    plain = redis.Redis.execute_command

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(args[0])
        return plain(self, *args, **kwargs)

    if wrapping == "functools":
        monkeypatch.setattr(redis.Redis, "execute_command", functools.wraps(plain)(traced))
    elif wrapping == "replaced":
        monkeypatch.setattr(redis.Redis, "execute_command", traced)
    else:
        monkeypatch.setattr(store.client, "execute_command", functools.partial(traced, store.client))
    assert store.load(record.sid) == record
    assert seen == ["HMGET"]


# --- construction and configuration -----------------------------------------------------------------


def test_own_client_is_used_as_it_is_and_left_open(raw: redis.Redis, clock: MockClock) -> None:
    prefix = _prefix()
    store = RedisSessionStore(raw, crypto=SessionCrypto(KEY), clock=clock, prefix=prefix)
    try:
        assert store.client is raw
        record = user_record(clock)
        store.save(record, clock.now() + HOUR)
        store.close()
        assert raw.exists(record_key(store, record.sid)) == 1  # the client still works
        assert store.load(record.sid) == record
    finally:
        _drop_prefix(raw, prefix)


def test_bad_arguments_are_refused(redis_server: RedisServer) -> None:
    with pytest.raises(TypeError, match="SessionCrypto"):
        RedisSessionStore(redis_server.url(), crypto=KEY)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prefix"):
        RedisSessionStore(redis_server.url(), crypto=SessionCrypto(KEY), prefix=b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Redis URL"):
        RedisSessionStore(42, crypto=SessionCrypto(KEY))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not a Redis URL"):
        RedisSessionStore("http://127.0.0.1/", crypto=SessionCrypto(KEY))
    decoding = redis.Redis.from_url(redis_server.url(), decode_responses=True)
    try:
        with pytest.raises(ConfigurationError, match="decode"):
            RedisSessionStore(decoding, crypto=SessionCrypto(KEY))
    finally:
        decoding.close()


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # an import of redis now fails
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[redis\]") as caught:
        RedisSessionStore("redis://127.0.0.1:6379/0", crypto=SessionCrypto(KEY))
    assert caught.value.extra == "redis"
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[redis\]"):
        _config(AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_REDIS_URL="redis://127.0.0.1:6379/0")
    _config(AUTHFLOW_SESSION_STORE="sql")  # not needed by the other stores


def test_the_module_imports_without_redis() -> None:
    program = (
        "import sys; sys.modules['redis'] = None\n"
        "from flask_authflow.storage._redis_sessions import RedisSessionStore\n"
        "print(RedisSessionStore.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "RedisSessionStore"


def _config(**values: object) -> Any:
    config: dict[str, object] = {"AUTHFLOW_SIGNING_KEY": secrets.token_bytes(32), **values}
    return load_config(config, debug=False, testing=True)


def test_config_needs_a_url_for_redis() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SESSION_STORE='redis' needs AUTHFLOW_REDIS_URL"):
        _config(AUTHFLOW_SESSION_STORE="redis")
    with pytest.raises(ConfigurationError, match="AUTHFLOW_REDIS_URL must be"):
        _config(AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_REDIS_URL=" ")
    with pytest.raises(ConfigurationError, match="'sql' \\(default\\), 'memory' or 'redis'"):
        _config(AUTHFLOW_SESSION_STORE="mongodb")
    config = _config(AUTHFLOW_SESSION_STORE="redis", AUTHFLOW_REDIS_URL="redis://127.0.0.1:6379/2")
    assert (config.session.store, config.session.redis_url) == ("redis", "redis://127.0.0.1:6379/2")
    assert _config().session.redis_url is None


# --- an app on it ------------------------------------------------------------------------------------


@pytest.mark.authflow_stores("sql")  # the configured stores: sessions in redis, users in SQLite
def test_app_end_to_end_with_sessions_in_redis(
    redis_server: RedisServer, raw: redis.Redis, tmp_path: Path, app_factory: AppFactory
) -> None:
    database = tmp_path / "authflow.db"
    app = app_factory(
        AUTHFLOW_SESSION_STORE="redis",
        AUTHFLOW_REDIS_URL=redis_server.url(3),
        AUTHFLOW_DATABASE_URL=f"sqlite:///{database}",
    )
    state = get_state(app)
    store = state.session_store
    assert isinstance(store, RedisSessionStore)
    db3 = redis.Redis.from_url(redis_server.url(3))

    @app.get("/p")
    @login_required
    def protected() -> str:
        return f"hello {current_session.user_id}"

    try:
        laptop = login_test_client(app, "alice", password=PASSWORD)
        phone = login_test_client(app, "alice", password=PASSWORD)
        user = state.backend.find_user("default", "alice")
        assert laptop.get("/p").text == phone.get("/p").text == f"hello {user.user_id}"
        sids = [sid_of(cookie_value(c)) for c in (laptop, phone)]
        assert {r.sid for r in store.list_user_sessions("default", user.user_id)} == set(sids)
        assert all(db3.exists(f"authflow:s:{sid_hash(sid)}") for sid in sids)
        # users live in SQL, sessions do not (their table, if the schema has one, stays empty)
        engine = create_engine(f"sqlite:///{database}")
        try:
            assert "authflow_users" in inspect(engine).get_table_names()
            if "authflow_sessions" in inspect(engine).get_table_names():
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT count(*) FROM authflow_sessions")).scalar_one() == 0
        finally:
            engine.dispose()
        assert account_admin(app).revoke_sessions("default", user.user_id) == 2
        assert laptop.get("/p").status_code == 401
        assert phone.get("/p").status_code == 401
        assert list(db3.scan_iter(match="authflow:[su]:*")) == []
    finally:
        store.close()
        db3.flushdb()
        db3.close()
