"""The example apps: body limits, an empty signing key, and the CSRF token rotating at login."""

from __future__ import annotations

import io
import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from examples.issuer.app import create_app as create_issuer_app
from examples.reference.app import create_app as create_reference_app
from flask_authflow.errors import ConfigurationError

# The example apps as configured: their SQLite files in tmp_path, where hostile input meets SQL.
pytestmark = pytest.mark.authflow_stores("sql")

FAST = {"AUTHFLOW_ARGON2_TIME_COST": 1, "AUTHFLOW_ARGON2_MEMORY_COST": 8, "AUTHFLOW_ARGON2_PARALLELISM": 1}
FIFTY_MB = 50 * 1024 * 1024


def _reference(tmp_path: Path, **config: Any) -> Flask:
    return create_reference_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST,
            **config,
        },
        instance_path=str(tmp_path / "ref-instance"),
    )


def _issuer(tmp_path: Path) -> Flask:
    return create_issuer_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'iss.db'}",
            "AUTHFLOW_ISSUER": "https://issuer.example",
            **FAST,
        },
        instance_path=str(tmp_path / "iss-instance"),
    )


@pytest.mark.parametrize(("make", "path"), [(_reference, "/login"), (_issuer, "/issue")])
def test_a_50_mb_body_gets_413(tmp_path: Path, make: Any, path: str) -> None:
    app = make(tmp_path)
    assert app.config["MAX_CONTENT_LENGTH"] == 64 * 1024
    # The body claims 50 MB; the app refuses on the length without reading it.
    response = app.test_client().post(
        path,
        input_stream=io.BytesIO(b"{}"),
        content_type="application/json",
        environ_overrides={"CONTENT_LENGTH": str(FIFTY_MB)},
    )
    assert response.status_code == 413


def test_an_explicit_body_limit_is_kept(tmp_path: Path) -> None:
    assert _reference(tmp_path, MAX_CONTENT_LENGTH=1024).config["MAX_CONTENT_LENGTH"] == 1024


@pytest.mark.parametrize("factory", [create_reference_app, create_issuer_app])
def test_an_empty_signing_key_is_an_error_not_the_development_key(
    tmp_path: Path, factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASK_AUTHFLOW_SIGNING_KEY", "")
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SIGNING_KEY"):
        factory({"TESTING": True, **FAST}, instance_path=str(tmp_path / "instance"))
    assert not (tmp_path / "instance" / "dev-signing-key").exists()


def _token(html: str) -> str:
    return html.split('name="csrf_token" value="')[1].split('"')[0]


def test_the_csrf_token_rotates_at_login(tmp_path: Path) -> None:
    app = _reference(tmp_path)
    runner = app.test_cli_runner()
    created = runner.invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert created.exit_code == 0, created.output
    client = app.test_client()
    before = _token(client.get("/login").text)
    logged_in = client.post(
        "/login", data={"username": "alice", "password": "wonderland-rabbit-42", "csrf_token": before}
    )
    assert logged_in.status_code == 302
    after = _token(client.get("/account").text)
    assert after != before
    # The token from before the login no longer works; the new one does.
    assert client.post("/logout", data={"csrf_token": before}).status_code == 400
    assert client.get("/dashboard").status_code == 200
    assert client.post("/logout", data={"csrf_token": after}).status_code == 302
    assert client.get("/dashboard").status_code == 401
