"""A factor secret sealed under a key that is no longer configured (the signing key rotated
without keeping the previous one) refuses the right code, fail closed, and says why: the
``factor_verify`` audit row has the reason ``secret_unreadable`` and the log names the
user, the factor kind and the factor id, never the secret. Putting the old key back in
``AUTHFLOW_PREVIOUS_SIGNING_KEYS`` opens it again."""

from __future__ import annotations

import logging
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyotp
import pytest
from flask import Flask

from flask_authflow._clock import MockClock
from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.appfactory import AppFactory

PASSWORD = "correct-horse-42-battery"
OLD_KEY, NEW_KEY = secrets.token_bytes(32), secrets.token_bytes(32)


def site(app_factory: AppFactory, backend: InMemoryBackend, key: bytes, **config: Any) -> Flask:
    return app_factory(backend=backend, AUTHFLOW_SIGNING_KEY=key, AUTHFLOW_VIEWS=True, **config)


@pytest.fixture
def backend(mock_clock: MockClock, authflow_hasher: Any) -> InMemoryBackend:
    return InMemoryBackend(clock=mock_clock)


def enroll(app: Flask) -> str:
    """alice, with a password and a TOTP key enrolled by the operator under ``app``'s key."""
    runner = app.test_cli_runner()
    made = runner.invoke(args=["authflow", "create-user", "alice", "--password-stdin"], input=PASSWORD + "\n")
    assert made.exit_code == 0, made.output
    enrolled = runner.invoke(args=["authflow", "enroll-totp", "alice"])
    assert enrolled.exit_code == 0, enrolled.output
    return parse_qs(urlsplit(enrolled.output.strip()).query)["secret"][0]


def sign_in(app: Flask, key: str, clock: MockClock) -> Any:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    token = client.get("/csrf").json["csrf_token"]  # type: ignore[index]
    headers = {"X-CSRF-Token": token}
    step = client.post("/login", json={"username": "alice", "password": PASSWORD}, headers=headers)
    assert step.json["status"] == "factor_required", step.json  # type: ignore[index]
    code = pyotp.TOTP(key).at(clock.now())
    return client.post("/login/factor", json={"kind": "totp", "code": code}, headers=headers)


def verify_rows(app: Flask, backend: InMemoryBackend) -> list[Any]:
    return [r for r in backend.audit_rows if r.event == "factor_verify" and r.factor == FactorKind.TOTP.value]


def test_a_secret_sealed_under_a_lost_key_is_refused_logged_and_audited(
    app_factory: AppFactory, backend: InMemoryBackend, mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    key = enroll(site(app_factory, backend, OLD_KEY))
    user = backend.find_user("default", "alice")
    assert user is not None
    [factor] = [f for f in backend.list_factors("default", user.user_id) if f.kind is FactorKind.TOTP]
    rotated = site(app_factory, backend, NEW_KEY)  # the old key is gone
    with caplog.at_level(logging.ERROR, logger="flask_authflow"):
        refused = sign_in(rotated, key, mock_clock)
    assert refused.status_code == 401  # the right code, refused: fail closed
    [row] = [r for r in verify_rows(rotated, backend) if r.status != "success"]
    assert row.reason == "secret_unreadable" and row.user_id == user.user_id
    [record] = [r for r in caplog.records if "secret_unreadable" in r.getMessage()]
    message = record.getMessage()
    assert user.user_id in message and factor.factor_id in message and "totp" in message
    assert "AUTHFLOW_PREVIOUS_SIGNING_KEYS" in message  # how to recover
    assert key not in message and factor.secret not in message  # never the secret


def test_keeping_the_previous_key_opens_it_again(
    app_factory: AppFactory, backend: InMemoryBackend, mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    key = enroll(site(app_factory, backend, OLD_KEY))
    kept = site(app_factory, backend, NEW_KEY, AUTHFLOW_PREVIOUS_SIGNING_KEYS=[OLD_KEY])
    with caplog.at_level(logging.ERROR, logger="flask_authflow"):
        done = sign_in(kept, key, mock_clock)
    assert done.json["status"] == "authenticated", done.json  # type: ignore[index]
    assert not [r for r in caplog.records if "secret_unreadable" in r.getMessage()]


def test_a_wrong_code_under_a_readable_key_keeps_its_own_reason(
    app_factory: AppFactory, backend: InMemoryBackend, mock_clock: MockClock
) -> None:
    enroll(site(app_factory, backend, OLD_KEY))
    app = site(app_factory, backend, OLD_KEY)
    refused = sign_in(app, pyotp.random_base32(), mock_clock)  # another key's code
    assert refused.status_code == 401
    reasons = [r.reason for r in verify_rows(app, backend) if r.status != "success"]
    assert reasons == ["invalid_credential"]


def test_the_sealer_logs_nothing_for_a_readable_secret(
    app_factory: AppFactory, backend: InMemoryBackend
) -> None:
    app = site(app_factory, backend, OLD_KEY)
    enroll(app)
    user = backend.find_user("default", "alice")
    assert user is not None
    [factor] = [f for f in backend.list_factors("default", user.user_id) if f.kind is FactorKind.TOTP]
    assert get_state(app).sealer.open_factor(factor) is not None
