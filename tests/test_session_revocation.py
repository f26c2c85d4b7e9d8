"""Revocation stays revoked, caching headers, canonical cookies, late writes, size cap.

* point 2: saving an existing session never re-creates it (memory, SQLite, PostgreSQL,
  threads and several processes on PostgreSQL, and through a Flask app);
* point 6: ``Cache-Control`` of responses that read a session or set its cookie, and the
  issuer's JWKS / discovery never touch the session;
* point 7: anonymous requests that only read the session write nothing;
* point 9: only the canonical base64url spelling of the cookie signature is accepted;
* point 11: ``after_request`` handlers registered before ``init_app`` still get saved;
* point 12: every mutation path of the session dict goes through the 64 KiB cap;
* point 16: an empty ``MemorySessionStore`` is truthy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask, Response, session

from flask_authflow import AuthFlow
from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore
from flask_authflow._core.session import AuthSession, new_guest_record, new_session_id
from flask_authflow.errors import SessionDataTooLarge
from flask_authflow.sessions._interface import AuthFlowSessionInterface
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory, base_app
from tests.parts import child_processes
from tests.test_session_interface import (
    COOKIE,
    KEY,
    SpyStore,
    client_for,
    cookie_value,
    logged_in,
    make_app,
    raw_get,
    set_cookies,
    sid_of,
    state,
)
from tests.test_session_stores import user_record

HOUR = timedelta(hours=1)
CRYPTO_KEY = bytes(range(32))


# --- point 2: the store contract ------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Any
) -> Iterator[Callable[[MockClock], SessionStore]]:
    made: list[SqlAlchemySessionStore] = []

    def make(clock: MockClock) -> SessionStore:
        if request.param == "memory":
            return MemorySessionStore(clock=clock)
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'sessions.db'}"
        else:
            url = request.getfixturevalue("postgres_server").new_database()
        store = SqlAlchemySessionStore(url, crypto=SessionCrypto(CRYPTO_KEY), clock=clock)
        made.append(store)
        return store

    yield make
    for store in made:
        store.engine.dispose()


def test_saving_an_existing_session_after_its_deletion_creates_nothing(
    make_store: Callable[[MockClock], SessionStore],
) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock)
    assert store.save(record, clock.now() + HOUR) is True
    loaded = store.load(record.sid)
    assert loaded is not None
    store.delete(record.sid)  # logout / revoke between the load and the save
    assert store.save(replace(loaded, custom={"late": 1}), clock.now() + HOUR, existing=True) is False
    assert store.load(record.sid) is None
    assert store.list_user_sessions("acme", "alice") == []


def test_existing_save_of_a_live_session_updates_it(make_store: Callable[[MockClock], SessionStore]) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock)
    store.save(record, clock.now() + HOUR)
    changed = replace(record, custom={"n": 2})
    assert store.save(changed, clock.now() + HOUR, existing=True) is True
    assert store.load(record.sid) == changed


def test_existing_save_of_an_expired_session_creates_nothing(
    make_store: Callable[[MockClock], SessionStore],
) -> None:
    clock = MockClock()
    store = make_store(clock)
    record = user_record(clock)
    store.save(record, clock.now() + timedelta(minutes=1))
    clock.advance(timedelta(minutes=2))
    assert store.save(record, clock.now() + HOUR, existing=True) is False
    assert store.load(record.sid) is None


def test_rotation_from_a_revoked_id_creates_nothing(make_store: Callable[[MockClock], SessionStore]) -> None:
    clock = MockClock()
    store = make_store(clock)
    before = user_record(clock)
    store.save(before, clock.now() + HOUR)
    store.delete(before.sid)  # revoked while the request that rotates it was running
    rotated = replace(before, sid=new_session_id())
    assert store.save(rotated, clock.now() + HOUR, replaces=[before.sid]) is False
    assert store.load(rotated.sid) is None
    assert store.load(before.sid) is None


def test_rotation_is_all_or_nothing(make_store: Callable[[MockClock], SessionStore]) -> None:
    clock = MockClock()
    store = make_store(clock)
    live = user_record(clock)
    store.save(live, clock.now() + HOUR)
    rotated = replace(live, sid=new_session_id())
    assert store.save(rotated, clock.now() + HOUR, replaces=[live.sid, "revoked-id-000000000000"]) is False
    assert store.load(live.sid) == live  # rolled back: the live id was not deleted
    assert store.load(rotated.sid) is None


def test_refresh_racing_revoke_never_resurrects_threads(
    make_store: Callable[[MockClock], SessionStore],
) -> None:
    clock = MockClock()
    store = make_store(clock)
    resurrected = 0
    for _ in range(25):
        record = user_record(clock)
        store.save(record, clock.now() + HOUR)
        barrier = threading.Barrier(2)
        results: list[bool] = []

        def refresh(
            sid: str = record.sid, barrier: threading.Barrier = barrier, results: list[bool] = results
        ) -> None:
            loaded = store.load(sid)  # the request loaded the session ...
            barrier.wait()
            barrier.wait()  # ... the revoke happened ...
            assert loaded is not None
            results.append(store.save(loaded, clock.now() + HOUR, existing=True))  # ... then it saves

        def revoke(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            store.delete_user_sessions("acme", "alice")
            barrier.wait()

        threads = [threading.Thread(target=refresh), threading.Thread(target=revoke)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert results == [False]
        if store.load(record.sid) is not None:
            resurrected += 1
    assert resurrected == 0


def _process_refresher(url: str, sids: list[str], barrier: Any, out: Any) -> None:
    clock = MockClock()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(CRYPTO_KEY), clock=clock, create_tables=False)
    written = 0
    for sid in sids:
        loaded = store.load(sid)
        barrier.wait()
        barrier.wait()
        if loaded is not None and store.save(loaded, clock.now() + HOUR, existing=True):
            written += 1
    store.engine.dispose()
    out.put(written)


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_refresh_racing_revoke_never_resurrects_processes_postgresql(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    clock = MockClock()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(CRYPTO_KEY), clock=clock)
    try:
        records = [user_record(clock) for _ in range(8)]
        for record in records:
            store.save(record, clock.now() + HOUR)
        ctx = child_processes()
        workers = 3
        barrier = ctx.Barrier(workers + 1, timeout=60)
        out = ctx.Queue()
        sids = [r.sid for r in records]
        procs = [
            ctx.Process(target=_process_refresher, args=(url, sids, barrier, out)) for _ in range(workers)
        ]
        for proc in procs:
            proc.start()
        for record in records:
            barrier.wait()  # every worker has loaded this session
            store.delete(record.sid)  # revoke
            barrier.wait()  # now they all save it
        written = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
            assert proc.exitcode == 0
        assert written == [0] * workers
        assert [store.load(sid) for sid in sids] == [None] * len(sids)
    finally:
        store.engine.dispose()


# --- point 2: through a Flask app -----------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def revocation_app(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[Flask, SessionStore]]:
    clock = MockClock()
    store: SessionStore
    if request.param == "memory":
        store = MemorySessionStore(clock=clock)
    else:
        store = SqlAlchemySessionStore(
            f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(CRYPTO_KEY), clock=clock
        )
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    gate = threading.Event()
    loaded = threading.Event()

    @app.post("/slow-set")
    def slow_set() -> str:
        assert session.is_authenticated  # type: ignore[attr-defined]
        loaded.set()
        gate.wait(timeout=10)
        session["note"] = "written after the logout"
        return "ok"

    app.config["gate"] = gate
    app.config["loaded"] = loaded
    yield app, store
    if isinstance(store, SqlAlchemySessionStore):
        store.engine.dispose()


def test_logout_during_a_concurrent_request_stays_logged_out(
    revocation_app: tuple[Flask, SessionStore],
) -> None:
    app, store = revocation_app
    first = logged_in(app)
    sid = sid_of(cookie_value(first))
    second = client_for(app)
    second.set_cookie(COOKIE, cookie_value(first))
    responses: list[Any] = []
    slow = threading.Thread(target=lambda: responses.append(first.post("/slow-set")))
    slow.start()
    assert app.config["loaded"].wait(timeout=10)
    assert second.post("/logout").status_code == 200  # the other tab logs out
    app.config["gate"].set()
    slow.join(timeout=10)
    (response,) = responses
    assert response.status_code == 200
    assert store.load(sid) is None  # not re-created by the late save
    assert any(c.startswith(f"{COOKIE}=;") for c in set_cookies(response))  # the cookie is cleared
    assert state(first)["state"] == "guest"


# --- point 6: caching -----------------------------------------------------------------------------


def test_authenticated_read_is_private_no_store() -> None:
    clock = MockClock()
    app = make_app(AuthFlowSessionInterface(MemorySessionStore(clock=clock), KEY, clock=clock), clock)

    @app.get("/own-cache")
    def own_cache() -> Response:
        assert session.is_authenticated  # type: ignore[attr-defined]
        return Response("x", headers={"Cache-Control": "private, max-age=60"})

    client = logged_in(app)
    assert client.get("/").headers["Cache-Control"] == "private, no-store"
    assert client.get("/own-cache").headers["Cache-Control"] == "private, max-age=60"
    assert "Cache-Control" not in client.get("/plain").headers  # the session was not read


def test_a_response_that_sets_the_session_cookie_is_never_public() -> None:
    clock = MockClock()
    app = make_app(AuthFlowSessionInterface(MemorySessionStore(clock=clock), KEY, clock=clock), clock)

    @app.post("/public-write")
    def public_write() -> Response:
        session["k"] = "v"
        return Response("x", headers={"Cache-Control": "public, max-age=600"})

    response = client_for(app).post("/public-write")
    assert set_cookies(response)
    assert response.headers["Cache-Control"] == "private, no-store"


def test_unaccessed_session_is_not_touched() -> None:
    clock = MockClock()
    store = SpyStore(clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    client = logged_in(app)
    cookie = client.get_cookie("authflow_session")
    assert cookie is not None
    sid = cookie.value.rpartition(".")[0]

    def last_seen() -> Any:
        record = store.load(sid)
        return record and record.last_seen_at

    saves, seen = store.saves, last_seen()
    clock.advance(timedelta(minutes=30))  # stale: past the touch interval
    response = client.get("/plain")
    # The read's folded touch is put back: the view never looked, the session is not kept alive.
    assert set_cookies(response) == [] and store.saves == saves and last_seen() == seen
    response = client.get("/")  # a view that reads the session refreshes it (a touch)
    assert set_cookies(response) and store.saves == saves and last_seen() == clock.now()


ISSUER_CONFIG: dict[str, Any] = {
    "AUTHFLOW_SESSION_STORE": "memory",
    "AUTHFLOW_ISSUER": "https://issuer.example",
    "AUTHFLOW_ISSUER_KEY_STORE": "memory",
}


@pytest.mark.parametrize("path", ["/jwks.json", "/.well-known/openid-configuration"])
def test_issuer_documents_never_touch_a_stale_session(
    path: str, app_factory: AppFactory, mock_clock: MockClock
) -> None:
    clock = mock_clock
    store = SpyStore(clock)
    app = app_factory(session_store=store, **ISSUER_CONFIG)
    client = login_test_client(app, "alice")
    saves = store.saves
    clock.advance(timedelta(minutes=30))  # the session is due for a last-seen refresh
    response = client.get(path)
    assert response.status_code == 200
    assert set_cookies(response) == []
    assert store.saves == saves


# --- point 7: anonymous reads write nothing -------------------------------------------------------


def test_anonymous_read_of_the_session_writes_nothing() -> None:
    clock = MockClock()
    store = SpyStore(clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)

    @app.get("/peek")
    def peek() -> str:
        return str(session.get("cart")) + str("x" in session) + str(session.is_guest)  # type: ignore[attr-defined]

    response = client_for(app).get("/peek")
    assert response.status_code == 200
    assert set_cookies(response) == [] and store.saves == 0 and store.count() == 0
    assert response.headers["Vary"] == "Cookie"


# --- point 9: canonical cookie signature ----------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _alternative_spellings(cookie: str) -> list[str]:
    value, _, signature = cookie.rpartition(".")
    index = _B64.index(signature[-1])
    # 32 bytes = 43 characters: the last one carries 2 bits, its 4 low bits are unused.
    same_bytes = [c for c in _B64 if _B64.index(c) >> 4 == index >> 4 and c != signature[-1]]
    assert len(same_bytes) == 15
    return [
        f"{value}.{signature}=",
        f"{value}.{signature}==",
        *(f"{value}.{signature[:-1]}{c}" for c in same_bytes),
    ]


def test_non_canonical_signature_spellings_are_a_guest() -> None:
    clock = MockClock()
    app = make_app(AuthFlowSessionInterface(MemorySessionStore(clock=clock), KEY, clock=clock), clock)
    cookie = cookie_value(logged_in(app))
    assert raw_get(app, cookie).get_json()["state"] == "authenticated"
    for spelling in _alternative_spellings(cookie):
        body = raw_get(app, spelling).get_json()
        assert body["state"] == "guest", spelling


# --- point 11: after_request handlers registered before init_app ----------------------------------


def test_after_request_registered_before_init_app_is_saved() -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")

    @app.after_request
    def stamp(response: Response) -> Response:
        if response.status_code == 200 and session.get("stamp") is None:
            session["stamp"] = "late"
        return response

    AuthFlow(app)  # the plugin's clock, hasher and in-memory stores

    @app.get("/stamp")
    def read_stamp() -> str:
        return str(session.get("stamp"))

    client = client_for(app)
    assert client.get("/stamp").get_data(as_text=True) == "None"
    assert client.get("/stamp").get_data(as_text=True) == "late"


# --- point 12: every mutation path goes through the cap -------------------------------------------

BIG = "x" * (70 * 1024)


def _session() -> AuthSession:
    return AuthSession(new_guest_record(MockClock().now()), new=True)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.__setitem__("k", BIG),
        lambda s: s.update(k=BIG),
        lambda s: s.update({"k": BIG}),
        lambda s: s.update([("k", BIG)]),
        lambda s: s.setdefault("k", BIG),
        lambda s: s.__ior__({"k": BIG}),
    ],
    ids=["setitem", "update-kwargs", "update-mapping", "update-pairs", "setdefault", "ior"],
)
def test_every_mutation_path_is_capped(mutate: Callable[[AuthSession], object]) -> None:
    s = _session()
    with pytest.raises(SessionDataTooLarge):
        mutate(s)
    assert dict(s) == {} and not s.modified


def test_in_place_or_operator_is_capped() -> None:
    s = _session()
    with pytest.raises(SessionDataTooLarge):
        s |= {"k": BIG}
    assert dict(s) == {}


def test_or_operator_in_a_view_answers_413() -> None:
    clock = MockClock()
    app = make_app(AuthFlowSessionInterface(MemorySessionStore(clock=clock), KEY, clock=clock), clock)
    app.register_error_handler(SessionDataTooLarge, lambda exc: (exc.to_dict(), exc.status))

    @app.post("/ior")
    def ior() -> str:
        session.__ior__({"k": BIG})
        return "ok"

    client = client_for(app)
    assert client.post("/ior").status_code == 413
    assert state(client)["custom"] == {}


def test_nested_growth_after_an_assignment_answers_413() -> None:
    clock = MockClock()
    app = make_app(AuthFlowSessionInterface(MemorySessionStore(clock=clock), KEY, clock=clock), clock)

    @app.post("/nested")
    def nested() -> str:
        session["cart"] = []
        session["cart"].append(BIG)
        return "ok"

    response = client_for(app).post("/nested")
    assert response.status_code == 413
    assert b"custom session data is" in response.data


def test_nested_growth_of_stored_data_without_modified_answers_413() -> None:
    clock = MockClock()
    store = MemorySessionStore(clock=clock)
    app = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)

    @app.post("/append")
    def append() -> str:
        session["cart"].append(BIG)  # nested: the dict never hears about it
        return "ok"

    client = client_for(app)
    assert client.post("/cart").status_code == 200
    sid = sid_of(cookie_value(client))
    response = client.post("/append")
    assert response.status_code == 413
    record = store.load(sid)
    assert record is not None and record.custom == {"cart": []}


# --- point 16 ---------------------------------------------------------------------------------------


def test_empty_memory_store_is_truthy() -> None:
    store = MemorySessionStore()
    assert store
    assert store.count() == 0
    store.save(user_record(MockClock()), MockClock().now() + HOUR)
    assert store.count() == 1
