"""``flask authflow tokens``: create (printed once, alone on stdout), list, revoke."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from flask import Flask, jsonify

from flask_authflow import current_user, login_required
from flask_authflow._clock import MockClock
from flask_authflow._web.state import get_state
from flask_authflow.api_auth._tokens import TOKEN_PREFIX
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory


def cli_app(app_factory: AppFactory) -> Flask:
    app = app_factory()

    @app.get("/api/me")
    @login_required(api=True)
    def me() -> Any:
        return jsonify(identifier=current_user.identifier)

    with app.app_context():
        add_user(get_state(app).backend, "default", "alice", "a long enough passphrase")
        add_user(get_state(app).backend, "acme", "bob", "a long enough passphrase")
    return app


def run(app: Flask, *args: str) -> Any:
    return app.test_cli_runner().invoke(args=["authflow", *args])


def test_create_prints_the_token_alone_and_it_works(app_factory: AppFactory, mock_clock: MockClock) -> None:
    app = cli_app(app_factory)
    result = run(
        app, "tokens", "create", "Alice", "--name", "ci", "--scope", "notes:read", "--expires-in", "7"
    )
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert result.stdout == token + "\n" and token.startswith(TOKEN_PREFIX) and len(token) == 64
    assert "shown once" in result.stderr and token not in result.stderr
    answer = app.test_client().get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert answer.get_json() == {"identifier": "alice"}

    listed = run(app, "tokens", "list", "alice")
    assert listed.exit_code == 0 and token not in listed.output
    assert listed.output.startswith("ci  id ") and "scopes notes:read" in listed.output
    expires = (mock_clock.now() + timedelta(days=7)).isoformat(timespec="seconds")
    assert f"expires {expires}" in listed.output and "1 token(s)" in listed.output

    revoked = run(app, "tokens", "revoke", "alice", "ci")
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    assert app.test_client().get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert run(app, "tokens", "list", "alice").output == "0 token(s)\n"


def test_json_mode_documents(app_factory: AppFactory) -> None:
    app = cli_app(app_factory)
    created = json.loads(
        run(app, "tokens", "create", "bob", "--tenant", "acme", "--name", "deploy", "--json").stdout
    )
    assert created["token"].startswith(TOKEN_PREFIX) and created["name"] == "deploy"
    assert created["scopes"] == [] and created["last_used_at"] is None
    listed = json.loads(run(app, "tokens", "list", "bob", "--tenant", "acme", "--json").stdout)
    assert [entry["id"] for entry in listed] == [created["id"]]
    assert "token" not in listed[0]
    assert json.loads(run(app, "tokens", "revoke", "bob", "deploy", "--tenant", "acme", "--json").stdout) == {
        "revoked": "deploy"
    }


def test_refusals_exit_1_with_a_message(app_factory: AppFactory) -> None:
    app = cli_app(app_factory)
    assert run(app, "tokens", "create", "alice", "--name", "ci").exit_code == 0
    taken = run(app, "tokens", "create", "alice", "--name", "ci")
    assert taken.exit_code == 1 and "Error:" in taken.stderr and taken.stdout == ""
    unknown_user = run(app, "tokens", "create", "nobody", "--name", "ci")
    assert unknown_user.exit_code == 1 and "no user 'nobody'" in unknown_user.stderr
    other_tenant = run(app, "tokens", "list", "alice", "--tenant", "acme")
    assert other_tenant.exit_code == 1
    bad_scope = run(app, "tokens", "create", "alice", "--name", "x", "--scope", "NOT OK")
    assert bad_scope.exit_code == 1 and bad_scope.stdout == ""
    too_long = run(app, "tokens", "create", "alice", "--name", "y", "--expires-in", "9999")
    assert too_long.exit_code == 1 and too_long.stdout == ""
    assert run(app, "tokens", "create", "alice", "--name", "z", "--expires-in", "0").exit_code == 2
    missing = run(app, "tokens", "revoke", "alice", "nope", "--json")
    assert missing.exit_code == 1 and json.loads(missing.stdout)["error"] == "token_not_found"
    assert "1 token(s)" in run(app, "tokens", "list", "alice").output
