"""An operator's account actions commit once, with their own audit row (login/_accounts.py).

``authflow.accounts`` (disable, enable, delete, unlock), ``authflow.factors`` (an
operator's TOTP key, a removed factor, new recovery codes) and their commands each write
exactly their audit row, with the request's context (an unknown one from the command
line); an unknown user is ``UserNotFound`` and writes nothing; a fault at any write keeps
nothing of the change and a retry works; a disable racing a login of the same user never
leaves a live session of the disabled user (threads on SQLite here, processes on
PostgreSQL below).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request

from flask_authflow import AuthFlow, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey, UserRecord
from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._outcomes import FactorCredential, FactorKind, FactorRequired, InvalidCredential
from flask_authflow._web import services
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.audit._context import AuditContext, audit_context
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuthFlowError, UserNotFound
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory, make_app
from tests.concurrency import run_together
from tests.faults import Fault, Faults, Trace, snapshot
from tests.parts import child_processes
from tests.test_app_users import SqlApp

PASSWORD = "an operators test passphrase"
LOCK = timedelta(minutes=15)
OPERATOR = {"REMOTE_ADDR": "192.0.2.7", "HTTP_USER_AGENT": "ops-console/1.0"}

#: Each test runs on the plugin's in-memory stores and on a SQLite file (sessions in it too).
STORES = ["memory", pytest.param("sqlite", marks=pytest.mark.authflow_stores("sql"))]


def _sqlite_app(app_factory: AppFactory, tmp_path: Path, **options: Any) -> Flask:
    return app_factory(
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}", AUTHFLOW_SESSION_STORE="sql", **options
    )


@pytest.fixture(params=STORES)
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    return _sqlite_app(app_factory, tmp_path) if request.param == "sqlite" else app_factory()


# --- the actions: each prepares its precondition and acts as the operator -------------------


@dataclass(frozen=True)
class Action:
    """An operator's action: its audit event and factor, whether it ends the user's
    sessions, what must hold before it (``prepare``) and the call (in an app context)."""

    event: str
    factor: str | None
    ends_sessions: bool
    prepare: Callable[[Flask, UserRecord], object]
    act: Callable[[UserRecord], object]


def _nothing(app: Flask, user: UserRecord) -> None:
    return None


def _disabled(app: Flask, user: UserRecord) -> None:
    with app.app_context():
        get_state(app).backend.set_disabled(user.tenant, user.identifier, True)


def _locked(app: Flask, user: UserRecord) -> None:
    with app.app_context():
        state = get_state(app)
        state.backend.set_lock(AttemptKey(user.tenant, user.identifier, "password"), state.clock.now() + LOCK)


def _with_totp(app: Flask, user: UserRecord) -> None:
    with app.app_context():
        services.factors(app).create_totp(user.user_id)


def _totp_of(user: UserRecord) -> str:
    return next(f.factor_id for f in services.factors().list(user.user_id) if f.kind is FactorKind.TOTP)


ACTIONS: dict[str, Action] = {
    "disable": Action(
        "account_disabled", None, True, _nothing, lambda u: services.accounts().disable(u.identifier)
    ),
    "enable": Action(
        "account_enabled", None, False, _disabled, lambda u: services.accounts().enable(u.identifier)
    ),
    "delete": Action(
        "account_deleted", None, True, _nothing, lambda u: services.accounts().delete(u.identifier)
    ),
    "unlock": Action(
        "lockout_cleared", None, False, _locked, lambda u: services.accounts().unlock(u.identifier)
    ),
    "enroll_totp": Action(
        "factor_enrolled", "totp", True, _nothing, lambda u: services.factors().create_totp(u.user_id)
    ),
    "disable_factor": Action(
        "factor_disabled",
        "totp",
        True,
        _with_totp,
        lambda u: services.factors().revoke(u.user_id, _totp_of(u)),
    ),
    "regenerate_recovery_codes": Action(
        "recovery_codes_regenerated",
        "recovery_code",
        True,
        _nothing,
        lambda u: services.factors().create_recovery_codes(u.user_id),
    ),
}

_names = itertools.count(1)


def _prepared(app: Flask, action: Action) -> UserRecord:
    """A new user in the action's precondition, with a session when the action ends them."""
    with app.app_context():
        user = add_user(get_state(app).backend, "default", f"user{next(_names)}", PASSWORD)
    action.prepare(app, user)
    if action.ends_sessions:
        _sign_in(app, user)
    return user


def _sign_in(app: Flask, user: UserRecord) -> AuthSession:
    """A password login of ``user`` through the service; its session, as the store keeps it."""
    client = app.test_client()
    with client.session_transaction() as session:
        assert isinstance(session, AuthSession)
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        assert handle.begin_login(user.identifier, user.tenant, session) == FactorRequired(
            FactorKind.PASSWORD
        )
        handle.verify_factor(FactorCredential.password(PASSWORD), session)
    return session


def _sessions(app: Flask, user: UserRecord) -> int:
    with app.app_context():
        return len(get_state(app).session_store.list_user_sessions(user.tenant, user.user_id))


def _rows(app: Flask) -> list[AuditRecord]:
    with app.app_context():
        return list(get_state(app).backend.audit_rows)


def _as_operator(app: Flask, call: Callable[[], object]) -> tuple[str, AuditContext]:
    """``call()`` in a request of the operator's console: ``"ok"`` or the error's code, and
    the request's audit context."""
    with app.test_request_context("/admin", environ_base=OPERATOR):
        ctx = audit_context()
        try:
            call()
        except AuthFlowError as exc:
            return exc.code, ctx
    return "ok", ctx


def _expected_reason(app: Flask, action: Action, ended: int) -> str | None:
    if action.ends_sessions:
        return f"sessions_ended={ended}"
    if action.event == "lockout_cleared":
        return f"locked_until={(get_state(app).clock.now() + LOCK).isoformat()}"
    return None


# --- each action writes exactly its row ------------------------------------------------------


@pytest.mark.parametrize("name", list(ACTIONS))
def test_each_action_writes_exactly_its_row_with_the_requests_context(app: Flask, name: str) -> None:
    action = ACTIONS[name]
    user = _prepared(app, action)
    ended = _sessions(app, user)
    assert ended == (1 if action.ends_sessions else 0)
    before = _rows(app)
    answer, ctx = _as_operator(app, lambda: action.act(user))
    assert answer == "ok"
    rows = _rows(app)
    assert rows[: len(before)] == before
    [row] = rows[len(before) :]
    assert (row.event, row.status, row.tenant, row.user_id, row.identifier, row.factor) == (
        action.event, "success", "default", user.user_id, user.identifier, action.factor,
    )  # fmt: skip
    with app.app_context():
        assert row.reason == _expected_reason(app, action, ended)
    assert (row.client_ip, row.ip_source, row.user_agent, row.request_id) == (
        "192.0.2.7", ctx.ip_source, "ops-console/1.0", ctx.request_id,
    )  # fmt: skip
    assert _sessions(app, user) == 0


def test_the_commands_write_their_rows_with_an_unknown_context(app: Flask) -> None:
    with app.app_context():
        user = add_user(get_state(app).backend, "default", "alice", PASSWORD)
    _locked(app, user)
    before = len(_rows(app))
    runner = app.test_cli_runner()
    for command in ("disable", "enable", "unlock"):
        result = runner.invoke(args=["authflow", "users", command, "alice"])
        assert result.exit_code == 0, result.output
    rows = _rows(app)[before:]
    assert [row.event for row in rows] == ["account_disabled", "account_enabled", "lockout_cleared"]
    assert {(row.user_id, row.client_ip, row.ip_source, row.user_agent) for row in rows} == {
        (user.user_id, None, "unknown", None)
    }
    with app.app_context():  # the lock and the counted failures are gone
        assert get_state(app).backend.locked_until("default", "alice", get_state(app).clock.now()) is None


def test_unlock_answers_what_ended(app: Flask) -> None:
    with app.app_context():
        user = add_user(get_state(app).backend, "default", "alice", PASSWORD)
        assert services.accounts().unlock("ALICE").was_locked is False
        _locked(app, user)
        until = get_state(app).clock.now() + LOCK
        done = services.accounts().unlock("alice")
        assert (done.was_locked, done.locked_until) == (True, until)
        rows = [row.reason for row in get_state(app).backend.audit_rows if row.event == "lockout_cleared"]
    assert rows == ["not_locked", f"locked_until={until.isoformat()}"]


CALLS: dict[str, Callable[[Any], object]] = {
    "disable": lambda admin: admin.disable("default", "nobody"),
    "enable": lambda admin: admin.enable("default", "nobody"),
    "delete": lambda admin: admin.delete("default", "nobody"),
    "unlock": lambda admin: admin.unlock("default", "nobody"),
    "enroll_totp": lambda admin: admin.enroll_totp("default", "nobody"),
    "disable_factor": lambda admin: admin.disable_factor("default", "nobody", "factor-1"),
    "regenerate_recovery_codes": lambda admin: admin.regenerate_recovery_codes("default", "nobody"),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_an_unknown_user_is_user_not_found_and_writes_no_row(app: Flask, name: str) -> None:
    before = _rows(app)
    with app.test_request_context("/admin", environ_base=OPERATOR):
        with pytest.raises(UserNotFound):
            CALLS[name](account_admin(app))
    assert _rows(app) == before


# --- a fault at any write keeps nothing, and a retry works ---------------------------------------

#: What ends first, outside the change's unit (the session store may live in Redis): the
#: sessions, and with them (``session_revoked``) the device trust and, for a disable, the
#: API tokens. A later fault leaves them ended: the safe direction, and the retry works.
SESSION_LAYER = frozenset({"authflow_sessions", "authflow_devices", "authflow_api_tokens"})


def _session_layer(table: str, row: dict[str, Any]) -> bool:
    return table in SESSION_LAYER or (table == "authflow_audit" and row.get("status") == "error")


def _after_the_change(trace: Trace, fault: Fault) -> bool:
    """``fault`` hits the second pass over the sessions, once the change committed."""
    own = [n for n, write in enumerate(trace.writes, 1) if write.table not in SESSION_LAYER]
    return fault.kind == "store" and trace.writes[fault.n - 1].table in SESSION_LAYER and fault.n > own[-1]


@pytest.mark.authflow_stores("sql")
@pytest.mark.parametrize("name", list(ACTIONS))
def test_a_fault_at_any_write_keeps_nothing_and_a_retry_works(
    tmp_path: Path, app_factory: AppFactory, name: str
) -> None:
    action, app = ACTIONS[name], _sqlite_app(app_factory, tmp_path)
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    with Faults(backend.engine) as faults:
        user = _prepared(app, action)
        with faults.trace() as trace:
            assert _as_operator(app, lambda: action.act(user))[0] == "ok"
        assert trace.commits_writing(besides=SESSION_LAYER) == 1, trace.transactions
        assert trace.audit_rows == 1
        for fault in trace.faults(mail=False):
            _run_fault(app, faults, action, fault, after_the_change=_after_the_change(trace, fault))


def _run_fault(app: Flask, faults: Faults, action: Action, fault: Fault, *, after_the_change: bool) -> None:
    """The action on a new user with ``fault``: nothing kept, and the retry works."""
    user = _prepared(app, action)
    before = snapshot(faults.engine, ignore=_session_layer)
    faults.fired.clear()
    with faults.inject(fault, app):
        answer = _as_operator(app, lambda: action.act(user))[0]
    assert faults.fired == [fault]
    if after_the_change:  # logged; the change and its row are kept
        assert answer == "ok", fault
        return
    assert answer in ("store_unavailable", "audit_unavailable"), (fault, answer)
    assert snapshot(faults.engine, ignore=_session_layer) == before, fault
    assert _as_operator(app, lambda: action.act(user))[0] == "ok", f"{fault}: the retry failed"
    assert [row.event for row in _rows(app) if row.user_id == user.user_id][-1] == action.event


def test_a_delete_and_the_apps_hook_commit_with_the_row_or_not_at_all(
    tmp_path: Path, mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> None:
    sql_app = SqlApp(f"sqlite:///{tmp_path / 'app.db'}", mock_clock, authflow_hasher)
    deleted: list[str] = []
    try:
        assert sql_app.cli("create-user", "alice", "--password-stdin", stdin=PASSWORD).exit_code == 0
        [user_id] = sql_app.accounts()
        sql_app.refuse_delete = True
        with signals.user_deleted.connected_to(lambda sender, user: deleted.append(user.identifier)):
            assert sql_app.cli("users", "delete", "alice", "--yes").exit_code != 0
            assert deleted == [] and sql_app.members() == {user_id: "cli"}
            sql_app.refuse_delete = False
            assert sql_app.cli("users", "delete", "alice", "--yes").exit_code == 0
        assert deleted == ["alice"] and sql_app.members() == {} and sql_app.accounts() == {}
        with sql_app.app.app_context():
            rows = get_state(sql_app.app).backend.audit_rows
        assert [row.event for row in rows if row.user_id == user_id] == ["account_deleted"]
    finally:
        with sql_app.app.app_context():
            sql_app.db.engine.dispose()


# --- a disable racing a login of the same user ---------------------------------------------------


def test_a_login_that_began_before_a_disable_does_not_complete(app: Flask) -> None:
    """The interleaving the race below may hit, played in order: the login read the account
    before the disable, and checks the password after it."""
    with app.app_context():
        user = add_user(get_state(app).backend, "default", "alice", PASSWORD)
        session = AuthSession(new_guest_record(get_state(app).clock.now()), new=True)
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        assert handle.begin_login("alice", "default", session) == FactorRequired(FactorKind.PASSWORD)
        services.accounts().disable("alice")
        outcome = handle.verify_factor(FactorCredential.password(PASSWORD), session)
        assert isinstance(outcome, InvalidCredential) and not session.is_authenticated
        [row] = [r for r in get_state(app).backend.audit_rows if r.event == "factor_verify"]
        assert (row.status, row.reason) == ("failure", "disabled")
    assert _sessions(app, user) == 0


def test_a_login_without_a_password_reads_the_account_under_the_lock_a_disable_takes(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A login the application establishes (a passkey, a provider, a magic link) reads the
    account in its unit under the user's lock: a disable that starts meanwhile waits for
    the login's commit, then its second pass ends the session the login wrote. (Read
    before the unit, the disable ran at once, ended no session, and the login then wrote
    one that nothing ended.)"""
    backend = get_state(app).backend
    with app.app_context():
        user = add_user(backend, "default", "alice", PASSWORD)
    disabled: list[str] = []
    disabling = threading.Thread(
        target=lambda: disabled.append(_disable_in(app, user.identifier)), daemon=True
    )
    real = backend.required_factors

    def disable_meanwhile(tenant: str, user_id: str) -> Any:
        # After the account was read, before the login writes its session: the disable starts
        # and gets as far as the lock allows (a moment is plenty when nothing holds it).
        disabling.start()
        disabling.join(0.3)
        return real(tenant, user_id)

    monkeypatch.setattr(backend, "required_factors", disable_meanwhile)
    with app.test_request_context():
        session = AuthSession(new_guest_record(get_state(app).clock.now()), new=True)
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        outcome = handle.establish(session, "default", user.user_id, method="passkey")
    assert type(outcome).__name__ == "Authenticated"
    assert disabling.is_alive()  # it waited for the login's lock ...
    disabling.join(10)
    assert disabled == ["ok"]  # ... then disabled the account
    with app.app_context():
        found = backend.find_user("default", "alice")
        assert found is not None and found.disabled
    assert _sessions(app, user) == 0  # and no session of the disabled user is left


def _disable_in(app: Flask, identifier: str) -> str:
    with app.app_context():
        services.accounts().disable(identifier)
    return "ok"


def _login_route(app: Flask, authflow: AuthFlow) -> None:
    """``POST /signin``: a password login as the pages make it (the session is written in
    the step's unit of work: the SQL session store is on the backend's database)."""

    @app.post("/signin")
    def signin() -> str:
        return type(authflow.login.password(request.get_json()["user"], PASSWORD)).__name__


ROUNDS = 6


@pytest.mark.authflow_stores("sql")
def test_a_disable_racing_a_login_never_leaves_a_session_threads_on_sqlite(
    tmp_path: Path, app_factory: AppFactory
) -> None:
    authflow = AuthFlow()
    app = _sqlite_app(app_factory, tmp_path, authflow=authflow)
    _login_route(app, authflow)
    for round_ in range(ROUNDS):
        with app.app_context():
            user = add_user(get_state(app).backend, "default", f"racer{round_}", PASSWORD)
        answer = _race(app, user, delay=0.002 * (round_ % 3))  # a spread of starts: both orders
        assert answer in ("Authenticated", "InvalidCredential"), answer
        assert _sessions(app, user) == 0, f"round {round_}: the disabled user kept a session ({answer})"
        with app.app_context():
            found = get_state(app).backend.find_user("default", user.identifier)
            assert found is not None and found.disabled


def _race(app: Flask, user: UserRecord, *, delay: float) -> str:
    """A disable (after ``delay``) and a login of ``user`` at once; the login's answer."""
    client = app.test_client()

    def disable() -> str:
        time.sleep(delay)
        with app.app_context():
            return str(services.accounts().disable(user.identifier))

    def sign_in() -> str:
        return client.post("/signin", json={"user": user.identifier}).text

    return str(run_together([disable, sign_in])[1])


# --- the same race, in several processes on PostgreSQL -----------------------------------------

SPAWN = child_processes()
PROCESSES = 3  # one disables, two log in


def _racing_app(url: str, folder: str) -> Flask:
    authflow = AuthFlow()
    app = make_app(
        authflow=authflow,
        AUTHFLOW_DATABASE_URL=url,
        AUTHFLOW_SESSION_STORE="sql",
        instance_path=Path(folder),
        hasher=PasswordHasher.fast_for_tests(),
    )
    _login_route(app, authflow)
    return app


def _racer(role: str, url: str, folder: str, names: list[str], barrier: Any, out: Any) -> None:
    """Each round: wait for the others, then disable the round's user (``role``
    "disable") or log in as them ("login"); report the answers."""
    app = _racing_app(url, folder)
    answers: list[str] = []
    try:
        for round_, name in enumerate(names):
            barrier.wait(60)
            if role == "disable":
                time.sleep(0.002 * (round_ % 3))  # a spread of starts: both orders happen
                with app.app_context():
                    answers.append(str(services.accounts().disable(name)))
            else:  # a fresh browser each round
                answers.append(app.test_client().post("/signin", json={"user": name}).text)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put((role, repr(exc)))
    else:
        out.put((role, answers))


@pytest.mark.postgres
@pytest.mark.multiprocess
@pytest.mark.authflow_stores("sql")
def test_a_disable_racing_logins_never_leaves_a_session_processes_on_postgresql(
    postgres_server: Any, tmp_path: Path
) -> None:
    url = postgres_server.new_database()
    upgrade(url)
    app = _racing_app(url, str(tmp_path / "main"))
    names = [f"racer{i}" for i in range(ROUNDS)]
    with app.app_context():
        users = [add_user(get_state(app).backend, "default", name, PASSWORD) for name in names]
    barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
    roles = ["disable"] + ["login"] * (PROCESSES - 1)
    processes = [
        SPAWN.Process(target=_racer, args=(role, url, str(tmp_path / f"p{i}"), names, barrier, out))
        for i, role in enumerate(roles)
    ]
    for process in processes:
        process.start()
    reports = [out.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(30)
    for role, answers in reports:
        assert isinstance(answers, list), (role, answers)
        allowed = None if role == "disable" else {"Authenticated", "InvalidCredential"}
        assert allowed is None or set(answers) <= allowed, answers
    for user in users:
        assert _sessions(app, user) == 0, f"{user.identifier} kept a session after its disable"
        with app.app_context():
            found = get_state(app).backend.get_user("default", user.user_id)
            assert found is not None and found.disabled
    get_state(app).backend.close()  # type: ignore[attr-defined]
