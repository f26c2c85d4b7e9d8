"""Faults: the PostgreSQL server goes away under load and comes back.

While the database is unreachable, session-dependent routes answer 503 (never a page for
a guest, never a success), logins fail closed, and nothing half-written remains: the
attempt row, the counter change and the audit rows of a credential check commit together.
Once the server is back, service resumes by itself: no request started after the restart
is answered 5xx, and no committed session, audit row or counter is lost.

The server is a private one (the suite's shared server is never stopped), crashed with
``pg_ctl -m immediate`` and restarted on the same data directory and port.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask, request
from flask.testing import FlaskClient
from sqlalchemy import event, func, select

from flask_authflow import AuthFlow, fresh_login_required, login_required
from flask_authflow._clock import MockClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import AttemptKey
from flask_authflow._core.session import AuthSession, SessionRecord, new_guest_record
from flask_authflow._outcomes import Authenticated, FactorCredential, InvalidCredential
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import hash_session_id
from flask_authflow.errors import AuditWriteError, StoreUnavailable
from flask_authflow.login._service import AuthnService
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend, audit_table, lockouts_table
from flask_authflow.storage._sql.engine import autocommit_reads
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.authn_support import FAST_HASHER
from tests.parts import PostgresServer, start_postgres

# Outages of the SQL stores are the point: the app's own database, never the plugin's memory.
pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "correct horse battery staple"
USERS = ["alice", "bob", "carol"]
ATTACKER = "mallory"  # logs in with wrong passwords only (no such user: counted all the same)
COOKIE = "authflow_session"
HOUR = timedelta(hours=1)


def pg_ctl(server: PostgresServer, *args: str) -> None:
    command = [*server.run_as, str(server.bindir / "pg_ctl"), "-D", str(server.datadir), *args]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def crash(server: PostgresServer) -> None:
    """Stop the server at once, as a crash would (committed data survives in the WAL)."""
    pg_ctl(server, "-m", "immediate", "-w", "stop")


def restart(server: PostgresServer) -> None:
    """Start it again on the same data and port (``start_postgres``'s options); returns
    once it accepts connections."""
    base = server.datadir.parent
    options = f"-p {server.port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    pg_ctl(server, "-l", str(base / "log"), "-w", "-o", options, "start")


@pytest.fixture(scope="module")
def private_server() -> Iterator[PostgresServer]:
    try:
        server = start_postgres()
    except Exception as exc:
        from tests.parts import missing_part

        missing_part(f"could not start PostgreSQL: {exc}")
        raise
    yield server
    server.stop()


def outage_app(app_factory: AppFactory, url: str) -> tuple[Flask, SqlAlchemyBackend]:
    """An app on the database at ``url``, with its users, a JSON login and a protected page."""
    backend = SqlAlchemyBackend(url)
    for user in USERS:
        add_user(backend, "default", user, PASSWORD)
    authflow = AuthFlow()
    app = app_factory(
        authflow=authflow,
        backend=backend,
        AUTHFLOW_COOKIE_SECURE=False,
        AUTHFLOW_LOCKOUT_MAX_FAILURES=10**6,  # the attacker is counted, never locked, here
        AUTHFLOW_THROTTLE=False,  # nor throttled: the load comes from one address
    )

    @app.post("/login")
    def login() -> str:
        body = request.get_json()
        return type(authflow.login.password(body["identifier"], body["password"])).__name__

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"

    return app, backend


@dataclass(frozen=True)
class Answer:
    kind: str  # "login", "wrong", "protected"
    started: float
    ended: float
    status: int
    body: str
    cookie: str | None = None  # the session cookie a successful login set


def session_cookie(client: FlaskClient) -> str | None:
    cookie = client.get_cookie(COOKIE)
    return None if cookie is None else cookie.value


def load(app: Flask, user: str, stop: threading.Event, answers: list[Answer]) -> None:
    """One user's traffic: log in as a fresh client, request the protected page with the
    last session that logged in, and an attacker's wrong password now and then."""
    signed_in: FlaskClient | None = None
    step = 0
    while not stop.is_set():
        step += 1
        started = time.monotonic()
        if step % 4 == 1 or signed_in is None:
            client = app.test_client()  # a new browser: a new session each login
            response = client.post("/login", json={"identifier": user, "password": PASSWORD})
            kind = "login"
            if response.get_data(as_text=True) == "Authenticated":
                signed_in = client
        elif step % 4 == 3:
            client = app.test_client()
            response = client.post("/login", json={"identifier": ATTACKER, "password": f"guess-{step}"})
            kind = "wrong"
        else:
            client = signed_in
            response = client.get("/p")
            kind = "protected"
        body = response.get_data(as_text=True)
        cookie = session_cookie(client) if kind == "login" and body == "Authenticated" else None
        answers.append(Answer(kind, started, time.monotonic(), response.status_code, body, cookie))
        time.sleep(0.002)


@pytest.mark.postgres
def test_the_database_goes_away_under_load_and_comes_back(
    private_server: PostgresServer, app_factory: AppFactory
) -> None:
    url = private_server.new_database()
    app, backend = outage_app(app_factory, url)
    try:
        check_outage(private_server, app, backend)
    finally:
        backend.close()  # also when a check failed: no connection left to the garbage collector


def check_outage(private_server: PostgresServer, app: Flask, backend: SqlAlchemyBackend) -> None:
    answers: list[Answer] = []
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(app, user, stop, answers)) for user in USERS]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)
        crash_started = time.monotonic()
        crash(private_server)
        down = time.monotonic()
        time.sleep(1.5)
        restart_started = time.monotonic()
        restart(private_server)
        up = time.monotonic()
        time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not any(thread.is_alive() for thread in threads)

    before = [a for a in answers if a.ended < crash_started]
    during = [a for a in answers if a.started > down and a.ended < restart_started]
    after = [a for a in answers if a.started > up]
    assert len(before) >= 6 and len(during) >= 6 and len(after) >= 6, tally(answers)
    assert [a for a in before if a.status >= 500] == []

    # During the outage: 503 with a clear code, never a success, never a guest's 401.
    assert {a.status for a in during} == {503}, tally(during)
    assert {a.kind for a in during} == {"login", "wrong", "protected"}
    for answer in during:
        if answer.kind == "protected":  # a plain client: the text error
            assert "try again later" in answer.body
        else:  # the JSON error of a JSON request
            assert json.loads(answer.body)["error"] in ("store_unavailable", "audit_unavailable")

    # After the restart: service resumed by itself, nothing answered 5xx.
    assert [a for a in after if a.status >= 500] == []
    assert {a.kind for a in after if a.status == 200} == {"login", "wrong", "protected"}
    assert all(a.body == "ok" for a in after if a.kind == "protected")

    # Nothing committed was lost: every session a login answered is still valid ...
    logins = [a for a in answers if a.kind == "login" and a.status == 200]
    assert logins and all(a.body == "Authenticated" and a.cookie for a in logins)
    for answer in logins:
        client = app.test_client()
        client.set_cookie(COOKIE, str(answer.cookie))
        assert client.get("/p").status_code == 200
    # ... and audited, with its attempt row: one transaction wrote both, or neither.
    with backend.engine.connect() as conn:
        audited = set(
            conn.execute(
                select(audit_table.c.session_id).where(
                    audit_table.c.event == "factor_verify", audit_table.c.status == "success"
                )
            ).scalars()
        )
        verified = conn.execute(
            select(func.count())
            .select_from(audit_table)
            .where(
                audit_table.c.event == "factor_verify",
                audit_table.c.status == "success",
                audit_table.c.identifier.in_(USERS),
            )
        ).scalar_one()
        audit = audit_table.c
        latest = conn.execute(
            select(audit.identifier, func.max(audit.time))
            .where(audit.event == "factor_verify", audit.status == "success", audit.identifier.in_(USERS))
            .group_by(audit.identifier)
        ).all()
        counter = lockouts_table.c
        remembered = conn.execute(
            select(counter.subject, counter.last_success_at).where(
                counter.subject.in_(USERS), counter.factor == "password", counter.last_success_at.is_not(None)
            )
        ).all()
        refused = conn.execute(
            select(func.count())
            .select_from(audit_table)
            .where(
                audit_table.c.event == "factor_verify",
                audit_table.c.status == "failure",
                audit_table.c.identifier == ATTACKER,
            )
        ).scalar_one()
    for answer in logins:
        sid = str(answer.cookie).rpartition(".")[0]
        assert hash_session_id(sid) in audited
    assert verified >= len(logins)
    # The latest audited success of each user is the one its counter remembers (never one
    # without the other).
    assert dict(latest) == dict(remembered)
    # Every wrong password that was answered was counted, in the counter and the attempt log.
    wrong = [a for a in answers if a.kind == "wrong" and a.status == 200]
    assert wrong and all(a.body == "InvalidCredential" for a in wrong)
    counted = backend.failure_count(AttemptKey("default", ATTACKER, "password"))
    assert counted == backend.attempt_count("default", ATTACKER, success=False) == refused >= len(wrong)


def tally(answers: list[Answer]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for answer in answers:
        counts[answer.kind, answer.status] = counts.get((answer.kind, answer.status), 0) + 1
    return counts


@pytest.mark.postgres
def test_a_restart_nobody_saw_costs_no_request(
    private_server: PostgresServer, app_factory: AppFactory
) -> None:
    """No pre-ping: the first use of each pooled connection after a restart finds it dead.
    Reads and transactions that had not reached their commit run once more on a new
    connection, so the first requests after the restart succeed."""
    url = private_server.new_database()
    app, backend = outage_app(app_factory, url)
    store = SqlAlchemySessionStore(
        url, crypto=SessionCrypto(bytes(32)), purge_every=None, clock=backend.clock
    )
    try:
        check_unseen_restart(private_server, app, backend, store)
    finally:
        store.engine.dispose()
        backend.close()


def check_unseen_restart(
    private_server: PostgresServer, app: Flask, backend: SqlAlchemyBackend, store: SqlAlchemySessionStore
) -> None:
    clients = [app.test_client() for _ in range(3)]
    for client, user in zip(clients, USERS, strict=True):
        assert client.post("/login", json={"identifier": user, "password": PASSWORD}).text == "Authenticated"
        assert client.get("/p").status_code == 200  # the pool now holds live connections
    record = replace(new_guest_record(backend.clock.now()), custom={"cart": ["book"]})
    store.save(record, backend.clock.now() + HOUR)

    crash(private_server)
    restart(private_server)  # no request while it was down: every pooled connection is dead

    assert clients[0].get("/p").status_code == 200  # the session read, retried
    assert backend.find_user("default", "bob") is not None  # a backend read, retried
    crash(private_server)
    restart(private_server)
    assert store.save(record, backend.clock.now() + HOUR, existing=True) is True  # a write, retried
    assert store.load(record.sid) is not None
    crash(private_server)
    restart(private_server)
    response = clients[1].post("/login", json={"identifier": "bob", "password": PASSWORD})
    assert response.status_code == 200 and response.text == "Authenticated"
    assert clients[2].get("/p").status_code == 200


# --- without a server to crash -------------------------------------------------------------------


class DownStore(MemorySessionStore):
    """A session store that can be switched off, as an unreachable database is."""

    down = False

    def load(self, sid: str) -> SessionRecord | None:
        if self.down:
            raise StoreUnavailable("the session store is unavailable")
        return super().load(sid)


def test_session_dependent_routes_answer_503_while_the_store_is_down(
    app_factory: AppFactory, mock_clock: MockClock
) -> None:
    store = DownStore(clock=mock_clock)
    backend = InMemoryBackend()
    add_user(backend, "default", "alice", PASSWORD)
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, backend=backend, session_store=store, AUTHFLOW_COOKIE_SECURE=False)
    handled: list[str] = []

    @authflow.unauthorized_handler
    def to_the_login_page() -> tuple[str, int]:
        handled.append("login page")
        return "go and log in", 401

    @app.post("/login")
    def login() -> str:
        return type(authflow.login.password("alice", PASSWORD)).__name__

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"

    @app.get("/fresh")
    @fresh_login_required
    def fresh() -> str:
        return "fresh"

    @app.get("/public")
    def public() -> str:
        return "anyone"

    client = app.test_client()
    assert client.post("/login", json={}).text == "Authenticated"
    assert client.get("/p").text == "ok"
    store.down = True
    for path in ("/p", "/fresh"):
        response = client.get(path, headers={"Accept": "application/json"})
        assert response.status_code == 503
        assert response.get_json()["error"] == "store_unavailable"
        assert response.headers["Cache-Control"] == "no-store"
    assert handled == []  # an outage is not a reason to send anyone to the login page
    assert client.get("/public").text == "anyone"  # pages that do not need the session still work
    assert client.get_cookie(COOKIE) is not None  # the session cookie was left alone
    store.down = False
    assert client.get("/p").text == "ok"  # the same session, once the store is back
    fresh_client = app.test_client()
    assert fresh_client.get("/p").status_code == 401  # no session at all is still a guest
    assert handled == ["login page"]


def login_once(
    service: AuthnService, password: str, during_check: list[str] | None = None
) -> tuple[object, AuthSession]:
    """begin_login then verify_factor; ``during_check`` is emptied just before the check."""
    session = AuthSession(new_guest_record(service.clock.now()), new=True, request_fingerprint="fp")
    handle = service.with_audit_context(AuditContext.unknown())
    handle.begin_login("alice", "default", session)
    if during_check is not None:
        during_check.clear()
    with FactorCredential.password(password) as credential:
        try:
            return handle.verify_factor(credential, session), session
        except AuditWriteError as exc:
            return exc, session


def last_success(backend: SqlAlchemyBackend, subject: str) -> object:
    """The latest password success settled on the account ``subject`` (``None``: none)."""
    t = lockouts_table.c
    query = select(t.last_success_at).where(
        t.tenant == "default", t.subject == subject, t.factor == "password"
    )
    with backend.engine.connect() as conn:
        return conn.execute(query).scalar()


class FailingAudit(SqlAlchemyBackend):
    """Audit rows of credential checks cannot be written (the rest of the database works)."""

    def write(self, record: object) -> None:
        if getattr(record, "event", None) == "factor_verify":
            raise AuditWriteError()
        super().write(record)  # type: ignore[arg-type]


def test_a_credential_checks_attempt_and_audit_rows_commit_in_one_transaction(database_url: str) -> None:
    clock = MockClock()
    backend = SqlAlchemyBackend(database_url, clock=clock)
    try:
        add_user(backend, "default", "alice", PASSWORD)
        service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
        commits: list[str] = []
        event.listen(backend.engine, "commit", lambda conn: commits.append("commit"))
        outcome, _session = login_once(service, "wrong password", commits)
        assert isinstance(outcome, InvalidCredential)
        # The check runs first (no reservation commits before it); the failure, admitted on
        # the host, network and account levels, commits once with its attempt and audit rows.
        assert len(commits) == 1
        outcome, _session = login_once(service, PASSWORD, commits)
        assert isinstance(outcome, Authenticated)
        assert len(commits) == 1
        rows = [(r.event, r.status) for r in backend.audit_rows]
        assert rows.count(("factor_verify", "failure")) == rows.count(("factor_verify", "success")) == 1
        assert backend.attempt_count("default", "alice", success=False) == 1
        assert last_success(backend, "alice") is not None  # settled with its audit row
    finally:
        backend.close()


def test_when_the_audit_row_fails_the_attempt_is_rolled_back_but_a_failure_still_counts(
    database_url: str,
) -> None:
    clock = MockClock()
    backend = FailingAudit(database_url, clock=clock)
    try:
        add_user(backend, "default", "alice", PASSWORD)
        service = AuthnService(backend, backend, hasher=FAST_HASHER, clock=clock, account_tokens=backend)
        key = AttemptKey("default", "alice", "password")

        outcome, session = login_once(service, PASSWORD)
        assert isinstance(outcome, AuditWriteError)
        assert not session.is_authenticated
        assert last_success(backend, "alice") is None  # no success without its row

        outcome, session = login_once(service, "wrong password")
        assert isinstance(outcome, AuditWriteError)
        # The failure was counted on its own, once: an unwritable audit trail buys no guesses.
        assert backend.failure_count(key) == 1
        assert backend.attempt_count("default", "alice", success=False) == 1
        assert [r.event for r in backend.audit_rows if r.event == "factor_verify"] == []
    finally:
        backend.close()


@pytest.mark.postgres
def test_the_direct_session_read_leaves_tracing_and_echo_alone(postgres_server: PostgresServer) -> None:
    """The psycopg fast path steps aside when someone watches the statements."""
    url = postgres_server.new_database()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(bytes(32)), purge_every=None)
    try:
        record = replace(new_guest_record(store._clock.now()), custom={"n": 1})
        store.save(record, store._clock.now() + HOUR)
        seen: list[str] = []
        assert store.load(record.sid) == record
        for engine in (store.engine, autocommit_reads(store.engine)):  # (reads: the second)
            event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
        assert store.load(record.sid) == record
        assert len(seen) == 1 and "FROM authflow_sessions" in seen[0]
    finally:
        store.engine.dispose()


@pytest.mark.parametrize("broken", ["database", "audit"])
def test_a_store_outage_during_post_login_is_a_generic_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """Fail closed, but not disguised as bad credentials: the reference app's ``POST /login``
    answers 503 with a generic message (it answered 401 "login error: The audit row could
    not be written..."), and a wrong password during the outage is no different."""
    from sqlalchemy import create_engine

    from flask_authflow import get_state
    from tests.test_reference_app_mfa import client_of, password_login, reference_app

    app = reference_app(tmp_path)
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    if broken == "database":  # every statement of the login fails to connect
        monkeypatch.setattr(backend, "_engine", create_engine(f"sqlite:///{tmp_path}/missing/x.db"))
    else:  # reads work, the audit row cannot be written
        monkeypatch.setattr(backend, "write", lambda record: (_ for _ in ()).throw(AuditWriteError()))
    for password in (None, "not the password"):
        client = client_of(app)
        if password is None:
            response = password_login(client)
        else:
            response = client.post("/login", json={"username": "alice", "password": password})
        assert response.status_code == 503, response.text
        assert response.text == "the service could not complete the request; try again later\n"
        assert response.headers["Cache-Control"] == "no-store"
        assert "authflow_session" not in response.headers.get("Set-Cookie", "")
    monkeypatch.undo()
    assert password_login(client_of(app)).text == "authenticated\n"  # back once the store is
