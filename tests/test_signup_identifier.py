"""Sign-up refuses a username that is an e-mail address other than the account's own
(``identifier_not_own_address``): such a name would pass for the owner of that mailbox.
The account's own address as its username is fine."""

from __future__ import annotations

import pytest

from flask_authflow._core.session import AuthSession, new_guest_record
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.audit._context import AuditContext
from flask_authflow.login._signup import IdentifierNotOwnAddress, signup
from tests.test_signup import PASSWORD, outbox, sign_up, site  # noqa: F401 - the fixture
from tests.test_views import Site, csrf_of


@pytest.mark.parametrize(
    "username",
    [
        "victim@gmail.example",  # someone else's address
        "VICTIM@Gmail.Example",  # in another case
        "  victim@gmail.example ",  # with spaces around it
        "\uff56ictim@gmail.example",  # fullwidth v: the same name once normalised
        "carol@example.org",  # her own local part at another domain
        "carol@",  # not even an address: an @ is reserved for her own
        "@example.com",
    ],
)
def test_a_username_with_an_at_other_than_the_address_is_refused(site: Site, username: str) -> None:  # noqa: F811
    answer = sign_up(site, username, "carol@example.com")
    assert answer.status_code == 400
    assert answer.json == {
        "error": "identifier_not_own_address",
        "message": "A username with an @ must be the address you sign up with, or have no @ at all.",
    }
    assert [u.identifier for u in site.backend.list_users()] == ["alice", "bob"]
    assert outbox(site).messages == []
    [row] = [r for r in site.backend.audit_rows if r.event == "signup"]
    assert (row.status, row.reason) == ("refused", "identifier_not_own_address")


@pytest.mark.parametrize("username", ["carol@example.com", "Carol@EXAMPLE.com", " carol@example.com"])
def test_the_accounts_own_address_is_a_fine_username(site: Site, username: str) -> None:  # noqa: F811
    answer = sign_up(site, username, "CAROL@example.com")
    assert answer.status_code == 202
    user = site.backend.find_user("default", "carol@example.com")
    assert user is not None and user.email == "carol@example.com"
    assert [mail.to for mail in outbox(site).messages] == ["carol@example.com"]


def test_the_form_shows_the_refusal(site: Site) -> None:  # noqa: F811
    client = site.client()
    form = client.get("/signup")
    data = {
        "username": "victim@gmail.example",
        "email": "carol@example.com",
        "password": PASSWORD,
        "password_confirm": PASSWORD,
        "csrf_token": csrf_of(form.text),
    }
    refused = client.post("/signup", data=data)
    assert refused.status_code == 400 and "must be the address you sign up with" in refused.text
    assert site.backend.find_user("default", "victim@gmail.example") is None


def test_the_service_raises_the_typed_error(site: Site) -> None:  # noqa: F811
    state = get_state(site.app)
    with site.app.test_request_context("/"):
        session = AuthSession(new_guest_record(site.clock.now()), new=True, request_fingerprint="fp")
        with pytest.raises(IdentifierNotOwnAddress) as raised:
            signup(
                state.service,
                account_admin(),
                AuditContext.unknown(),
                session,
                "default",
                "victim@gmail.example",
                "carol@example.com",
                PASSWORD,
            )
    assert (raised.value.code, raised.value.status) == ("identifier_not_own_address", 400)
    assert site.backend.find_user("default", "victim@gmail.example") is None
