"""Every aggregate's store contract (tests/store_contract.py) on every backend adapter: the
memory store, SQLite and PostgreSQL.

Each adapter is set up once per module: one SQLite file and one PostgreSQL database, whose
tables are emptied after each test (a new database per test costs more than the test).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, delete, text

from flask_authflow._clock import MockClock
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import BACKEND_TABLES
from tests.parts import PostgresServer
from tests.store_contract_account_tokens import AccountTokensContract
from tests.store_contract_attempts import AttemptsContract
from tests.store_contract_audit import AuditContract
from tests.store_contract_devices import DevicesContract
from tests.store_contract_factors import FactorsContract
from tests.store_contract_links import IdentityLinksContract
from tests.store_contract_login import LoginStoreContract
from tests.store_contract_one_time import OneTimeContract
from tests.store_contract_roles import RolesContract
from tests.store_contract_users import UsersContract


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgresql"])
def adapter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``"memory"``, or the URL of this module's database of that kind."""
    if request.param == "memory":
        yield "memory"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('contract') / 'authflow.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_cluster")
        url = server.new_database()
        yield url
        server.drop_databases([url.rsplit("/", 1)[1]])


@pytest.fixture(scope="module")
def cleaner(adapter: str) -> Iterator[Engine | None]:
    """An engine on the adapter's database that empties its tables (``None`` in memory)."""
    if adapter == "memory":
        yield None
        return
    engine = create_engine(adapter)
    yield engine
    engine.dispose()


def empty_tables(engine: Engine) -> None:
    """Put the database back as a new one has it: no rows, and ids counted from 1 again."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            names = ", ".join(table.name for table in BACKEND_TABLES)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            return
        for table in reversed(BACKEND_TABLES):  # SQLite numbers rows from the highest one left
            conn.execute(delete(table))


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def backend(adapter: str, cleaner: Engine | None, clock: MockClock) -> Iterator[Any]:
    if cleaner is None:
        yield InMemoryBackend(clock=clock)
        return
    store = SqlAlchemyBackend(adapter, clock=clock)
    try:
        yield store
    finally:
        store.close()
        empty_tables(cleaner)


class TestLoginStore(LoginStoreContract):
    pass


class TestUsers(UsersContract):
    pass


class TestFactors(FactorsContract):
    pass


class TestAttempts(AttemptsContract):
    pass


class TestAudit(AuditContract):
    pass


class TestOneTime(OneTimeContract):
    pass


class TestIdentityLinks(IdentityLinksContract):
    pass


class TestRoles(RolesContract):
    pass


class TestAccountTokens(AccountTokensContract):
    pass


class TestDevices(DevicesContract):
    pass
