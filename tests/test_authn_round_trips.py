"""How many round trips one password login costs on PostgreSQL (a regression guard).

On a server database the login's latency beyond Argon2 is its round trips: every
statement, and the BEGIN and COMMIT of every transaction (psycopg sends BEGIN on its
own before a transaction's first statement). A listener on the engines counts them for
one successful ``POST /login``, after a warm-up login, so a statement or a transaction
added to the login path fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.pool import Pool

from flask_authflow import AuthFlow
from flask_authflow.login.password import PasswordHasher
from flask_authflow.storage.sql.backend import SqlAlchemyBackend
from tests.appfactory import AppFactory

pytestmark = pytest.mark.postgres

PASSWORD = "correct horse battery staple"


@dataclass
class Trace:
    """What reached the database: (pool, statement) pairs and the transactions' pools
    (by pool: an engine and its AUTOCOMMIT variant share one)."""

    statements: list[tuple[Pool, str]] = field(default_factory=list)
    commits: list[Pool] = field(default_factory=list)
    rollbacks: list[Pool] = field(default_factory=list)

    def of(self, engine: Engine) -> list[str]:
        return [statement for pool, statement in self.statements if pool is engine.pool]

    @property
    def round_trips(self) -> int:
        # A transaction's BEGIN and its COMMIT (or ROLLBACK) are a round trip each.
        return len(self.statements) + 2 * (len(self.commits) + len(self.rollbacks))


def _in_transaction(conn: Any) -> bool:
    """The connection runs a real transaction (AUTOCOMMIT ones send no BEGIN/COMMIT)."""
    return conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT"


@pytest.fixture
def trace() -> Iterator[Trace]:
    found = Trace()

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found.statements.append((conn.engine.pool, " ".join(statement.split())))

    def on_commit(conn: Any) -> None:
        if _in_transaction(conn):
            found.commits.append(conn.engine.pool)

    def on_rollback(conn: Any) -> None:
        if _in_transaction(conn):
            found.rollbacks.append(conn.engine.pool)

    listeners = [("before_cursor_execute", on_statement), ("commit", on_commit), ("rollback", on_rollback)]
    for name, listener in listeners:
        event.listen(Engine, name, listener)
    try:
        yield found
    finally:
        for name, listener in listeners:
            event.remove(Engine, name, listener)


@pytest.mark.authflow_stores("sql")  # the sessions' round trips too: the SQL session store
def test_one_password_login_on_postgresql_costs_at_most_twenty_five_round_trips(
    postgres_server: Any, trace: Trace, app_factory: AppFactory
) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url, hasher=PasswordHasher.fast_for_tests())
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, backend=backend, AUTHFLOW_DATABASE_URL=url)
    with app.app_context():
        authflow.state.backend.create_user("default", "alice", PASSWORD)

    @app.post("/login")
    def login_view() -> str:
        return type(authflow.login_with_password("alice", PASSWORD)).__name__

    client = app.test_client()
    try:
        for _ in range(2):  # the first login warms the pools up
            trace.statements.clear()
            trace.commits.clear()
            trace.rollbacks.clear()
            client._cookies.clear()  # a fresh guest each time
            assert client.post("/login", json={}).text == "Authenticated"

        # The session save (the session store's business) is bounded below, not listed.
        statements = [s for s in trace.of(backend.engine) if "authflow_sessions" not in s]
        kinds = [" ".join(s.split()[:3]) for s in statements]
        # begin_login: the user, their factor kinds and the lock in one read; its audit row
        # (AUTOCOMMIT). verify_factor: the reservation (upsert locking the counter row, then
        # the lock/in-flight check with the reservation itself) in a transaction; the
        # password hash; the settlement (lock re-check, reservation, counter reset, attempt
        # row) and the audit row in one transaction. Both transactions that take the
        # counter row's lock first bound their wait for it (SET LOCAL lock_timeout).
        assert kinds == [
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            "SELECT max(authflow_lockouts.locked_until) AS",  # the (account, address) pair's lock
            "INSERT INTO authflow_audit",
            # The reservations: the pair's, then the account's, each in its own transaction.
            "SET LOCAL lock_timeout",
            "INSERT INTO authflow_lockouts",
            "WITH dropped AS",
            "SET LOCAL lock_timeout",
            "INSERT INTO authflow_lockouts",
            "WITH dropped AS",
            "SELECT authflow_factors.id, authflow_factors.user_id,",
            # The settlement: the account's in one statement, the pair's in three.
            "SET LOCAL lock_timeout",
            "WITH settled AS",
            "DELETE FROM authflow_attempt_reservations",
            "UPDATE authflow_lockouts SET",
            "INSERT INTO authflow_attempts",
            "INSERT INTO authflow_audit",
            # After the sign-in: the device, one upsert (AUTOCOMMIT), and, as it is new to
            # the user (a fresh browser each time), its audit row.
            "INSERT INTO authflow_devices",
            "INSERT INTO authflow_audit",
        ], "\n".join(kinds)
        assert trace.commits.count(backend.engine.pool) == 3
        assert trace.rollbacks == []
        # The whole request, the session save included: at most 25 round trips (16 before
        # the pair lockout's second reservation and settlement; 14 before the device record
        # and its row; 12 before the two bounded lock waits). The pair's reservation and
        # settlement are the next to fold into the account's statements. An account whose
        # address is verified (or that has none) costs the unverified-address gate nothing.
        assert trace.round_trips <= 25, (trace.round_trips, [s for _, s in trace.statements])
    finally:
        backend.close()
