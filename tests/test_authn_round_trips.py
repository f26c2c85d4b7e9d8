"""How many statements, commits and round trips a login step costs (a regression guard).

On a server database the login's latency beyond Argon2 is its round trips: every
statement, and the BEGIN and COMMIT of every transaction (psycopg sends BEGIN on its
own before a transaction's first statement). On SQLite every commit is a write of the
database file. A listener on the engines counts them for one successful ``POST /login``
and one TOTP step, after a warm-up, so a statement or a transaction added to the login
path fails here. The counts are deterministic (never timed).

Where a password login's work goes (issue 30 point 3): ONE read before Argon2 (the user,
their factor kinds and password hash, the account's lock, this address's host and network
locks and a required enrollment); then ONE transaction: the settlement (verified first,
counted after: the success is settled only while no level is locked, decided under the
write lock, a failure is counted only while every level has room), the device record, the
audit rows of the begin, the step and the device, and the session. A success is its counter
rows' ``last_success_at`` (revision 0011), written with their reset in one statement: the
attempt log holds failures only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyotp
import pytest
from flask import Flask, request
from sqlalchemy import Engine, event
from sqlalchemy.pool import Pool

from flask_authflow import AuthFlow, current_session
from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore, SessionWrite
from flask_authflow._core.session import new_guest_record
from flask_authflow._web.state import get_state
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.engine import autocommit_reads, sqlite_touch_engine
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.storage._sql.uow import UnitOfWork as SqlUnitOfWork
from flask_authflow.testing._users import add_user
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
    """The connection runs a real transaction (AUTOCOMMIT ones send no BEGIN/COMMIT): by the
    execution option, or by the driver connection (an engine made AUTOCOMMIT)."""
    if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return False
    return getattr(conn.connection.dbapi_connection, "autocommit", None) is not True


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


def _login_app(app_factory: AppFactory, url: str, **config: Any) -> tuple[Flask, SqlAlchemyBackend, str]:
    """The app, its backend and the TOTP key of ``tom`` (alice has a password only)."""
    backend = SqlAlchemyBackend(url)
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, backend=backend, AUTHFLOW_DATABASE_URL=url, **config)
    with app.app_context():
        add_user(authflow.state.backend, "default", "alice", PASSWORD)
        tom = add_user(authflow.state.backend, "default", "tom", PASSWORD)
        uri = authflow.factors.create_totp(tom.user_id)
    key = re.search(r"secret=([A-Z2-7]+)", uri)
    assert key is not None

    @app.post("/login")
    def login_view() -> str:
        body = request.get_json()
        return type(authflow.login.password(body["user"], body.get("password", PASSWORD))).__name__

    @app.post("/totp")
    def totp_view() -> str:
        return type(authflow.factors.verify("totp", request.get_json()["code"])).__name__

    return app, backend, key.group(1)


def _reset(trace: Trace) -> None:
    trace.statements.clear()
    trace.commits.clear()
    trace.rollbacks.clear()


def _traced_login(app: Flask, trace: Trace) -> None:
    client = app.test_client()
    for _ in range(2):  # the first login warms the pools up
        _reset(trace)
        client._cookies.clear()  # a fresh guest each time
        assert client.post("/login", json={"user": "alice"}).text == "Authenticated"


def _traced_totp_step(app: Flask, trace: Trace, key: str, clock: MockClock) -> None:
    """Only the TOTP step is traced (its password step is the request before)."""
    client = app.test_client()
    for _ in range(2):  # the first login warms the pools up
        client._cookies.clear()
        assert client.post("/login", json={"user": "tom"}).text == "FactorRequired"
        _reset(trace)
        code = pyotp.TOTP(key).at(clock.now())
        assert client.post("/totp", json={"code": code}).text == "Authenticated"
        clock.advance(timedelta(seconds=90))  # the next code is another time step's


def _kinds(trace: Trace, engine: Engine) -> list[str]:
    """The statements on ``engine`` and on the AUTOCOMMIT engine of its reads (its own pool
    for an engine made from a server URL, see ``autocommit_reads``)."""
    pools = (engine.pool, autocommit_reads(engine).pool)
    return [" ".join(s.split()[:3]) for pool, s in trace.statements if pool in pools]


@pytest.mark.authflow_stores("sql")  # the session is written in the settlement's unit
def test_one_password_login_on_sqlite_costs_six_statements_and_one_commit(
    tmp_path: Path, trace: Trace, app_factory: AppFactory
) -> None:
    app, backend, _ = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")
    try:
        _traced_login(app, trace)
        kinds = _kinds(trace, backend.engine)
        assert kinds == [
            # begin_login: the user, their factor kinds and password hash, the account's
            # lock, this address's host and network locks and the account's required
            # enrollment in one read (the password step of the request reads nothing more).
            "SELECT (SELECT max(authflow_lockouts.locked_until)",  # ... and the password hash
            # Argon2 ran; then ONE transaction (it was three commits, 17 statements): the
            # settlement (the locks re-checked under the write lock) ...
            "BEGIN IMMEDIATE",
            # (unless a level is locked, the counters of host, network and account reset
            # and their latest success set, created where missing: one upsert, whose row
            # count says whether a lock refused it, or the account, read in it: disabled or
            # deleted by an operator while Argon2 ran, the login fails (see
            # login/_accounts.py); it was a success row per level logged in the attempt log,
            # then the reset)
            "INSERT INTO authflow_lockouts",
            # ... (whether the account must enroll a factor first was read with the user),
            # the device and its row (new to the user: a fresh browser each time), the
            # session, and the begin's and the step's audit rows (ONE executemany INSERT
            # just before the commit).
            "INSERT INTO authflow_devices",
            "INSERT INTO authflow_sessions",
            "INSERT INTO authflow_audit",
        ], "\n".join(kinds)
        assert len(trace.commits) == 1
    finally:
        backend.close()


@pytest.mark.authflow_stores("sql")
def test_the_audit_chain_costs_a_password_login_one_statement_more(
    tmp_path: Path, trace: Trace, app_factory: AppFactory
) -> None:
    counted = []
    for chain in (False, True):  # the head's compare-and-swap UPDATE, nothing else
        url = f"sqlite:///{tmp_path / f'login-{chain}.db'}"
        app, backend, _ = _login_app(
            app_factory, url, AUTHFLOW_AUDIT_CHAIN=chain, AUTHFLOW_AUDIT_CHAIN_KEY=b"c" * 32
        )
        try:
            _traced_login(app, trace)
            counted.append((_kinds(trace, backend.engine), len(trace.commits)))
        finally:
            backend.close()
    (off, off_commits), (on, on_commits) = counted
    assert on == [*off[:-1], "UPDATE authflow_audit_chain_heads SET", off[-1]], "\n".join(on)
    assert off[-1] == "INSERT INTO authflow_audit" and on_commits == off_commits == 1


@pytest.mark.authflow_stores("sql")
def test_one_totp_step_on_sqlite_costs_eight_statements_and_one_commit(
    tmp_path: Path, trace: Trace, app_factory: AppFactory, mock_clock: MockClock
) -> None:
    app, backend, key = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")
    try:
        _traced_totp_step(app, trace, key, mock_clock)
        # The session store reads (and touches) on its read-and-touch pool of the same file.
        reads = sqlite_touch_engine(backend.engine)
        assert reads is not None
        kinds = [
            " ".join(s.split()[:3])
            for pool, s in trace.statements
            if pool in (backend.engine.pool, reads.pool)
        ]
        assert kinds == [
            "SELECT authflow_sessions.data, authflow_sessions.updated_at,",  # the session read
            # ONE transaction (it was 17 statements with a reservation of its own): the
            # key, the code's time step used up (a conditional UPDATE), the settlement ...
            "BEGIN IMMEDIATE",
            "SELECT authflow_factors.id, authflow_factors.user_id,",
            "UPDATE authflow_factors SET",
            # (the upsert of the password's settlement, the account re-read in it)
            "INSERT INTO authflow_lockouts",
            # ... (no required enrollment: the password step's begin found none, and none
            # can appear on an existing account), the device and its row, the step's row,
            # and the session moved to its new id (its live row only: never re-created).
            "INSERT INTO authflow_devices",
            "UPDATE authflow_sessions SET",
            "INSERT INTO authflow_audit",  # the step's rows, in one INSERT before the commit
        ], "\n".join(kinds)
        assert len(trace.commits) == 1
    finally:
        backend.close()


@pytest.mark.postgres
@pytest.mark.authflow_stores("sql")  # the sessions' round trips too: the SQL session store
def test_one_password_login_on_postgresql_costs_ten_round_trips_and_one_commit(
    postgres_server: Any, trace: Trace, app_factory: AppFactory
) -> None:
    url = postgres_server.new_database()
    app, backend, _ = _login_app(app_factory, url)
    try:
        _traced_login(app, trace)
        kinds = _kinds(trace, backend.engine)
        assert kinds == [
            # The read before Argon2 (AUTOCOMMIT: no BEGIN, no COMMIT).
            "SELECT (SELECT max(authflow_lockouts.locked_until)",
            # BEGIN (sent by the driver), then the bound on lock waits for this transaction.
            "SET LOCAL lock_timeout",
            # The account re-read under its row lock (FOR UPDATE: an operator's disable
            # or delete takes turns with the login; see login/_accounts.py).
            "SELECT authflow_users.user_id FROM",
            # The levels' counter rows locked (one upsert), then the settlement in ONE
            # statement read after the locks are held (data-modifying CTEs: reservations
            # given back, counters reset with their latest success unless a level is locked;
            # the success written on the counter rows instead of the attempt log saves no
            # round trip here: it was a CTE of this statement).
            "INSERT INTO authflow_lockouts",
            "WITH settled AS",
            # The device (its "new" answer decides an audit row and a mail), the session
            # (the unit's write), the audit rows (one INSERT); then COMMIT.
            "INSERT INTO authflow_devices",
            "INSERT INTO authflow_sessions",
            "INSERT INTO authflow_audit",
        ], "\n".join(kinds)
        assert trace.commits.count(backend.engine.pool) == 1 and trace.rollbacks == []
        # 8 statements, BEGIN and COMMIT (25, then 14 before; 7 until the account was
        # re-read under its row lock, which an operator's disable waits for; on SQLite that
        # read is part of the settlement's upsert). Issue 30 asks for 6; what
        # stands in the way (see the branch's report): the lock and the settlement cannot
        # be one statement (one snapshot, taken before the lock wait, would miss a lock
        # committed meanwhile, and PostgreSQL will not update a row twice in one
        # statement); the device's answer feeds the audit rows; the session and the audit
        # rows could share one statement (a CTE) only if the audit writer composed the
        # session store's sealed row into its INSERT; SET LOCAL is the bound that also
        # holds behind a transaction-pooling proxy (a connection-wide lock_timeout does not).
        assert trace.round_trips == 10, (trace.round_trips, "\n".join(kinds))
    finally:
        backend.close()


@pytest.mark.postgres
@pytest.mark.authflow_stores("sql")
def test_one_totp_step_on_postgresql_costs_twelve_round_trips_and_one_commit(
    postgres_server: Any, trace: Trace, app_factory: AppFactory, mock_clock: MockClock
) -> None:
    url = postgres_server.new_database()
    app, backend, key = _login_app(app_factory, url)
    try:
        _traced_totp_step(app, trace, key, mock_clock)
        kinds = _kinds(trace, backend.engine)
        assert kinds == [
            "SELECT authflow_sessions.data, authflow_sessions.updated_at",  # the session read
            "SET LOCAL lock_timeout",  # after BEGIN
            # The key, then the code's time step used up (its answer, a replay or not,
            # decides the outcome: the key must be read first to know the step) ...
            "SELECT authflow_factors.id, authflow_factors.user_id,",
            "UPDATE authflow_factors SET",
            "SELECT authflow_users.user_id FROM",  # the account re-read under its row lock
            # ... the settlement (as the password's), the device, the session moved to its
            # new id and the step's audit rows; then COMMIT.
            "INSERT INTO authflow_lockouts",
            "WITH settled AS",
            "INSERT INTO authflow_devices",
            "UPDATE authflow_sessions SET",
            "INSERT INTO authflow_audit",
        ], "\n".join(kinds)
        assert trace.commits.count(backend.engine.pool) == 1
        # 10 statements, BEGIN and COMMIT (16 before; issue 30 asks for 5: see above).
        assert trace.round_trips == 12, (trace.round_trips, "\n".join(kinds))
    finally:
        backend.close()


@pytest.mark.authflow_stores("sql")
def test_a_totp_step_reads_the_required_enrollment_only_when_the_begin_found_one(
    tmp_path: Path, trace: Trace, app_factory: AppFactory, mock_clock: MockClock
) -> None:
    """The read skipped above is made when ``begin_login`` found a requirement: the step
    then holds the session in it instead of authenticating it."""
    app, backend, key = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")
    try:
        tom = backend.find_user("default", "tom")
        assert tom is not None
        required_enrollment.require(backend, "default", tom.user_id, ["webauthn"], mock_clock.now(), "import")
        client = app.test_client()
        assert client.post("/login", json={"user": "tom"}).text == "FactorRequired"
        _reset(trace)
        code = pyotp.TOTP(key).at(mock_clock.now())
        assert client.post("/totp", json={"code": code}).text == "WorkflowPending"
        kinds = _kinds(trace, backend.engine)
        assert "SELECT authflow_account_tokens.token_hash, authflow_account_tokens.kind," in kinds
    finally:
        backend.close()


@pytest.mark.authflow_stores("sql")
def test_an_unknown_identifier_costs_the_statements_of_a_wrong_password(
    tmp_path: Path, trace: Trace, app_factory: AppFactory
) -> None:
    """The password hash read with the user leaves no oracle: a known user's wrong password
    and an unknown identifier run the same statements (the phantom's hash is known to be
    none, and its dummy verify needs no read either)."""
    app, backend, _ = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")

    try:
        seen = []
        for user in ("alice", "nobody", "alice", "nobody"):
            client = app.test_client()
            _reset(trace)
            wrong = {"user": user, "password": "not the password at all"}
            assert client.post("/login", json=wrong).text == "InvalidCredential"
            seen.append(_kinds(trace, backend.engine))
        assert seen[2] == seen[3], "\n".join(seen[2]) + "\n--\n" + "\n".join(seen[3])
    finally:
        backend.close()


@pytest.mark.authflow_stores("sql")
def test_a_login_step_writes_its_session_through_its_unit_of_work(
    tmp_path: Path, app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33.5: the step's session is the unit's write (``UnitOfWork.save_session``);
    the session interface only prepares the record and then sends the cookie: it never
    saves the session itself (no call from storage back into it and down again)."""
    app, backend, _ = _login_app(app_factory, f"sqlite:///{tmp_path / 'login.db'}")

    @app.get("/state")
    def state_view() -> str:
        return current_session.state.name

    try:
        store = get_state(app).session_store
        written: list[SessionWrite] = []
        save_session = SqlUnitOfWork.save_session

        def in_the_unit(unit: SqlUnitOfWork, to: SessionStore, write: SessionWrite) -> bool:
            assert to is store  # the app's own store (each app sharing a backend joins its own)
            written.append(write)
            return save_session(unit, to, write)

        def outside_the_unit(*args: Any, **kwargs: Any) -> bool:
            raise AssertionError("the step's session was saved outside its unit of work")

        client = app.test_client()
        with monkeypatch.context() as patched:
            patched.setattr(SqlUnitOfWork, "save_session", in_the_unit)
            patched.setattr(store, "save", outside_the_unit)
            assert client.post("/login", json={"user": "alice"}).text == "Authenticated"
        # One write, by the unit: the guest's new id, signed in (nothing stored to replace).
        [write] = written
        assert (write.record.state.name, write.existing, write.replaces) == ("AUTHENTICATED", False, ())
        # The cookie names the row the unit wrote: the next request finds the login.
        assert client.get("/state").text == "AUTHENTICATED"
    finally:
        backend.close()


def test_a_unit_refuses_a_session_write_to_a_store_that_did_not_join_it(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """Which session stores write in a store's units is decided at wiring time: a unit
    refuses the write to any other store (a memory store's units: every store) instead of
    writing it outside its transaction."""
    write = SessionWrite(new_guest_record(mock_clock.now()), mock_clock.now() + timedelta(hours=1))
    backend = SqlAlchemyBackend(f"sqlite:///{tmp_path / 'units.db'}", clock=mock_clock)
    try:
        sessions = SqlAlchemySessionStore(backend.engine, crypto=SessionCrypto(b"k" * 32), clock=mock_clock)
        for units in (InMemoryBackend(), backend):
            unit = units.begin_unit()
            try:
                with pytest.raises(RuntimeError):
                    unit.save_session(sessions, write)
            finally:
                unit.rollback()
        assert sessions.load(write.record.sid) is None
    finally:
        backend.close()


@pytest.mark.authflow_stores("sql")
def test_two_apps_on_one_backend_each_write_their_sessions_with_their_own_store(
    tmp_path: Path, app_factory: AppFactory
) -> None:
    """A backend shared by two apps (each with its own signing key, so its own session
    store) writes each app's login session with that app's store: each app reads it back."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    backend = SqlAlchemyBackend(url)
    try:
        clients = []
        for key in (b"a" * 32, b"b" * 32):
            authflow = AuthFlow()
            app = app_factory(
                authflow=authflow, backend=backend, AUTHFLOW_DATABASE_URL=url, AUTHFLOW_SIGNING_KEY=key
            )

            @app.post("/login")
            def login_view(authflow: AuthFlow = authflow) -> str:
                outcome = authflow.login.password("alice", PASSWORD)
                return type(outcome).__name__

            @app.get("/state")
            def state_view() -> str:
                return current_session.state.name

            clients.append(app.test_client())
        add_user(backend, "default", "alice", PASSWORD)
        for client in clients:
            assert client.post("/login").text == "Authenticated"
        assert [client.get("/state").text for client in clients] == ["AUTHENTICATED"] * 2
    finally:
        backend.close()
