"""Sign-up: the account, the verification mail, no enumeration of addresses, the login gate."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._mail import SmtpSender
from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.smtp_server import SmtpTestServer, smtp_server  # noqa: F401 - the real SMTP server fixture
from tests.test_views import Site, csrf_of, login, make_site

PASSWORD = "a long enough passphrase 42"


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory, AUTHFLOW_REGISTRATION=True, AUTHFLOW_PASSWORD_RESET=True)
    get_state(made.app).mail_sender = Outbox()
    return made


def outbox(site: Site) -> Outbox:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender


def token_in(body: str) -> str:
    found = re.search(r"token=([A-Za-z0-9_-]{43})", body)
    assert found is not None, body
    return found.group(1)


def code_in(body: str) -> str:
    found = re.search(r"code[^:]*: ([A-Z2-7]{4}-[A-Z2-7]{4})", body)
    assert found is not None, body
    return found.group(1)


def sign_up(site: Site, username: str = "carol", email: str = "carol@example.com", **kw: Any) -> Any:
    """Sign up by JSON; the response is closed, as a server does once it is sent, which
    delivers the mail (it goes out after the answer)."""
    body = {"username": username, "email": email, "password": PASSWORD, **kw}
    answer = site.client().post("/signup", json=body)
    answer.close()
    return answer


def test_sign_up_mails_a_link_and_the_account_signs_in_only_once_confirmed(site: Site) -> None:
    registered: list[dict[str, Any]] = []
    with signals.user_registered.connected_to(lambda sender, **kw: registered.append(kw)):
        answer = sign_up(site)
    assert answer.status_code == 202 and answer.json == {"status": "verification_sent"}
    user = site.backend.find_user("default", "carol")
    assert user is not None and user.email == "carol@example.com" and user.email_verified_at is None
    assert registered == [{"user_id": user.user_id, "tenant": "default"}]
    [mail] = outbox(site).messages
    assert mail.to == "carol@example.com" and "Confirm your address" in mail.subject
    client = site.client()
    refused = login(client, "carol", PASSWORD)
    assert refused.status_code == 403 and "Confirm your e-mail address first" in refused.text
    assert client.get("/private").status_code != 200
    wrong = login(site.client(), "carol", "not the password at all")
    assert wrong.status_code == 401 and "Confirm" not in wrong.text  # no hint without the password
    confirmed = client.post("/signup/verify", json={"token": token_in(mail.body)})
    assert confirmed.status_code == 200 and confirmed.json["status"] == "email_confirmed"
    assert site.backend.find_user("default", "carol").email_verified_at is not None
    assert login(client, "carol", PASSWORD).status_code == 302
    again = client.post("/signup/verify", json={"token": token_in(mail.body)})
    assert again.status_code == 410


def test_an_address_that_has_an_account_answers_the_same_and_mails_its_owner(site: Site) -> None:
    site.backend.set_email("default", site.user_id("alice"), "alice@example.com", verified_at=None)
    new = sign_up(site, "dave", "dave@example.com")
    taken = sign_up(site, "mallory", "alice@example.com")
    assert (taken.status_code, taken.json) == (new.status_code, new.json)
    assert site.backend.find_user("default", "mallory") is None
    notice = outbox(site).messages[-1]
    assert notice.to == "alice@example.com" and "tried to create" in notice.body
    assert "token=" not in notice.body and "/password/forgot" in notice.body


def test_a_taken_username_with_a_new_address_is_refused(site: Site) -> None:
    answer = sign_up(site, "alice", "someone@example.com")
    assert answer.status_code == 409 and answer.json["error"] == "user_exists"
    assert outbox(site).messages == []


@pytest.mark.parametrize(
    "body",
    [
        {"username": "google:12345", "email": "g@example.com", "password": PASSWORD},
        {"username": "oidc:x", "email": "g@example.com", "password": PASSWORD},
        {"username": "eve", "email": "not an address", "password": PASSWORD},
        {"username": "eve", "email": "eve@", "password": PASSWORD},
        {"username": "eve", "email": "eve@example.com\r\nBcc: x@example.com", "password": PASSWORD},
        {"username": "eve", "email": "eve@example.com", "password": "short"},
        {"username": "eve", "email": "eve@example.com"},
        {"username": 5, "email": "eve@example.com", "password": PASSWORD},
        {"username": "", "email": "eve@example.com", "password": PASSWORD},
        {"username": "e" * 5000, "email": "eve@example.com", "password": PASSWORD},
    ],
)
def test_bad_sign_ups_are_refused_and_leave_nothing(site: Site, body: dict[str, Any]) -> None:
    answer = site.client().post("/signup", json=body)
    assert 400 <= answer.status_code < 500 and "error" in answer.json
    assert [u.identifier for u in site.backend.list_users()] == ["alice", "bob"]
    assert outbox(site).messages == []


def test_the_code_confirms_too_and_a_wrong_one_is_refused(site: Site) -> None:
    sign_up(site)
    code = code_in(outbox(site).messages[-1].body)
    client = site.client()
    wrong = client.post("/signup/verify", json={"username": "carol", "code": "AAAA-AAAA"})
    assert wrong.status_code == 401
    right = client.post("/signup/verify", json={"username": "carol", "code": code.lower()})
    assert right.status_code == 200
    # A new sign-up: the hard cap of wrong codes and the throttle before it are in
    # tests/test_verification_throttle.py.
    sign_up(site, "erin", "erin@example.com")
    code = code_in(outbox(site).messages[-1].body)
    assert client.post("/signup/verify", json={"username": "nobody", "code": code}).status_code == 401
    assert client.post("/signup/verify", json={"username": "erin", "code": "0000-0000"}).status_code == 400


def test_send_again_voids_the_first_link_and_answers_the_same_for_everyone(site: Site) -> None:
    sign_up(site)
    first = token_in(outbox(site).messages[-1].body)
    client = site.client()
    answers = [
        client.post("/signup/resend", json=body)
        for body in (
            {"username": "carol"},
            {"username": "alice"},
            {"username": "nobody"},
            {"email": "x@example.com"},
        )
    ]
    for answer in answers:
        answer.close()  # the mail goes out once the answer was sent
    assert {(a.status_code, a.json["status"]) for a in answers} == {(202, "sent_if_pending")}
    assert len(outbox(site).messages) == 2  # only carol, who waits for her confirmation
    second = token_in(outbox(site).messages[-1].body)
    assert client.post("/signup/verify", json={"token": first}).status_code == 410
    assert client.post("/signup/verify", json={"token": second}).status_code == 200


def test_the_html_pages(site: Site) -> None:
    client = site.client()
    page = client.get("/login")
    assert 'href="/signup"' in page.text and 'href="/password/forgot"' in page.text
    form = client.get("/signup")
    data = {
        "username": "carol",
        "email": "carol@example.com",
        "password": PASSWORD,
        "password_confirm": PASSWORD,
        "csrf_token": csrf_of(form.text),
    }
    assert client.post("/signup", data={**data, "csrf_token": "x"}).status_code == 400
    sent = client.post("/signup", data=data)
    sent.close()
    assert sent.status_code == 200 and 'id="signup-sent"' in sent.text
    token = token_in(outbox(site).messages[-1].body)
    shown = client.get(f"/signup/verify?token={token}")
    assert shown.status_code == 200 and 'id="verify-form"' in shown.text
    assert site.backend.find_user("default", "carol").email_verified_at is None  # a GET changes nothing
    done = client.post("/signup/verify", data={"token": token, "csrf_token": csrf_of(shown.text)})
    assert done.status_code == 200 and 'id="signup-confirmed"' in done.text


def test_sign_up_is_off_unless_enabled(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    client = site.client()
    assert (
        client.post(
            "/signup", json={"username": "x", "email": "x@example.com", "password": PASSWORD}
        ).status_code
        == 404
    )
    assert 'href="/signup"' not in client.get("/login").text


def test_no_mail_sender_is_a_clear_error_and_creates_nothing(site: Site) -> None:
    get_state(site.app).mail_sender = None
    answer = sign_up(site)
    assert answer.status_code == 503 and answer.json["error"] == "mail_delivery_failed"
    assert site.backend.find_user("default", "carol") is None


def test_the_verification_mail_travels_through_a_real_smtp_server(
    site: Site,
    smtp_server: SmtpTestServer,  # noqa: F811
) -> None:
    get_state(site.app).mail_sender = SmtpSender(smtp_server.settings())
    assert sign_up(site).status_code == 202
    [received] = smtp_server.messages
    assert received.over_tls and received.rcpt_tos == ("carol@example.com",)
    parts = {part.get_content_type(): part.get_content() for part in received.message.iter_parts()}
    assert set(parts) == {"text/plain", "text/html"}
    token = token_in(parts["text/plain"])
    assert f"token={token}" in parts["text/html"]
    assert site.client().post("/signup/verify", json={"token": token}).status_code == 200


def test_cli_users_confirm(site: Site) -> None:
    sign_up(site)
    runner = site.app.test_cli_runner()
    refused = login(site.client(), "carol", PASSWORD)
    assert refused.status_code == 403
    result = runner.invoke(args=["authflow", "users", "confirm", "carol", "--json"])
    assert result.exit_code == 0, result.output
    assert '"email_confirmed": true' in result.output
    assert login(site.client(), "carol", PASSWORD).status_code == 302
    link = token_in(outbox(site).messages[-1].body)
    assert site.client().post("/signup/verify", json={"token": link}).status_code == 410  # voided
    assert runner.invoke(args=["authflow", "users", "confirm", "bob"]).exit_code != 0  # no address
    missing = runner.invoke(args=["authflow", "users", "confirm", "nobody"])
    assert missing.exit_code != 0 and "no user" in missing.output
