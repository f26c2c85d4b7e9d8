"""The SQLAlchemy backend on SQLite and PostgreSQL: atomic counting, fail closed, its schema (the
store contract runs on it in tests/test_store_contracts.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey
from flask_authflow._outcomes import FactorCredential, FactorKind, FactorRequired
from flask_authflow.errors import AuditWriteError, StoreUnavailable
from flask_authflow.login._service import AuthnService
from flask_authflow.storage._sql import migrations
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import lockouts_table, metadata
from flask_authflow.testing._users import add_user
from tests.authn_support import CTX, FAST_HASHER, new_session
from tests.store_contract import T0, WINDOW, AuditRecord, factor


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def backend(database_url: str, clock: MockClock) -> Iterator[SqlAlchemyBackend]:
    store = SqlAlchemyBackend(database_url, clock=clock)
    yield store
    store.close()


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
    user = add_user(backend, "acme", "alice", "pw")
    backend.set_password_hash("acme", user.user_id, FAST_HASHER.hash("pw2"))
    with backend.engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM authflow_factors WHERE user_id = :u AND kind = 'password'"),
            {"u": user.user_id},
        ).scalar()
    assert count == 1


def test_attempt_log_rows(backend: SqlAlchemyBackend) -> None:
    """The log holds failures; a success is its counter row's latest success (revision 0011)."""
    key = AttemptKey("acme", "alice", "password")
    backend.register_failure(key, now=T0, client_ip="203.0.113.1", **WINDOW)
    backend.register_success(key, now=T0 + timedelta(seconds=1))
    assert (
        backend.attempt_count("acme", "alice") == backend.attempt_count("acme", "alice", success=False) == 1
    )
    with backend.engine.connect() as conn:
        remembered = conn.execute(sa.select(lockouts_table.c.last_success_at)).scalar_one()
    assert remembered == T0 + timedelta(seconds=1)


def test_failure_counting_is_atomic_across_engines(database_url: str) -> None:
    """Two engines (as two machines would have), eight threads, no lost update."""
    first = SqlAlchemyBackend(database_url)
    second = SqlAlchemyBackend(database_url)
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
    first = SqlAlchemyBackend(database_url)
    second = SqlAlchemyBackend(database_url)
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
    store = SqlAlchemyBackend(f"sqlite:///{path}", clock=clock, create_tables=False)
    path.unlink()
    path.mkdir()  # the database turns into something SQLite cannot open
    try:
        service = AuthnService(store, store, hasher=FAST_HASHER, clock=clock, account_tokens=store)
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
    store = SqlAlchemyBackend(url, clock=clock, create_tables=False)
    try:
        with pytest.raises(StoreUnavailable):
            store.locked_until("acme", "alice", T0)
    finally:
        store.close()


def factor_record_calls(store: SqlAlchemyBackend, user: str = "u1") -> list[Callable[[], Any]]:
    """Every factor-record method of ``store``, on the factors of ``user`` in tenant acme."""
    return [
        lambda: store.add_factor("acme", factor(user, "f1")),
        lambda: store.get_factor("acme", user, "f1"),
        lambda: store.list_user_factors("acme", user, include_pending=True),
        lambda: store.list_factors("acme", user),
        lambda: store.required_factors("acme", user),
        lambda: store.find_factor_by_lookup("acme", FactorKind.WEBAUTHN, "cred"),
        lambda: store.confirm_factor("acme", user, "f1", replace_kind=True),
        lambda: store.delete_factor("acme", user, "f1"),
        lambda: store.advance_factor_counter("acme", user, "f1", 5, now=T0),
        lambda: store.swap_factor_secret("acme", user, "f1", expected_counter=0, secret="s", now=T0),
        lambda: store.enroll_factor("acme", user, FactorKind.TOTP, "s"),
    ]


@pytest.mark.parametrize("down", ["sqlite", "postgresql"])
def test_factor_records_fail_closed(down: str, tmp_path: Path, clock: MockClock) -> None:
    """A database that cannot answer is StoreUnavailable for every factor-record method
    (never a False, None or UserNotFound the service would take for an answer)."""
    from tests.parts import free_port

    if down == "sqlite":
        path = tmp_path / "db.sqlite"
        url = f"sqlite:///{path}"
    else:
        url = f"postgresql+psycopg://authflow@127.0.0.1:{free_port()}/nope?connect_timeout=2"
    store = SqlAlchemyBackend(url, clock=clock, create_tables=False)
    if down == "sqlite":
        path.unlink()
        path.mkdir()  # the database turns into something SQLite cannot open
    try:
        for call in factor_record_calls(store):
            with pytest.raises(StoreUnavailable):
                call()
    finally:
        store.close()


def test_factor_records_without_their_table_fail_closed(backend: SqlAlchemyBackend) -> None:
    user = backend.create_user("acme", "alice")
    with backend.engine.begin() as conn:
        conn.execute(text("DROP TABLE authflow_factors"))
    for call in factor_record_calls(backend, user.user_id):
        with pytest.raises(StoreUnavailable):
            call()


def test_every_factor_row_has_its_own_id(backend: SqlAlchemyBackend) -> None:
    user = add_user(backend, "acme", "alice", "pw")
    backend.enroll_factor("acme", user.user_id, FactorKind.TOTP, "seed")
    backend.enroll_factor("acme", user.user_id, FactorKind.WEBAUTHN, "{}")
    with backend.engine.connect() as conn:
        ids = conn.execute(text("SELECT factor_id FROM authflow_factors")).scalars().all()
    assert len(ids) == len(set(ids)) == 3 and all(len(i) >= 16 for i in ids)
    with pytest.raises(sa.exc.IntegrityError):  # the database refuses a duplicate by itself
        with backend.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO authflow_factors (factor_id, user_id, kind, secret, created_at) "
                    "VALUES (:id, :user, 'hotp', 's', '2026-01-01 00:00:00')"
                ),
                {"id": ids[0], "user": user.user_id},
            )


def schema_differences(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": migrations.VERSION_TABLE}
        )
        return list(compare_metadata(context, metadata))


def test_upgrading_a_revision_0001_database_keeps_its_factors(database_url: str, clock: MockClock) -> None:
    """Revision 0002 on a database with factors: every row stays, confirmed, with an id of
    its own; the downgrade drops pending enrollments only."""
    engine = sa.create_engine(database_url)
    try:
        migrations.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO authflow_users (user_id, tenant, identifier, created_at, disabled) "
                    "VALUES ('u1', 'acme', 'alice', '2026-01-01 00:00:00', false)"
                )
            )
            for kind in ("password", "totp", "webauthn", "webauthn"):
                conn.execute(
                    text(
                        "INSERT INTO authflow_factors (user_id, kind, secret, created_at) "
                        "VALUES ('u1', :kind, :secret, '2026-01-01 00:00:00')"
                    ),
                    {"kind": kind, "secret": f"{kind}-secret"},
                )
            row_ids = conn.execute(text("SELECT id FROM authflow_factors ORDER BY id")).scalars().all()

        result = migrations.upgrade(engine)
        assert (result.before, result.after) == ("0001", migrations.head())
        assert schema_differences(engine) == []
        store = SqlAlchemyBackend(engine, clock=clock, create_tables=False)
        factors = store.list_factors("acme", "u1")
        assert [(c.kind, c.factor_id, c.secret) for c in factors] == [
            (FactorKind.PASSWORD, f"legacy-{row_ids[0]}", "password-secret"),
            (FactorKind.TOTP, f"legacy-{row_ids[1]}", "totp-secret"),
            (FactorKind.WEBAUTHN, f"legacy-{row_ids[2]}", "webauthn-secret"),
            (FactorKind.WEBAUTHN, f"legacy-{row_ids[3]}", "webauthn-secret"),
        ]
        assert all(c.confirmed and c.counter == 0 and c.data == {} and c.lookup is None for c in factors)
        assert store.get_password_hash("acme", "u1") == "password-secret"
        assert store.required_factors("acme", "u1") == [
            FactorKind.PASSWORD,
            FactorKind.TOTP,
            FactorKind.WEBAUTHN,
        ]
        # The migrated rows work as records: counters move, new factors join them.
        assert store.advance_factor_counter("acme", "u1", f"legacy-{row_ids[1]}", 3, now=T0)
        store.add_factor("acme", factor("u1", "new-pending", FactorKind.HOTP, lookup="l1"))
        with pytest.raises(ValueError):  # (kind, lookup) is unique on the migrated table too
            store.add_factor("acme", factor("u1", "other", FactorKind.HOTP, lookup="l1", confirmed=True))
        with pytest.raises(ValueError):  # so is the factor id
            store.add_factor("acme", factor("u1", f"legacy-{row_ids[1]}"))

        result = migrations.downgrade(engine, "0001")
        assert (result.before, result.after) == (migrations.head(), "0001")
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("authflow_factors")}
            kept = conn.execute(text("SELECT id, kind FROM authflow_factors ORDER BY id")).all()
        assert columns == {"id", "user_id", "kind", "secret", "created_at"}
        # The pending enrollment is gone (0001 would take it for a confirmed factor).
        assert [tuple(row) for row in kept] == list(
            zip(row_ids, ["password", "totp", "webauthn", "webauthn"], strict=True)
        )
        with pytest.raises(sa.exc.IntegrityError):  # 0001's one-password index is back
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO authflow_factors (user_id, kind, secret, created_at) "
                        "VALUES ('u1', 'password', 'x', '2026-01-01 00:00:00')"
                    )
                )
        assert migrations.upgrade(engine).after == migrations.head()
        assert schema_differences(engine) == []
        assert len(store.list_factors("acme", "u1")) == 4
    finally:
        engine.dispose()


def test_lockout_table_lost_mid_login_fails_closed(backend: SqlAlchemyBackend, clock: MockClock) -> None:
    add_user(backend, "acme", "alice", "pw")
    service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
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
    add_user(backend, "acme", "alice", "pw")
    service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
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
    from flask_authflow.storage._sql.engine import resolve_engine

    engine = resolve_engine(database_url)
    try:
        store = SqlAlchemyBackend(engine)
        store.create_user("acme", "alice")
        store.close()  # does not dispose an engine it was given
        assert store.find_user("acme", "alice") is not None
    finally:
        engine.dispose()
