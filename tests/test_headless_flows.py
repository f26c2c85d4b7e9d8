"""The headless API's account flows, as both kinds of client: sign-up and its
confirmation, the password reset, the change of e-mail, the account, factor enrollment
and removal, recovery codes, sessions, devices and API tokens.

Each answer is checked against the OpenAPI document (``tests.headless_support``); each
flow is the one the pages run (same services, mails from the configured origin, the same
refusals), so these tests assert what an API client sees and what changed behind it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyotp
import pytest

from flask_authflow._web.state import get_state
from flask_authflow.login import _required_enrollment as required_enrollment
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.headless_support import KINDS, ApiClient
from tests.test_views import PASSWORD, Site, make_site
from tests.webauthn_soft import SoftAuthenticator

ORIGIN = "https://app.example.com"
NEW_PASSWORD = "a brand new passphrase 9"


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    made = make_site(
        app_factory,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_EXTERNAL_URL=ORIGIN,
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"],
    )
    get_state(made.app).mail_sender = Outbox()
    made.backend.set_email(
        "default", made.user_id("alice"), "alice@example.com", verified_at=made.clock.now()
    )
    return made


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def mails(site: Site) -> list[Any]:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender.messages


def link_token(mail: Any) -> str:
    """The token of the mail's link, which starts with the configured origin."""
    found = re.search(re.escape(ORIGIN) + r"/[^\s\"]*token=([A-Za-z0-9_-]{43})", mail.body)
    assert found is not None, mail.body
    return found.group(1)


def signed_in(site: Site, kind: str, username: str = "alice", password: str = PASSWORD) -> ApiClient:
    api = ApiClient(site.app, kind)
    answer = api.post("/login/password", {"username": username, "password": password})
    assert answer.status_code == 200 and answer.json["status"] == "authenticated", answer.json
    return api


def done(answer: Any) -> Any:
    """``answer``, its mail delivered (mails go out once the answer was sent)."""
    answer.close()
    return answer


# --- sign-up and its confirmation ------------------------------------------------------------------


def test_sign_up_confirm_by_link_then_sign_in(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    created = api.post(
        "/signup", {"username": "carol", "email": "carol@example.com", "password": NEW_PASSWORD}
    )
    assert created.status_code == 202 and created.json == {"status": "verification_sent"}
    [mail] = mails(site)
    assert mail.to == "carol@example.com"
    refused = ApiClient(site.app, kind).post(
        "/login/password", {"username": "carol", "password": NEW_PASSWORD}
    )
    assert refused.status_code == 403 and refused.json["error"] == "email_not_verified"

    confirmed = api.post("/signup/verify", {"token": link_token(mail)})
    assert confirmed.status_code == 200 and confirmed.json == {
        "status": "email_confirmed",
        "username": "carol",
    }
    again = api.post("/signup/verify", {"token": link_token(mail)})
    assert again.status_code == 410 and again.json["error"] == "account_token_used"
    signed_in(site, kind, "carol", NEW_PASSWORD)


def test_sign_up_refuses_a_taken_username_and_a_weak_password(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    taken = api.post("/signup", {"username": "bob", "email": "bob2@example.com", "password": NEW_PASSWORD})
    assert taken.status_code == 409 and taken.json["error"] == "user_exists"
    weak = api.post("/signup", {"username": "erin", "email": "erin@example.com", "password": "erin"})
    assert weak.status_code == 400 and weak.json["error"] == "weak_password"
    missing = api.post("/signup", {"email": "erin@example.com", "password": NEW_PASSWORD})
    assert missing.status_code == 400 and missing.json["error"] == "invalid_input"
    assert mails(site) == [] and site.backend.find_user("default", "erin") is None


def test_sign_up_confirm_by_code_and_resend(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    api.post("/signup", {"username": "dora", "email": "dora@example.com", "password": NEW_PASSWORD})
    resent = done(api.post("/signup/resend", {"email": "dora@example.com"}))
    unknown = done(api.post("/signup/resend", {"email": "nobody@example.com"}))
    assert resent.status_code == unknown.status_code == 202 and resent.json == unknown.json
    assert [m.to for m in mails(site)] == ["dora@example.com", "dora@example.com"]
    code = re.search(r"\b([A-Z0-9]{4}-?[A-Z0-9]{4})\b", mails(site)[-1].body)
    assert code is not None, mails(site)[-1].body
    wrong = api.post("/signup/verify", {"username": "dora", "code": "AAAA-AAAA"})
    assert wrong.status_code in (401, 410)
    confirmed = api.post("/signup/verify", {"username": "dora", "code": code.group(1)})
    assert confirmed.status_code == 200 and confirmed.json["username"] == "dora"


def test_account_flows_that_are_off_answer_404(app_factory: AppFactory, kind: str) -> None:
    site = make_site(app_factory)
    api = ApiClient(site.app, kind)
    for path, body in (
        ("/signup", {"username": "xavier", "email": "x@example.com", "password": NEW_PASSWORD}),
        ("/signup/resend", {"email": "x@example.com"}),
        ("/password/forgot", {"username": "alice"}),
        ("/password/reset", {"token": "A" * 43, "password": NEW_PASSWORD}),
    ):
        answer = api.post(path, body)
        assert answer.status_code == 404 and answer.json["error"] == "not_found", path


def test_without_the_pages_its_links_open_the_mailing_flows_answer_404(
    app_factory: AppFactory, kind: str
) -> None:
    app = app_factory(
        AUTHFLOW_HEADLESS=True,  # the API without the ready pages: a mailed link would lead nowhere
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_EXTERNAL_URL=ORIGIN,
    )
    get_state(app).mail_sender = Outbox()
    api = ApiClient(app, kind)
    for path, body in (
        ("/signup", {"username": "xavier", "email": "x@example.com", "password": NEW_PASSWORD}),
        ("/password/forgot", {"username": "alice"}),
    ):
        answer = api.post(path, body)
        assert answer.status_code == 404 and answer.json["error"] == "not_found", path
    assert get_state(app).mail_sender.messages == []


# --- password reset --------------------------------------------------------------------------------


def test_forgot_answers_the_same_and_mails_only_a_real_account(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    known = done(api.post("/password/forgot", {"username": "alice"}))
    unknown = done(api.post("/password/forgot", {"username": "nobody"}))
    assert known.status_code == unknown.status_code == 202 and known.json == unknown.json
    assert [m.to for m in mails(site)] == ["alice@example.com"]


def test_forgot_shares_the_pages_throttle(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    for _ in range(50):
        answer = done(api.post("/password/forgot", {"username": "nobody"}))
        if answer.status_code == 429:
            break
    assert answer.status_code == 429 and answer.json["error"] == "throttled"
    assert int(answer.headers["Retry-After"]) > 0
    page = site.client().post("/password/forgot", json={"username": "alice"})  # the same address
    assert page.status_code == 429
    assert mails(site) == []


def test_reset_sets_the_password_and_ends_every_session(site: Site, kind: str) -> None:
    other = signed_in(site, kind)
    api = ApiClient(site.app, kind)
    done(api.post("/password/forgot", {"email": "alice@example.com"}))
    token = link_token(mails(site)[0])
    bad = api.post("/password/reset", {"token": "B" * 43, "password": NEW_PASSWORD})
    assert bad.status_code == 401 and bad.json["error"] == "account_token_invalid"
    weak = api.post("/password/reset", {"token": token, "password": "short"})
    assert weak.status_code == 400
    reset = done(api.post("/password/reset", {"token": token, "password": NEW_PASSWORD}))
    assert reset.status_code == 200 and reset.json["status"] == "password_reset"
    assert reset.json["sessions_ended"] == 1
    assert other.get("/account").status_code == 401  # the other session ended
    assert mails(site)[-1].to == "alice@example.com"  # the notice of what ended
    used = api.post("/password/reset", {"token": token, "password": NEW_PASSWORD + "x"})
    assert used.status_code == 410
    signed_in(site, kind, password=NEW_PASSWORD)


def test_reset_asks_for_the_second_factor_first(site: Site, kind: str) -> None:
    with site.app.app_context():
        totp = pyotp.parse_uri(site.authflow.factors.create_totp(site.user_id("alice")))
    api = ApiClient(site.app, kind)
    done(api.post("/password/forgot", {"username": "alice"}))
    token = link_token(mails(site)[0])
    first = api.post("/password/reset", {"token": token, "password": NEW_PASSWORD})
    assert first.status_code == 401 and first.json["error"] == "second_factor_required"
    assert first.json["kinds"] == ["totp"]
    code = totp.at(site.clock.now())
    step = api.post("/login/factor", {"kind": "totp", "code": code})
    assert step.status_code == 200
    reset = done(api.post("/password/reset", {"token": token, "password": NEW_PASSWORD}))
    assert reset.status_code == 200 and reset.json["status"] == "password_reset"


# --- the account and its address -------------------------------------------------------------------


def test_the_account_is_read_by_its_user_only(site: Site, kind: str) -> None:
    guest = ApiClient(site.app, kind).get("/account")
    assert guest.status_code == 401 and guest.json["error"] == "login_required"
    account = signed_in(site, kind).get("/account")
    assert account.status_code == 200
    assert account.json["identifier"] == "alice" and account.json["id"] == site.user_id("alice")
    assert account.json["email"] == "alice@example.com" and account.json["email_verified"] is True
    assert account.json["auth_method"] == "password"


def test_email_change_needs_a_fresh_login_and_the_new_address(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    site.clock.advance(11 * 60)  # past AUTHFLOW_FRESHNESS
    stale = api.post("/account/email", {"email": "alice.new@example.com"})
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"
    api = signed_in(site, kind)
    asked = done(api.post("/account/email", {"email": "alice.new@example.com"}))
    assert asked.status_code == 202 and asked.json == {"status": "verification_sent"}
    [mail] = mails(site)
    assert mail.to == "alice.new@example.com"
    assert site.backend.find_user("default", "alice").email == "alice@example.com"  # not yet
    changed = done(ApiClient(site.app, kind).post("/account/email/confirm", {"token": link_token(mail)}))
    assert changed.status_code == 200 and changed.json == {"status": "email_changed"}
    assert site.backend.find_user("default", "alice").email == "alice.new@example.com"
    assert mails(site)[-1].to == "alice@example.com"  # the old address is told


# --- factors ---------------------------------------------------------------------------------------


def test_an_authenticator_app_is_added_confirmed_listed_and_removed(site: Site, kind: str) -> None:
    other = signed_in(site, kind)
    api = signed_in(site, kind)
    token_before = api.token
    begun = api.post("/account/factors/totp")
    assert begun.status_code == 201 and begun.json["kind"] == "totp"
    key, factor_id = begun.json["secret"], begun.json["factor_id"]
    assert begun.json["otpauth_uri"].startswith("otpauth://totp/")
    wrong = api.post("/account/factors/totp/confirm", {"factor_id": factor_id, "code": "000000"})
    assert wrong.status_code == 400 and wrong.json["error"] == "enrollment_failed"
    code = pyotp.TOTP(key).at(site.clock.now())
    added = done(api.post("/account/factors/totp/confirm", {"factor_id": factor_id, "code": code}))
    assert added.status_code == 200 and added.json == {"status": "factor_added", "kind": "totp"}
    if kind == "app":
        assert api.token is not None and api.token != token_before  # rotated like the cookie
    assert other.get("/account").status_code == 401  # the other session ended
    assert api.get("/account").status_code == 200
    assert mails(site)[-1].to == "alice@example.com"  # the owner's notice
    listed = api.get("/account/factors").json
    assert [(f["id"], f["kind"]) for f in listed["factors"]] == [(factor_id, "totp")]
    assert "secret" not in json.dumps(listed) and key not in json.dumps(listed)

    removed = done(api.delete(f"/account/factors/{factor_id}"))
    assert removed.status_code == 200 and removed.json == {"status": "factor_removed", "kind": "totp"}
    again = api.delete(f"/account/factors/{factor_id}")
    assert again.status_code == 404 and again.json["error"] == "not_found"
    assert api.get("/account/factors").json["factors"] == []


def test_factor_changes_need_a_fresh_login(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    site.clock.advance(11 * 60)
    for path in ("/account/factors/totp", "/account/factors/recovery-codes"):
        stale = api.post(path)
        assert stale.status_code == 401 and stale.json["error"] == "step_up_required", path
    guest = ApiClient(site.app, kind).post("/account/factors/totp")
    assert guest.status_code == 401 and guest.json["error"] == "login_required"


def test_a_held_login_sets_up_the_required_factor_and_is_signed_in(site: Site, kind: str) -> None:
    required_enrollment.require(
        site.backend, "default", site.user_id(), ("totp",), site.clock.now(), "import"
    )
    api = ApiClient(site.app, kind)
    held = api.post("/login/password", {"username": "alice", "password": PASSWORD})
    assert held.status_code == 200 and held.json["status"] == "enrollment_required"
    assert api.get("/account").status_code == 401  # not signed in yet
    listed = api.get("/account/factors").json
    assert listed["required"] == ["totp"] and listed["offered"] == ["totp"]
    other = api.post("/account/factors/recovery-codes")
    assert other.status_code == 400 and other.json["error"] == "factor_not_registered"
    begun = api.post("/account/factors/totp").json
    code = pyotp.TOTP(begun["secret"]).at(site.clock.now())
    added = done(api.post("/account/factors/totp/confirm", {"factor_id": begun["factor_id"], "code": code}))
    assert added.status_code == 200
    state = api.get("/session").json
    assert state["state"] == "authenticated" and state["user"]["identifier"] == "alice"


def test_hotp_and_recovery_codes(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    begun = api.post("/account/factors/hotp").json
    assert begun["otpauth_uri"].startswith("otpauth://hotp/")
    code = pyotp.HOTP(begun["secret"]).at(0)
    assert (
        done(
            api.post("/account/factors/hotp/confirm", {"factor_id": begun["factor_id"], "code": code})
        ).status_code
        == 200
    )
    assert api.get("/account/factors/recovery-codes").json == {"remaining": 0, "total": None}
    codes = api.post("/account/factors/recovery-codes")
    assert codes.status_code == 201 and len(codes.json["codes"]) == 10
    confirmed = done(
        api.post(
            "/account/factors/recovery-codes/confirm",
            {"factor_id": codes.json["factor_id"], "code": codes.json["codes"][3]},
        )
    )
    assert confirmed.status_code == 200
    left = api.get("/account/factors/recovery-codes").json
    assert left["remaining"] == 10 and left["total"] == 10
    kinds = sorted(f["kind"] for f in api.get("/account/factors").json["factors"])
    assert kinds == ["hotp", "recovery_code"]


def test_email_codes(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    begun = api.post("/account/factors/email", {"address": "alice.codes@example.com"})
    assert begun.status_code == 201 and begun.json["address"] == "alice.codes@example.com"
    mail = mails(site)[-1]
    assert mail.to == "alice.codes@example.com"
    code = re.search(r"\b(\d{8})\b", mail.body)
    assert code is not None, mail.body
    added = done(
        api.post(
            "/account/factors/email/confirm", {"factor_id": begun.json["factor_id"], "code": code.group(1)}
        )
    )
    assert added.status_code == 200 and added.json["kind"] == "email_otp"


def test_a_passkey_is_added_with_its_creation_options(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    begun = api.post("/account/factors/webauthn", {"label": "Blue key", "passkey": True})
    assert begun.status_code == 201 and begun.json["kind"] == "webauthn"
    options = begun.json["publicKey"]
    assert (
        options["rp"]["id"] == "example.com"
        and options["authenticatorSelection"]["residentKey"] == "required"
    )
    attestation, _ = SoftAuthenticator().register(options)
    forged = api.post(
        "/account/factors/webauthn/confirm", {"factor_id": begun.json["factor_id"], "credential": {"id": "x"}}
    )
    assert forged.status_code == 400
    begun = api.post("/account/factors/webauthn", {"label": "Blue key", "passkey": True})
    attestation, _ = SoftAuthenticator().register(begun.json["publicKey"])
    added = done(
        api.post(
            "/account/factors/webauthn/confirm",
            {"factor_id": begun.json["factor_id"], "credential": json.loads(attestation)},
        )
    )
    assert added.status_code == 200 and added.json["kind"] == "webauthn"
    [factor] = api.get("/account/factors").json["factors"]
    assert factor["label"] == "Blue key" and factor["kind"] == "webauthn"


# --- sessions, devices, API tokens -----------------------------------------------------------------


def test_sessions_are_listed_and_ended(site: Site, kind: str) -> None:
    other = signed_in(site, kind)
    third = signed_in(site, "browser" if kind == "app" else "app")
    api = signed_in(site, kind)
    rows = api.get("/account/sessions").json["sessions"]
    assert (
        len(rows) == 3 and rows[0]["current"] is True and [r["current"] for r in rows[1:]] == [False, False]
    )
    assert all(re.fullmatch(r"[0-9a-f]{64}", r["hash"]) for r in rows)
    mine = rows[0]["hash"]
    unknown = api.delete("/account/sessions/" + "0" * 64)
    assert unknown.status_code == 404 and unknown.json["error"] == "not_found"
    other_hash = next(r["hash"] for r in other.get("/account/sessions").json["sessions"] if r["current"])
    ended = api.delete(f"/account/sessions/{other_hash}")
    assert ended.status_code == 200 and ended.json == {"status": "revoked"}
    assert other.get("/account").status_code == 401
    assert third.get("/account").status_code == 200

    with site.app.app_context():
        site.authflow.tokens.create(site.user_id("alice"), "script")  # ends with the others
    everywhere = api.post("/account/sessions/revoke-others")
    assert everywhere.status_code == 200
    assert everywhere.json["sessions_ended"] == 1 and everywhere.json["api_tokens_revoked"] == 1
    assert third.get("/account").status_code == 401
    own = api.delete(f"/account/sessions/{mine}")
    assert own.status_code == 200 and own.json == {"status": "logged_out"}
    assert api.get("/account").status_code == 401


def test_devices_are_listed_and_forgotten(site: Site) -> None:
    api = signed_in(site, "browser")
    [row] = api.get("/account/devices").json["devices"]
    assert row["current"] is True and row["trusted_until"] is None
    unknown = api.delete("/account/devices/nosuchdevice")
    assert unknown.status_code == 404 and unknown.json["error"] == "not_found"
    forgotten = api.delete(f"/account/devices/{row['device_id']}")
    assert forgotten.status_code == 200 and forgotten.json == {"status": "device_forgotten"}
    assert api.get("/account/devices").json["devices"] == []
    rows = [r for r in site.backend.audit_rows if r.event == "device_forgotten"]
    assert len(rows) == 1 and rows[0].user_id == site.user_id("alice")


def test_an_app_sign_in_sets_no_cookie_and_records_no_device(site: Site) -> None:
    api = ApiClient(site.app, "app")
    answer = api.post("/login/password", {"username": "alice", "password": PASSWORD})
    assert answer.status_code == 200 and answer.json["status"] == "authenticated"
    assert "Set-Cookie" not in answer.headers  # neither the session's nor the device's
    assert api.get("/account/devices").json["devices"] == []


def test_api_tokens_are_created_shown_once_and_revoked(site: Site, kind: str) -> None:
    api = signed_in(site, kind)
    created = api.post("/account/api-tokens", {"name": "deploy", "expires_in_days": 30})
    assert created.status_code == 201 and created.json["token"].startswith("afp_")
    assert (
        created.json["api_token"]["name"] == "deploy" and created.json["api_token"]["expires_at"] is not None
    )
    taken = api.post("/account/api-tokens", {"name": "deploy"})
    assert taken.status_code == 409 and taken.json["error"] == "token_name_taken"
    listed = api.get("/account/api-tokens").json
    assert [t["name"] for t in listed["api_tokens"]] == ["deploy"]
    assert created.json["token"] not in json.dumps(listed)
    rows = [r for r in site.backend.audit_rows if r.event == "api_token_created"]
    assert len(rows) == 1 and rows[0].user_id == site.user_id("alice")

    revoked = api.post("/account/api-tokens/revoke", {"name": "deploy"})
    assert revoked.status_code == 200 and revoked.json == {"status": "api_token_revoked"}
    again = api.post("/account/api-tokens/revoke", {"name": "deploy"})
    assert again.status_code == 404
    site.clock.advance(11 * 60)
    stale = api.post("/account/api-tokens", {"name": "late"})
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"


def test_a_browser_without_its_csrf_token_changes_nothing(site: Site) -> None:
    api = signed_in(site, "browser")
    refused = api.post("/account/api-tokens", {"name": "deploy"}, headers={"X-CSRF-Token": "forged"})
    assert refused.status_code == 400 and refused.json["error"] == "csrf"
    assert api.get("/account/api-tokens").json["api_tokens"] == []
