"""The headless API's sign-in, with both kinds of client: the password step, the factor
step, logout; the answers are the document's (``ApiClient`` checks each one), the work is
the pages' (the same audit rows), and each rejection path is exercised with its bad input."""

from __future__ import annotations

import secrets
from typing import Any

import flask_babel
import pytest
from flask_wtf.csrf import CSRFProtect

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.headless import CLIENT_HEADER, TOKEN_HEADER
from flask_authflow._web.state import get_state
from flask_authflow._web.views.common import MESSAGES
from flask_authflow.errors import StoreUnavailable
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.appfactory import AppFactory
from tests.headless_support import BASE, KINDS, ApiClient
from tests.test_devices_web import make_device_site
from tests.test_views import PASSWORD, FakeMailCode, FixedCode, Site, make_site

ALICE = {"username": "alice", "password": PASSWORD}


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_device_site(app_factory)  # alice: password, then TOTP 123456


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest, site: Site) -> ApiClient:
    return ApiClient(site.app, request.param)


def events(site: Site) -> list[tuple[str, str]]:
    return [(row.event, row.status) for row in site.backend.audit_rows]


def credential(api: ApiClient) -> str | None:
    """What carries the session now: the app's token, or the browser's cookie."""
    if api.kind == "app":
        return api.token
    cookie = api.client.get_cookie("authflow_session")
    return cookie.value if cookie is not None else None


def test_password_then_totp_signs_in_and_rotates_the_session_at_each_step(api: ApiClient, site: Site) -> None:
    step = api.post("/login/password", ALICE)
    assert step.json["status"] == "factor_required" and step.json["kinds"] == ["totp"]
    assert step.json["session"]["state"] == "authenticating"
    first = credential(api)
    assert first is not None
    done = api.post("/login/factor", {"kind": "totp", "code": "123 456"})
    assert done.json["status"] == "authenticated"
    assert done.json["session"]["user"]["identifier"] == "alice"
    second = credential(api)
    assert second is not None and second != first
    assert api.get("/session").json["state"] == "authenticated"
    assert events(site) == [  # audited as the pages' sign-in is
        ("login_begin", "started"),
        ("factor_verify", "success"),  # the password
        # an app keeps no device cookie; a browser's device is recorded in the TOTP step's unit
        *([("device_sign_in", "new")] if api.kind == "browser" else []),
        ("factor_verify", "success"),  # the TOTP
    ]


def test_an_app_gets_no_cookie_and_a_browser_no_token(api: ApiClient) -> None:
    step = api.post("/login/password", ALICE)
    if api.kind == "app":
        assert "Set-Cookie" not in step.headers and step.headers[TOKEN_HEADER]
        assert step.json["session"]["csrf_token"] is None
    else:
        assert TOKEN_HEADER not in step.headers and "authflow_session=" in step.headers["Set-Cookie"]
        assert step.json["session"]["csrf_token"]


def test_the_app_token_works_on_the_apps_own_routes(site: Site) -> None:
    api = ApiClient(site.app, "app")
    api.post("/login/password", ALICE)
    api.post("/login/factor", {"code": "123456"})
    headers = {CLIENT_HEADER: "app", "Authorization": f"Session {api.token}"}
    assert api.client.get("/private", headers=headers).text == "private page"
    assert api.client.get("/private", headers={CLIENT_HEADER: "app"}).status_code == 401


def test_wrong_password_and_unknown_user_get_the_same_answer(api: ApiClient) -> None:
    wrong = api.post("/login/password", {"username": "alice", "password": "not the password at all"})
    unknown = api.post("/login/password", {"username": "nobody", "password": "not the password at all"})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json == unknown.json and wrong.json["error"] == "invalid"


def test_a_locked_account_answers_403_with_the_end_of_the_lock(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
    api = ApiClient(site.app, "app")
    assert api.post("/login/password", {**ALICE, "password": "wrong password, twice"}).status_code == 401
    api.post("/login/password", {**ALICE, "password": "wrong password, twice"})
    locked = api.post("/login/password", ALICE)  # the right password, refused while locked
    assert locked.status_code == 403 and locked.json["error"] == "locked" and locked.json["locked_until"]


def test_a_throttled_login_answers_429_with_retry_after(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_THROTTLE_LIMITS={"login.address": "1/minute"})
    api = ApiClient(site.app, "app")
    api.post("/login/password", {**ALICE, "password": "wrong password once"})
    throttled = api.post("/login/password", ALICE)
    assert throttled.status_code == 429 and throttled.json["error"] == "throttled"
    assert int(throttled.headers["Retry-After"]) >= 1


def test_a_wrong_code_may_be_tried_again(api: ApiClient) -> None:
    api.post("/login/password", ALICE)
    wrong = api.post("/login/factor", {"code": "000000"})
    assert wrong.status_code == 401 and wrong.json["error"] == "retry_code"
    assert api.post("/login/factor", {"code": "123456"}).json["status"] == "authenticated"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"kind": "hotp", "code": "123456"}, 400, "wrong_kind"),
        ({"kind": "no-such-kind", "code": "123456"}, 400, "wrong_kind"),
        ({"kind": "totp"}, 400, "missing_code"),
        ({"kind": "totp", "code": "   "}, 400, "missing_code"),
        ({"code": 123456}, 400, "invalid_input"),
        ({"code": "1" * 257}, 400, "invalid_input"),
        ({"code": "123456", "trust_device": "yes"}, 400, "invalid_input"),
        ({"code": "123456", "extra": 1}, 400, "invalid_input"),
        ({"kind": "webauthn"}, 400, "wrong_kind"),
    ],
)
def test_a_malformed_factor_step_is_refused_and_costs_no_attempt(
    api: ApiClient, site: Site, body: dict[str, Any], status: int, code: str
) -> None:
    api.post("/login/password", ALICE)
    refused = api.post("/login/factor", body)
    assert refused.status_code == status and refused.json["error"] == code
    assert ("factor_verify", "failure") not in events(site)
    assert api.post("/login/factor", {"code": "123456"}).json["status"] == "authenticated"


def test_a_factor_step_without_a_login_is_409(api: ApiClient) -> None:
    refused = api.post("/login/factor", {"code": "123456"})
    assert refused.status_code == 409 and refused.json["error"] == "login_not_started"
    assert api.post("/login/factor/send", {"kind": "email_otp"}).status_code == 409
    assert api.post("/login/factor/webauthn/options").status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"username": "alice"},
        {"username": "", "password": PASSWORD},
        {"username": "alice", "password": PASSWORD, "remember": "1"},
        {"username": ["alice"], "password": PASSWORD},
        {"username": "al\x00ice", "password": PASSWORD},
        {"username": "alice", "password": "\ud800 lone surrogate"},
        [],
        None,
    ],
)
def test_a_malformed_password_step_is_400_before_the_password_is_looked_at(
    api: ApiClient, site: Site, body: Any
) -> None:
    if body is None:
        refused = api.call("POST", "/login/password", headers={"Content-Type": "application/json"})
    else:
        refused = api.call("POST", "/login/password", body)
    assert refused.status_code == 400 and refused.json["error"] == "invalid_input"
    assert events(site) == []


def test_a_deep_or_broken_json_body_is_400(api: ApiClient) -> None:
    for data in ("[" * 5000, "{not json", "\xff"):
        answer = api.client.post(
            BASE + "/login/password",
            data=data,
            headers={**api.headers("POST"), "Content-Type": "application/json"},
        )
        assert answer.status_code == 400 and answer.json["error"] == "invalid_input"


def test_logout_ends_the_session_and_the_old_credential_is_worthless(api: ApiClient, site: Site) -> None:
    api.post("/login/password", ALICE)
    api.post("/login/factor", {"code": "123456"})
    old = api.token
    ended = api.post("/logout")
    assert ended.json == {"status": "logged_out", "location": None}
    if api.kind == "app":
        assert ended.headers[TOKEN_HEADER] == "" and api.token is None
        api.token = old  # a client that kept it anyway
    assert api.get("/session").json["state"] == "guest"
    assert ("logout", "success") in events(site)


# --- the two kinds never mix -------------------------------------------------------------------


def test_a_browser_must_send_its_csrf_token_and_an_app_needs_none(site: Site) -> None:
    browser = ApiClient(site.app, "browser")
    refused = browser.post("/login/password", ALICE, headers={"X-CSRF-Token": "forged"})
    assert refused.status_code == 400 and refused.json["error"] == "csrf"
    assert events(site) == []
    assert browser.post("/login/password", ALICE).status_code == 200
    assert ApiClient(site.app, "app").post("/login/password", ALICE).status_code == 200


def test_an_app_request_with_a_cookie_or_a_browser_request_with_a_token_is_refused(site: Site) -> None:
    browser = ApiClient(site.app, "browser")
    browser.post("/login/password", ALICE)
    cookie = browser.client.get_cookie("authflow_session")
    assert cookie is not None
    app = ApiClient(site.app, "app")
    mixed = app.get("/session", headers={"Cookie": f"authflow_session={cookie.value}"})
    assert mixed.status_code == 400 and mixed.json["error"] == "client_kind_mismatch"
    as_token = browser.get("/session", headers={"Authorization": f"Session {cookie.value}"})
    assert as_token.status_code == 400 and as_token.json["error"] == "client_kind_mismatch"
    for kind in ("mobile", "app, browser"):
        unknown = app.get("/session", headers={CLIENT_HEADER: kind})
        assert unknown.status_code == 400 and unknown.json["error"] == "client_kind_mismatch"


def test_an_app_token_in_a_cookie_jar_and_a_cookie_as_a_token_are_new_guests(site: Site) -> None:
    app = ApiClient(site.app, "app")
    app.post("/login/password", ALICE)
    app.post("/login/factor", {"code": "123456"})
    jar = site.app.test_client()
    jar.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    jar.set_cookie("authflow_session", str(app.token))
    assert jar.get("/private", headers={"Accept": "application/json"}).status_code == 401
    assert jar.get(BASE + "/session").json["state"] == "guest"

    browser = ApiClient(site.app, "browser")
    browser.post("/login/password", ALICE)
    browser.post("/login/factor", {"code": "123456"})
    cookie = browser.client.get_cookie("authflow_session")
    assert cookie is not None
    thief = ApiClient(site.app, "app")
    thief.token = cookie.value
    assert thief.get("/session").json["state"] == "guest"
    assert browser.get("/session").json["state"] == "authenticated"  # the real session is untouched


def test_refusals_speak_the_requests_language(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    flask_babel.Babel(site.app, locale_selector=lambda: "de")
    api = ApiClient(site.app, "app")
    refused = api.get("/session", headers={CLIENT_HEADER: "mobile"})
    assert refused.json["error"] == "client_kind_mismatch"  # the code stays, the message is German
    assert refused.json["message"] == "Authflow-Client muss „browser“ oder „app“ sein."
    wrong = api.post("/login/password", {"username": "alice", "password": "not the password at all"})
    assert wrong.json["error"] == "invalid" and wrong.json["message"] != MESSAGES["invalid"]


# --- a store down: 503, never a 500, never a success -----------------------------------------


def test_a_store_down_answers_503_with_a_request_id(
    api: ApiClient, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("the database at db.internal:5432 is unreachable")

    monkeypatch.setattr(site.backend, "login_facts", down)
    refused = api.post("/login/password", ALICE)
    assert refused.status_code == 503 and refused.json["request_id"]
    assert "db.internal" not in refused.json["message"]  # the cause is logged, not shown
    assert api.get("/session").json["state"] == "guest"


def test_a_session_store_down_is_a_503_for_a_change(
    api: ApiClient, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.post("/login/password", ALICE)
    if api.kind == "browser":
        api.csrf_token()  # read while the store is up

    def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("the session store is unreachable")

    monkeypatch.setattr(site.store, "load", down)
    monkeypatch.setattr(site.store, "save", down)
    refused = api.post("/login/factor", {"code": "123456"})
    assert refused.status_code == 503 and refused.json["error"] == "store_unavailable"
    assert TOKEN_HEADER not in refused.headers or not refused.headers[TOKEN_HEADER]


def test_with_flask_wtf_browsers_use_its_token_and_apps_need_none(app_factory: AppFactory) -> None:
    site = make_site(app_factory, SECRET_KEY=secrets.token_hex(32))
    csrf = CSRFProtect(site.app)
    csrf.exempt(site.app.blueprints["authflow_api"])  # as docs/headless.rst says
    browser = ApiClient(site.app, "browser")
    refused = browser.post("/login/password", ALICE, headers={"X-CSRF-Token": "forged"})
    assert refused.status_code == 400 and refused.json["error"] == "csrf"  # Flask-WTF's refusal, as JSON
    assert browser.post("/login/password", ALICE).json["status"] == "authenticated"  # with its token
    app = ApiClient(site.app, "app")
    assert app.post("/login/password", ALICE).json["status"] == "authenticated"


def test_an_app_asks_for_an_e_mailed_code_and_signs_in_with_it(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    mail = FakeMailCode("87654321")
    service = get_state(site.app).service
    service.register_factor(FixedCode("123456"))
    service.register_factor(mail)
    for kind in (FactorKind.TOTP, FactorKind.EMAIL_OTP):
        site.backend.enroll_factor("default", site.user_id(), kind, "seed")
    api = ApiClient(site.app, "app")
    step = api.post("/login/password", ALICE)
    assert sorted(step.json["kinds"]) == ["email_otp", "totp"] and mail.sent == 0
    assert api.post("/login/factor/send", {"kind": "totp"}).json["error"] == "sends_nothing"
    assert api.post("/login/factor/send", {"kind": "email_otp"}).json == {
        "status": "sent",
        "kind": "email_otp",
    }
    assert api.post("/login/factor/send").json["status"] == "sent" and mail.sent == 2  # e-mail by default
    too_many = api.post("/login/factor/send", {"kind": "email_otp"})
    assert too_many.status_code == 429 and too_many.json["error"] == "too_many_sends"
    done = api.post("/login/factor", {"kind": "email_otp", "code": "8765 4321"})
    assert done.json["status"] == "authenticated"
