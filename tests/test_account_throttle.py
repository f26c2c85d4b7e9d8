"""The account flows ask the throttle: sign-up and reset requests per client address (429
with ``Retry-After``, nothing created), mails per recipient (dropped silently, so the
answer never says whether an address has an account)."""

from __future__ import annotations

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.test_views import Site, csrf_of, make_site

PASSWORD = "a long enough passphrase 42"
LIMITS = {"signup.address": "2/hour", "reset.address": "3/hour", "stranger_mail.recipient": "2/hour"}


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(
        app_factory,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_THROTTLE_LIMITS=LIMITS,
    )
    get_state(made.app).mail_sender = Outbox()
    return made


def _outbox(site: Site) -> Outbox:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender


def test_sign_ups_from_one_address_are_throttled_and_create_nothing(site: Site) -> None:
    client = site.client()
    for name in ("ann", "bea"):
        answer = client.post(
            "/signup", json={"username": name, "email": f"{name}@example.com", "password": PASSWORD}
        )
        answer.close()
        assert answer.status_code == 202
    refused = client.post(
        "/signup", json={"username": "cat", "email": "cat@example.com", "password": PASSWORD}
    )
    assert refused.status_code == 429
    assert refused.json["error"] == "throttled"
    assert int(refused.headers["Retry-After"]) >= 1
    assert site.backend.find_user("default", "cat") is None
    # Another address is not slowed by this one.
    other = site.app.test_client()
    other.environ_base.update(site.client().environ_base, REMOTE_ADDR="198.51.100.7")
    answer = other.post("/signup", json={"username": "dot", "email": "dot@example.com", "password": PASSWORD})
    answer.close()
    assert answer.status_code == 202


def test_reset_requests_are_throttled_per_address_with_a_page_for_browsers(site: Site) -> None:
    add_user(site.backend, "default", "erin", PASSWORD, email="erin@example.com")
    client = site.client()
    for _ in range(3):
        client.post("/password/forgot", json={"username": "nobody"}).close()
    token = csrf_of(client.get("/password/forgot").text)
    refused = client.post("/password/forgot", data={"username": "erin", "csrf_token": token})
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert refused.mimetype == "text/html"


def test_mails_to_one_recipient_stop_silently_at_its_limit(site: Site) -> None:
    add_user(site.backend, "default", "erin", PASSWORD, email="erin@example.com")
    answers = []
    for number in range(3):
        client = site.app.test_client()  # three addresses: only the recipient's limit applies
        client.environ_base.update(site.client().environ_base, REMOTE_ADDR=f"203.0.113.{number + 1}")
        answer = client.post("/password/forgot", json={"email": "erin@example.com"})
        answer.close()
        answers.append((answer.status_code, answer.json))
    assert answers == [(202, {"status": "sent_if_known"})] * 3  # the same answer every time
    assert [m.to for m in _outbox(site).messages] == ["erin@example.com"] * 2
