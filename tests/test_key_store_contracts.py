"""The issuer key stores' contract (tests/store_contract_keys.py) on every key store: memory,
file, SQLite and PostgreSQL (one database per module, its key tables emptied after each test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, delete

from flask_authflow._clock import MockClock
from flask_authflow.issuer import FileLocalIdpKeyStore, LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from flask_authflow.storage._sql.schema import issuer_key_schedule_table, issuer_keys_table
from tests.parts import PostgresServer
from tests.store_contract_keys import KeysContract, es256


@pytest.fixture(scope="module", params=["memory", "file", "sqlite", "postgresql"])
def kind(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The store's kind, or for SQL the URL of this module's database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('keys') / 'keys.db'}"
    elif request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_cluster")
        url = server.new_database()
        yield url
        server.drop_databases([url.rsplit("/", 1)[1]])
    else:
        yield request.param


@pytest.fixture(scope="module")
def cleaner(kind: str) -> Iterator[Engine | None]:
    """An engine on the SQL store's database that empties its key tables (else ``None``)."""
    if kind in ("memory", "file"):
        yield None
        return
    engine = create_engine(kind)
    yield engine
    engine.dispose()


@pytest.fixture
def first_key() -> LocalIdpSigningKey:
    return es256("first")


@pytest.fixture
def key_store(
    kind: str, cleaner: Engine | None, first_key: LocalIdpSigningKey, tmp_path: Path
) -> Iterator[Any]:
    if kind == "memory":
        yield MemoryLocalIdpKeyStore.with_current(first_key)
    elif kind == "file":
        yield FileLocalIdpKeyStore.initialize(tmp_path / "keys", first_key)
    else:
        assert cleaner is not None
        store = SqlAlchemyLocalIdpKeyStore(kind, clock=MockClock())
        store.ensure_current(lambda: first_key)
        try:
            yield store
        finally:
            store.dispose()
            with cleaner.begin() as conn:
                conn.execute(delete(issuer_key_schedule_table))
                conn.execute(delete(issuer_keys_table))


class TestKeyStores(KeysContract):
    pass
