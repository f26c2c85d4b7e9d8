"""Change of e-mail: behind a fresh login, confirmed by the new address, noticed by the old."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flask_authflow import signals
from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.test_views import Site, csrf_of, login, make_site


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory)
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email(
        "default", made.user_id("alice"), "alice@example.com", verified_at=made.clock.now()
    )
    return made


def sent(site: Site) -> list[Any]:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender.messages


def token_in(body: str) -> str:
    found = re.search(r"token=([A-Za-z0-9_-]{43})", body)
    assert found is not None, body
    return found.group(1)


def signed_in(site: Site) -> Any:
    client = site.client()
    assert login(client).status_code == 302
    return client


def ask(client: Any, address: str) -> Any:
    answer = client.post("/account/email", json={"email": address})
    answer.close()  # the mail goes out once the answer was sent
    return answer


def test_the_new_address_replaces_the_old_only_once_confirmed(site: Site) -> None:
    client = signed_in(site)
    asked = ask(client, "alice.new@example.com")
    assert asked.status_code == 202
    [mail] = sent(site)
    assert mail.to == "alice.new@example.com"
    assert site.backend.find_user("default", "alice").email == "alice@example.com"  # not yet
    changed: list[dict[str, Any]] = []
    with signals.email_changed.connected_to(lambda sender, **kw: changed.append(kw)):
        done = site.client().post("/account/email/confirm", json={"token": token_in(mail.body)})
        done.close()
    assert done.status_code == 200 and done.json == {"status": "email_changed"}
    user = site.backend.find_user("default", "alice")
    assert user.email == "alice.new@example.com" and user.email_verified_at is not None
    assert changed == [{"user_id": user.user_id, "tenant": "default"}]
    notice = sent(site)[-1]
    assert notice.to == "alice@example.com" and "a***@example.com" in notice.body
    assert "token" not in notice.body and "alice.new" not in notice.body
    again = site.client().post("/account/email/confirm", json={"token": token_in(mail.body)})
    assert again.status_code == 410


def test_it_needs_a_signed_in_fresh_session(site: Site) -> None:
    assert site.client().post("/account/email", json={"email": "x@example.com"}).status_code == 401
    assert site.client().get("/account/email").status_code == 302
    client = signed_in(site)
    site.clock.advance(11 * 60)  # older than the freshness window (10 minutes)
    stale = client.post("/account/email", json={"email": "x@example.com"})
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"
    form = client.get("/account/email")
    page = client.post("/account/email", data={"email": "x@example.com", "csrf_token": csrf_of(form.text)})
    assert page.status_code == 302 and "/step-up" in page.location
    assert sent(site) == []


def test_an_address_of_another_account_answers_the_same_and_sends_nothing(site: Site) -> None:
    site.backend.set_email("default", site.user_id("bob"), "bob@example.com", verified_at=None)
    client = signed_in(site)
    free, taken = ask(client, "fresh@example.com"), ask(client, "bob@example.com")
    assert (free.status_code, free.json) == (taken.status_code, taken.json)
    assert [m.to for m in sent(site)] == ["fresh@example.com"]


def test_a_newer_request_voids_the_older_link(site: Site) -> None:
    client = signed_in(site)
    ask(client, "first@example.com")
    ask(client, "second@example.com")
    first, second = (token_in(m.body) for m in sent(site))
    assert site.client().post("/account/email/confirm", json={"token": first}).status_code == 410
    assert site.client().post("/account/email/confirm", json={"token": second}).status_code == 200
    assert site.backend.find_user("default", "alice").email == "second@example.com"


def test_a_taken_address_at_confirmation_changes_nothing(site: Site) -> None:
    client = signed_in(site)
    ask(client, "race@example.com")
    site.backend.set_email("default", site.user_id("bob"), "race@example.com", verified_at=None)
    answer = site.client().post("/account/email/confirm", json={"token": token_in(sent(site)[0].body)})
    assert answer.status_code == 409
    assert site.backend.find_user("default", "alice").email == "alice@example.com"


@pytest.mark.parametrize("body", [{"email": "nope"}, {"email": 5}, {}, ["x"], {"email": "a@b\r\nBcc: c@d"}])
def test_bad_addresses_are_refused(site: Site, body: Any) -> None:
    answer = signed_in(site).post("/account/email", json=body)
    assert answer.status_code == 400
    assert sent(site) == []


@pytest.mark.parametrize("token", ["short", "A" * 43, 5])
def test_bad_tokens_are_refused(site: Site, token: Any) -> None:
    answer = site.client().post("/account/email/confirm", json={"token": token})
    assert answer.status_code in (400, 401)
    assert site.backend.find_user("default", "alice").email == "alice@example.com"


def test_a_reset_token_does_not_change_the_address(site: Site) -> None:
    from flask_authflow.login import _account_tokens as account_tokens

    other = account_tokens.issue(
        site.backend,
        kind="password_reset",
        tenant="default",
        user_id=site.user_id("alice"),
        now=site.clock.now(),
        ttl=__import__("datetime").timedelta(minutes=5),
        payload={"email": "evil@example.com"},
    )
    answer = site.client().post("/account/email/confirm", json={"token": other.token})
    assert answer.status_code == 401
    assert site.backend.find_user("default", "alice").email == "alice@example.com"
