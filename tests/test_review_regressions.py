"""Regression tests for defects found in the security review (each failed before its fix)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import DateTime, create_engine, text

from examples.issuer.app import create_app as create_issuer_app
from examples.reference.app import create_app as create_reference_app
from flask_authflow import AuthFlow, current_session
from flask_authflow.errors import InvalidInput, StoreUnavailable
from flask_authflow.issuer.keys import LocalIdpSigningKey
from flask_authflow.login.password import PasswordHasher
from flask_authflow.outcomes import FactorCredential
from flask_authflow.responses import SERVER_ERROR_MESSAGE
from flask_authflow.sessions.stores import MemorySessionStore
from flask_authflow.storage.memory import InMemoryBackend
from flask_authflow.storage.sql.base import metadata
from flask_authflow.storage.sql.keystore import SqlAlchemyLocalIdpKeyStore

FAST_ARGON2 = {
    "TESTING": True,
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
DEEP_JSON = b"[" * 20_000 + b"]" * 20_000  # past the recursion limit, under the 64 KiB body limit
LONE_SURROGATE_PASSWORD = b'{"username": "alice", "password": "\\ud800"}'


@pytest.fixture
def reference_app(tmp_path: Path) -> Flask:
    app = create_reference_app(
        {
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert result.exit_code == 0, result.output
    return app


@pytest.fixture
def issuer_app(tmp_path: Path) -> Flask:
    app = create_issuer_app(
        {
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'issuer.db'}",
            "AUTHFLOW_ISSUER_KEY_STORE": "memory",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "issuer-instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert result.exit_code == 0, result.output
    return app


def _reference_login(app: Flask) -> FlaskClient:
    client = app.test_client()
    response = client.post("/login", json={"username": "alice", "password": "wonderland-rabbit-42"})
    assert response.status_code == 200, response.text
    assert client.get("/dashboard").status_code == 200
    return client


# --- a change made while the session store could not be read must not look done -----------------


class _DownStore(MemorySessionStore):
    """A memory store where every operation fails while ``down`` is set (a full outage)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("session store down")

    def load(self, sid):  # type: ignore[no-untyped-def]
        self._check()
        return super().load(sid)

    def save(self, record, expires_at, *, replaces=(), existing=False):  # type: ignore[no-untyped-def]
        self._check()
        return super().save(record, expires_at, replaces=replaces, existing=existing)

    def delete(self, sid):  # type: ignore[no-untyped-def]
        self._check()
        super().delete(sid)


def _outage_app(store: _DownStore, hasher: PasswordHasher, clock: Any) -> tuple[Flask, AuthFlow]:
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    authflow = AuthFlow(
        app,
        backend=InMemoryBackend(hasher=hasher, clock=clock).with_user_password("bob", "default", "pw-bob-1"),
        session_store=store,
        clock=clock,
        hasher=hasher,
    )

    @app.post("/logout")
    def logout() -> str:
        authflow.logout()
        return "logged out"

    @app.post("/login")
    def login() -> str:
        outcome = authflow.login_with_password("bob", "pw-bob-1")
        return type(outcome).__name__

    @app.get("/state")
    def state() -> str:
        return current_session.state.value

    return app, authflow


def test_logout_while_the_store_cannot_be_read_is_503_not_a_fake_success(
    authflow_hasher: PasswordHasher, mock_clock: Any
) -> None:
    from flask_authflow.testing import login_test_client

    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(store, authflow_hasher, mock_clock)
    client = login_test_client(app, "alice")
    assert client.get("/state").text == "authenticated"
    store.down = True
    response = client.post("/logout", headers={"Accept": "application/json"})
    # Before the fix: 200 "logged out", while the session stayed valid in the store.
    assert response.status_code == 503
    assert response.json["error"] == "store_unavailable"
    assert response.json["message"].startswith(SERVER_ERROR_MESSAGE)
    assert response.headers["Cache-Control"] == "no-store"
    store.down = False
    assert client.get("/state").text == "authenticated"  # nothing happened, and the client was told so


def test_login_while_the_store_cannot_be_read_is_503(
    authflow_hasher: PasswordHasher, mock_clock: Any
) -> None:
    from flask_authflow.testing import login_test_client

    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(store, authflow_hasher, mock_clock)
    client = login_test_client(app, "alice")  # the browser holds a session cookie
    store.down = True
    response = client.post("/login")
    assert response.status_code == 503  # before the fix: 200 "Authenticated", and nothing kept
    assert "Set-Cookie" not in response.headers
    store.down = False
    assert client.get("/state").text == "authenticated"  # still alice's untouched session


def test_reading_a_session_during_an_outage_still_serves_a_guest(
    authflow_hasher: PasswordHasher, mock_clock: Any
) -> None:
    store = _DownStore(clock=mock_clock)
    app, _ = _outage_app(store, authflow_hasher, mock_clock)
    store.down = True
    response = app.test_client().get("/state")
    assert response.status_code == 200
    assert response.text == "guest"


# --- lone surrogates in a password are a typed input error, not a 500 -----------------------------


def test_lone_surrogate_secret_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        FactorCredential.password("\ud800")
    with pytest.raises(InvalidInput):
        PasswordHasher.fast_for_tests().hash("pass\udcffword")


def test_reference_app_lone_surrogate_password_is_not_a_500(reference_app: Flask) -> None:
    response = reference_app.test_client().post(
        "/login", data=LONE_SURROGATE_PASSWORD, content_type="application/json"
    )
    assert response.status_code == 401
    assert response.text.startswith("login error:")


def test_issuer_app_lone_surrogate_password_is_a_typed_400(issuer_app: Flask) -> None:
    response = issuer_app.test_client().post(
        "/login", data=LONE_SURROGATE_PASSWORD, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"


# --- JSON nested past the parser's recursion limit ------------------------------------------------


def test_reference_app_deeply_nested_json_is_a_400(reference_app: Flask) -> None:
    response = reference_app.test_client().post("/login", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400


def test_issuer_app_deeply_nested_json_is_a_typed_400(issuer_app: Flask) -> None:
    client = issuer_app.test_client()
    response = client.post("/login", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"
    assert (
        client.post("/login", json={"username": "alice", "password": "wonderland-rabbit-42"}).status_code
        == 200
    )
    response = client.post("/issue", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"


# --- CLI: identifiers are normalised like the login does ------------------------------------------


def test_set_password_with_another_spelling_revokes_the_sessions(reference_app: Flask) -> None:
    client = _reference_login(reference_app)
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "set-password", "ALICE", "--password-stdin"], input="a new passphrase 7\n"
    )
    # Before the fix: the password changed, then an AttributeError, and no session revoked.
    assert result.exit_code == 0, result.output
    assert "1 session(s) revoked" in result.output
    assert client.get("/dashboard").status_code == 401


def test_sessions_commands_find_the_user_under_another_spelling(reference_app: Flask) -> None:
    _reference_login(reference_app)
    runner = reference_app.test_cli_runner()
    listed = runner.invoke(args=["authflow", "sessions", "list", "--user", "Alice"])
    assert listed.exit_code == 0, listed.output
    assert "1 session(s)" in listed.output
    revoked = runner.invoke(args=["authflow", "sessions", "revoke", "--user", "ALICE"])
    assert revoked.exit_code == 0, revoked.output
    assert "1 session(s) revoked" in revoked.output


def test_sessions_command_with_a_bad_tenant_is_a_clean_error(reference_app: Flask) -> None:
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "sessions", "list", "--user", "alice", "--tenant", "bad\x00tenant"]
    )
    assert result.exit_code == 1
    assert "invalid tenant" in result.output


def test_password_stdin_that_is_not_utf8_is_a_usage_error(reference_app: Flask) -> None:
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "set-password", "alice", "--password-stdin"], input=b"\xff\xfe\n"
    )
    assert result.exit_code == 2
    assert "not valid UTF-8" in result.output
    assert not isinstance(result.exception, UnicodeDecodeError)


# --- one UTC datetime column type for every table -------------------------------------------------


def test_every_datetime_column_uses_the_shared_utc_type() -> None:
    from flask_authflow.storage.sql.base import UTCDateTime

    columns = [
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, DateTime) or isinstance(column.type, UTCDateTime)
    ]
    assert columns, "expected datetime columns"
    wrong = [
        name
        for table in metadata.sorted_tables
        for column in table.columns
        if (name := f"{table.name}.{column.name}") in columns and not isinstance(column.type, UTCDateTime)
    ]
    assert wrong == []


class _OffsetClock:
    """A clock answering in UTC+02:00 (aware, but not UTC)."""

    def now(self) -> datetime:
        return datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))


def test_issuer_key_times_are_stored_as_utc_on_sqlite(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'keys.db'}")
    store = SqlAlchemyLocalIdpKeyStore(engine, clock=_OffsetClock())
    store.rotate(LocalIdpSigningKey.generate_es256())
    with engine.connect() as conn:
        raw = conn.execute(text("SELECT created_at FROM authflow_issuer_keys")).scalar_one()
    # Before the fix the wall time of the +02:00 value (14:00) was stored as if it were UTC.
    assert str(raw).startswith("2026-03-01 12:00:00")


def test_utc_datetime_round_trips_as_aware_utc(tmp_path: Path) -> None:
    from sqlalchemy import Column, Integer, MetaData, Table, insert, select

    from flask_authflow.storage.sql.base import UTCDateTime

    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True), Column("at", UTCDateTime()))
    table.metadata.create_all(engine)
    moment = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    with engine.begin() as conn:
        conn.execute(insert(table).values(id=1, at=moment))
        back = conn.execute(select(table.c.at)).scalar_one()
    assert back == moment
    assert back.tzinfo is UTC


def test_fresh_login_required_with_zero_max_age_always_asks_for_step_up() -> None:
    from flask_authflow import fresh_login_required
    from flask_authflow.clock import MockClock
    from flask_authflow.testing import login_test_client

    clock = MockClock()
    hasher = PasswordHasher.fast_for_tests()
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    AuthFlow(
        app,
        backend=InMemoryBackend(hasher=hasher, clock=clock),
        session_store=MemorySessionStore(clock=clock),
        clock=clock,
        hasher=hasher,
    )

    @app.get("/now-only")
    @fresh_login_required(timedelta(0))
    def now_only() -> str:
        return "fresh"

    client = login_test_client(app, "alice")
    clock.advance(timedelta(seconds=1))  # well inside the 10-minute default, but not within 0
    response = client.get("/now-only", headers={"Accept": "application/json"})
    assert response.status_code == 401
    assert response.get_json()["error"] == "step_up_required"


def test_any_sqlalchemy_error_in_the_session_store_is_store_unavailable(tmp_path: Path) -> None:
    from sqlalchemy.exc import InvalidRequestError

    from flask_authflow.core.crypto import SessionCrypto
    from flask_authflow.storage.sql.session_store import SqlAlchemySessionStore

    store = SqlAlchemySessionStore(
        f"sqlite:///{tmp_path / 's.db'}", crypto=SessionCrypto(secrets.token_bytes(32))
    )

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise InvalidRequestError("not a driver error, still a broken store")

    class BrokenEngine:
        def connect(self) -> Any:
            return broken()

    store._read_engine = BrokenEngine()  # type: ignore[assignment]
    with pytest.raises(StoreUnavailable):
        store.load("x" * 43)
