"""The reset pages and their JSON twins: forms, links, errors, the second factor."""

from __future__ import annotations

import email
import email.policy
import html
import re
from pathlib import Path
from typing import Any

import pyotp
import pytest
from flask.testing import FlaskClient

from flask_authflow._web.state import account_admin
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login import _password_reset as password_reset
from tests.appfactory import AppFactory
from tests.test_views import PASSWORD, Site, csrf_of, login, make_site

NEW = "a brand new passphrase 9"


@pytest.fixture
def site(app_factory: AppFactory, tmp_path: Path) -> Site:
    return make_site(app_factory, AUTHFLOW_PASSWORD_RESET=True, AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"))


def link_token(site: Site, user: str = "alice") -> str:
    return account_tokens.issue(
        site.backend,
        kind="password_reset",
        tenant="default",
        user_id=site.user_id(user),
        now=site.clock.now(),
        ttl=password_reset.DEFAULT_RESET_TTL,
    ).token


def password_ok(site: Site, password: str) -> bool:
    client = site.client()
    return login(client, password=password).status_code == 302


def test_the_pages_are_not_there_unless_enabled(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    client = site.client()
    assert client.get("/password/forgot").status_code == 404
    assert client.post("/password/reset", json={"token": "x", "password": "y"}).status_code == 404
    assert "forgot-link" not in client.get("/login").text


def test_the_sign_in_page_links_to_the_forgot_page(site: Site) -> None:
    client = site.client()
    assert 'href="/password/forgot"' in client.get("/login").text
    page = client.get("/password/forgot")
    assert page.status_code == 200 and 'id="forgot-form"' in page.text


def test_a_reset_link_sets_the_password_and_ends_the_other_browsers_session(site: Site) -> None:
    other = site.client()
    assert login(other).status_code == 302
    assert other.get("/private").status_code == 200
    client = site.client()
    token = link_token(site)
    form = client.get(f"/password/reset?token={token}")
    assert form.status_code == 200 and 'id="reset-form"' in form.text
    data = {"token": token, "password": NEW, "password_confirm": NEW, "csrf_token": csrf_of(form.text)}
    done = client.post("/password/reset", data=data)
    assert done.status_code == 200 and 'id="reset-done"' in done.text
    assert other.get("/private").status_code != 200
    assert password_ok(site, NEW) and not password_ok(site, PASSWORD)
    again = client.post("/password/reset", data=data)
    assert again.status_code == 410 and "already used" in again.text


def test_json_reset_answers(site: Site) -> None:
    client = site.client()
    token = link_token(site)
    short = client.post("/password/reset", json={"token": token, "password": "short"})
    assert short.status_code == 400 and short.json["error"] == "weak_password"
    done = client.post("/password/reset", json={"token": token, "password": NEW})
    assert done.status_code == 200 and done.json["status"] == "password_reset"
    used = client.post("/password/reset", json={"token": token, "password": NEW + "x"})
    assert used.status_code == 410 and used.json["error"] == "account_token_used"
    unknown = client.post("/password/reset", json={"token": "A" * 43, "password": NEW})
    assert unknown.status_code == 401 and unknown.json["error"] == "account_token_invalid"


@pytest.mark.parametrize(
    "body",
    [
        {"token": "short", "password": NEW},
        {"token": 5, "password": NEW},
        {"token": "A" * 43},
        {"token": "A" * 43, "password": ["x"]},
        ["not", "an", "object"],
        "a string",
        {"token": "A" * 43, "password": "x" * 20000},
    ],
)
def test_malformed_json_bodies_get_400(site: Site, body: Any) -> None:
    answer = site.client().post("/password/reset", json=body)
    assert answer.status_code in (400, 413) and "error" in answer.json
    assert password_ok(site, PASSWORD)


def test_a_broken_json_body_gets_400(site: Site) -> None:
    client = site.client()
    for path in ("/password/reset", "/password/forgot"):
        answer = client.post(path, data="{not json", content_type="application/json")
        assert answer.status_code == 400 and answer.json["error"] == "invalid_input"


def test_a_bad_link_shows_why(site: Site) -> None:
    client = site.client()
    assert client.get("/password/reset?token=nope").status_code == 400
    assert client.get("/password/reset?token=" + "A" * 43).status_code == 401
    token = link_token(site)
    site.clock.advance(password_reset.DEFAULT_RESET_TTL.total_seconds() + 1)
    expired = client.get(f"/password/reset?token={token}")
    assert expired.status_code == 410 and 'id="ask-again"' in expired.text


def test_a_form_without_csrf_or_with_mismatched_passwords_changes_nothing(site: Site) -> None:
    client = site.client()
    token = link_token(site)
    form = client.get(f"/password/reset?token={token}")
    no_csrf = client.post("/password/reset", data={"token": token, "password": NEW, "password_confirm": NEW})
    assert no_csrf.status_code == 400
    mismatch = client.post(
        "/password/reset",
        data={
            "token": token,
            "password": NEW,
            "password_confirm": NEW + "!",
            "csrf_token": csrf_of(form.text),
        },
    )
    assert mismatch.status_code == 400 and "do not match" in mismatch.text
    assert password_ok(site, PASSWORD)


def test_forgot_answers_the_same_for_known_and_unknown_accounts(site: Site) -> None:
    client = site.client()
    answers = []
    for body in ({"username": "alice"}, {"username": "nobody"}, {"email": "nobody@example.com"}):
        answer = client.post("/password/forgot", json=body)
        answers.append((answer.status_code, answer.json))
    assert answers == [(202, {"status": "sent_if_known"})] * 3
    for body in (
        {},
        {"username": "a", "email": "b@example.com"},
        {"email": "not an address"},
        {"username": 5},
    ):
        assert client.post("/password/forgot", json=body).status_code == 400


def test_forgot_form_page(site: Site) -> None:
    client = site.client()
    form = client.get("/password/forgot")
    sent = client.post("/password/forgot", data={"username": "nobody", "csrf_token": csrf_of(form.text)})
    assert sent.status_code == 200 and 'id="reset-sent"' in sent.text
    assert client.post("/password/forgot", data={"username": "nobody"}).status_code == 400


def test_a_totp_user_passes_totp_on_the_factor_page_before_the_password_changes(site: Site) -> None:
    uri = account_admin(site.app).enroll_totp("default", "alice")
    totp = pyotp.parse_uri(uri)
    client = site.client()
    token = link_token(site)
    form = client.get(f"/password/reset?token={token}")
    data = {"token": token, "password": NEW, "password_confirm": NEW, "csrf_token": csrf_of(form.text)}
    asked = client.post("/password/reset", data=data)
    assert asked.status_code == 302 and asked.location.startswith("/login/factor")
    assert password_ok_with_totp(site, PASSWORD)  # unchanged so far
    factor = client.get(asked.location)
    carried = re.search(r'name="next" value="([^"]+)"', factor.text)
    assert carried is not None
    passed = client.post(
        "/login/factor",
        data={
            "kind": "totp",
            "code": totp.at(site.clock.now()),
            "csrf_token": csrf_of(factor.text),
            "next": html.unescape(carried.group(1)),
        },
    )
    assert passed.status_code == 302 and passed.location.startswith("/password/reset")
    form = client.get(passed.location)
    data["csrf_token"] = csrf_of(form.text)
    done = client.post("/password/reset", data=data)
    assert done.status_code == 200 and 'id="reset-done"' in done.text
    assert not password_ok_with_totp(site, PASSWORD)


def password_ok_with_totp(site: Site, password: str) -> bool:
    """The password step passes (the TOTP step follows)."""
    client: FlaskClient = site.client()
    answer = login(client, password=password)
    return answer.status_code == 302 and "/login/factor" in answer.location


def test_json_reset_of_a_totp_user_asks_for_the_factor_first(site: Site) -> None:
    account_admin(site.app).enroll_totp("default", "alice")
    client = site.client()
    token = link_token(site)
    asked = client.post("/password/reset", json={"token": token, "password": NEW})
    assert asked.status_code == 401 and asked.json["error"] == "second_factor_required"
    assert "totp" in asked.json["kinds"]


def test_forgot_mails_a_link_into_the_outbox_folder_and_it_works(site: Site, tmp_path: Path) -> None:
    site.backend.set_email("default", site.user_id("alice"), "alice@example.com", verified_at=None)
    client = site.client()
    for body in ({"username": "alice"}, {"email": "alice@example.com"}, {"username": "bob"}):
        answer = client.post("/password/forgot", json=body)
        assert answer.status_code == 202
        answer.close()  # the mail goes out once the answer was sent
    files = sorted((tmp_path / "outbox").glob("*.eml"))
    assert len(files) == 2  # bob has no address: nothing is sent for him
    message = email.message_from_bytes(files[-1].read_bytes(), policy=email.policy.default)
    assert message["To"] == "alice@example.com"
    parts = {part.get_content_type(): part.get_content() for part in message.iter_parts()}
    assert set(parts) == {"text/plain", "text/html"}
    token = re.search(r"token=([A-Za-z0-9_-]{43})", parts["text/plain"])
    assert token is not None and token.group(1) in parts["text/html"]
    done = client.post("/password/reset", json={"token": token.group(1), "password": NEW})
    assert done.status_code == 200
    assert password_ok(site, NEW)


def test_cli_users_send_reset(site: Site, tmp_path: Path) -> None:
    runner = site.app.test_cli_runner()
    no_address = runner.invoke(args=["authflow", "users", "send-reset", "alice"])
    assert no_address.exit_code != 0 and "no e-mail address" in no_address.output
    site.backend.set_email("default", site.user_id("alice"), "alice@example.com", verified_at=None)
    result = runner.invoke(args=["authflow", "users", "send-reset", "alice", "--json"])
    assert result.exit_code == 0, result.output
    assert '"sent_to": "alice@example.com"' in result.output
    [sent] = (tmp_path / "outbox").glob("*.eml")
    message = email.message_from_bytes(sent.read_bytes(), policy=email.policy.default)
    text = message.get_body(preferencelist=("plain",)).get_content()
    token = re.search(r"token=([A-Za-z0-9_-]{43})", text)
    assert token is not None
    assert (
        site.client().post("/password/reset", json={"token": token.group(1), "password": NEW}).status_code
        == 200
    )
    missing = runner.invoke(args=["authflow", "users", "send-reset", "nobody"])
    assert missing.exit_code != 0 and "no user" in missing.output
