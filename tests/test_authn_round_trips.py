"""How many statements, commits and round trips one password login costs (a regression guard).

On a server database the login's latency beyond Argon2 is its round trips: every
statement, and the BEGIN and COMMIT of every transaction (psycopg sends BEGIN on its
own before a transaction's first statement). On SQLite every commit is a write of the
database file. A listener on the engines counts them for one successful ``POST /login``,
after a warm-up login, so a statement or a transaction added to the login path fails here.
The counts are deterministic (never timed).

Where a password login's writes go (issue 30 point 3): the three lockout levels (host,
network, account) are reserved in **one** transaction before Argon2 runs (it must commit
first, so that parallel guesses see it), and settled in **one** unit of work with the
step's audit row and the session (the same database). The device record and its row are
the web layer's, written after the commit (``web/devices.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import Engine, event
from sqlalchemy.pool import Pool

from flask_authflow import AuthFlow
from flask_authflow.login.password import PasswordHasher
from flask_authflow.storage.sql.backend import SqlAlchemyBackend
from tests.appfactory import AppFactory

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


def _login_app(app_factory: AppFactory, url: str) -> tuple[Flask, SqlAlchemyBackend]:
    backend = SqlAlchemyBackend(url, hasher=PasswordHasher.fast_for_tests())
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, backend=backend, AUTHFLOW_DATABASE_URL=url)
    with app.app_context():
        authflow.state.backend.create_user("default", "alice", PASSWORD)

    @app.post("/login")
    def login_view() -> str:
        return type(authflow.login_with_password("alice", PASSWORD)).__name__

    return app, backend


def _traced_login(app: Flask, trace: Trace) -> None:
    client = app.test_client()
    for _ in range(2):  # the first login warms the pools up
        trace.statements.clear()
        trace.commits.clear()
        trace.rollbacks.clear()
        client._cookies.clear()  # a fresh guest each time
        assert client.post("/login", json={}).text == "Authenticated"


def _kinds(trace: Trace, engine: Engine) -> list[str]:
    return [" ".join(s.split()[:3]) for s in trace.of(engine)]


@pytest.mark.authflow_stores("sql")  # the session is written in the settlement's unit
def test_one_password_login_on_sqlite_costs_seventeen_statements_and_three_commits_of_its_own(
    tmp_path: Path, trace: Trace, app_factory: AppFactory
) -> None:
    app, backend = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")
    try:
        _traced_login(app, trace)
        assert _kinds(trace, backend.engine) == [
            # begin_login: the user, their factor kinds and the account's lock in one read;
            # the host's and network's locks in one; its audit row (AUTOCOMMIT).
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            "SELECT max(authflow_lockouts.locked_until) AS",
            "INSERT INTO authflow_audit",
            # The reservation of all three levels: one transaction (24 statements and 6
            # commits before, when each level had its own).
            "BEGIN IMMEDIATE",
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            "INSERT INTO authflow_attempt_reservations",
            "SELECT authflow_factors.id, authflow_factors.user_id,",  # the password hash
            # The settlement: lock re-check, reservations, counters, attempt rows, the
            # step's audit row and the session, one unit.
            "BEGIN IMMEDIATE",
            "SELECT max(authflow_lockouts.locked_until) AS",
            "DELETE FROM authflow_attempt_reservations",
            "UPDATE authflow_lockouts SET",
            "INSERT INTO authflow_attempts",
            # Whether the account must enroll a factor before it is signed in
            # (login/required_enrollment.py: an import that could not carry one).
            "SELECT authflow_account_tokens.token_hash, authflow_account_tokens.kind,",
            "INSERT INTO authflow_audit",
            "INSERT INTO authflow_sessions",
            # After the sign-in, the web layer's: the device and (new to the user) its row.
            "INSERT INTO authflow_devices",
            "INSERT INTO authflow_audit",
        ], "\n".join(_kinds(trace, backend.engine))
        # The begin's audit row, the reservation, the settlement; then the device's two.
        assert len(trace.commits) == 5
    finally:
        backend.close()


@pytest.mark.postgres
@pytest.mark.authflow_stores("sql")  # the sessions' round trips too: the SQL session store
def test_one_password_login_on_postgresql_costs_at_most_twenty_five_round_trips(
    postgres_server: Any, trace: Trace, app_factory: AppFactory
) -> None:
    url = postgres_server.new_database()
    app, backend = _login_app(app_factory, url)
    try:
        _traced_login(app, trace)
        # The session save (the session store's business) is bounded below, not listed.
        statements = [s for s in trace.of(backend.engine) if "authflow_sessions" not in s]
        kinds = [" ".join(s.split()[:3]) for s in statements]
        assert kinds == [
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            "SELECT max(authflow_lockouts.locked_until) AS",  # the host's and network's locks
            "INSERT INTO authflow_audit",
            # The reservation of the three levels in one transaction, its wait for the
            # counter rows' locks bounded: the rows locked in one upsert, their state read
            # in one statement, the reservations inserted in one.
            "SET LOCAL lock_timeout",
            "INSERT INTO authflow_lockouts",
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            "INSERT INTO authflow_attempt_reservations",
            "SELECT authflow_factors.id, authflow_factors.user_id,",
            # The settlement of the three levels and the audit row in one transaction, the
            # counter rows locked first in the reservation's order (never a deadlock).
            "SET LOCAL lock_timeout",
            "INSERT INTO authflow_lockouts",
            "SELECT max(authflow_lockouts.locked_until) AS",
            "DELETE FROM authflow_attempt_reservations",
            "UPDATE authflow_lockouts SET",
            "INSERT INTO authflow_attempts",
            # Whether the account must enroll a factor first (login/required_enrollment.py).
            "SELECT authflow_account_tokens.token_hash, authflow_account_tokens.kind,",
            "INSERT INTO authflow_audit",
            # After the sign-in: the device, one upsert (AUTOCOMMIT), and, as it is new to
            # the user (a fresh browser each time), its audit row.
            "INSERT INTO authflow_devices",
            "INSERT INTO authflow_audit",
        ], "\n".join(kinds)
        assert trace.commits.count(backend.engine.pool) == 2
        assert trace.rollbacks == []
        # The whole request, the session save included (25 before, with two lockout levels
        # reserved and settled one by one; now three levels, in one transaction each, and
        # the required-enrollment read and the settlement's ordered row lock).
        assert trace.round_trips <= 25, (trace.round_trips, [s for _, s in trace.statements])
    finally:
        backend.close()
