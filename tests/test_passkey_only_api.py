"""Passkey-only accounts through the headless API, with both kinds of client: sign-up with a
passkey, passkey sign-in once the address is confirmed, a password added after a fresh
sign-in, and each refusal (every answer is checked against the OpenAPI document)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.headless_support import KINDS, ApiClient
from tests.test_passkey_only import PASSKEY_CONFIG, token_in
from tests.test_views import FRESHNESS_PASSED, Site, make_site, real_factors
from tests.webauthn_soft import SoftAuthenticator

NEW_PASSWORD = "a new passphrase for dora"


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(app_factory, **PASSKEY_CONFIG)
    real_factors(made.app)
    get_state(made.app).mail_sender = Outbox()
    return made


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest, site: Site) -> ApiClient:
    return ApiClient(site.app, request.param)


def sign_up(api: ApiClient, key: SoftAuthenticator, username: str = "dora") -> Any:
    options = api.post("/signup/passkey/options", {"username": username, "email": f"{username}@example.com"})
    assert options.status_code == 200, options.text
    attestation, _ = key.register(options.json["publicKey"])
    answer = api.post("/signup/passkey", {"credential": json.loads(attestation)})
    answer.close()  # a sent answer: the mail goes out
    return answer


def passkey_sign_in(api: ApiClient, key: SoftAuthenticator) -> Any:
    options = api.post("/login/passkey/options")
    return api.post("/login/passkey", {"credential": json.loads(key.assert_(options.json["publicKey"]))})


def test_a_passkey_only_account_signs_up_signs_in_and_adds_a_password(api: ApiClient, site: Site) -> None:
    key = SoftAuthenticator()
    answer = sign_up(api, key)
    assert answer.status_code == 202 and answer.json == {"status": "verification_sent"}
    early = passkey_sign_in(api, key)
    assert early.status_code == 403 and early.json["error"] == "email_not_verified"
    [mail] = get_state(site.app).mail_sender.messages  # type: ignore[union-attr]
    assert site.client().post("/signup/verify", json={"token": token_in(mail.body)}).status_code == 200
    signed_in = passkey_sign_in(api, key)
    assert signed_in.status_code == 200 and signed_in.json["status"] == "authenticated"
    added = api.post("/account/password/set", {"password": NEW_PASSWORD})
    assert added.status_code == 200 and added.json == {"status": "password_set"}
    user = site.backend.find_user("default", "dora")
    assert user is not None and site.backend.get_password_hash("default", user.user_id) is not None
    again = api.post("/account/password/set", {"password": NEW_PASSWORD})
    assert again.status_code == 409 and again.json["error"] == "password_exists"


def test_the_api_refuses_what_the_pages_refuse(api: ApiClient, site: Site) -> None:
    bad = api.post("/signup/passkey/options", {"username": "eve@example.com", "email": "dora@example.com"})
    assert bad.status_code == 400 and bad.json["error"] == "identifier_not_own_address"
    unbegun = api.post("/signup/passkey", {"credential": {"id": "x", "rawId": "x", "type": "public-key",
                                                            "response": {}}})  # fmt: skip
    assert unbegun.status_code == 400 and unbegun.json["error"] == "enrollment_failed"
    key = SoftAuthenticator()
    assert sign_up(api, key, "alice").json["error"] == "user_exists"
    signed_out = api.post("/account/password/set", {"password": NEW_PASSWORD})
    assert signed_out.status_code == 401


def test_a_stale_sign_in_must_step_up_before_adding_a_password(api: ApiClient, site: Site) -> None:
    key = SoftAuthenticator()
    sign_up(api, key)
    [mail] = get_state(site.app).mail_sender.messages  # type: ignore[union-attr]
    site.client().post("/signup/verify", json={"token": token_in(mail.body)})
    assert passkey_sign_in(api, key).json["status"] == "authenticated"
    site.clock.advance(FRESHNESS_PASSED)
    stale = api.post("/account/password/set", {"password": NEW_PASSWORD})
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"


def test_passkey_sign_up_is_not_offered_unless_enabled(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_REGISTRATION=True)
    for kind in KINDS:
        api = ApiClient(site.app, kind)
        answer = api.post("/signup/passkey/options", {"username": "dora", "email": "dora@example.com"})
        assert answer.status_code == 404 and answer.json["error"] == "unavailable_kind"
