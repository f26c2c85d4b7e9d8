"""Workflows: a pending ceremony with a kind, data, an expiry and a single-use token.

Pure transitions first, then the extension's ``start_workflow`` / ``complete_workflow`` /
``abort_workflow`` through views on every session store, including 20 parallel
completions of one workflow (exactly one wins) on SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, jsonify, request
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, get_state, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.session import (
    AuthState,
    InvalidTransition,
    SessionRecord,
    WorkflowExpired,
    WorkflowKind,
    WorkflowNotPending,
    WorkflowTokenInvalid,
    abort_workflow,
    complete_workflow,
    new_guest_record,
    start_workflow,
    workflow_token_hash,
)
from flask_authflow._outcomes import WorkflowPending
from flask_authflow.errors import InvalidInput
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import deserialize_record, serialize_record
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.concurrency import run_together

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
#: The one-winner guarantee holds where the session is written in the backend's database:
#: these apps keep the SQL stores they configure (the plugin would swap in memory stores).
pytestmark = pytest.mark.authflow_stores("sql")
TOKEN = "w" * 43  # a well-formed workflow token (fixed: test ids must not change between processes)
#: A well-formed token of no workflow (fixed, so that test ids are the same in every process).
ANOTHER_TOKEN = "t" * 43
PASSWORD = "correct horse battery staple"
KINDS = ["signup", "email_verification", "password_reset", "custom:accept_terms"]


def authenticated() -> SessionRecord:
    guest = new_guest_record(T0)
    return SessionRecord(
        sid=guest.sid,
        state=AuthState.AUTHENTICATED,
        created_at=T0,
        last_seen_at=T0,
        tenant="acme",
        user_id="u1",
        factors_passed=("password",),
        authenticated_at=T0,
    )


def pending(record: SessionRecord, kind: str = "password_reset") -> SessionRecord:
    return start_workflow(
        record, kind=WorkflowKind(kind), token=TOKEN, expires_at=T0 + timedelta(minutes=30), now=T0,
        data={"email": "a@example.org"},
    )  # fmt: skip


# --- pure transitions ----------------------------------------------------------------------------


def test_a_workflow_keeps_only_the_hash_of_its_token() -> None:
    record = pending(new_guest_record(T0))
    assert record.state is AuthState.PENDING_WORKFLOW and record.workflow is not None
    assert record.workflow["token"] == workflow_token_hash(TOKEN) != TOKEN
    assert TOKEN not in serialize_record(record).decode()
    assert deserialize_record(serialize_record(record)) == record


def test_records_written_before_workflows_stay_readable() -> None:
    old = serialize_record(authenticated()).replace(b',"workflow":null', b"")
    assert b"workflow" not in old
    assert deserialize_record(old).workflow is None


def test_completion_returns_to_the_state_it_came_from() -> None:
    from_guest = complete_workflow(pending(new_guest_record(T0)), TOKEN, now=T0)
    assert from_guest.state is AuthState.GUEST and from_guest.workflow is None
    from_login = complete_workflow(pending(authenticated()), TOKEN, now=T0)
    assert from_login.state is AuthState.AUTHENTICATED and from_login.user_id == "u1"
    assert from_login.authenticated_at == T0


def test_a_workflow_completes_once() -> None:
    done = complete_workflow(pending(authenticated()), TOKEN, now=T0)
    with pytest.raises(WorkflowNotPending):
        complete_workflow(done, TOKEN, now=T0)
    with pytest.raises(WorkflowNotPending):
        abort_workflow(done)


def test_an_expired_workflow_cannot_complete() -> None:
    record = pending(new_guest_record(T0))
    assert complete_workflow(record, TOKEN, now=T0 + timedelta(minutes=29)).state is AuthState.GUEST
    with pytest.raises(WorkflowExpired):
        complete_workflow(record, TOKEN, now=T0 + timedelta(minutes=30))


@pytest.mark.parametrize(
    ("proof", "error"),
    [
        (ANOTHER_TOKEN, WorkflowTokenInvalid),  # another token
        (WorkflowKind("signup"), WorkflowTokenInvalid),  # another kind
        ("password_reset", InvalidInput),  # a kind as a plain string is read as a token
        ("short", InvalidInput),
        ("!" * 43, InvalidInput),
        (TOKEN + "x", InvalidInput),
    ],
)
def test_completion_refuses_a_wrong_proof(proof: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        complete_workflow(pending(new_guest_record(T0)), proof, now=T0)


def test_the_kind_object_completes_its_own_workflow() -> None:
    done = complete_workflow(pending(authenticated()), WorkflowKind.PASSWORD_RESET, now=T0)
    assert done.state is AuthState.AUTHENTICATED


@pytest.mark.parametrize("kind", ["", "reset", "custom:", "custom:Bad", "custom:" + "a" * 33, "CUSTOM:x"])
def test_unknown_kinds_are_refused(kind: str) -> None:
    with pytest.raises(InvalidInput):
        WorkflowKind(kind)


def test_workflows_start_only_from_guest_or_authenticated() -> None:
    with pytest.raises(InvalidTransition):
        pending(pending(new_guest_record(T0)))
    with pytest.raises(InvalidTransition):
        start_workflow(new_guest_record(T0), kind=WorkflowKind.SIGNUP, token=TOKEN, expires_at=T0, now=T0)


@pytest.mark.parametrize("data", [{"n": float("nan")}, {"k": object()}, {1: "x"}, {"big": "x" * 3000}, ["x"]])
def test_workflow_data_must_be_small_json(data: Any) -> None:
    with pytest.raises(InvalidInput):
        start_workflow(
            new_guest_record(T0), kind=WorkflowKind.SIGNUP, token=TOKEN, expires_at=T0 + timedelta(1),
            now=T0, data=data,
        )  # fmt: skip


# --- through the extension -------------------------------------------------------------------------


def build_app(
    tmp_path: Path, store: str, clock: MockClock, database: str | None = None, **config: Any
) -> Flask:
    app = Flask(__name__, instance_path=str(tmp_path / "instance"))
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), **config)
    app.config["AUTHFLOW_DATABASE_URL"] = database or f"sqlite:///{tmp_path / 'authflow.db'}"
    if store == "memory":
        app.config["AUTHFLOW_SESSION_STORE"] = "memory"
    authflow = AuthFlow(app, hasher=PasswordHasher.fast_for_tests(), clock=clock)

    @app.post("/wf/start")
    def start() -> Any:
        body = request.get_json()
        begun = authflow.login.start_workflow(body["kind"], body.get("data"), body.get("expires_in"))
        return jsonify(kind=begun.kind, token=begun.token, data=dict(begun.data))

    @app.post("/wf/complete")
    def complete() -> Any:
        done = authflow.login.complete_workflow(request.get_json()["token"])
        return jsonify(kind=done.kind, state=done.state, data=dict(done.data), user=done.user_id)

    @app.post("/wf/abort")
    def abort() -> Any:
        done = authflow.login.abort_workflow()
        return jsonify(kind=done.kind, state=done.state, completed=done.completed)

    @app.get("/state")
    def state() -> Any:
        from flask_authflow._web.state import current_auth_session

        return jsonify(state=current_auth_session().state.value)

    @app.post("/login-user")
    def login_user() -> Any:
        user = get_state().backend.find_user("default", "alice")
        outcome = authflow.login.user(user.user_id, method="magic_link")
        return jsonify(outcome=type(outcome).__name__, state=current_state())

    return app


def current_state() -> str:
    from flask_authflow._web.state import current_auth_session

    return current_auth_session().state.value


@pytest.fixture(params=["memory", "sqlite"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Flask]:
    app = build_app(tmp_path, request.param, MockClock(T0))
    yield app
    get_state(app).backend.close()


def events(app: Flask, prefix: str = "workflow_") -> list[tuple[str, str, str | None]]:
    rows = get_state(app).backend.audit_rows
    return [(row.event, row.status, row.reason) for row in rows if row.event.startswith(prefix)]


def started(client: FlaskClient, kind: str, **body: Any) -> str:
    answer = client.post("/wf/start", json={"kind": kind, **body})
    assert answer.status_code == 200, answer.get_json()
    assert client.get("/state").get_json() == {"state": "pending_workflow"}
    token: str = answer.get_json()["token"]
    return token


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_starts_and_completes_from_a_guest(app: Flask, kind: str) -> None:
    client = app.test_client()
    token = started(client, kind, data={"email": "new@example.org"})
    done = client.post("/wf/complete", json={"token": token})
    assert done.get_json() == {
        "kind": kind,
        "state": "guest",
        "data": {"email": "new@example.org"},
        "user": None,
    }
    assert client.get("/state").get_json() == {"state": "guest"}
    assert events(app) == [
        ("workflow_started", "success", f"kind={kind}"),
        ("workflow_completed", "success", f"kind={kind}"),
    ]


def test_a_workflow_started_signed_in_returns_there(app: Flask) -> None:
    client = login_test_client(app, "alice", password=PASSWORD)
    token = started(client, "email_verification")
    done = client.post("/wf/complete", json={"token": token}).get_json()
    assert done["state"] == "authenticated" and done["user"] is not None
    assert client.get("/state").get_json() == {"state": "authenticated"}


def test_signals_and_counters_follow_each_step(app: Flask) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    client = app.test_client()
    with (
        signals.workflow_started.connected_to(lambda s, **kw: seen.append(("started", kw)), app),
        signals.workflow_completed.connected_to(lambda s, **kw: seen.append(("completed", kw)), app),
        signals.workflow_aborted.connected_to(lambda s, **kw: seen.append(("aborted", kw)), app),
    ):
        client.post("/wf/complete", json={"token": started(client, "signup")})
        started(client, "password_reset")
        client.post("/wf/abort")
    assert [name for name, _ in seen] == ["started", "completed", "started", "aborted"]
    assert seen[0][1] == {"kind": "signup", "user_id": None, "tenant": None}
    counts = get_state(app).counters.snapshot()
    assert (counts["workflows_started"], counts["workflows_completed"], counts["workflows_aborted"]) == (
        2,
        1,
        1,
    )


def test_abort_returns_to_where_it_started_and_voids_the_token(app: Flask) -> None:
    client = login_test_client(app, "alice", password=PASSWORD)
    token = started(client, "custom:accept_terms")
    assert client.post("/wf/abort").get_json() == {
        "kind": "custom:accept_terms", "state": "authenticated", "completed": False,
    }  # fmt: skip
    again = client.post("/wf/complete", json={"token": token})
    assert again.status_code == 409 and again.get_json()["error"] == "workflow_not_pending"
    assert client.post("/wf/abort").status_code == 409
    assert events(app)[-3:] == [
        ("workflow_aborted", "success", "aborted kind=custom:accept_terms"),
        ("workflow_completed", "refused", "workflow_not_pending"),
        ("workflow_aborted", "refused", "workflow_not_pending"),
    ]


def test_a_second_completion_is_refused(app: Flask) -> None:
    client = app.test_client()
    token = started(client, "signup")
    assert client.post("/wf/complete", json={"token": token}).status_code == 200
    second = client.post("/wf/complete", json={"token": token})
    assert second.status_code == 409 and second.get_json()["error"] == "workflow_not_pending"


def test_an_expired_workflow_is_refused_and_ended(tmp_path: Path) -> None:
    clock = MockClock(T0)
    app = build_app(tmp_path, "sqlite", clock)
    client = app.test_client()
    token = started(client, "password_reset")
    clock.advance(timedelta(minutes=30))  # the default expiry of a reset
    answer = client.post("/wf/complete", json={"token": token})
    assert answer.status_code == 410 and answer.get_json()["error"] == "workflow_expired"
    assert client.get("/state").get_json() == {"state": "guest"}
    assert events(app)[-1] == ("workflow_aborted", "success", "expired kind=password_reset")
    get_state(app).backend.close()


def test_expiry_is_configurable_per_kind_and_per_call(tmp_path: Path) -> None:
    clock = MockClock(T0)
    app = build_app(tmp_path, "memory", clock, AUTHFLOW_WORKFLOW_EXPIRY={"signup": 60})
    client = app.test_client()
    token = started(client, "signup")
    clock.advance(61)
    assert client.post("/wf/complete", json={"token": token}).status_code == 410
    token = started(client, "signup", expires_in=3600)
    clock.advance(61)
    assert client.post("/wf/complete", json={"token": token}).status_code == 200
    get_state(app).backend.close()


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        ("x", 400, "invalid_input"),
        ("A" * 44, 400, "invalid_input"),
        ("é" * 43, 400, "invalid_input"),
        (None, 400, "invalid_input"),
        (["list"], 400, "invalid_input"),
        ("signup", 400, "invalid_input"),
        (ANOTHER_TOKEN, 401, "workflow_token_invalid"),
    ],
)
def test_a_bad_token_is_a_typed_4xx_and_keeps_the_workflow(
    app: Flask, token: Any, status: int, code: str
) -> None:
    client = app.test_client()
    real = started(client, "signup")
    answer = client.post("/wf/complete", json={"token": token})
    assert answer.status_code == status and answer.get_json()["error"] == code
    assert events(app)[-1] == ("workflow_completed", "refused", code)
    assert client.post("/wf/complete", json={"token": real}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "nope"},
        {"kind": 5},
        {"kind": "signup", "data": {"x": "y" * 4000}},
        {"kind": "signup", "data": "text"},
        {"kind": "signup", "expires_in": -1},
        {"kind": "signup", "expires_in": "soon"},
        {"kind": "signup", "expires_in": 10**9},
    ],
)
def test_bad_start_input_is_a_400(app: Flask, body: dict[str, Any]) -> None:
    client = app.test_client()
    answer = client.post("/wf/start", json=body)
    assert answer.status_code == 400 and answer.get_json()["error"] == "invalid_input"
    assert client.get("/state").get_json() == {"state": "guest"}


def test_completing_without_a_workflow_is_a_409(app: Flask) -> None:
    answer = app.test_client().post("/wf/complete", json={"token": TOKEN})
    assert answer.status_code == 409 and answer.get_json()["error"] == "workflow_not_pending"


def test_login_user_out_of_a_workflow_reports_the_true_state(app: Flask) -> None:
    login_test_client(app, "alice", password=PASSWORD)  # creates alice
    client = app.test_client()
    started(client, "signup")
    answer = client.post("/login-user").get_json()
    assert answer == {"outcome": "Authenticated", "state": "authenticated"}
    assert ("workflow_aborted", "success", "new_login kind=signup") in events(app)


def test_establish_into_pending_workflow_reports_it(app: Flask) -> None:
    login_test_client(app, "alice", password=PASSWORD)
    with app.test_request_context():
        from flask_authflow._web.state import current_auth_session
        from flask_authflow.audit._context import AuditContext

        state = get_state(app)
        user = state.backend.find_user("default", "alice")
        session = current_auth_session()
        outcome = state.service.with_audit_context(AuditContext.unknown()).establish(
            session, "default", user.user_id, method="oidc:test", pending_workflow=True
        )
        assert outcome == WorkflowPending(user.user_id, "default")
        assert session.state is AuthState.PENDING_WORKFLOW


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_of_twenty_parallel_completions_exactly_one_wins(tmp_path: Path, store: str, request: Any) -> None:
    database = None
    if store == "postgresql":
        database = request.getfixturevalue("postgres_server").new_database(migrated=True)
    app = build_app(tmp_path, "sql", MockClock(T0), database)
    client = login_test_client(app, "alice", password=PASSWORD)
    token = started(client, "password_reset")
    cookies = [(cookie.key, cookie.value) for cookie in client._cookies.values()]

    def attempt() -> int:
        other = app.test_client()
        other.environ_base.update(client.environ_base)
        for key, value in cookies:
            other.set_cookie(key, value)
        return other.post("/wf/complete", json={"token": token}).status_code

    statuses = run_together([attempt for _ in range(20)])
    assert sorted(statuses) == [200] + [409] * 19
    assert [row[:2] for row in events(app)].count(("workflow_completed", "success")) == 1
    get_state(app).backend.close()
