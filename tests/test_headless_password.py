"""The change of password through the headless API (``POST /account/password``), as both
kinds of client: the account page's flow (the current password verified as a step-up, the
policy, the other sessions, API tokens and links ended, the notice mailed) and each of its
refusals. Every answer is checked against the OpenAPI document (``tests.headless_support``).
"""

from __future__ import annotations

import json
from typing import Any

import pyotp
import pytest

from flask_authflow._web.headless import CLIENT_HEADER
from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.headless_support import BASE, KINDS, ApiClient, check_answer
from tests.test_passkey_only import PASSKEY_CONFIG, token_in
from tests.test_views import FRESHNESS_PASSED, PASSWORD, Site, make_site, real_factors
from tests.webauthn_soft import SoftAuthenticator

NEW_PASSWORD = "a brand new passphrase 9"
PATH = "/account/password"


def mailed_site(app_factory: AppFactory, **config: Any) -> Site:
    made = make_site(app_factory, **config)
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email(
        "default", made.user_id("alice"), "alice@example.com", verified_at=made.clock.now()
    )
    return made


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return mailed_site(app_factory)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def mails(site: Site) -> list[Any]:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender.messages


def signed_in(site: Site, kind: str, password: str = PASSWORD) -> ApiClient:
    api = ApiClient(site.app, kind)
    answer = api.post("/login/password", {"username": "alice", "password": password})
    assert answer.status_code == 200 and answer.json["status"] == "authenticated", answer.json
    return api


def password_hash(site: Site) -> str | None:
    return site.backend.get_password_hash("default", site.user_id("alice"))


def signs_in(site: Site, password: str) -> bool:
    """The password is accepted (the login completes, or asks for the second factor)."""
    answer = ApiClient(site.app, "app").post("/login/password", {"username": "alice", "password": password})
    return bool(answer.status_code == 200)


def change(api: ApiClient, current: str = PASSWORD, new: str = NEW_PASSWORD) -> Any:
    answer = api.post(PATH, {"current_password": current, "new_password": new})
    answer.close()  # a sent answer: the notice goes out
    return answer


def test_the_change_ends_the_other_sessions_and_mails_the_notice(site: Site, kind: str) -> None:
    other = signed_in(site, kind)
    api = signed_in(site, kind)
    token = api.token
    cookie = api.client.get_cookie("authflow_session") if kind == "browser" else None
    answer = change(api)
    assert answer.status_code == 200 and answer.json["status"] == "password_changed"
    assert answer.json["sessions_ended"] == 1 and answer.json["api_tokens_revoked"] == 0
    if kind == "app":  # the session id rotated: the app's token with it
        assert api.token is not None and api.token != token
    else:
        renewed = api.client.get_cookie("authflow_session")
        assert cookie is not None and renewed is not None and renewed.value != cookie.value
    assert api.get("/account").status_code == 200  # this session goes on
    assert other.get("/account").status_code == 401  # the other one ended
    [notice] = mails(site)
    assert notice.to == "alice@example.com"
    assert not signs_in(site, PASSWORD) and signs_in(site, NEW_PASSWORD)


def test_a_wrong_current_password_changes_nothing_and_counts_towards_the_lock(
    app_factory: AppFactory, kind: str
) -> None:
    site = mailed_site(app_factory, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
    other = signed_in(site, kind)
    api = signed_in(site, kind)
    wrong = change(api, current="a guess")
    assert wrong.status_code == 401 and wrong.json["error"] == "wrong_current_password"
    assert other.get("/account").status_code == 200 and mails(site) == []
    locked = change(api, current="another guess")
    assert locked.status_code == 403 and locked.json["error"] == "locked"
    assert "locked_until" in locked.json
    assert change(api).status_code == 403  # the right one too, while locked
    assert other.get("/account").status_code == 200
    assert not signs_in(site, NEW_PASSWORD)


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ({"new": "alice"}, "weak_password"),  # the policy: the username, too short
        ({"new": "p" * 2000}, "weak_password"),  # the policy's length limit
        ({"current": "p" * 2000}, "password_too_long"),  # the hasher's
    ],
)
def test_a_refused_password_changes_nothing(site: Site, kind: str, given: dict[str, str], code: str) -> None:
    other = signed_in(site, kind)
    api = signed_in(site, kind)
    refused = change(api, **given)
    assert refused.status_code == 400 and refused.json["error"] == code
    assert other.get("/account").status_code == 200 and mails(site) == []
    assert signs_in(site, PASSWORD)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"current_password": PASSWORD},
        {"new_password": NEW_PASSWORD},
        {"current_password": "", "new_password": NEW_PASSWORD},
        {"current_password": PASSWORD, "new_password": ""},
        {"current_password": PASSWORD, "new_password": NEW_PASSWORD, "new_password_confirm": NEW_PASSWORD},
        {"current_password": PASSWORD, "new_password": 42},
    ],
)
def test_missing_or_bad_fields_are_invalid_input(site: Site, kind: str, body: dict[str, Any]) -> None:
    api = signed_in(site, kind)
    refused = api.post(PATH, body)
    assert refused.status_code == 400 and refused.json["error"] == "invalid_input"
    assert signs_in(site, PASSWORD)


def test_a_guest_must_sign_in(site: Site, kind: str) -> None:
    guest = change(ApiClient(site.app, kind))
    assert guest.status_code == 401 and guest.json["error"] == "login_required"
    assert signs_in(site, PASSWORD)


@pytest.mark.parametrize("token", [None, "forged"])
def test_a_browser_without_its_csrf_token_changes_nothing(site: Site, token: str | None) -> None:
    api = signed_in(site, "browser")
    headers = {CLIENT_HEADER: "browser"} | ({} if token is None else {"X-CSRF-Token": token})
    body = {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    refused = api.client.post(BASE + PATH, json=body, headers=headers)
    check_answer(api.document, "POST", BASE + PATH, refused)
    assert refused.status_code == 400 and refused.json is not None and refused.json["error"] == "csrf"
    assert signs_in(site, PASSWORD) and mails(site) == []


def test_the_change_is_throttled_as_every_password_check(app_factory: AppFactory, kind: str) -> None:
    site = mailed_site(app_factory, AUTHFLOW_THROTTLE_LIMITS={"factor.address": "3/minute"})
    api = signed_in(site, kind)
    before = password_hash(site)
    statuses = [change(api, current=f"guess {n}").status_code for n in range(4)]
    assert 429 in statuses and set(statuses) <= {401, 429}
    throttled = change(api)  # the right one: not even checked
    assert throttled.status_code == 429 and throttled.json["error"] == "throttled"
    assert int(throttled.headers["Retry-After"]) >= 1
    assert password_hash(site) == before  # unchanged


def test_a_user_with_a_second_factor_steps_up_first(site: Site, kind: str) -> None:
    with site.app.app_context():
        totp = pyotp.parse_uri(site.authflow.factors.create_totp(site.user_id("alice")))
    api = ApiClient(site.app, kind)
    first = api.post("/login/password", {"username": "alice", "password": PASSWORD})
    assert first.status_code == 200 and first.json["status"] == "factor_required"
    factor = api.post("/login/factor", {"kind": "totp", "code": totp.at(site.clock.now())})
    assert factor.status_code == 200 and factor.json["status"] == "authenticated"
    site.clock.advance(FRESHNESS_PASSED)
    refused = change(api)  # the current password alone is not the strongest step
    assert refused.status_code == 401 and refused.json["error"] == "step_up_required"
    assert signs_in(site, PASSWORD) and not signs_in(site, NEW_PASSWORD)  # unchanged


def test_an_account_without_a_password_is_pointed_to_setting_one(app_factory: AppFactory, kind: str) -> None:
    site = make_site(app_factory, **PASSKEY_CONFIG)
    real_factors(site.app)
    get_state(site.app).mail_sender = Outbox()
    api, key = ApiClient(site.app, kind), SoftAuthenticator()
    options = api.post("/signup/passkey/options", {"username": "dora", "email": "dora@example.com"})
    attestation, _ = key.register(options.json["publicKey"])
    api.post("/signup/passkey", {"credential": json.loads(attestation)}).close()
    [mail] = mails(site)
    assert site.client().post("/signup/verify", json={"token": token_in(mail.body)}).status_code == 200
    begun = api.post("/login/passkey/options")
    signed = api.post("/login/passkey", {"credential": json.loads(key.assert_(begun.json["publicKey"]))})
    assert signed.status_code == 200 and signed.json["status"] == "authenticated"
    refused = change(api, current="anything")
    assert refused.status_code == 409 and refused.json["error"] == "no_password"
    assert api.post("/account/password/set", {"password": NEW_PASSWORD}).status_code == 200


def test_two_sessions_changing_it_at_once_keep_no_stale_session(site: Site) -> None:
    """Two sessions that both know the password change it at the same moment: exactly one
    wins, the other is told its current password is wrong (as it is once the first
    committed) or that it is signed out (the winner ended its session first), no session
    that signed in with the old password outlives both changes, and the winner's new
    password stands."""
    first, second = signed_in(site, "app"), signed_in(site, "app")
    news = (NEW_PASSWORD, NEW_PASSWORD + " two")
    answers = run_together([lambda: change(first, new=news[0]), lambda: change(second, new=news[1])])
    assert sorted(answer.status_code for answer in answers) == [200, 401], [a.json for a in answers]
    # the loser's current password is no longer right, or the winner ended its session first
    assert [a.json["error"] for a in answers if a.status_code == 401] in (
        ["wrong_current_password"],
        ["login_required"],
    )
    assert len(site.sessions()) <= 1  # at most the winner's (the checks below sign in anew)
    assert not signs_in(site, PASSWORD)
    assert [signs_in(site, new) for new in news] == [answer.status_code == 200 for answer in answers]
