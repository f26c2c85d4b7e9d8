"""Disabling, deleting or re-keying a user ends every session of that user, on every store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import get_state, login_required, signals
from flask_authflow._web.state import account_admin
from flask_authflow.errors import UserNotFound
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory

# Every store on purpose: the plugin's in-memory stores would replace them.
pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "correct horse battery staple"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    if request.param == "memory":
        app = app_factory(
            AUTHFLOW_SESSION_STORE="memory", AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'users.db'}"
        )
    elif request.param == "sqlite":
        app = app_factory(AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}")
    else:
        server = request.getfixturevalue("postgres_server")
        app = app_factory(AUTHFLOW_DATABASE_URL=server.new_database(migrated=True))

    @app.get("/dashboard")
    @login_required
    def dashboard() -> str:
        return "dashboard"

    return app


def two_clients(app: Flask) -> tuple[Any, Any]:
    first = login_test_client(app, "alice", password=PASSWORD)
    second = login_test_client(app, "Alice", password=PASSWORD)
    for client in (first, second):
        assert client.get("/dashboard").status_code == 200
    return first, second


def test_disabling_a_user_ends_their_sessions(app: Flask) -> None:
    clients = two_clients(app)
    revoked: list[dict[str, Any]] = []
    with signals.session_revoked.connected_to(lambda sender, **kw: revoked.append(kw), app):
        with app.app_context():
            assert account_admin().disable("default", "ALICE") == 2
    for client in clients:
        assert client.get("/dashboard").status_code == 401
    assert revoked and revoked[0]["reason"] == "user_disabled"
    with pytest.raises(RuntimeError, match=r"failed"):
        login_test_client(app, "alice", password=PASSWORD)
    with app.app_context():
        user = get_state(app).backend.find_user("default", "alice")
        assert user is not None and user.disabled
        account_admin().enable("default", "alice")
    assert login_test_client(app, "alice", password=PASSWORD).get("/dashboard").status_code == 200


def test_deleting_a_user_ends_their_sessions_and_keeps_the_audit(app: Flask) -> None:
    clients = two_clients(app)
    with app.app_context():
        rows_before = list(get_state(app).backend.audit_rows)
        assert account_admin().delete("default", "alice") == 2
        assert get_state(app).backend.find_user("default", "alice") is None
        rows = get_state(app).backend.audit_rows
        assert rows[: len(rows_before)] == rows_before  # the user's rows stay, and the deletion's joins them
        assert [(row.event, row.reason) for row in rows[len(rows_before) :]] == [
            ("account_deleted", "sessions_ended=2")
        ]
        with pytest.raises(UserNotFound):
            account_admin().delete("default", "alice")
    for client in clients:
        assert client.get("/dashboard").status_code == 401


def test_cli_users_disable_enable_delete(app: Flask) -> None:
    first, _ = two_clients(app)
    runner = app.test_cli_runner()
    result = runner.invoke(args=["authflow", "users", "disable", "Alice"])
    assert result.exit_code == 0, result.output
    assert "2 session(s) revoked" in result.output
    assert first.get("/dashboard").status_code == 401
    assert runner.invoke(args=["authflow", "users", "enable", "alice"]).exit_code == 0
    again = login_test_client(app, "alice", password=PASSWORD)
    refused = runner.invoke(args=["authflow", "users", "delete", "alice"], input="n\n")
    assert refused.exit_code != 0 and again.get("/dashboard").status_code == 200
    deleted = runner.invoke(args=["authflow", "users", "delete", "alice", "--yes"])
    assert deleted.exit_code == 0 and "1 session(s) revoked" in deleted.output
    assert again.get("/dashboard").status_code == 401
    missing = runner.invoke(args=["authflow", "users", "disable", "nobody"])
    assert missing.exit_code != 0 and "Traceback" not in missing.output
