"""A change of e-mail treats an address in another case as the same address (the local part
included): taken is taken, and the address is stored and mailed in its lower-case form."""

from __future__ import annotations

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.test_email_change import ask, sent, signed_in, token_in
from tests.test_views import Site, make_site


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory)
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email(
        "default", made.user_id("alice"), "alice@example.com", verified_at=made.clock.now()
    )
    return made


def test_another_accounts_address_in_another_case_answers_the_same_and_sends_nothing(site: Site) -> None:
    site.backend.set_email("default", site.user_id("bob"), "bob@example.com", verified_at=None)
    client = signed_in(site)
    free, taken = ask(client, "fresh@example.com"), ask(client, "BOB@Example.com")
    assert (free.status_code, free.json) == (taken.status_code, taken.json)
    assert [m.to for m in sent(site)] == ["fresh@example.com"]


def test_the_new_address_is_mailed_and_stored_in_lower_case(site: Site) -> None:
    client = signed_in(site)
    assert ask(client, "Alice.New@Example.COM").status_code == 202
    [mail] = sent(site)
    assert mail.to == "alice.new@example.com"
    done = site.client().post("/account/email/confirm", json={"token": token_in(mail.body)})
    assert done.status_code == 200
    assert site.backend.find_user("default", "alice").email == "alice.new@example.com"
    assert site.backend.find_user_by_email("default", "ALICE.NEW@example.com").identifier == "alice"


def test_an_address_taken_in_another_case_at_confirmation_changes_nothing(site: Site) -> None:
    client = signed_in(site)
    ask(client, "race@example.com")
    site.backend.set_email("default", site.user_id("bob"), "Race@Example.com", verified_at=None)
    answer = site.client().post("/account/email/confirm", json={"token": token_in(sent(site)[0].body)})
    assert answer.status_code == 409
    assert site.backend.find_user("default", "alice").email == "alice@example.com"
