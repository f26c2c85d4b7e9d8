"""The example apps answer hostile input with typed errors, never a 500: lone surrogates in a
password, JSON nested past the parser's limit, and CLI arguments in other spellings or
encodings."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.issuer.app import create_app as create_issuer_app
from examples.reference.app import create_app as create_reference_app
from flask_authflow._outcomes import FactorCredential
from flask_authflow.errors import InvalidInput
from flask_authflow.login._password import PasswordHasher

# The example apps as configured: their SQLite files in tmp_path, where hostile input meets SQL.
pytestmark = pytest.mark.authflow_stores("sql")

FAST_ARGON2 = {
    "TESTING": True,
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
DEEP_JSON = b"[" * 20_000 + b"]" * 20_000  # past the recursion limit, under the 64 KiB body limit
LONE_SURROGATE_PASSWORD = b'{"username": "alice", "password": "\\ud800"}'


@pytest.fixture
def reference_app(tmp_path: Path) -> Flask:
    app = create_reference_app(
        {
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert result.exit_code == 0, result.output
    return app


@pytest.fixture
def issuer_app(tmp_path: Path) -> Flask:
    app = create_issuer_app(
        {
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'issuer.db'}",
            "AUTHFLOW_ISSUER_KEY_STORE": "memory",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "issuer-instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert result.exit_code == 0, result.output
    return app


def _reference_login(app: Flask) -> FlaskClient:
    client = app.test_client()
    response = client.post("/login", json={"username": "alice", "password": "wonderland-rabbit-42"})
    assert response.status_code == 200, response.text
    assert client.get("/dashboard").status_code == 200
    return client


def test_lone_surrogate_secret_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        FactorCredential.password("\ud800")
    with pytest.raises(InvalidInput):
        PasswordHasher.fast_for_tests().hash("pass\udcffword")


def test_reference_app_lone_surrogate_password_is_not_a_500(reference_app: Flask) -> None:
    response = reference_app.test_client().post(
        "/login", data=LONE_SURROGATE_PASSWORD, content_type="application/json"
    )
    assert response.status_code == 401
    assert response.text.startswith("login error:")


def test_issuer_app_lone_surrogate_password_is_a_typed_400(issuer_app: Flask) -> None:
    response = issuer_app.test_client().post(
        "/login", data=LONE_SURROGATE_PASSWORD, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"


def test_reference_app_deeply_nested_json_is_a_400(reference_app: Flask) -> None:
    response = reference_app.test_client().post("/login", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400


def test_issuer_app_deeply_nested_json_is_a_typed_400(issuer_app: Flask) -> None:
    client = issuer_app.test_client()
    response = client.post("/login", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"
    assert (
        client.post("/login", json={"username": "alice", "password": "wonderland-rabbit-42"}).status_code
        == 200
    )
    response = client.post("/issue", data=DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response.json["error"] == "invalid_input"


def test_set_password_with_another_spelling_revokes_the_sessions(reference_app: Flask) -> None:
    client = _reference_login(reference_app)
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "set-password", "ALICE", "--password-stdin"], input="a new passphrase 7\n"
    )
    # Before the fix: the password changed, then an AttributeError, and no session revoked.
    assert result.exit_code == 0, result.output
    assert "1 session(s) revoked" in result.output
    assert client.get("/dashboard").status_code == 401


def test_sessions_commands_find_the_user_under_another_spelling(reference_app: Flask) -> None:
    _reference_login(reference_app)
    runner = reference_app.test_cli_runner()
    listed = runner.invoke(args=["authflow", "sessions", "list", "--user", "Alice"])
    assert listed.exit_code == 0, listed.output
    assert "1 session(s)" in listed.output
    revoked = runner.invoke(args=["authflow", "sessions", "revoke", "--user", "ALICE"])
    assert revoked.exit_code == 0, revoked.output
    assert "1 session(s) revoked" in revoked.output


def test_sessions_command_with_a_bad_tenant_is_a_clean_error(reference_app: Flask) -> None:
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "sessions", "list", "--user", "alice", "--tenant", "bad\x00tenant"]
    )
    assert result.exit_code == 1
    assert "invalid tenant" in result.output


def test_password_stdin_that_is_not_utf8_is_a_usage_error(reference_app: Flask) -> None:
    result = reference_app.test_cli_runner().invoke(
        args=["authflow", "set-password", "alice", "--password-stdin"], input=b"\xff\xfe\n"
    )
    assert result.exit_code == 2
    assert "not valid UTF-8" in result.output
    assert not isinstance(result.exception, UnicodeDecodeError)
