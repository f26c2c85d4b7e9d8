"""Shared fixtures of the flask-authflow test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
