"""The SQLAlchemy backend on SQLite and PostgreSQL: contract, atomic counting, fail closed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from flask_authflow.authn.outcomes import FactorCredential, FactorRequired
from flask_authflow.authn.service import AuthnService
from flask_authflow.authn.stores import AttemptKey
from flask_authflow.clock import MockClock
from flask_authflow.errors import AuditWriteError, StoreUnavailable
from flask_authflow.stores.sqlalchemy.backend import SqlAlchemyBackend
from tests.authn_support import CTX, fast_hasher, new_session
from tests.store_contract import T0, WINDOW, AuditRecord, StoreContract


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def backend(database_url: str, clock: MockClock) -> Iterator[SqlAlchemyBackend]:
    store = SqlAlchemyBackend(database_url, hasher=fast_hasher(), clock=clock)
    yield store
    store.close()


class TestSqlAlchemyBackend(StoreContract):
    pass


def test_tables(backend: SqlAlchemyBackend) -> None:
    names = set(inspect(backend.engine).get_table_names())
    assert {
        "authflow_users",
        "authflow_factors",
        "authflow_attempts",
        "authflow_lockouts",
        "authflow_audit",
    } <= names
    assert repr(backend).startswith("<SqlAlchemyBackend ")


def test_one_password_per_user(backend: SqlAlchemyBackend) -> None:
    user = backend.create_user("acme", "alice", "pw")
    backend.set_password("acme", "alice", "pw2")
    with backend.engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM authflow_factors WHERE user_id = :u AND kind = 'password'"),
            {"u": user.user_id},
        ).scalar()
    assert count == 1


def test_attempt_log_rows(backend: SqlAlchemyBackend) -> None:
    key = AttemptKey("acme", "alice", "password")
    backend.register_failure(key, now=T0, client_ip="203.0.113.1", **WINDOW)
    backend.register_success(key, now=T0)
    assert backend.attempt_count("acme", "alice") == 2
    assert backend.attempt_count("acme", "alice", success=False) == 1


def test_failure_counting_is_atomic_across_engines(database_url: str) -> None:
    """Two engines (as two machines would have), eight threads, no lost update."""
    first = SqlAlchemyBackend(database_url, hasher=fast_hasher())
    second = SqlAlchemyBackend(database_url, hasher=fast_hasher())
    key = AttemptKey("acme", "alice", "password")
    policy = {"window": timedelta(hours=1), "max_failures": 10_000, "lock_duration": timedelta(minutes=1)}
    counts: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def hammer(store: SqlAlchemyBackend) -> None:
        try:
            for _ in range(25):
                result = store.register_failure(key, now=T0, **policy)
                with lock:
                    counts.append(result.failures)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in (first, second) * 4]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(counts) == list(range(1, 201))  # every increment saw a distinct value
        assert first.failure_count(key) == 200 == second.failure_count(key)
        assert first.attempt_count("acme", "alice") == 200
    finally:
        first.close()
        second.close()


def test_lock_fires_exactly_once_per_threshold_under_concurrency(database_url: str) -> None:
    first = SqlAlchemyBackend(database_url, hasher=fast_hasher())
    second = SqlAlchemyBackend(database_url, hasher=fast_hasher())
    key = AttemptKey("acme", "alice", "password")
    locks: list[int] = []

    def hammer(store: SqlAlchemyBackend) -> None:
        for _ in range(10):
            if store.register_failure(key, now=T0, **WINDOW).locked_until is not None:
                locks.append(1)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in (first, second) * 3]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(locks) == 60 // 5
        assert first.locked_until("acme", "alice", T0) == T0 + timedelta(minutes=15)
    finally:
        first.close()
        second.close()


def test_unreachable_database_fails_closed(tmp_path: Path, clock: MockClock) -> None:
    path = tmp_path / "db.sqlite"
    store = SqlAlchemyBackend(f"sqlite:///{path}", hasher=fast_hasher(), clock=clock, create_tables=False)
    path.unlink()
    path.mkdir()  # the database turns into something SQLite cannot open
    try:
        service = AuthnService(store, store, clock=clock)
        session = new_session(clock)
        with pytest.raises(StoreUnavailable):
            service.with_audit_context(CTX).begin_login("alice", "acme", session)
        assert session.is_guest
        with pytest.raises(StoreUnavailable):
            store.register_failure(AttemptKey("a", "b", "password"), now=T0, **WINDOW)
        with pytest.raises(AuditWriteError):
            store.write(AuditRecord(time=T0, event="logout", status="success"))
    finally:
        store.close()


def test_postgres_down_fails_closed(clock: MockClock) -> None:
    from tests.parts import free_port

    url = f"postgresql+psycopg://authflow@127.0.0.1:{free_port()}/nope?connect_timeout=2"
    store = SqlAlchemyBackend(url, hasher=fast_hasher(), clock=clock, create_tables=False)
    try:
        with pytest.raises(StoreUnavailable):
            store.locked_until("acme", "alice", T0)
    finally:
        store.close()


def test_lockout_table_lost_mid_login_fails_closed(backend: SqlAlchemyBackend, clock: MockClock) -> None:
    backend.with_user_password("alice", "acme", "pw")
    service = AuthnService(backend, backend, clock=clock)
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    assert isinstance(handle.begin_login("alice", "acme", session), FactorRequired)
    with backend.engine.begin() as conn:
        conn.execute(text("DROP TABLE authflow_lockouts"))
    before = (session.record, list(session.dead_sids))
    with pytest.raises(StoreUnavailable):
        handle.verify_factor(FactorCredential.password("pw"), session)
    assert (session.record, list(session.dead_sids)) == before
    assert not session.is_authenticated


def test_audit_table_lost_fails_the_login(backend: SqlAlchemyBackend, clock: MockClock) -> None:
    backend.with_user_password("alice", "acme", "pw")
    service = AuthnService(backend, backend, clock=clock)
    handle = service.with_audit_context(CTX)
    session = new_session(clock)
    handle.begin_login("alice", "acme", session)
    with backend.engine.begin() as conn:
        conn.execute(text("DROP TABLE authflow_audit"))
    before = (session.record, list(session.dead_sids))
    with pytest.raises(AuditWriteError):
        handle.verify_factor(FactorCredential.password("pw"), session)
    assert (session.record, list(session.dead_sids)) == before
    assert session.is_authenticating


def test_engine_objects_are_accepted(database_url: str) -> None:
    from flask_authflow.stores.sqlalchemy.base import resolve_engine

    engine = resolve_engine(database_url)
    try:
        store = SqlAlchemyBackend(engine, hasher=fast_hasher())
        store.create_user("acme", "alice")
        store.close()  # does not dispose an engine it was given
        assert store.find_user("acme", "alice") is not None
    finally:
        engine.dispose()
