"""Shared fixtures of the flask-authflow test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import get_state
from flask_authflow.clock import MockClock
from flask_authflow.login.password import PasswordHasher
from tests.appfactory import AppFactory, make_app
from tests.parts import PostgresServer, RedisServer, missing_part, start_postgres, start_redis


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on 127.0.0.1, started once for the whole run."""
    try:
        server = start_postgres()
    except Exception as exc:
        missing_part(f"could not start PostgreSQL: {exc}")
        raise
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free port of 127.0.0.1, started once for the whole run."""
    try:
        server = start_redis()
    except Exception as exc:
        missing_part(f"could not start redis-server: {exc}")
        raise
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'authflow.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def app_factory(
    tmp_path: Path, mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> Iterator[AppFactory]:
    """``make_app`` (tests/appfactory.py) bound to this test's instance folder, ``mock_clock``
    and fast hasher; keyword arguments override them and the base config. The SQL backends of
    the apps it made are closed after the test."""
    made: list[Flask] = []

    def factory(**overrides: Any) -> Flask:
        bound: dict[str, Any] = {
            "instance_path": tmp_path / "instance",
            "clock": mock_clock,
            "hasher": authflow_hasher,
        }
        app = make_app(**{**bound, **overrides})
        made.append(app)
        return app

    yield factory
    for app in made:
        _close_sql_backend(app)


def _close_sql_backend(app: Flask) -> None:
    from flask_authflow.storage.sql.backend import SqlAlchemyBackend

    backend = get_state(app).backend
    if isinstance(backend, SqlAlchemyBackend):
        backend.close()
