"""The reference app's ``GET /api/me``: a session or a personal API token, on SQLite."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from flask import Flask

from examples.reference.app import create_app

PASSWORD = "wonderland-rabbit-42"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}

pytestmark = pytest.mark.authflow_stores("sql")


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input=f"{PASSWORD}\n"
    )
    assert result.exit_code == 0, result.output
    return app


def test_api_me_answers_a_token_made_with_the_cli_until_it_is_revoked(app: Flask) -> None:
    runner = app.test_cli_runner()
    made = runner.invoke(args=["authflow", "tokens", "create", "alice", "--name", "ci", "--scope", "me:read"])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    client = app.test_client()
    answer = client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["identifier"], body["tenant"], body["via"], body["scopes"]) == (
        "alice",
        "default",
        "token",
        ["me:read"],
    )
    assert "Set-Cookie" not in answer.headers

    assert runner.invoke(args=["authflow", "tokens", "revoke", "alice", "ci"]).exit_code == 0
    refused = client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401 and refused.get_json()["error"] == "invalid_token"
    assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]


def test_api_me_answers_a_session_and_refuses_a_guest(app: Flask) -> None:
    client = app.test_client()
    guest = client.get("/api/me")
    assert guest.status_code == 401 and guest.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    login = client.post("/login", json={"username": "alice", "password": PASSWORD})
    assert login.status_code == 200, login.text
    me = client.get("/api/me")
    assert me.status_code == 200
    assert (me.get_json()["identifier"], me.get_json()["via"]) == ("alice", "session")
