"""Throttling over HTTP, in the reference app: 429 with ``Retry-After``, and the client address
taken from ``X-Forwarded-For`` only when the peer is a trusted proxy."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.reference.app import create_app

pytestmark = pytest.mark.authflow_stores("sql")

PASSWORD = "wonderland-rabbit-42"


def make_app(tmp_path: Path, **config: Any) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            "AUTHFLOW_ARGON2_TIME_COST": 1,
            "AUTHFLOW_ARGON2_MEMORY_COST": 8,
            "AUTHFLOW_ARGON2_PARALLELISM": 1,
            "AUTHFLOW_THROTTLE_LIMITS": {"login.address": "2/minute", "login.network": "50/minute"},
            **config,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input=f"{PASSWORD}\n"
    )
    assert result.exit_code == 0, result.output
    return app


def login(client: FlaskClient, password: str = "wrong-password-1", **environ: Any) -> Any:
    return client.post("/login", json={"username": "alice", "password": password}, **environ)


def test_a_throttled_login_answers_429_with_retry_after(tmp_path: Path) -> None:
    client = make_app(tmp_path).test_client()
    assert [login(client).status_code for _ in range(2)] == [401, 401]
    refused = login(client, PASSWORD)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["Cache-Control"] == "no-store"


def test_behind_the_loopback_proxy_the_address_comes_from_x_forwarded_for(tmp_path: Path) -> None:
    app = make_app(tmp_path, AUTHFLOW_TRUSTED_PROXIES=["127.0.0.1/32"])
    client = app.test_client()
    attacker = {"headers": {"X-Forwarded-For": "203.0.113.66"}}
    assert [login(client, **attacker).status_code for _ in range(3)] == [401, 401, 429]
    owner = app.test_client()
    answer = login(owner, PASSWORD, headers={"X-Forwarded-For": "198.51.100.8"})
    assert answer.status_code == 200, answer.get_data(as_text=True)


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(tmp_path: Path) -> None:
    app = make_app(tmp_path, AUTHFLOW_TRUSTED_PROXIES=["127.0.0.1/32"])
    client = app.test_client()
    peer = {"environ_base": {"REMOTE_ADDR": "192.0.2.50"}}
    # A new forged address on every request: all of them count against the real peer.
    statuses = [
        login(client, headers={"X-Forwarded-For": f"198.51.100.{n}"}, **peer).status_code for n in range(3)
    ]
    assert statuses == [401, 401, 429]


@pytest.mark.parametrize(
    "forwarded",
    [
        "not-an-address",
        "203.0.113.9, ::::, 10.0.0.1",
        ",".join(f"10.0.{n // 256}.{n % 256}" for n in range(2000)),  # a header flood (over 4 KiB)
        "203.0.113.9\u00e9",
        "[2001:db8::1]:443",
    ],
)
def test_malformed_or_flooded_forwarding_headers_never_give_a_500(tmp_path: Path, forwarded: str) -> None:
    client = make_app(tmp_path).test_client()
    statuses = [login(client, headers={"X-Forwarded-For": forwarded}).status_code for _ in range(3)]
    # Garbage never earns a fresh budget: the three requests share one address.
    assert statuses == [401, 401, 429]


def test_throttling_can_be_switched_off(tmp_path: Path) -> None:
    client = make_app(tmp_path, AUTHFLOW_THROTTLE=False).test_client()
    assert all(login(client).status_code == 401 for _ in range(4))


def test_admin_answers_the_admin_role_and_refuses_others(tmp_path: Path) -> None:
    app = make_app(tmp_path, AUTHFLOW_THROTTLE=False)
    runner = app.test_cli_runner()
    runner.invoke(args=["authflow", "create-user", "bob", "--password-stdin"], input=f"{PASSWORD}\n")
    assert runner.invoke(args=["authflow", "roles", "create", "admin"]).exit_code == 0
    assert runner.invoke(args=["authflow", "users", "add-role", "alice", "admin"]).exit_code == 0
    admin = app.test_client()
    assert login(admin, PASSWORD).status_code == 200
    assert admin.get("/admin").status_code == 200
    other = app.test_client()
    assert other.post("/login", json={"username": "bob", "password": PASSWORD}).status_code == 200
    refused = other.get("/admin", headers={"Accept": "application/json"})
    assert refused.status_code == 403
    assert refused.get_json()["error"] == "permission_denied"
    assert runner.invoke(args=["authflow", "users", "remove-role", "alice", "admin"]).exit_code == 0
    assert admin.get("/admin", headers={"Accept": "application/json"}).status_code == 403
    assert app.test_client().get("/admin", headers={"Accept": "application/json"}).status_code == 401
