"""Passkey-only accounts (issue 31.2): sign-up with a passkey and an address, no password;
the verification gate; each refusal with the input that triggers it; all or nothing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError, StoreUnavailable
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.test_views import FRESHNESS_PASSED, Site, csrf_of, login, make_site, real_factors
from tests.webauthn_soft import SoftAuthenticator

PASSKEY_CONFIG: dict[str, Any] = {
    "AUTHFLOW_REGISTRATION": True,
    "AUTHFLOW_REGISTRATION_PASSKEY": True,
    "AUTHFLOW_WEBAUTHN_RP_ID": "example.com",
    "AUTHFLOW_WEBAUTHN_ORIGINS": ["https://example.com"],
    "AUTHFLOW_PASSKEY_LOGIN": True,
}


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory, **PASSKEY_CONFIG)
    real_factors(made.app)
    get_state(made.app).mail_sender = Outbox()
    return made


def outbox(site: Site) -> Outbox:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender


def begin(client: FlaskClient, username: str = "dora", email: str = "dora@example.com") -> Any:
    return client.post("/signup/passkey/options", json={"username": username, "email": email})


def finish(client: FlaskClient, attestation: str) -> Any:
    answer = client.post("/signup/passkey", json={"credential": json.loads(attestation)})
    answer.close()  # a sent answer: the mail goes out
    return answer


def passkey_signup(site: Site, key: SoftAuthenticator, username: str = "dora", **kw: Any) -> Any:
    client = site.client()
    options = begin(client, username, kw.pop("email", f"{username}@example.com"))
    assert options.status_code == 200, options.text
    attestation, _ = key.register(options.json["publicKey"], **kw)
    return finish(client, attestation)


def passkey_login(site: Site, key: SoftAuthenticator, client: FlaskClient | None = None) -> Any:
    client = client or site.client()
    token = csrf_of(client.get("/login").text)
    options = client.post("/login/passkey/options", data={"csrf_token": token})
    assert options.status_code == 200, options.text
    return client.post(
        "/login/passkey", data={"credential": key.assert_(options.json["publicKey"]), "csrf_token": token}
    )


def token_in(body: str) -> str:
    found = re.search(r"token=([A-Za-z0-9_-]{43})", body)
    assert found is not None, body
    return found.group(1)


def test_a_passkey_sign_up_makes_an_account_without_a_password_that_signs_in_once_confirmed(
    site: Site,
) -> None:
    key = SoftAuthenticator()
    client = site.client()
    options = begin(client)
    public = options.json["publicKey"]
    assert public["authenticatorSelection"]["residentKey"] == "required"
    assert public["authenticatorSelection"]["userVerification"] == "required"
    assert site.backend.find_user("default", "dora") is None  # nothing stored before the attestation
    attestation, _ = key.register(public)
    answer = finish(client, attestation)
    assert answer.status_code == 202 and answer.json == {"status": "verification_sent"}
    user = site.backend.find_user("default", "dora")
    assert user is not None and user.email == "dora@example.com" and user.email_verified_at is None
    assert site.backend.get_password_hash("default", user.user_id) is None
    [passkey] = site.backend.list_factors("default", user.user_id)
    assert passkey.kind is FactorKind.WEBAUTHN and passkey.data["passkey"] is True
    [mail] = outbox(site).messages
    assert mail.to == "dora@example.com"
    early = passkey_login(site, key)
    assert early.status_code == 403 and early.json["error"] == "email_not_verified"
    assert site.client().post("/signup/verify", json={"token": token_in(mail.body)}).status_code == 200
    signed_in = site.client()
    done = passkey_login(site, key, signed_in)
    assert done.status_code == 200 and done.json["status"] == "authenticated"
    assert signed_in.get("/private").text == "private page"
    assert login(site.client(), "dora", "").status_code == 400  # there is no password to try
    rows = [r for r in site.backend.audit_rows if r.event == "signup" and r.status == "sent"]
    assert rows[-1].user_id == user.user_id and rows[-1].factor == "webauthn"


def test_the_sign_up_page_offers_the_passkey_form_and_its_form_post_works(site: Site) -> None:
    key = SoftAuthenticator()
    client = site.client()
    html = client.get("/signup").text
    assert 'id="passkey-signup-form"' in html and 'data-webauthn="create"' in html
    token = csrf_of(html)
    refused = client.post("/signup/passkey/options", data={"username": "dora", "email": "dora@example.com"})
    assert refused.status_code == 400 and refused.json["error"] == "csrf"
    options = client.post(
        "/signup/passkey/options", data={"username": "dora", "email": "dora@example.com", "csrf_token": token}
    )
    attestation, _ = key.register(options.json["publicKey"])
    done = client.post("/signup/passkey", data={"credential": attestation, "csrf_token": token})
    done.close()
    assert done.status_code == 200 and 'id="signup-sent"' in done.text
    assert site.backend.find_user("default", "dora") is not None


@pytest.mark.parametrize(
    ("username", "email", "code"),
    [
        ("dora:x", "dora@example.com", "invalid_input"),
        ("dora", "not an address", "invalid_input"),
        ("eve@example.com", "dora@example.com", "identifier_not_own_address"),
        (None, "dora@example.com", "invalid_input"),
    ],
)
def test_a_passkey_sign_up_refuses_what_the_password_sign_up_refuses(
    site: Site, username: str | None, email: str, code: str
) -> None:
    answer = site.client().post("/signup/passkey/options", json={"username": username, "email": email})
    assert answer.status_code == 400 and answer.json["error"] == code
    assert len(site.backend.list_users("default")) == 2


def test_an_attestation_without_a_ceremony_a_wrong_one_or_a_replayed_one_makes_nothing(site: Site) -> None:
    key = SoftAuthenticator()
    client = site.client()
    public = begin(client).json["publicKey"]
    attestation, _ = key.register(public, origin="https://evil.example")
    wrong = finish(client, attestation)
    assert wrong.status_code == 400 and wrong.json["error"] == "enrollment_failed"
    right_but_late, _ = key.register(public)  # the refused try used the challenge up
    again = finish(client, right_but_late)
    assert again.status_code == 400 and again.json["error"] == "enrollment_failed"
    no_uv, _ = key.register(begin(client).json["publicKey"], uv=False)
    assert finish(client, no_uv).status_code == 400  # a passkey-only account needs user verification
    good, _ = key.register(begin(client).json["publicKey"])
    assert finish(client, good).status_code == 202
    replayed = finish(client, good)
    assert replayed.status_code == 400 and replayed.json["error"] == "enrollment_failed"
    malformed = site.client().post("/signup/passkey", json={"credential": "not json"})
    assert malformed.status_code == 400 and malformed.json["error"] == "invalid_input"
    missing = site.client().post("/signup/passkey", json={})
    assert missing.status_code == 400 and missing.json["error"] == "invalid_input"
    assert [u.identifier for u in site.backend.list_users("default")].count("dora") == 1
    reasons = {r.reason for r in site.backend.audit_rows if r.event == "signup" and r.status == "refused"}
    assert {"webauthn_origin", "no_challenge", "webauthn_user_verification"} <= reasons


def test_a_taken_username_is_refused_and_a_taken_address_answers_the_same_and_mails_its_owner(
    site: Site,
) -> None:
    key = SoftAuthenticator()
    taken = passkey_signup(site, key, "alice", email="new@example.com")
    assert taken.status_code == 409 and taken.json["error"] == "user_exists"
    site.backend.set_email("default", site.user_id("alice"), "alice@example.com", verified_at=None)
    same = passkey_signup(site, key, "dora", email="alice@example.com")
    assert same.status_code == 202 and same.json == {"status": "verification_sent"}
    assert site.backend.find_user("default", "dora") is None
    [notice] = outbox(site).messages
    assert notice.to == "alice@example.com" and "token=" not in notice.body


def test_a_failure_at_any_write_leaves_no_account_and_the_retry_works(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = SoftAuthenticator()

    class Down:
        def send(self, to: str, subject: str, body: str) -> None:
            raise OSError("the mail server is down")

    get_state(site.app).mail_sender = Down()  # the mail, the last thing before the commit
    failed = passkey_signup(site, key)
    assert failed.status_code == 503 and failed.json["error"] == "mail_delivery_failed"
    assert site.backend.find_user("default", "dora") is None
    get_state(site.app).mail_sender = Outbox()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the factor write failed")

    with monkeypatch.context() as patch:
        patch.setattr(site.backend, "add_factor", broken)  # the passkey, after the account row
        assert passkey_signup(site, key).status_code == 503
    assert site.backend.find_user("default", "dora") is None
    assert passkey_signup(site, key).status_code == 202
    user = site.backend.find_user("default", "dora")
    assert user is not None and len(site.backend.list_factors("default", user.user_id)) == 1


def test_passkey_sign_up_is_off_unless_enabled(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_REGISTRATION=True)
    client = site.client()
    assert begin(client).status_code == 404
    assert client.post("/signup/passkey", json={"credential": {}}).status_code == 404
    assert 'id="passkey-signup-form"' not in client.get("/signup").text


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ({"AUTHFLOW_REGISTRATION": False}, "AUTHFLOW_REGISTRATION"),
        ({"AUTHFLOW_WEBAUTHN_RP_ID": None, "AUTHFLOW_WEBAUTHN_ORIGINS": [], "AUTHFLOW_PASSKEY_LOGIN": False},
         "AUTHFLOW_WEBAUTHN_RP_ID"),
        ({"AUTHFLOW_PASSKEY_LOGIN": ["other"]}, "AUTHFLOW_PASSKEY_LOGIN"),
    ],
)  # fmt: skip
def test_init_app_refuses_passkey_sign_up_without_what_it_needs(
    app_factory: AppFactory, missing: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        make_site(app_factory, **{**PASSKEY_CONFIG, **missing})


def confirmed_account(site: Site, key: SoftAuthenticator) -> FlaskClient:
    """A passkey sign-up whose address is confirmed, signed in with its passkey."""
    assert passkey_signup(site, key).status_code == 202
    [mail] = outbox(site).messages
    assert site.client().post("/signup/verify", json={"token": token_in(mail.body)}).status_code == 200
    client = site.client()
    assert passkey_login(site, key, client).json["status"] == "authenticated"
    return client


def test_a_passwordless_account_adds_a_password_after_a_fresh_sign_in(site: Site) -> None:
    key = SoftAuthenticator()
    client = confirmed_account(site, key)
    html = client.get("/account").text
    assert 'id="set-password-form"' in html and 'id="change-password-form"' not in html
    token = csrf_of(html)
    new = "a new passphrase for dora"
    form = {"csrf_token": token, "new_password": new, "new_password_confirm": new}
    mismatch = client.post("/account/password/set", data={**form, "new_password_confirm": "other"})
    assert mismatch.status_code == 400
    assert client.post("/account/password/set", data={"csrf_token": token}).status_code == 400
    assert client.post("/account/password/set", data={**form, "csrf_token": "forged"}).status_code in (
        400,
        403,
    )
    site.clock.advance(FRESHNESS_PASSED)
    stale = client.post("/account/password/set", data=form)
    assert stale.status_code == 302 and stale.location.startswith("/step-up")
    user = site.backend.find_user("default", "dora")
    assert user is not None and site.backend.get_password_hash("default", user.user_id) is None
    fresh = site.client()
    assert passkey_login(site, key, fresh).json["status"] == "authenticated"
    form["csrf_token"] = csrf_of(fresh.get("/account").text)
    done = fresh.post("/account/password/set", data=form)
    assert done.status_code == 302 and done.location == "/account?notice=password_set"
    assert site.backend.get_password_hash("default", user.user_id) is not None
    html = fresh.get("/account").text
    assert 'id="change-password-form"' in html and 'id="set-password-form"' not in html
    form["csrf_token"] = csrf_of(html)
    again = fresh.post("/account/password/set", data=form)  # a password is changed with the old one
    assert again.status_code == 409
    assert login(site.client(), "dora", new).location.startswith("/login/factor")  # then the passkey


def test_the_account_page_refuses_to_remove_the_last_passkey(site: Site) -> None:
    key = SoftAuthenticator()
    client = confirmed_account(site, key)
    user = site.backend.find_user("default", "dora")
    assert user is not None
    [passkey] = site.backend.list_factors("default", user.user_id)
    token = csrf_of(client.get("/account/factors").text)
    refused = client.post(f"/account/factors/{passkey.factor_id}/remove", data={"csrf_token": token})
    assert refused.status_code == 409 and 'id="error"' in refused.text
    assert [f.factor_id for f in site.backend.list_factors("default", user.user_id)] == [passkey.factor_id]
    answer = client.post(
        f"/account/factors/{passkey.factor_id}/remove",
        data={"csrf_token": token},
        headers={"Accept": "application/json"},
    )
    assert answer.status_code == 409 and "last way to sign in" in answer.json["message"]
