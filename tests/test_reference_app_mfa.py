"""The reference app with second factors: the JSON ``POST /login/factor`` and
``POST /login/factor/send`` routes, the kinds ``POST /login`` names, malformed bodies and
codes (400, never 500), single use, lockout, and form posts handed to the ready views.

The factors are the real ones (TOTP computed with pyotp at the app's mock time, recovery
codes), enrolled through the account pages, on the in-memory and the SQL stores."""

from __future__ import annotations

import json
import re
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyotp
import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.reference.app import create_app
from flask_authflow import FactorKind, get_state
from flask_authflow._clock import MockClock
from flask_authflow.mfa._webauthn import WebAuthnFactor, WebAuthnSettings
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.webauthn_soft import SoftAuthenticator

PASSWORD = "wonderland-rabbit-42"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
STEP = timedelta(seconds=30)
FULL_WIDTH = "\uff11\uff12\uff13\uff14\uff15\uff16"
ARABIC_INDIC = "\u0660\u0661\u0662\u0663\u0664\u0665"
MALFORMED_CODES = [
    "12345",
    "1234567",
    "12a456",
    " 123456",
    FULL_WIDTH,
    ARABIC_INDIC,
    "",
    "123456\n",
    "12 456",
]


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.authflow_stores("memory")),
        pytest.param("sql", marks=pytest.mark.authflow_stores("sql")),
    ]
)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Flask:
    return reference_app(tmp_path)


WEBAUTHN = {
    "AUTHFLOW_WEBAUTHN_RP_ID": "example.com",
    "AUTHFLOW_WEBAUTHN_ORIGINS": ["https://example.com"],
}


def reference_app(tmp_path: Path, **config: Any) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
            **config,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input=f"{PASSWORD}\n"
    )
    assert result.exit_code == 0, result.output
    return app


def client_of(app: Flask) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    return client


def password_login(client: FlaskClient) -> Any:
    return client.post("/login", json={"username": "alice", "password": PASSWORD})


def factor(client: FlaskClient, kind: str = "totp", **body: Any) -> Any:
    return client.post("/login/factor", json={"kind": kind, **body})


def code_at(secret: str, clock: MockClock, steps: int = 0) -> str:
    return pyotp.TOTP(secret).at(int(clock.now().timestamp()) + 30 * steps)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match is not None
    return match.group(1)


def field(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match is not None
    return match.group(1)


def enroll_totp(app: Flask, clock: MockClock) -> str:
    """Sign in, add an authenticator app through the account pages; returns its key."""
    client = client_of(app)
    assert password_login(client).text == "authenticated\n"
    token = csrf_of(client.get("/account/factors").text)
    page = client.post("/account/factors/totp", data={"csrf_token": token})
    secret = re.search(r'id="totp-secret">([A-Z2-7]+)</code>', page.text)
    assert page.status_code == 200 and "<svg" in page.text and secret is not None
    confirmed = client.post(
        "/account/factors/totp/confirm",
        data={
            "factor_id": field(page.text, "factor_id"),
            "code": code_at(secret.group(1), clock),
            "csrf_token": csrf_of(page.text),
        },
    )
    assert confirmed.location == "/account/factors?notice=totp_added"
    clock.advance(STEP)  # the code that confirmed the app is used up
    return secret.group(1)


def enroll_recovery_codes(app: Flask, secret: str, clock: MockClock) -> list[str]:
    client = client_of(app)
    password_login(client)
    assert factor(client, code=code_at(secret, clock)).json == {"status": "authenticated"}
    clock.advance(STEP)
    token = csrf_of(client.get("/account/factors").text)
    page = client.post("/account/factors/recovery-codes", data={"csrf_token": token})
    codes = re.findall(r"<code>([a-z0-9]{5}-[a-z0-9]{5})</code>", page.text)
    assert len(codes) == 10
    done = client.post(
        "/account/factors/recovery-codes/confirm",
        data={"factor_id": field(page.text, "factor_id"), "code": codes[0], "csrf_token": csrf_of(page.text)},
    )
    assert done.location == "/account/factors?notice=recovery_added"
    return codes


def test_the_json_factor_step_follows_the_password(app: Flask, mock_clock: MockClock) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    begun = password_login(client)
    assert begun.status_code == 200
    assert begun.text.splitlines()[0] == "next factor required: totp"  # the reference wiring's text
    assert begun.headers["Authflow-Factor-Kinds"] == "totp"
    assert client.get("/dashboard").status_code == 401  # the password alone is not a login
    done = factor(client, code=code_at(secret, mock_clock))
    assert done.status_code == 200 and done.json == {"status": "authenticated"}
    assert done.headers["Cache-Control"] == "no-store"
    assert client.get("/dashboard").status_code == 200


def test_login_names_every_kind_and_a_recovery_code_passes(app: Flask, mock_clock: MockClock) -> None:
    secret = enroll_totp(app, mock_clock)
    codes = enroll_recovery_codes(app, secret, mock_clock)
    client = client_of(app)
    begun = password_login(client)
    assert begun.text == "next factor required: totp\naccepted factors: totp, recovery_code\n"
    assert begun.headers["Authflow-Factor-Kinds"] == "totp, recovery_code"
    done = factor(client, "recovery_code", code=codes[3])
    assert done.json == {"status": "authenticated"}
    client.post("/logout", json={})
    password_login(client)
    again = factor(client, "recovery_code", code=codes[3])
    assert again.status_code == 401 and again.json["error"] == "invalid_credential"
    assert factor(client, "recovery_code", code=codes[4].upper()).json == {"status": "authenticated"}


def test_wrong_and_reused_codes_are_401_and_the_login_waits(app: Flask, mock_clock: MockClock) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    right = code_at(secret, mock_clock)
    wrong = factor(client, code=f"{(int(right) + 1) % 1_000_000:06d}")
    assert wrong.status_code == 401 and wrong.json["error"] == "invalid_credential"
    assert client.get("/dashboard").status_code == 401
    assert factor(client, code=right).json == {"status": "authenticated"}  # the login waited
    again = factor(client, code=right)  # nothing pending any more
    assert again.status_code == 401 and again.json["error"] == "invalid_credential"

    other = client_of(app)  # a new login: the code is used up
    password_login(other)
    reused = factor(other, code=right)
    assert reused.status_code == 401 and reused.json["error"] == "invalid_credential"
    for steps in (-2, 2):  # outside the ±1 step window
        far = factor(other, code=code_at(secret, mock_clock, steps))
        assert far.status_code == 401, steps
    assert other.get("/dashboard").status_code == 401
    assert factor(other, code=code_at(secret, mock_clock, 1)).json == {"status": "authenticated"}


@pytest.mark.parametrize("code", MALFORMED_CODES)
def test_a_malformed_code_is_400_and_keeps_the_login(app: Flask, mock_clock: MockClock, code: str) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    for _ in range(6):  # more than the lockout allows: malformed input is not a guess
        refused = factor(client, code=code)
        assert refused.status_code == 400
        assert refused.json["error"] == "invalid_input" and "6 digits" in refused.json["message"]
    assert client.get("/dashboard").status_code == 401
    assert factor(client, code=code_at(secret, mock_clock)).json == {"status": "authenticated"}


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '"totp"',
        "null",
        "{}",
        '{"kind": 5, "code": "123456"}',
        '{"kind": ["totp"], "code": "123456"}',
        '{"kind": "sms", "code": "123456"}',
        '{"kind": "' + "x" * 5000 + '", "code": "123456"}',
        '{"kind": "totp"}',
        '{"kind": "totp", "code": 123456}',
        '{"kind": "totp", "code": null}',
        '{"kind": "totp", "code": ["123456"]}',
        '{"kind": "totp", "code": "' + "1" * 10000 + '"}',
        '{"kind": "totp", "code": "\\ud800\\udc00\\ud800"}',
        '{"kind": "webauthn", "credential": "{}"}',
        '{"kind": "webauthn", "credential": ["id"]}',
        '{"kind": "webauthn"}',
        "[" * 20000 + "]" * 20000,
    ],
)
def test_a_malformed_body_is_400_not_500(app: Flask, mock_clock: MockClock, body: str) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    response = client.post("/login/factor", data=body, content_type="application/json")
    assert response.status_code == 400, response.text
    assert isinstance(response.json["error"], str) and response.json["message"]
    assert "x" * 100 not in response.text  # the unknown kind is not echoed back
    assert factor(client, code=code_at(secret, mock_clock)).json == {"status": "authenticated"}


def test_five_wrong_codes_lock_like_five_wrong_passwords(app: Flask, mock_clock: MockClock) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    right = code_at(secret, mock_clock)
    wrong = f"{(int(right) + 1) % 1_000_000:06d}"
    statuses = [factor(client, code=wrong).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 401]
    locked = factor(client, code=wrong)
    assert locked.status_code == 403 and locked.json["error"] == "locked"
    until = locked.json["until"]
    assert until.startswith("20") and until > mock_clock.now().isoformat()
    assert factor(client, code=right).status_code == 401  # the login ended with the lock
    relogin = password_login(client_of(app))
    assert relogin.status_code == 403 and relogin.text.startswith("account locked until 20")
    mock_clock.advance(timedelta(minutes=16))
    fresh = client_of(app)
    assert password_login(fresh).status_code == 200
    assert factor(fresh, code=code_at(secret, mock_clock)).json == {"status": "authenticated"}


def test_without_a_login_the_factor_routes_refuse(app: Flask) -> None:
    client = client_of(app)
    response = factor(client, code="123456")
    assert response.status_code == 401 and response.json["error"] == "invalid_credential"
    send = client.post("/login/factor/send", json={"kind": "email_otp"})
    assert send.status_code == 401 and send.json["error"] == "login_not_started"
    assert client.post("/login/factor/send", json=[1]).status_code == 400
    assert client.post("/login/factor/send", json={"kind": 1}).status_code == 400


def test_send_names_the_step_and_refuses_a_kind_outside_it(app: Flask, mock_clock: MockClock) -> None:
    enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    outside = client.post("/login/factor/send", json={"kind": "email_otp"})
    assert outside.status_code == 401 and outside.json["error"] == "login_not_started"
    inside = client.post("/login/factor/send", json={"kind": "totp"})  # nothing to send for an app
    assert inside.status_code == 200 and inside.json["status"] == "factor_required"
    assert inside.json["kinds"] == ["totp"]


def test_form_posts_go_to_the_ready_views(app: Flask, mock_clock: MockClock) -> None:
    secret = enroll_totp(app, mock_clock)
    client = client_of(app)
    page = client.get("/login")
    signed = client.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    )
    assert signed.status_code == 302 and signed.location == "/login/factor"
    step = client.get(signed.location)
    assert 'id="factor-form-totp"' in step.text
    forged = client.post("/login/factor", data={"kind": "totp", "code": code_at(secret, mock_clock)})
    assert forged.status_code == 400 and "This form has expired" in forged.text
    assert client.post("/login/factor/send", data={"kind": "totp"}).status_code == 400
    done = client.post(
        "/login/factor",
        data={"kind": "totp", "code": code_at(secret, mock_clock), "csrf_token": csrf_of(step.text)},
    )
    assert done.status_code == 302 and done.location == "/account"
    assert client.get("/dashboard").status_code == 200


def test_a_webauthn_credential_object_is_passed_on_as_json(app: Flask, mock_clock: MockClock) -> None:
    enroll_totp(app, mock_clock)
    client = client_of(app)
    password_login(client)
    credential = {"id": "abc", "rawId": "abc", "type": "public-key", "response": {}}
    # WebAuthn is not a kind of this step (nor configured): refused as a wrong credential
    response = client.post("/login/factor", data=json.dumps({"kind": "webauthn", "credential": credential}),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 401 and response.json["error"] == "invalid_credential"


@pytest.mark.authflow_stores("sql")
def test_a_security_key_over_json(tmp_path: Path, mock_clock: MockClock) -> None:
    app = reference_app(tmp_path, **WEBAUTHN)
    service = get_state(app).service
    if service.factor(FactorKind.WEBAUTHN) is None:  # an init_app that predates WebAuthn's wiring
        service.register_factor(WebAuthnFactor(WebAuthnSettings.from_config(app.config)))
    key = SoftAuthenticator()
    enrolling = client_of(app)
    password_login(enrolling)
    token = csrf_of(enrolling.get("/account/factors").text)
    options = enrolling.post(
        "/account/factors/webauthn/options", data={"csrf_token": token, "label": "Blue key"}
    )
    attestation, _ = key.register(options.json["publicKey"])
    added = enrolling.post(
        "/account/factors/webauthn/confirm",
        data={"factor_id": options.json["factor_id"], "credential": attestation, "csrf_token": token},
    )
    assert added.location == "/account/factors?notice=webauthn_added"

    client = client_of(app)
    begun = password_login(client)
    assert begun.text.splitlines()[0] == "next factor required: webauthn"
    challenge = client.post("/login/factor/send", json={"kind": "webauthn"})
    assert challenge.status_code == 200 and challenge.json["kinds"] == ["webauthn"]
    request_options = challenge.json["challenges"]["webauthn"]["publicKey"]
    malformed = factor(client, "webauthn", credential={"id": 1})
    assert malformed.status_code == 400 and malformed.json["error"] == "invalid_input"
    forged = json.loads(key.assert_(request_options, tamper_signature=True))
    assert factor(client, "webauthn", credential=forged).status_code == 401  # each challenge is single-use:
    request_options = client.post("/login/factor/send", json={"kind": "webauthn"}).json["challenges"][
        "webauthn"
    ]
    assertion = json.loads(key.assert_(request_options["publicKey"]))
    done = factor(client, "webauthn", credential=assertion)
    assert done.status_code == 200 and done.json == {"status": "authenticated"}
    assert client.get("/dashboard").status_code == 200
