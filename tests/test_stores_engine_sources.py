"""The SQL stores accept an Engine, a URL, or a Flask-SQLAlchemy ``db``; missing drivers name the extra."""

from __future__ import annotations

import builtins
import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import create_engine, inspect

from flask_authflow import AuthFlow, current_session, get_state
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow.errors import MissingExtraError
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.engine import resolve_engine
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.testing import login_test_client
from flask_authflow.testing._users import add_user


# The app's own stores and clock: a session store built without a clock keeps the system
# clock (it does not adopt the app's, as the backend does), so the plugin's mock_clock given
# to the extension would date sessions in another year than the store reads them.
@pytest.mark.authflow_stores("app")
def test_flask_sqlalchemy_db_object_is_accepted(tmp_path: Path, authflow_hasher: Any) -> None:
    from flask_sqlalchemy import SQLAlchemy

    app = Flask(__name__)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    app.config.update(TESTING=True, SQLALCHEMY_DATABASE_URI=url, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    db = SQLAlchemy(app)
    with app.app_context():  # db.engine needs an app context
        backend = SqlAlchemyBackend(db)
        store = SqlAlchemySessionStore(db, crypto=SessionCrypto(secrets.token_bytes(32)))
        assert backend.engine is db.engine
    AuthFlow(app, backend=backend, session_store=store, hasher=authflow_hasher)

    @app.get("/me")
    def me() -> str:
        return current_session.state.value

    assert login_test_client(app, "alice").get("/me").text == "authenticated"
    tables = set(inspect(create_engine(url)).get_table_names())
    assert {"authflow_users", "authflow_sessions", "authflow_audit"} <= tables
    assert get_state(app).session_store is store


def test_engine_and_url_are_accepted(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'e.db'}")
    assert resolve_engine(engine) is engine
    assert str(resolve_engine(f"sqlite:///{tmp_path / 'u.db'}").url).endswith("u.db")


def test_anything_else_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Flask-SQLAlchemy db"):
        resolve_engine(42)


def test_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_psycopg(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "psycopg" or name.startswith("psycopg."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(MissingExtraError, match=r"flask-authflow\[postgres\]"):
        resolve_engine("postgresql+psycopg://u@127.0.0.1:1/db")


@pytest.mark.parametrize("commit", [True, False])
def test_accounts_created_inside_the_apps_transaction_commit_or_roll_back_with_it(
    database_url: str, authflow_hasher: Any, commit: bool
) -> None:
    """A sign-up view flushes its own row, then creates the user, a factor and an identity
    link: they join the app's db.session transaction (no 5 s wait for SQLite's write lock,
    which the app's transaction holds), and its commit keeps both, its rollback neither.
    Outside an open transaction (a CLI command) a write still commits on its own."""
    import time

    from flask_sqlalchemy import SQLAlchemy
    from sqlalchemy import Column, String

    from flask_authflow._outcomes import FactorKind

    db = SQLAlchemy()

    class Profile(db.Model):  # type: ignore[name-defined,misc]
        __tablename__ = "profiles"
        id = Column(String(32), primary_key=True)

    app = Flask(__name__)
    app.config.update(
        TESTING=True, SQLALCHEMY_DATABASE_URI=database_url, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32)
    )
    declared = SqlAlchemyBackend(db)  # at import time, as apps do
    db.init_app(app)
    AuthFlow(app, backend=declared, hasher=authflow_hasher)
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with app.app_context():
        db.create_all()
        db.session.add(Profile(id="alice"))
        db.session.flush()  # the app's transaction holds its row (and SQLite's write lock)
        started = time.monotonic()
        user = add_user(backend, "default", "alice", "correct horse battery staple")
        backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "sealed-key")
        backend.link_identity("https://id.example.com", "sub-1", "default", user.user_id)
        took = time.monotonic() - started
        if commit:
            db.session.commit()
        else:
            db.session.rollback()
    assert took < 1, took
    with app.app_context():
        assert (db.session.get(Profile, "alice") is not None) is commit
        found = backend.find_user("default", "alice")
        assert (found is not None) is commit
        assert (backend.find_link("https://id.example.com", "sub-1") is not None) is commit
        if found is not None:
            kinds = backend.required_factors("default", found.user_id)
            assert kinds == [FactorKind.PASSWORD, FactorKind.TOTP]
        # No transaction of the app is open: the write commits on its own.
        backend.create_user("default", "bob")
        db.session.rollback()
    with app.app_context():
        assert backend.find_user("default", "bob") is not None
    with app.app_context():
        db.drop_all()
        db.engine.dispose()


@pytest.mark.postgres
def test_reads_of_an_engine_made_from_a_server_url_run_on_an_autocommit_engine_of_their_own(
    postgres_server: Any,
) -> None:
    """An engine made from a PostgreSQL URL reads on a second engine of the same URL whose
    connections are AUTOCOMMIT from the start (no isolation switch at each checkout and
    checkin), made once and disposed with it; an application's engine keeps its one pool
    and reads in AUTOCOMMIT through the execution option."""
    from sqlalchemy import text

    from flask_authflow.storage._sql.engine import autocommit_reads

    url = postgres_server.new_database()
    ours = resolve_engine(url)
    reads = autocommit_reads(ours)
    try:
        assert reads is autocommit_reads(ours) and reads.pool is not ours.pool
        assert reads.url == ours.url
        with reads.connect() as conn:
            assert conn.connection.dbapi_connection.autocommit is True  # type: ignore[union-attr]
            # Outside a transaction: a statement's effect is committed at once.
            conn.execute(text("CREATE TABLE seen (n int)"))
        with ours.connect() as conn:  # the engine's own connections still open transactions
            assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
            assert conn.execute(text("SELECT count(*) FROM seen")).scalar_one() == 0
        ours.dispose()
        assert reads.pool.checkedin() == 0  # disposed with the engine it reads for
    finally:
        ours.dispose()
    given = create_engine(url)
    try:
        shared = autocommit_reads(given)
        assert shared.pool is given.pool and shared.get_execution_options()["isolation_level"] == "AUTOCOMMIT"
    finally:
        given.dispose()
