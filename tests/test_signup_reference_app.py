"""The reference app's account routes: sign-up, verification, forgot and reset, with the
mails read from its outbox folder (no SMTP server configured)."""

from __future__ import annotations

import email
import email.policy
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from examples.reference.app import create_app

pytestmark = pytest.mark.authflow_stores("sql")

FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
PASSWORD = "a long enough passphrase 42"
NEW = "another long passphrase 77"


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )


def mails(app: Flask) -> list[Any]:
    folder = Path(app.config["AUTHFLOW_MAIL_OUTBOX"])
    return [
        email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        for path in sorted(folder.glob("*.eml"))
    ]


def last_token(app: Flask) -> str:
    text = mails(app)[-1].get_body(preferencelist=("plain",)).get_content()
    found = re.search(r"token=([A-Za-z0-9_-]{43})", text)
    assert found is not None, text
    return found.group(1)


def post(app: Flask, path: str, body: Any) -> Any:
    answer = app.test_client().post(path, json=body)
    answer.close()  # delivers a mail that goes out after the answer
    return answer


def test_sign_up_verify_sign_in_forgot_and_reset(app: Flask) -> None:
    signed = post(app, "/signup", {"username": "carol", "email": "carol@example.com", "password": PASSWORD})
    assert signed.status_code == 202 and signed.json == {"status": "verification_sent"}
    login = {"username": "carol", "password": PASSWORD}
    assert post(app, "/login", login).status_code == 401  # not confirmed yet
    assert post(app, "/signup/verify", {"token": last_token(app)}).status_code == 200
    assert post(app, "/login", login).status_code == 200
    forgot = post(app, "/password/forgot", {"email": "carol@example.com"})
    assert forgot.status_code == 202
    assert post(app, "/password/forgot", {"username": "nobody"}).json == forgot.json
    token = last_token(app)
    assert post(app, "/password/reset", {"token": token, "password": NEW}).status_code == 200
    assert post(app, "/password/reset", {"token": token, "password": NEW}).status_code == 410
    assert post(app, "/login", {"username": "carol", "password": NEW}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/signup", {"username": "x"}),
        ("/signup", ["a", "list"]),
        ("/signup", {"username": "x", "email": "nope", "password": PASSWORD}),
        ("/signup/verify", {"token": "short"}),
        ("/signup/verify", {}),
        ("/password/forgot", {}),
        ("/password/forgot", {"username": ["x"]}),
        ("/password/reset", {"token": "A" * 43}),
        ("/password/reset", "text"),
    ],
)
def test_malformed_bodies_answer_400(app: Flask, path: str, body: Any) -> None:
    answer = post(app, path, body)
    assert answer.status_code == 400 and "error" in answer.json


@pytest.mark.parametrize(("path", "status"), [("/signup/verify", 401), ("/password/reset", 401)])
def test_unknown_tokens_answer_401(app: Flask, path: str, status: int) -> None:
    answer = post(app, path, {"token": "A" * 43, "password": NEW})
    assert answer.status_code == status


def test_oversized_bodies_are_refused(app: Flask) -> None:
    answer = app.test_client().post("/signup", json={"username": "x" * 200_000})
    assert answer.status_code == 413
