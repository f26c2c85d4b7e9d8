"""Revocation and housekeeping: every session of a tenant, of a provider session, expired
sessions purged (in bounded batches as the store saves, all at once from the CLI), and
audit rows purged never younger than ``AUTHFLOW_AUDIT_RETENTION``.

Store tests run on the memory store, SQLite and PostgreSQL; the commands on a SQLite app
(and a memory app where a store cannot do it).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from flask import Flask
from sqlalchemy import func, select, text

from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore
from flask_authflow._core.session import SessionRecord, new_guest_record, pass_factor, start_login
from flask_authflow._web.config import load_config
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import ConfigurationError
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql import audit as audit_module
from flask_authflow.storage._sql import session_store as store_module
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore, sessions_table
from tests.appfactory import AppFactory

# The purge and audit commands run on the SQL store the app configures.
pytestmark = pytest.mark.authflow_stores("sql")

KEY = bytes(range(32))
HOUR = timedelta(hours=1)
ISSUER = "https://idp.example"


def signed_in(
    clock: MockClock, user: str, tenant: str = "acme", federation: dict[str, str] | None = None
) -> SessionRecord:
    now = clock.now()
    record = start_login(new_guest_record(now), tenant=tenant, user_id=user, factors=["password"], now=now)
    return replace(pass_factor(record, "password", now=now), fingerprint="fp", federation=federation)


def guest_with_data(clock: MockClock) -> SessionRecord:
    return replace(new_guest_record(clock.now()), custom={"cart": [1, 2]})


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_and_clock(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SessionStore, MockClock]]:
    clock = MockClock()
    if request.param == "memory":
        yield MemorySessionStore(clock=clock), clock
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url = request.getfixturevalue("postgres_server").new_database()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), clock=clock)
    yield store, clock
    store.engine.dispose()


@pytest.fixture
def sql_store(database_url: str) -> Iterator[tuple[SqlAlchemySessionStore, MockClock]]:
    clock = MockClock()
    store = SqlAlchemySessionStore(database_url, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
    yield store, clock
    store.engine.dispose()


def row_count(store: SqlAlchemySessionStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(sessions_table)).scalar_one())


# --- revoking a tenant ---------------------------------------------------------------------------


def test_delete_tenant_sessions_ends_every_session_of_the_tenant_and_nothing_else(
    store_and_clock: tuple[SessionStore, MockClock],
) -> None:
    store, clock = store_and_clock
    acme = [signed_in(clock, "alice"), signed_in(clock, "alice"), signed_in(clock, "bob")]
    other = signed_in(clock, "alice", tenant="globex")  # same user id, another tenant
    guest = guest_with_data(clock)
    stale = signed_in(clock, "carol")
    store.save(stale, clock.now() + timedelta(minutes=1))
    for record in (*acme, other, guest):
        store.save(record, clock.now() + HOUR)
    clock.advance(timedelta(minutes=2))  # carol's session has expired (not counted as revoked)

    assert store.delete_tenant_sessions("acme") == len(acme)
    assert [store.load(r.sid) for r in acme] == [None] * len(acme)
    assert store.load(other.sid) == other
    assert store.load(guest.sid) == guest
    assert store.list_user_sessions("acme", "alice") == []
    assert store.list_user_sessions("globex", "alice") == [other]
    assert store.delete_tenant_sessions("acme") == 0
    if isinstance(store, SqlAlchemySessionStore):
        assert row_count(store) == 2  # carol's expired row went with the tenant's


def test_a_save_after_the_tenant_revocation_never_brings_a_session_back(
    store_and_clock: tuple[SessionStore, MockClock],
) -> None:
    """A request that loaded the session before the revocation saves after it: refused."""
    store, clock = store_and_clock
    touched, rotating = signed_in(clock, "alice"), signed_in(clock, "bob")
    for record in (touched, rotating):
        store.save(record, clock.now() + HOUR)
    loaded = store.load(touched.sid)
    assert loaded is not None

    assert store.delete_tenant_sessions("acme") == 2

    assert store.save(replace(loaded, custom={"late": True}), clock.now() + HOUR, existing=True) is False
    rotated = replace(rotating, sid=signed_in(clock, "bob").sid)
    assert store.save(rotated, clock.now() + HOUR, replaces=[rotating.sid]) is False
    assert store.load(touched.sid) is None
    assert store.load(rotated.sid) is None
    assert store.list_user_sessions("acme", "bob") == []


def test_delete_federated_sessions_ends_the_provider_session_only(
    store_and_clock: tuple[SessionStore, MockClock],
) -> None:
    store, clock = store_and_clock
    ended = [
        signed_in(clock, "alice", federation={"issuer": ISSUER, "sid": "op-1"}),
        signed_in(clock, "alice", tenant="globex", federation={"issuer": ISSUER, "sid": "op-1"}),
    ]
    kept = [
        signed_in(clock, "alice", federation={"issuer": ISSUER, "sid": "op-2"}),
        signed_in(clock, "alice", federation={"issuer": "https://other.example", "sid": "op-1"}),
        signed_in(clock, "alice"),
    ]
    for record in (*ended, *kept):
        store.save(record, clock.now() + HOUR)
    assert store.delete_federated_sessions(ISSUER, "op-1") == 2
    assert [store.load(r.sid) for r in ended] == [None, None]
    assert [store.load(r.sid) for r in kept] == kept


# --- purging expired sessions --------------------------------------------------------------------


def test_the_store_purges_at_most_one_batch_every_n_saves(database_url: str) -> None:
    clock = MockClock()
    store = SqlAlchemySessionStore(
        database_url, crypto=SessionCrypto(KEY), clock=clock, purge_every=4, purge_batch=3
    )
    try:
        for _ in range(8):
            store.save(signed_in(clock, "old"), clock.now() + timedelta(minutes=1))
        clock.advance(timedelta(minutes=5))  # those 8 rows are expired now; 8 saves counted so far
        live = [signed_in(clock, "alice") for _ in range(4)]
        for record in live[:3]:
            store.save(record, clock.now() + HOUR)
        assert row_count(store) == 8 + 3  # saves 9 to 11: no purge
        store.save(live[3], clock.now() + HOUR)  # the 12th save purges one bounded batch
        assert row_count(store) == 8 + 4 - 3
        for record in live:  # updates count as saves too: the 16th save purges the next batch
            assert store.save(record, clock.now() + HOUR, existing=True)
        assert row_count(store) == 8 + 4 - 6
        assert [store.load(r.sid) for r in live] == live
    finally:
        store.engine.dispose()


def test_a_failing_purge_never_fails_the_save(
    sql_store: tuple[SqlAlchemySessionStore, MockClock], caplog: pytest.LogCaptureFixture
) -> None:
    store, clock = sql_store
    store._purge_every = 1
    store._purge_statement = text("DELETE FROM no_such_table")
    record = signed_in(clock, "alice")
    assert store.save(record, clock.now() + HOUR) is True
    assert store.load(record.sid) == record
    assert "session store unavailable" in caplog.text


def test_purge_expired_deletes_every_expired_row_in_batches(
    sql_store: tuple[SqlAlchemySessionStore, MockClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, clock = sql_store
    monkeypatch.setattr(store_module, "FULL_PURGE_BATCH", 4)
    for _ in range(11):
        store.save(signed_in(clock, "old"), clock.now() + timedelta(minutes=1))
    live = signed_in(clock, "alice")
    store.save(live, clock.now() + HOUR)
    clock.advance(timedelta(minutes=1))  # expiring exactly now counts as expired

    assert store.purge_expired(limit=5) == 5
    assert row_count(store) == 7
    assert store.purge_expired() == 6  # batches of 4, 2
    assert store.purge_expired() == 0
    assert row_count(store) == 1
    assert store.load(live.sid) == live


@pytest.mark.postgres
def test_concurrent_purges_on_postgresql_skip_each_others_rows(postgres_server: Any) -> None:
    """Two purges at once neither wait on each other nor delete a row twice (SKIP LOCKED)."""
    clock = MockClock()
    url = postgres_server.new_database()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), clock=clock, purge_every=None)
    try:
        for _ in range(6):
            store.save(signed_in(clock, "old"), clock.now() + timedelta(minutes=1))
        clock.advance(timedelta(minutes=5))
        with store.engine.connect() as holder:
            # Another purger holds the first three expired rows (its transaction is open).
            held = (
                holder.execute(
                    text("SELECT sid_hash FROM authflow_sessions ORDER BY sid_hash LIMIT 3 FOR UPDATE")
                )
                .scalars()
                .all()
            )
            assert store.purge_expired() == 3  # does not wait for the held rows
            holder.rollback()
        assert store.purge_expired() == 3
        assert len(held) == 3
        assert row_count(store) == 0
    finally:
        store.engine.dispose()


# --- audit rows ----------------------------------------------------------------------------------


def audit_row(clock: MockClock, event: str) -> AuditRecord:
    return AuditRecord(
        time=clock.now(),
        event=event,
        status="success",
        tenant="acme",
        user_id=None,
        identifier=None,
        session_id=None,
        factor=None,
        client_ip=None,
        ip_source="unknown",
        user_agent=None,
        request_id=None,
        reason=None,
    )


def test_purge_audit_deletes_rows_before_the_cutoff_in_batches(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = MockClock()
    backend = SqlAlchemyBackend(database_url, clock=clock)
    monkeypatch.setattr(audit_module, "AUDIT_PURGE_BATCH", 2)
    try:
        for day in range(5):
            backend.write(audit_row(clock, f"day{day}"))
            clock.advance(timedelta(days=1))
        cutoff = clock.now() - timedelta(days=2)  # rows of days 0, 1 and 2 are older
        assert backend.purge_audit(cutoff) == 3
        assert [r.event for r in backend.audit_rows] == ["day3", "day4"]
        assert backend.purge_audit(cutoff) == 0
    finally:
        backend.close()


# --- configuration -------------------------------------------------------------------------------


def test_audit_retention_defaults_to_a_year_and_may_be_forever() -> None:
    base = {"AUTHFLOW_SIGNING_KEY": secrets.token_bytes(32)}
    assert load_config(dict(base), debug=False, testing=True).audit.retention == timedelta(days=365)
    for forever in (None, "forever", "None"):
        config = load_config({**base, "AUTHFLOW_AUDIT_RETENTION": forever}, debug=False, testing=True)
        assert config.audit.retention is None
    config = load_config({**base, "AUTHFLOW_AUDIT_RETENTION": "86400"}, debug=False, testing=True)
    assert config.audit.retention == timedelta(days=1)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_AUDIT_RETENTION"):
        load_config({**base, "AUTHFLOW_AUDIT_RETENTION": "a while"}, debug=False, testing=True)


# --- the commands --------------------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'authflow.db'}"


@pytest.fixture
def app(app_factory: AppFactory, sqlite_url: str) -> Flask:
    return app_factory(AUTHFLOW_DATABASE_URL=sqlite_url)


def run(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", *args])


def run_json(app: Flask, *args: str) -> Any:
    result = run(app, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def failure(app: Flask, *args: str, exit_code: int = 1) -> dict[str, Any]:
    result = run(app, *args, "--json")
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_sessions_revoke_all_users_of_a_tenant(app: Flask) -> None:
    state = get_state(app)
    clock = state.clock
    assert isinstance(clock, MockClock)
    store = state.session_store
    default = [signed_in(clock, "alice", tenant="default"), signed_in(clock, "bob", tenant="default")]
    acme = signed_in(clock, "alice", tenant="acme")
    for record in (*default, acme):
        store.save(record, clock.now() + HOUR)

    result = run(app, "sessions", "revoke", "--all-users")
    assert result.exit_code == 0, result.output
    assert result.output == "2 session(s) of tenant 'default' revoked\n"
    assert [store.load(r.sid) for r in default] == [None, None]
    assert store.load(acme.sid) == acme
    assert run_json(app, "sessions", "revoke", "--all-users", "--tenant", "acme") == {
        "tenant": "acme",
        "sessions_revoked": 1,
    }
    assert store.load(acme.sid) is None


def test_sessions_revoke_a_provider_session(app: Flask) -> None:
    state = get_state(app)
    clock = state.clock
    assert isinstance(clock, MockClock)
    ended = signed_in(clock, "alice", tenant="default", federation={"issuer": ISSUER, "sid": "op-9"})
    kept = signed_in(clock, "alice", tenant="default", federation={"issuer": ISSUER, "sid": "op-8"})
    for record in (ended, kept):
        state.session_store.save(record, clock.now() + HOUR)
    document = run_json(app, "sessions", "revoke", "--issuer", ISSUER, "--sid", "op-9")
    assert document == {"issuer": ISSUER, "sid": "op-9", "sessions_revoked": 1}
    assert state.session_store.load(ended.sid) is None
    assert state.session_store.load(kept.sid) == kept


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--user", "alice", "--all-users"),
        ("--all-users", "--issuer", ISSUER, "--sid", "x"),
        ("--all-users", "--session", "0123456789abcdef"),
        ("--issuer", ISSUER),
        ("--issuer", ISSUER, "--sid", "x", "--tenant", "acme"),
    ],
)
def test_sessions_revoke_needs_exactly_one_target(app: Flask, args: tuple[str, ...]) -> None:
    assert failure(app, "sessions", "revoke", *args, exit_code=2)["error"] == "usage_error"


def test_sessions_purge(app: Flask) -> None:
    state = get_state(app)
    clock = state.clock
    assert isinstance(clock, MockClock)
    for _ in range(3):
        state.session_store.save(
            signed_in(clock, "old", tenant="default"), clock.now() + timedelta(minutes=1)
        )
    live = signed_in(clock, "alice", tenant="default")
    state.session_store.save(live, clock.now() + HOUR)
    clock.advance(timedelta(minutes=2))
    result = run(app, "sessions", "purge")
    assert result.exit_code == 0, result.output
    assert result.output == "3 expired session(s) purged\n"
    assert run_json(app, "sessions", "purge") == {"purged": 0}
    assert state.session_store.load(live.sid) == live


@pytest.mark.parametrize(
    "stores",
    ["sql", pytest.param("memory", marks=pytest.mark.authflow_stores("memory"))],
    ids=["sqlite", "memory"],
)
def test_sessions_purge_of_one_tenant(app: Flask, mock_clock: MockClock, stores: str) -> None:
    clock = mock_clock
    assert isinstance(get_state(app).session_store, MemorySessionStore) is (stores == "memory")
    store = get_state(app).session_store
    for tenant in ("acme", "acme", "globex"):
        store.save(signed_in(clock, "old", tenant=tenant), clock.now() + timedelta(minutes=1))
    store.save(guest_with_data(clock), clock.now() + timedelta(minutes=1))
    clock.advance(timedelta(minutes=2))
    result = run(app, "sessions", "purge", "--tenant", "acme")
    assert result.exit_code == 0, result.output
    assert result.output == "2 expired session(s) of tenant 'acme' purged\n"
    assert run_json(app, "sessions", "purge", "--tenant", "acme") == {"tenant": "acme", "purged": 0}
    assert run_json(app, "sessions", "purge") == {"purged": 2}  # globex's and the guest's
    assert failure(app, "sessions", "purge", "--tenant", "")["error"] == "invalid_input"


def write_aged_rows(app: Flask, ages_in_days: list[int]) -> MockClock:
    """One audit row written ``age`` days before the app's clock's current time, for each age."""
    state = get_state(app)
    clock = state.clock
    assert isinstance(clock, MockClock)
    for age in sorted(ages_in_days, reverse=True):
        state.backend.write(audit_row(MockClock(start=clock.now() - timedelta(days=age)), f"age{age}"))
    return clock


def audit_events(app: Flask) -> list[str]:
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    return [row.event for row in backend.audit_rows]


def test_audit_purge_keeps_every_row_younger_than_the_retention(
    app_factory: AppFactory, sqlite_url: str
) -> None:
    app = app_factory(AUTHFLOW_DATABASE_URL=sqlite_url, AUTHFLOW_AUDIT_RETENTION=timedelta(days=90))
    write_aged_rows(app, [400, 120, 91, 89, 10, 0])

    result = run(app, "audit", "purge")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("3 audit row(s) older than 90 day(s) deleted (written before ")
    assert audit_events(app) == ["age89", "age10", "age0"]

    refused = failure(app, "audit", "purge", "--older-than", "30d")
    assert refused["error"] == "retention"
    assert "shorter than AUTHFLOW_AUDIT_RETENTION (90 day(s))" in refused["message"]
    refused = failure(app, "audit", "purge", "--older-than", "2159h")  # 89 days 23 hours
    assert refused["error"] == "retention"
    assert audit_events(app) == ["age89", "age10", "age0"]


def test_audit_purge_older_than_a_longer_age(app_factory: AppFactory, sqlite_url: str) -> None:
    app = app_factory(AUTHFLOW_DATABASE_URL=sqlite_url, AUTHFLOW_AUDIT_RETENTION=timedelta(days=30))
    clock = write_aged_rows(app, [400, 200, 100, 5])
    document = run_json(app, "audit", "purge", "--older-than", "26w")  # 182 days
    assert document["deleted"] == 2
    assert document["older_than_seconds"] == 182 * 86400
    assert document["before"] == (clock.now() - timedelta(days=182)).isoformat()
    assert audit_events(app) == ["age100", "age5"]


def test_audit_purge_is_refused_when_rows_are_kept_forever(app_factory: AppFactory, sqlite_url: str) -> None:
    app = app_factory(AUTHFLOW_DATABASE_URL=sqlite_url, AUTHFLOW_AUDIT_RETENTION=None)
    write_aged_rows(app, [4000])
    refused = failure(app, "audit", "purge", "--older-than", "520w")
    assert refused["error"] == "retention"
    assert "kept forever" in refused["message"]
    assert audit_events(app) == ["age4000"]


@pytest.mark.parametrize("age", ["90", "d", "0d", "-5d", "3y", "1.5d"])
def test_audit_purge_refuses_a_malformed_age(app: Flask, age: str) -> None:
    assert failure(app, "audit", "purge", "--older-than", age, exit_code=2)["error"] == "usage_error"


@pytest.mark.authflow_stores("memory")
def test_audit_purge_on_the_memory_backend(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_AUDIT_RETENTION=timedelta(days=90))
    write_aged_rows(app, [400, 91, 89, 0])
    assert run_json(app, "audit", "purge")["deleted"] == 2
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    assert [row.event for row in backend.audit_rows] == ["age89", "age0"]
    refused = failure(app, "audit", "purge", "--older-than", "30d")
    assert refused["error"] == "retention"
