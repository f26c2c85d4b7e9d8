"""The SQL stores accept an Engine, a URL, or a Flask-SQLAlchemy ``db``; missing drivers name the extra."""

from __future__ import annotations

import builtins
import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import create_engine, inspect

from flask_authflow import AuthFlow, SessionCrypto, current_session, get_state
from flask_authflow.errors import MissingExtraError
from flask_authflow.stores.sqlalchemy.backend import SqlAlchemyBackend
from flask_authflow.stores.sqlalchemy.base import resolve_engine
from flask_authflow.stores.sqlalchemy.session_store import SqlAlchemySessionStore
from flask_authflow.testing import login_test_client


def test_flask_sqlalchemy_db_object_is_accepted(tmp_path: Path, authflow_hasher: Any) -> None:
    from flask_sqlalchemy import SQLAlchemy

    app = Flask(__name__)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    app.config.update(TESTING=True, SQLALCHEMY_DATABASE_URI=url, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    db = SQLAlchemy(app)
    with app.app_context():  # db.engine needs an app context
        backend = SqlAlchemyBackend(db, hasher=authflow_hasher)
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
