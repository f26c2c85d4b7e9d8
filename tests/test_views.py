"""The ready views (the ``authflow_views`` blueprint): login with factors, logout, step-up,
the account page, CSRF (built in and Flask-WTF), ``next`` handling and template overrides."""

from __future__ import annotations

import base64
import hmac
import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyotp
import pytest
from flask import Flask
from flask.testing import FlaskClient
from flask_wtf.csrf import CSRFError, CSRFProtect
from markupsafe import escape

from flask_authflow import AuthFlow, AuthFlowError, fresh_login_required, get_state, login_required
from flask_authflow._clock import MockClock
from flask_authflow._core.factors import (
    Accepted,
    EnrollContext,
    EnrollmentStart,
    FactorContext,
    Rejected,
    StoredEnrollment,
)
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import sid_hash
from flask_authflow._outcomes import FactorCredential, FactorKind
from flask_authflow._web.csrf import SESSION_KEY
from flask_authflow._web.state import account_admin
from flask_authflow._web.views import VIEWS_BLUEPRINT, csrf_token, register_views
from flask_authflow._web.views.common import MESSAGES
from flask_authflow.devices._labels import device_label
from flask_authflow.errors import ConfigurationError, InvalidInput
from flask_authflow.mfa._email_otp import EmailOtpFactor
from flask_authflow.mfa._webauthn import WebAuthnFactor, WebAuthnSettings
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT, Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory, base_app
from tests.parts import missing_part, require_marker
from tests.webauthn_soft import SoftAuthenticator

PASSWORD = "correct horse battery"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
HTML = {"Accept": "text/html"}
UNSAFE_NEXT = ["//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)", "evil"]


# --- the app under test ----------------------------------------------------------------------------


@dataclass
class Site:
    app: Flask
    authflow: AuthFlow
    backend: InMemoryBackend
    store: MemorySessionStore
    clock: MockClock

    def client(self, user_agent: str = TEST_USER_AGENT) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = user_agent
        return client

    def user_id(self, identifier: str = "alice") -> str:
        user = self.backend.find_user("default", identifier)
        assert user is not None
        return user.user_id

    def sessions(self, identifier: str = "alice") -> list[Any]:
        return self.store.list_user_sessions("default", self.user_id(identifier))


def make_site(
    app_factory: AppFactory,
    *,
    template_folder: str | None = None,
    register: bool = False,
    url_prefix: str | None = None,
    **config: Any,
) -> Site:
    authflow = AuthFlow()
    app = app_factory(
        authflow=authflow,
        import_name=__name__,
        template_folder=template_folder or "templates",
        AUTHFLOW_VIEWS=not register,
        **config,
    )
    state = get_state(app)
    backend, store, clock = state.backend, state.session_store, state.clock
    assert isinstance(backend, InMemoryBackend) and isinstance(store, MemorySessionStore)
    assert isinstance(clock, MockClock)
    if register:
        register_views(app, url_prefix=url_prefix)
    add_user(backend, "default", "alice", PASSWORD)
    add_user(backend, "default", "bob", "bob's own password")

    @app.get("/private")
    @login_required
    def private() -> str:
        return "private page"

    @app.get("/sensitive")
    @fresh_login_required
    def sensitive() -> str:
        return "sensitive page"

    return Site(app, authflow, backend, store, clock)


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_site(app_factory)


# --- HTML helpers --------------------------------------------------------------------------------


@dataclass
class Page:
    """What a page holds: forms (with their inputs and buttons), labels, links, assets."""

    forms: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[dict[str, str | None]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.page = Page()
        self._form: dict[str, Any] | None = None
        self._label: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.page.ids.append(str(a["id"]))
        fetched = tag in ("link", "img", "iframe") or (tag == "script" and "src" in a)
        if fetched or (tag == "a" and "://" in (a.get("href") or "")):
            self.page.external.append(f"{tag} {a}")
        if tag == "form":
            self._form = {"attrs": a, "inputs": [], "buttons": []}
            self.page.forms[a.get("id") or a.get("action") or str(len(self.page.forms))] = self._form
        elif tag == "input":
            self.page.inputs.append(a)
            if self._form is not None:
                self._form["inputs"].append(a)
        elif tag == "button" and self._form is not None:
            self._form["buttons"].append(a)
        elif tag == "label":
            self._label = a.get("for")
            if self._label:
                self.page.labels[self._label] = ""

    def handle_data(self, data: str) -> None:
        if self._label:
            self.page.labels[self._label] += data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "label":
            self._label = None


def parse(html: str) -> Page:
    parser = _Parser()
    parser.feed(html)
    return parser.page


def csrf_of(html: str, field_name: str = "csrf_token") -> str:
    match = re.search(rf'name="{field_name}" value="([^"]+)"', html)
    assert match is not None, "no CSRF field on the page"
    return match.group(1)


def input_named(page: Page, name: str) -> dict[str, str | None]:
    found = [i for i in page.inputs if i.get("name") == name]
    assert len(found) == 1, f"{len(found)} inputs named {name!r}"
    return found[0]


def login(client: FlaskClient, username: str = "alice", password: str = PASSWORD, **form: str) -> Any:
    page = client.get("/login")
    return client.post(
        "/login", data={"username": username, "password": password, "csrf_token": csrf_of(page.text), **form}
    )


def account_token(client: FlaskClient) -> str:
    page = client.get("/account")
    assert page.status_code == 200
    return csrf_of(page.text)


def session_hashes(html: str) -> dict[str, bool]:
    """``{session hash: is current}`` from the account page."""
    return {
        h: current == "true"
        for h, current in re.findall(r'data-session="([0-9a-f]{64})" data-current="(true|false)"', html)
    }


# --- wiring --------------------------------------------------------------------------------------


EXPECTED_RULES = {
    "authflow_views.login": ("/login", {"GET", "POST"}),
    "authflow_views.factor": ("/login/factor", {"GET", "POST"}),
    "authflow_views.step_up": ("/step-up", {"GET", "POST"}),
    "authflow_views.account": ("/account", {"GET"}),
    "authflow_views.change_password": ("/account/password", {"POST"}),
    "authflow_views.set_password": ("/account/password/set", {"POST"}),
    "authflow_views.revoke_session": ("/account/sessions/<session_hash>/revoke", {"POST"}),
    "authflow_views.revoke_other_sessions": ("/account/sessions/revoke-others", {"POST"}),
    "authflow_views.create_api_token": ("/account/api-tokens", {"POST"}),
    "authflow_views.revoke_api_token": ("/account/api-tokens/revoke", {"POST"}),
    "authflow_views.forget_device": ("/account/devices/<device_id>/forget", {"POST"}),
    "authflow_views.factor_send": ("/login/factor/send", {"POST"}),
    "authflow_views.factor_webauthn_options": ("/login/factor/webauthn-options", {"POST"}),
    "authflow_views.passkey_options": ("/login/passkey/options", {"POST"}),
    "authflow_views.passkey_login": ("/login/passkey", {"POST"}),
    "authflow_views.factors": ("/account/factors", {"GET"}),
    "authflow_views.enroll_totp": ("/account/factors/totp", {"GET", "POST"}),
    "authflow_views.confirm_totp": ("/account/factors/totp/confirm", {"POST"}),
    "authflow_views.generate_recovery_codes": ("/account/factors/recovery-codes", {"GET", "POST"}),
    "authflow_views.confirm_recovery_codes": ("/account/factors/recovery-codes/confirm", {"POST"}),
    "authflow_views.enroll_email": ("/account/factors/email", {"GET", "POST"}),
    "authflow_views.confirm_email": ("/account/factors/email/confirm", {"POST"}),
    "authflow_views.webauthn_enroll_options": ("/account/factors/webauthn/options", {"POST"}),
    "authflow_views.confirm_webauthn": ("/account/factors/webauthn/confirm", {"POST"}),
    "authflow_views.remove_factor": ("/account/factors/<factor_id>/remove", {"POST"}),
    "authflow_views.csrf": ("/csrf", {"GET"}),
    "authflow_views.forgot_password": ("/password/forgot", {"GET", "POST"}),
    "authflow_views.login_code": ("/login/code", {"GET", "POST"}),
    "authflow_views.login_code_link": ("/login/code/link", {"GET"}),
    "authflow_views.reset_password": ("/password/reset", {"GET", "POST"}),
    "authflow_views.signup": ("/signup", {"GET", "POST"}),
    "authflow_views.signup_verify": ("/signup/verify", {"GET", "POST"}),
    "authflow_views.signup_resend": ("/signup/resend", {"GET", "POST"}),
    "authflow_views.passkey_signup_options": ("/signup/passkey/options", {"POST"}),
    "authflow_views.passkey_signup": ("/signup/passkey", {"POST"}),
    "authflow_views.change_email": ("/account/email", {"GET", "POST"}),
    "authflow_views.confirm_email_change": ("/account/email/confirm", {"GET", "POST"}),
    "authflow_views.change_username": ("/account/username", {"GET", "POST"}),
}


def _rules(app: Flask) -> dict[str, tuple[str, set[str]]]:
    return {
        rule.endpoint: (rule.rule, set(rule.methods or ()) - {"HEAD", "OPTIONS"})
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith(f"{VIEWS_BLUEPRINT}.")
    }


def test_config_key_registers_the_endpoints_at_their_paths(site: Site) -> None:
    assert _rules(site.app) == EXPECTED_RULES


def test_register_views_takes_a_prefix_and_is_idempotent(app_factory) -> None:
    site = make_site(app_factory, register=True, url_prefix="/auth")
    assert _rules(site.app) == {
        endpoint: ("/auth" + path, methods) for endpoint, (path, methods) in EXPECTED_RULES.items()
    }
    blueprint = site.app.blueprints[VIEWS_BLUEPRINT]
    assert register_views(site.app) is blueprint  # a second registration changes nothing
    site.authflow.views.register(site.app)
    assert len(_rules(site.app)) == len(EXPECTED_RULES)
    client = site.client()
    page = client.get("/auth/login")
    assert 'action="/auth/login"' in page.text
    done = client.post(
        "/auth/login", data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    )
    assert done.status_code == 302 and done.location == "/auth/account"
    assert client.get("/auth/account").status_code == 200


def test_views_stay_off_unless_asked_and_need_the_extension(mock_clock, authflow_hasher) -> None:
    app = base_app(import_name=__name__)
    authflow = AuthFlow(app, backend=InMemoryBackend(clock=mock_clock), clock=mock_clock)
    assert VIEWS_BLUEPRINT not in app.blueprints
    authflow.views.register(app)
    assert _rules(app) == EXPECTED_RULES
    with pytest.raises(RuntimeError, match="not initialised"):
        register_views(Flask("bare"))


# --- the login page ------------------------------------------------------------------------------


def test_login_page_is_accessible_and_self_contained(site: Site) -> None:
    response = site.client().get("/login?next=/private")
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    page = parse(response.text)
    form = page.forms["login-form"]
    assert form["attrs"]["method"] == "post" and form["attrs"]["action"] == "/login"
    assert input_named(page, "username")["autocomplete"] == "username"
    assert input_named(page, "password")["autocomplete"] == "current-password"
    assert input_named(page, "password")["type"] == "password"
    assert input_named(page, "next")["value"] == "/private"
    assert input_named(page, "csrf_token")["type"] == "hidden"
    assert page.labels == {"username": "Username", "password": "Password"}
    assert [b["id"] for b in form["buttons"]] == ["login-submit"]
    assert page.external == []
    assert '<html lang="en">' in response.text


def test_login_redirects_to_the_account_and_the_page_lists_the_session(site: Site) -> None:
    client = site.client(FIREFOX)
    response = login(client)
    assert response.status_code == 302 and response.location == "/account"
    account = client.get("/account")
    assert account.status_code == 200
    assert "Signed in as <strong>alice</strong>" in account.text
    assert device_label(FIREFOX) in account.text  # the label the devices list shows too
    [record] = site.sessions()
    assert session_hashes(account.text) == {sid_hash(record.sid): True}
    assert record.sid not in account.text  # sessions are named by their hash only
    assert client.get("/private").text == "private page"


def test_login_follows_a_safe_next(site: Site) -> None:
    client = site.client()
    denied = client.get("/private?tab=2", headers=HTML)
    assert denied.status_code == 302 and denied.location == "/login?next=/private?tab%3D2"
    page = client.get(denied.location)
    assert input_named(parse(page.text), "next")["value"] == "/private?tab=2"
    done = client.post(
        "/login",
        data={
            "username": "alice",
            "password": PASSWORD,
            "next": "/private?tab=2",
            "csrf_token": csrf_of(page.text),
        },
    )
    assert done.status_code == 302 and done.location == "/private?tab=2"


@pytest.mark.parametrize("target", UNSAFE_NEXT)
def test_login_refuses_an_unsafe_next(site: Site, target: str) -> None:
    client = site.client()
    page = client.get("/login", query_string={"next": target})
    assert page.status_code == 200
    assert [i for i in parse(page.text).inputs if i.get("name") == "next"] == []
    assert "evil" not in page.text
    done = client.post(
        "/login",
        data={"username": "alice", "password": PASSWORD, "next": target, "csrf_token": csrf_of(page.text)},
    )
    assert done.status_code == 302 and done.location == "/account"


def test_wrong_password_and_unknown_user_get_the_same_generic_answer(site: Site) -> None:
    client = site.client()
    wrong = login(client, password="not it")
    unknown = login(client, username="nobody", password="not it")
    for response in (wrong, unknown):
        assert response.status_code == 401
        assert "Wrong username or password." in response.text
    assert input_named(parse(wrong.text), "username")["value"] == "alice"  # kept for the retry
    assert client.get("/account").status_code == 401
    assert site.sessions() == []


def test_lockout_answers_403_with_the_lock_end_and_lifts(app_factory, mock_clock) -> None:
    site = make_site(
        app_factory,
        AUTHFLOW_LOCKOUT_MAX_FAILURES=2,
        AUTHFLOW_LOCKOUT_DURATION=timedelta(minutes=15),
    )
    client = site.client()
    assert login(client, password="bad 1").status_code == 401
    locked = login(client, password="bad 2")
    assert locked.status_code == 403
    still = login(client)  # the right password during the lock
    assert still.status_code == 403
    until = (mock_clock.now() + timedelta(minutes=15)).strftime("%Y-%m-%d %H:%M")
    assert "Too many failed attempts. Try again after" in still.text and until in still.text
    assert client.get("/account").status_code == 401
    mock_clock.advance(timedelta(minutes=16))
    assert login(client).location == "/account"


@pytest.mark.parametrize(
    ("username", "password", "message"),
    [
        ("", PASSWORD, "Enter your username and password."),
        ("alice", "", "Enter your username and password."),
        ("a" * 5000, PASSWORD, "the identifier is too long"),
        ("al\x00ice", PASSWORD, "control characters"),
        ("alice", "p" * 2000, "passwords are limited to 1024 bytes"),
    ],
)
def test_bad_login_input_is_a_400_page(site: Site, username: str, password: str, message: str) -> None:
    response = login(site.client(), username=username, password=password)
    assert response.status_code == 400
    assert response.mimetype == "text/html"
    assert message in response.text


def test_login_page_of_a_signed_in_user_offers_a_new_login(site: Site) -> None:
    client = site.client()
    login(client)
    page = client.get("/login")
    assert page.status_code == 200 and "You are signed in as <strong>alice</strong>" in page.text
    assert login(client, username="bob", password="bob's own password").location == "/account"
    assert "Signed in as <strong>bob</strong>" in client.get("/account").text
    assert site.sessions("alice") == []


# --- CSRF (built in) -----------------------------------------------------------------------------


def test_login_without_or_with_a_wrong_csrf_token_is_refused(site: Site) -> None:
    client = site.client()
    client.get("/login")
    missing = client.post("/login", data={"username": "alice", "password": PASSWORD})
    wrong = client.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": "x" * 43})
    for response in (missing, wrong):
        assert response.status_code == 400 and response.mimetype == "text/html"
        assert "This form has expired or did not come from this site" in response.text
        assert csrf_of(response.text)  # the page offers a fresh form
    assert client.get("/account").status_code == 401
    assert site.sessions() == []


def test_a_token_of_another_session_is_refused(site: Site) -> None:
    attacker, victim = site.client(), site.client()
    token = csrf_of(attacker.get("/login").text)
    victim.get("/login")
    response = victim.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token})
    assert response.status_code == 400
    fresh = site.client()  # no session at all: nothing to compare with
    assert (
        fresh.post("/login", data={"username": "a", "password": "b", "csrf_token": token}).status_code == 400
    )


def test_the_token_rotates_at_login_and_logout_needs_the_new_one(site: Site) -> None:
    client = site.client()
    before = csrf_of(client.get("/login").text)
    client.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": before})
    after = account_token(client)
    assert after != before
    refused = client.post("/auth/logout", data={"csrf_token": before})
    assert refused.status_code == 400 and "This form has expired" in refused.text
    assert client.get("/account").status_code == 200  # still signed in
    assert client.post("/auth/logout").status_code == 400
    done = client.post("/auth/logout", data={"csrf_token": after})
    assert done.status_code == 302 and done.location == "/login"
    assert client.get("/account").status_code == 401
    assert site.sessions() == []
    assert client.get("/auth/logout").status_code == 405


def test_logout_of_a_guest_with_a_bad_token_shows_the_login_page(site: Site) -> None:
    response = site.client().post("/auth/logout", data={"csrf_token": "nope"})
    assert response.status_code == 400 and 'id="login-form"' in response.text


def _logout_rules(app: Flask) -> dict[str, tuple[str, set[str]]]:
    """Every rule of ``app`` whose endpoint is a logout (not the provider's return or back-channel)."""
    return {
        rule.endpoint: (rule.rule, set(rule.methods or ()) - {"HEAD", "OPTIONS"})
        for rule in app.url_map.iter_rules()
        if rule.endpoint.endswith(".logout")
    }


def password_only_app(app_factory: AppFactory, **config: Any) -> Flask:
    """A bare ``AuthFlow(app)`` (no views, no provider) with a JSON login and a CSRF token route."""
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, **config)
    add_user(get_state(app).backend, "default", "alice", PASSWORD)

    @app.post("/api/login")
    def api_login() -> str:
        return type(authflow.login.password("alice", PASSWORD)).__name__

    @app.get("/api/token")
    def api_token() -> str:
        return csrf_token()

    @app.get("/private")
    @login_required
    def private() -> str:
        return "private page"

    return app


def _signed_in(app: Flask) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    assert client.post("/api/login").text == "Authenticated"
    return client


def test_a_password_only_app_has_one_csrf_protected_logout_route(app_factory: AppFactory) -> None:
    app = password_only_app(app_factory)
    assert _logout_rules(app) == {"authflow_logout.logout": ("/auth/logout", {"POST"})}
    client = _signed_in(app)
    assert client.post("/auth/logout").status_code == 400  # a form without the token
    refused = client.post(
        "/auth/logout", data={"csrf_token": "forged"}, headers={"Accept": "application/json"}
    )
    assert refused.status_code == 400 and refused.json == {"error": "csrf", "message": MESSAGES["csrf"]}
    cross_site = client.post("/auth/logout", json={}, headers={"Origin": "https://evil.example"})
    assert cross_site.status_code == 403 and cross_site.headers["Cache-Control"] == "no-store"
    fetched = client.post("/auth/logout", json={}, headers={"Sec-Fetch-Site": "cross-site"})
    assert fetched.status_code == 403
    assert client.post("/auth/logout", json={}, headers={"Origin": "null"}).status_code == 403
    assert client.get("/private").status_code == 200  # every refusal kept the session
    assert client.get("/auth/logout").status_code == 405
    # JSON: no token (cross-site needs a preflight). Its own host behind a proxy ending TLS is this site.
    done = client.post("/auth/logout", json={}, headers={"Origin": "https://localhost"})
    assert done.status_code == 200 and done.json == {"status": "logged_out"}
    assert done.headers["Cache-Control"] == "no-store"
    assert client.get("/private", headers={"Accept": "application/json"}).status_code == 401
    form = _signed_in(app)
    token = form.get("/api/token").text
    ended = form.post("/auth/logout", data={"csrf_token": token})
    assert ended.status_code == 302 and ended.location == "/"
    assert form.get("/private", headers={"Accept": "application/json"}).status_code == 401


def test_the_logout_route_prefix_is_configurable_and_can_be_switched_off(app_factory: AppFactory) -> None:
    root = password_only_app(app_factory, AUTHFLOW_LOGOUT_URL_PREFIX="")
    assert _logout_rules(root) == {"authflow_logout.logout": ("/logout", {"POST"})}
    assert _signed_in(root).post("/logout", json={}).json == {"status": "logged_out"}
    nested = password_only_app(app_factory, AUTHFLOW_LOGOUT_URL_PREFIX="/api/session")
    assert _logout_rules(nested) == {"authflow_logout.logout": ("/api/session/logout", {"POST"})}
    off = password_only_app(app_factory, AUTHFLOW_LOGOUT_URL_PREFIX=None)
    assert _logout_rules(off) == {}
    assert _signed_in(off).post("/auth/logout", json={}).status_code == 404
    for bad in ("auth", "/auth/", 3):
        with pytest.raises(ConfigurationError, match="AUTHFLOW_LOGOUT_URL_PREFIX"):
            password_only_app(app_factory, AUTHFLOW_LOGOUT_URL_PREFIX=bad)


def test_the_ready_views_use_the_app_logout_route_or_bring_it_when_it_is_off(app_factory: AppFactory) -> None:
    on = make_site(app_factory)
    assert _logout_rules(on.app) == {"authflow_logout.logout": ("/auth/logout", {"POST"})}
    client = on.client()
    client.post(
        "/login",
        data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(client.get("/login").text)},
    )
    assert parse(client.get("/account").text).forms["logout-form"]["attrs"]["action"] == "/auth/logout"
    off = make_site(app_factory, AUTHFLOW_LOGOUT_URL_PREFIX=None)
    assert _logout_rules(off.app) == {"authflow_views.logout": ("/logout", {"POST"})}
    client = off.client()
    client.post(
        "/login",
        data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(client.get("/login").text)},
    )
    token = account_token(client)
    assert parse(client.get("/account").text).forms["logout-form"]["attrs"]["action"] == "/logout"
    assert client.post("/logout", data={"csrf_token": "forged"}).status_code == 400
    done = client.post("/logout", data={"csrf_token": token})
    assert done.status_code == 302 and done.location == "/login"
    assert client.get("/account").status_code == 401


# --- the factor step -----------------------------------------------------------------------------


@dataclass
class FixedCode:
    """A TOTP stand-in that accepts one code."""

    code: str
    kind: FactorKind = FactorKind.TOTP
    expensive: bool = False
    challenge_on_request: bool = False
    digits: int | None = 6

    def check_input(self, credential: FactorCredential) -> None:
        if len(credential) > 32:
            raise InvalidInput("the code is malformed")

    def challenge(self, ctx: FactorContext) -> None:
        return None

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> Accepted | Rejected:
        return (
            Accepted() if hmac.compare_digest(credential.secret_bytes(), self.code.encode()) else Rejected()
        )


@pytest.fixture
def mfa_site(site: Site) -> Site:
    get_state(site.app).service.register_factor(FixedCode("123456"))
    site.backend.enroll_factor("default", site.user_id(), FactorKind.TOTP, "seed")
    return site


def test_a_second_factor_has_its_own_page(mfa_site: Site) -> None:
    client = mfa_site.client()
    step = login(client, next="/private")
    assert step.status_code == 302 and step.location == "/login/factor?next=/private"
    assert client.get("/account").status_code == 401  # not signed in yet
    page = client.get(step.location)
    assert page.status_code == 200
    parsed = parse(page.text)
    code = input_named(parsed, "code")
    assert code["autocomplete"] == "one-time-code" and code["inputmode"] == "numeric"
    assert code["id"] == "code-totp" and parsed.labels["code-totp"] == "Authentication code"
    assert input_named(parsed, "next")["value"] == "/private"
    assert input_named(parsed, "kind") == {"type": "hidden", "name": "kind", "value": "totp"}
    form = parsed.forms["factor-form-totp"]
    assert form["attrs"]["method"] == "post" and [b["id"] for b in form["buttons"]] == ["factor-submit-totp"]
    assert "restart-login" in parsed.ids and "webauthn-button" not in parsed.ids
    assert "<script" not in page.text  # no security key here: no script either
    done = client.post(
        "/login/factor", data={"code": "123 456", "next": "/private", "csrf_token": csrf_of(page.text)}
    )
    assert done.status_code == 302 and done.location == "/private"
    assert client.get("/private").text == "private page"
    assert client.get("/login/factor").location == "/account"  # nothing left to verify


def test_a_wrong_code_keeps_the_step(mfa_site: Site) -> None:
    client = mfa_site.client()
    login(client)
    token = csrf_of(client.get("/login/factor").text)
    wrong = client.post("/login/factor", data={"code": "654321", "csrf_token": token})
    assert wrong.status_code == 401 and "That code was not accepted. Try again." in wrong.text
    assert 'id="factor-form-totp"' in wrong.text
    assert client.get("/account").status_code == 401  # still not signed in
    again = client.post("/login/factor", data={"code": "123456", "csrf_token": token})
    assert again.status_code == 302
    assert client.get("/account").status_code == 200


def test_the_factor_form_checks_its_token_and_input(mfa_site: Site) -> None:
    client = mfa_site.client()
    login(client)
    token = csrf_of(client.get("/login/factor").text)
    refused = client.post("/login/factor", data={"code": "123456", "csrf_token": "forged"})
    assert refused.status_code == 400 and "This form has expired" in refused.text
    empty = client.post("/login/factor", data={"code": "  ", "csrf_token": token})
    assert empty.status_code == 400 and "Enter the code." in empty.text
    huge = client.post("/login/factor", data={"code": "9" * 300, "csrf_token": token})
    assert huge.status_code == 400 and "too long" in huge.text
    malformed = client.post("/login/factor", data={"code": "9" * 40, "csrf_token": token})
    assert malformed.status_code == 400 and "the code is malformed" in malformed.text
    # none of these ended the login: the right code still completes it
    assert client.post("/login/factor", data={"code": "123456", "csrf_token": token}).location == "/account"


@pytest.mark.parametrize("target", UNSAFE_NEXT)
def test_the_factor_step_refuses_an_unsafe_next(mfa_site: Site, target: str) -> None:
    client = mfa_site.client()
    login(client)
    page = client.get("/login/factor", query_string={"next": target})
    assert "evil" not in page.text
    done = client.post(
        "/login/factor", data={"code": "123456", "next": target, "csrf_token": csrf_of(page.text)}
    )
    assert done.location == "/account"


@pytest.mark.parametrize(
    ("kind", "label", "inputmode", "maxlength"),
    [
        (FactorKind.EMAIL_OTP, "Code from your e-mail", "numeric", "16"),
        (FactorKind.HOTP, "Authentication code", "numeric", "12"),
    ],
)
def test_the_factor_page_names_the_pending_factor(
    site: Site, kind: FactorKind, label: str, inputmode: str, maxlength: str
) -> None:
    # The field is sized by the digits the factor declares (two characters per digit), and
    # a factor that sends its code offers to send it, as the e-mail factor declares.
    mail = kind is FactorKind.EMAIL_OTP
    stand_in = FixedCode("24681357", kind=kind, digits=8 if mail else 6, challenge_on_request=mail)
    get_state(site.app).service.register_factor(stand_in)
    site.backend.enroll_factor("default", site.user_id(), kind, "seed")
    client = site.client()
    assert login(client).location == "/login/factor"
    html = client.get("/login/factor").text
    page = parse(html)
    code = input_named(page, "code")
    assert page.labels[f"code-{kind.value}"] == label
    assert (code["inputmode"], code["autocomplete"], code["maxlength"]) == (
        inputmode,
        "one-time-code",
        maxlength,
    )
    assert page.forms[f"factor-form-{kind.value}"]["attrs"]["data-factor"] == kind.value
    # only e-mail codes have a "send" button (the only way: the code went out already)
    assert ("send-code-form" in page.forms) is (kind is FactorKind.EMAIL_OTP)
    if kind is FactorKind.EMAIL_OTP:
        assert "E-mail me a new code" in html
    token = csrf_of(html)
    wrong = client.post("/login/factor", data={"code": "00000000", "kind": kind.value, "csrf_token": token})
    assert wrong.status_code == 401 and "That code was not accepted. Try again." in wrong.text
    done = client.post("/login/factor", data={"code": "24681357", "kind": kind.value, "csrf_token": token})
    assert done.location == "/account"


def test_a_kind_the_app_cannot_verify_is_not_offered(site: Site) -> None:
    site.backend.enroll_factor("default", site.user_id(), FactorKind.WEBAUTHN, "seed")  # no RP configured
    client = site.client()
    assert login(client).location == "/login/factor"
    html = client.get("/login/factor").text
    page = parse(html)
    assert "no-method" in page.ids and "webauthn-button" not in page.ids and "<script" not in html
    refused = client.post(
        "/login/factor",
        data={"kind": "webauthn", "credential": "{}", "csrf_token": csrf_of(client.get("/login").text)},
    )
    assert refused.status_code == 401 and "Your security key was not accepted" in refused.text
    assert client.get("/account").status_code == 401


def test_the_factor_page_of_a_guest_goes_to_the_login(site: Site) -> None:
    client = site.client()
    assert client.get("/login/factor?next=/private").location == "/login?next=/private"
    assert client.post("/login/factor", data={"code": "1"}).location == "/login"


# --- step-up -------------------------------------------------------------------------------------


def test_step_up_refreshes_the_login_and_follows_next(site: Site, mock_clock: MockClock) -> None:
    client = site.client()
    login(client)
    assert client.get("/sensitive").text == "sensitive page"
    mock_clock.advance(timedelta(minutes=11))  # older than AUTHFLOW_FRESHNESS
    denied = client.get("/sensitive", headers=HTML)
    assert denied.status_code == 302 and denied.location == "/step-up?next=/sensitive"
    page = client.get(denied.location)
    parsed = parse(page.text)
    assert input_named(parsed, "password")["autocomplete"] == "current-password"
    assert input_named(parsed, "username")["autocomplete"] == "username"
    assert input_named(parsed, "username")["value"] == "alice"
    assert input_named(parsed, "next")["value"] == "/sensitive"
    assert set(parsed.labels) == {"step-up-username", "step-up-password"}
    # no second factor: the password form alone, as it always was
    assert parsed.ids == [
        "home-link",
        "content",
        "step-up-form",
        "step-up-username",
        "step-up-password",
        "step-up-submit",
    ]
    assert "Enter your password again to continue." in page.text and "<script" not in page.text
    token = csrf_of(page.text)
    wrong = client.post("/step-up", data={"password": "nope", "next": "/sensitive", "csrf_token": token})
    assert wrong.status_code == 401 and "Your password is not correct." in wrong.text
    assert client.get("/private").status_code == 200  # a failed step-up keeps the login
    assert client.get("/sensitive").status_code == 401
    done = client.post("/step-up", data={"password": PASSWORD, "next": "/sensitive", "csrf_token": token})
    assert done.status_code == 302 and done.location == "/sensitive"
    assert client.get("/sensitive").text == "sensitive page"


@pytest.mark.parametrize("target", UNSAFE_NEXT)
def test_step_up_refuses_an_unsafe_next(site: Site, target: str) -> None:
    client = site.client()
    login(client)
    page = client.get("/step-up", query_string={"next": target})
    assert "evil" not in page.text
    done = client.post(
        "/step-up", data={"password": PASSWORD, "next": target, "csrf_token": csrf_of(page.text)}
    )
    assert done.location == "/account?notice=stepped_up"
    assert "Thank you: your identity is confirmed." in client.get(done.location).text


def test_step_up_checks_token_input_and_lockout(app_factory) -> None:
    site = make_site(app_factory, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
    client = site.client()
    login(client)
    token = csrf_of(client.get("/step-up").text)
    assert client.post("/step-up", data={"password": PASSWORD}).status_code == 400
    assert client.post("/step-up", data={"password": "", "csrf_token": token}).status_code == 400
    assert client.post("/step-up", data={"password": "bad", "csrf_token": token}).status_code == 401
    locked = client.post("/step-up", data={"password": "bad again", "csrf_token": token})
    assert locked.status_code == 403 and "Too many failed attempts" in locked.text
    assert client.post("/step-up", data={"password": PASSWORD, "csrf_token": token}).status_code == 403
    assert client.get("/private").status_code == 200  # locked out of re-verifying, not logged out


def test_step_up_of_a_guest_goes_to_the_login(site: Site) -> None:
    client = site.client()
    assert client.get("/step-up?next=/sensitive").location == "/login?next=/sensitive"
    assert client.post("/step-up", data={"password": PASSWORD}).location == "/login"


# --- the account page ----------------------------------------------------------------------------


def test_account_page_forms_have_stable_names_labels_and_autocomplete(site: Site) -> None:
    client = site.client()
    login(client)
    page = parse(client.get("/account").text)
    change = page.forms["change-password-form"]
    assert change["attrs"]["action"] == "/account/password" and change["attrs"]["method"] == "post"
    fields = {i["name"]: i for i in change["inputs"]}
    assert fields["current_password"]["autocomplete"] == "current-password"
    assert fields["new_password"]["autocomplete"] == "new-password"
    assert fields["new_password_confirm"]["autocomplete"] == "new-password"
    assert [b["id"] for b in change["buttons"]] == ["change-password-submit"]
    assert page.labels == {
        "current-password": "Current password",
        "new-password": "New password",
        "new-password-confirm": "New password, again",
        "api-token-name": "Name",
        "api-token-scopes": "Scopes (separated by spaces; optional)",
        "api-token-days": "Expires in (days)",
    }
    for form_id, button in (("revoke-others-form", "revoke-others-submit"), ("logout-form", "logout-submit")):
        form = page.forms[form_id]
        assert form["attrs"]["method"] == "post" and [b["id"] for b in form["buttons"]] == [button]
    visible = [i for i in page.inputs if i.get("type") not in ("hidden",) and "hidden" not in i]
    assert visible and all(i["id"] in page.labels for i in visible)
    assert page.external == []
    assert len(page.ids) == len(set(page.ids))  # ids are unique


def test_account_needs_a_login(site: Site) -> None:
    client = site.client()
    assert client.get("/account", headers=HTML).location == "/login?next=/account"
    assert client.get("/account").status_code == 401
    for path in (
        "/account/password",
        "/account/sessions/revoke-others",
        f"/account/sessions/{'a' * 64}/revoke",
    ):
        response = client.post(path, data={"csrf_token": "x"})
        assert response.status_code == 302 and response.location == "/login?next=/account"


def test_a_user_the_loader_no_longer_finds_is_sent_to_the_login(site: Site) -> None:
    gone: set[str] = set()

    @site.authflow.user_loader
    def load(tenant: str, user_id: str) -> object | None:
        return None if user_id in gone else object()

    client = site.client()
    login(client)
    token = account_token(client)
    gone.add(site.user_id())
    assert client.get("/account", headers=HTML).location == "/login?next=/account"
    assert client.post("/account/sessions/revoke-others", data={"csrf_token": token}).location == (
        "/login?next=/account"
    )
    assert client.get("/step-up").location == "/login"


def test_change_password_ends_other_sessions_and_keeps_this_one(site: Site) -> None:
    mine, other = site.client(FIREFOX), site.client()
    login(mine)
    login(other)
    assert len(site.sessions()) == 2
    token = account_token(mine)
    cookie = mine.get_cookie("authflow_session")
    assert cookie is not None
    response = mine.post(
        "/account/password",
        data={
            "current_password": PASSWORD,
            "new_password": "a brand new passphrase",
            "new_password_confirm": "a brand new passphrase",
            "csrf_token": token,
        },
    )
    assert response.status_code == 302 and response.location == "/account?notice=password_changed"
    page = mine.get(response.location)
    assert page.status_code == 200 and "Your password has been changed." in page.text
    new_cookie = mine.get_cookie("authflow_session")
    assert new_cookie is not None and new_cookie.value != cookie.value  # the session id rotated
    assert csrf_of(page.text) != token  # ... and the CSRF token
    assert mine.post("/account/sessions/revoke-others", data={"csrf_token": token}).status_code == 400
    assert other.get("/account").status_code == 401
    assert other.get("/account", headers=HTML).location == "/login?next=/account"
    [record] = site.sessions()
    assert session_hashes(page.text) == {sid_hash(record.sid): True}
    assert login(site.client()).status_code == 401  # the old password is gone
    assert login(site.client(), password="a brand new passphrase").location == "/account"


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"current_password": "wrong", "new_password": "n3w pass", "new_password_confirm": "n3w pass"}, 401,
         "Your current password is not correct."),
        ({"current_password": PASSWORD, "new_password": "n3w pass", "new_password_confirm": "other"}, 400,
         "The two new passwords do not match."),
        ({"current_password": PASSWORD, "new_password": "", "new_password_confirm": ""}, 400,
         "Fill in your current password and the new password twice."),
        ({"current_password": "", "new_password": "n3w pass", "new_password_confirm": "n3w pass"}, 400,
         "Fill in your current password and the new password twice."),
        ({"current_password": PASSWORD, "new_password": "p" * 2000, "new_password_confirm": "p" * 2000}, 400,
         "1024 bytes"),
    ],
)  # fmt: skip
def test_change_password_refusals_change_nothing(
    site: Site, form: dict[str, str], status: int, message: str
) -> None:
    mine, other = site.client(), site.client()
    login(mine)
    login(other)
    response = mine.post("/account/password", data={**form, "csrf_token": account_token(mine)})
    assert response.status_code == status
    assert message in response.text and 'id="change-password-form"' in response.text
    assert other.get("/account").status_code == 200  # nobody was logged out
    assert login(site.client()).location == "/account"  # the password is unchanged


def test_a_password_the_policy_refuses_is_shown_with_its_message(site: Site) -> None:
    with site.app.app_context(), pytest.raises(AuthFlowError) as refused:
        account_admin().set_password("default", "alice", "alice")  # what the app's policy says
    client, other = site.client(), site.client()
    login(client)
    login(other)
    form = {"current_password": PASSWORD, "new_password": "alice", "new_password_confirm": "alice"}
    response = client.post("/account/password", data={**form, "csrf_token": account_token(client)})
    assert response.status_code == 400
    assert f'role="alert">{escape(refused.value.message)}</p>' in response.text
    assert other.get("/account").status_code == 200
    assert login(site.client()).location == "/account"


def test_change_password_needs_the_token(site: Site) -> None:
    client = site.client()
    login(client)
    response = client.post(
        "/account/password",
        data={"current_password": PASSWORD, "new_password": "n3w pass!", "new_password_confirm": "n3w pass!"},
    )
    assert response.status_code == 400 and "This form has expired" in response.text
    assert login(site.client()).location == "/account"


def test_change_password_with_a_wrong_current_password_is_lockout_protected(app_factory) -> None:
    site = make_site(app_factory, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
    client = site.client()
    login(client)
    form = {"current_password": "guess", "new_password": "n3w pass!", "new_password_confirm": "n3w pass!"}
    assert (
        client.post("/account/password", data={**form, "csrf_token": account_token(client)}).status_code
        == 401
    )
    locked = client.post("/account/password", data={**form, "csrf_token": account_token(client)})
    assert locked.status_code == 403 and "Too many failed attempts" in locked.text
    right = {**form, "current_password": PASSWORD, "csrf_token": account_token(client)}
    assert client.post("/account/password", data=right).status_code == 403
    assert login(site.client(), password="n3w pass!").status_code == 403  # locked, and unchanged


def test_log_out_one_other_session(site: Site) -> None:
    mine, other, third = site.client(FIREFOX), site.client(), site.client()
    for client in (mine, other, third):
        login(client)
    page = mine.get("/account").text
    hashes = session_hashes(page)
    assert len(hashes) == 3 and sum(hashes.values()) == 1
    assert next(iter(hashes.values())) is True  # the current session comes first
    target = next(h for h, current in hashes.items() if not current)
    parsed = parse(page)
    assert f"revoke-{target}" in parsed.ids
    response = mine.post(f"/account/sessions/{target}/revoke", data={"csrf_token": csrf_of(page)})
    assert response.status_code == 302 and response.location == "/account?notice=session_revoked"
    assert target not in session_hashes(mine.get("/account").text)
    statuses = sorted(client.get("/account").status_code for client in (other, third))
    assert statuses == [200, 401]
    again = mine.post(f"/account/sessions/{target}/revoke", data={"csrf_token": csrf_of(page)})
    assert again.status_code == 404 and "That session is not one of yours" in again.text


@pytest.mark.parametrize("bad", ["zz", "A" * 64, "0" * 63, "0" * 65])
def test_a_malformed_session_hash_is_a_404(site: Site, bad: str) -> None:
    client = site.client()
    login(client)
    response = client.post(f"/account/sessions/{bad}/revoke", data={"csrf_token": account_token(client)})
    assert response.status_code == 404 and "That session is not one of yours" in response.text


def test_revoking_needs_the_token(site: Site) -> None:
    mine, other = site.client(), site.client()
    login(mine)
    login(other)
    target = next(h for h, current in session_hashes(mine.get("/account").text).items() if not current)
    assert mine.post(f"/account/sessions/{target}/revoke", data={"csrf_token": "x"}).status_code == 400
    assert mine.post("/account/sessions/revoke-others").status_code == 400
    assert other.get("/account").status_code == 200


def test_logging_out_this_session_from_the_list_is_a_logout(site: Site) -> None:
    client = site.client()
    login(client)
    page = client.get("/account").text
    [current] = [h for h, is_current in session_hashes(page).items() if is_current]
    response = client.post(f"/account/sessions/{current}/revoke", data={"csrf_token": csrf_of(page)})
    assert response.status_code == 302 and response.location == "/login"
    assert client.get("/account").status_code == 401
    assert site.sessions() == []


def test_another_users_session_cannot_be_revoked(site: Site) -> None:
    alice, bob = site.client(), site.client()
    login(alice)
    login(bob, username="bob", password="bob's own password")
    [bobs] = session_hashes(bob.get("/account").text)
    response = alice.post(f"/account/sessions/{bobs}/revoke", data={"csrf_token": account_token(alice)})
    assert response.status_code == 404
    assert bob.get("/account").status_code == 200
    assert bobs not in alice.get("/account").text


def test_log_out_all_other_sessions(site: Site) -> None:
    mine, second, third = site.client(FIREFOX), site.client(), site.client()
    for client in (mine, second, third):
        login(client)
    login(site.client(), username="bob", password="bob's own password")
    response = mine.post("/account/sessions/revoke-others", data={"csrf_token": account_token(mine)})
    assert response.status_code == 302 and response.location == "/account?notice=others_revoked"
    page = mine.get(response.location)
    assert "All your other sessions have been logged out." in page.text
    assert list(session_hashes(page.text).values()) == [True]
    assert second.get("/account").status_code == 401 and third.get("/account").status_code == 401
    assert len(site.sessions("bob")) == 1  # another user's sessions are not touched


def test_an_unknown_notice_shows_nothing(site: Site) -> None:
    client = site.client()
    login(client)
    page = client.get("/account?notice=<script>alert(1)</script>")
    assert page.status_code == 200 and 'id="notice"' not in page.text and "<script>" not in page.text


# --- template overrides --------------------------------------------------------------------------


def test_an_app_template_overrides_the_packaged_one(app_factory: AppFactory, tmp_path: Path) -> None:
    (tmp_path / "authflow").mkdir()
    (tmp_path / "authflow" / "login.html").write_text(
        "<h1>Welcome to Example Corp</h1>"
        '<form method="post" id="login-form">'
        '<input type="hidden" name="{{ csrf_field_name }}" value="{{ csrf_token }}">'
        '<label for="u">Email</label><input id="u" name="username" autocomplete="username">'
        '<label for="p">Secret</label>'
        '<input id="p" name="password" type="password" autocomplete="current-password">'
        "{% if error %}<p>{{ error }}</p>{% endif %}</form>"
    )
    site = make_site(app_factory, template_folder=str(tmp_path))
    client = site.client()
    page = client.get("/login")
    assert "Welcome to Example Corp" in page.text and "Sign in</h1>" not in page.text
    assert login(client, password="nope").text.endswith("<p>Wrong username or password.</p></form>")
    assert login(client).location == "/account"
    account = client.get("/account")  # not overridden: the packaged page
    assert account.status_code == 200 and 'id="change-password-form"' in account.text


def test_overriding_the_base_template_restyles_every_page(app_factory: AppFactory, tmp_path: Path) -> None:
    (tmp_path / "authflow").mkdir()
    (tmp_path / "authflow" / "base.html").write_text(
        "<!doctype html><title>{% block title %}{% endblock %} | Example</title>"
        "<nav>Example Corp</nav>{% block content %}{% endblock %}"
    )
    site = make_site(app_factory, template_folder=str(tmp_path))
    client = site.client()
    page = client.get("/login").text
    assert "<title>Sign in | Example</title>" in page and "<nav>Example Corp</nav>" in page
    assert 'id="login-form"' in page
    login(client)
    assert "<title>Your account | Example</title>" in client.get("/account").text


def test_without_an_override_the_packaged_template_is_used(site: Site) -> None:
    page = site.client().get("/login").text
    assert "Welcome to Example Corp" not in page and "<h1>Sign in</h1>" in page


# --- Flask-WTF -----------------------------------------------------------------------------------


#: What the app's handler of Flask-WTF's ``CSRFError`` answers: the refusal was Flask-WTF's
#: (its reasons' wording, "The CSRF token is missing.", is its own and changes between releases).
WTF_REFUSED = "refused by Flask-WTF"


def _wtf_site(app_factory: AppFactory, **config: Any) -> tuple[Site, CSRFProtect]:
    site = make_site(app_factory, SECRET_KEY=secrets.token_hex(32), **config)

    @site.app.errorhandler(CSRFError)
    def refused(error: CSRFError) -> tuple[str, int]:
        return WTF_REFUSED, 400

    return site, CSRFProtect(site.app)


def test_with_flask_wtf_its_token_is_used_and_rotated_at_login(app_factory) -> None:
    site, _ = _wtf_site(app_factory)
    client = site.client()
    page = client.get("/login")
    token = csrf_of(page.text)
    assert token.count(".") == 2  # Flask-WTF's signed token, not the built-in one
    with client.session_transaction() as session:
        assert SESSION_KEY not in session and "csrf_token" in session
    done = client.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token})
    assert done.location == "/account"
    new_token = account_token(client)
    assert new_token != token
    old = client.post("/auth/logout", data={"csrf_token": token})
    assert old.status_code == 400 and old.text == WTF_REFUSED
    assert client.get("/account").status_code == 200
    assert client.post("/auth/logout", data={"csrf_token": new_token}).location == "/login"
    assert client.get("/account").status_code == 401


def test_flask_wtf_rejects_a_missing_or_foreign_token_before_the_view(app_factory) -> None:
    site, _ = _wtf_site(app_factory)
    client = site.client()
    client.get("/login")
    missing = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert missing.status_code == 400 and missing.text == WTF_REFUSED
    builtin_style = client.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": secrets.token_urlsafe(32)}
    )
    assert builtin_style.status_code == 400 and builtin_style.text == WTF_REFUSED
    assert client.get("/account").status_code == 401
    assert site.sessions() == []


@pytest.mark.parametrize("setup", ["check_default_off", "exempt"])
def test_the_views_run_flask_wtf_themselves_when_it_skipped_them(app_factory: AppFactory, setup: str) -> None:
    config = {"WTF_CSRF_CHECK_DEFAULT": False} if setup == "check_default_off" else {}
    site, csrf = _wtf_site(app_factory, **config)
    if setup == "exempt":
        csrf.exempt(site.app.blueprints[VIEWS_BLUEPRINT])
    client = site.client()
    page = client.get("/login")
    refused = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert refused.status_code == 400 and refused.text == WTF_REFUSED  # the view asked Flask-WTF
    assert site.sessions() == []
    done = client.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    )
    assert done.location == "/account"


def test_flask_wtf_disabled_leaves_the_built_in_token(app_factory) -> None:
    site, _ = _wtf_site(app_factory, WTF_CSRF_ENABLED=False)
    client = site.client()
    page = client.get("/login")
    with client.session_transaction() as session:
        assert session[SESSION_KEY] == csrf_of(page.text)
    refused = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert refused.status_code == 400 and "This form has expired" in refused.text
    assert login(client).location == "/account"


def test_flask_wtf_field_name_is_followed(app_factory) -> None:
    site, _ = _wtf_site(app_factory, WTF_CSRF_FIELD_NAME="xsrf")
    client = site.client()
    page = client.get("/login")
    assert 'name="csrf_token"' not in page.text
    token = csrf_of(page.text, "xsrf")
    assert (
        client.post(
            "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token}
        ).status_code
        == 400
    )
    assert (
        client.post("/login", data={"username": "alice", "password": PASSWORD, "xsrf": token}).location
        == "/account"
    )


# --- sign-in methods (/account/factors) with the real TOTP and recovery-code factors -------------


FRESHNESS_PASSED = timedelta(minutes=11)  # older than AUTHFLOW_FRESHNESS (10 minutes)
STEP = timedelta(seconds=30)


def totp_now(secret: str, clock: MockClock, steps: int = 0) -> str:
    """The code an authenticator app shows at the app's (mock) time, ``steps`` periods away."""
    return pyotp.TOTP(secret).at(int(clock.now().timestamp()) + 30 * steps)


def hidden_value(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match is not None, f"no field {name!r} on the page"
    return match.group(1)


def factors_token(client: FlaskClient) -> str:
    page = client.get("/account/factors")
    assert page.status_code == 200
    return csrf_of(page.text)


def enroll_totp(site: Site, client: FlaskClient) -> str:
    """Set up an authenticator app through the pages; returns its key (base32)."""
    page = client.post("/account/factors/totp", data={"csrf_token": factors_token(client)})
    assert page.status_code == 200, page.text
    secret_match = re.search(r'id="totp-secret">([A-Z2-7]+)</code>', page.text)
    assert secret_match is not None
    secret = secret_match.group(1)
    done = client.post(
        "/account/factors/totp/confirm",
        data={
            "factor_id": hidden_value(page.text, "factor_id"),
            "code": totp_now(secret, site.clock),
            "csrf_token": csrf_of(page.text),
        },
    )
    assert done.status_code == 302 and done.location == "/account/factors?notice=totp_added"
    return secret


def generate_recovery_codes(client: FlaskClient) -> tuple[list[str], str]:
    """Ask for a new set: (the codes shown, the page's HTML)."""
    page = client.post("/account/factors/recovery-codes", data={"csrf_token": factors_token(client)})
    assert page.status_code == 200, page.text
    codes = re.findall(r"<li><code>([a-z0-9]{5}-[a-z0-9]{5})</code></li>", page.text)
    return codes, page.text


def confirm_recovery_codes(client: FlaskClient, html: str, code: str) -> Any:
    return client.post(
        "/account/factors/recovery-codes/confirm",
        data={"factor_id": hidden_value(html, "factor_id"), "code": code, "csrf_token": csrf_of(html)},
    )


def factor_step(client: FlaskClient, code: str, kind: str = "totp", **form: str) -> Any:
    token = csrf_of(client.get("/login/factor").text)
    return client.post("/login/factor", data={"code": code, "kind": kind, "csrf_token": token, **form})


def logout(client: FlaskClient) -> None:
    assert client.post("/auth/logout", data={"csrf_token": account_token(client)}).location == "/login"


def test_enroll_totp_through_the_pages(site: Site) -> None:
    mine, other = site.client(FIREFOX), site.client()
    login(mine)
    login(other)
    account = parse(mine.get("/account").text)
    assert "factors-link" in account.ids
    listing = mine.get("/account/factors")
    parsed = parse(listing.text)
    assert "no-factors" in parsed.ids and parsed.external == []
    assert [b["id"] for b in parsed.forms["add-totp-form"]["buttons"]] == ["add-totp-submit"]
    assert {"recovery-codes-form"} <= set(parsed.forms)
    # no WebAuthn relying party, no mail sender: neither is offered
    assert "add-webauthn-form" not in parsed.forms and "add-email-form" not in parsed.forms

    page = mine.post("/account/factors/totp", data={"csrf_token": csrf_of(listing.text)})
    assert page.status_code == 200 and page.headers["Cache-Control"] == "no-store"
    qr = re.search(r'<figure class="qr" id="totp-qr">\s*<svg[^>]*class="authflow-qr"', page.text)
    assert qr is not None  # the QR code, inline
    secret = re.search(r'id="totp-secret">([A-Z2-7]{32})</code>', page.text)
    assert secret is not None
    form = parse(page.text)
    code_field = input_named(form, "code")
    assert code_field["autocomplete"] == "one-time-code" and code_field["inputmode"] == "numeric"
    assert form.labels["totp-code"] == "Code from the app" and form.external == []
    factor_id = hidden_value(page.text, "factor_id")
    token = csrf_of(page.text)

    def confirm(code: str) -> Any:
        return mine.post(
            "/account/factors/totp/confirm", data={"factor_id": factor_id, "code": code, "csrf_token": token}
        )

    wrong = confirm(totp_now(secret.group(1), site.clock, steps=5))
    assert wrong.status_code == 400 and "That code was not accepted. Try again, or start again." in wrong.text
    assert (
        secret.group(1) not in wrong.text and 'id="confirm-totp-form"' in wrong.text
    )  # the key is not shown again
    malformed = confirm("12a456")
    assert malformed.status_code == 400 and "exactly 6 digits" in malformed.text
    assert confirm("").status_code == 400
    assert site.backend.required_factors("default", site.user_id()) == [FactorKind.PASSWORD]  # still pending
    assert other.get("/account").status_code == 200  # nothing changed yet

    done = confirm(totp_now(secret.group(1), site.clock))
    assert done.status_code == 302 and done.location == "/account/factors?notice=totp_added"
    assert site.backend.required_factors("default", site.user_id()) == [FactorKind.PASSWORD, FactorKind.TOTP]
    listed = mine.get(done.location)
    assert "Your authenticator app is set up." in listed.text and secret.group(1) not in listed.text
    rows = re.findall(
        r'class="factor" id="factor-([^"]+)" data-factor-id="[^"]+" data-kind="totp"', listed.text
    )
    assert rows == [factor_id]
    assert other.get("/account").status_code == 401  # the user's other sessions ended
    assert mine.get("/account").status_code == 200  # ... not this one
    assert len(site.sessions()) == 1


def test_sign_in_with_password_and_totp_through_the_pages(site: Site) -> None:
    client = site.client()
    login(client)
    secret = enroll_totp(site, client)
    logout(client)
    site.clock.advance(STEP)  # the code that confirmed the app is used up
    step = login(client, next="/private")
    assert step.status_code == 302 and step.location == "/login/factor?next=/private"
    assert client.get("/private").status_code == 401  # the password alone signs nobody in
    page = parse(client.get(step.location).text)
    assert [f for f in page.forms if f.startswith("factor-form-")] == ["factor-form-totp"]
    assert "factor-choices" not in page.ids
    done = factor_step(client, totp_now(secret, site.clock), next="/private")
    assert done.status_code == 302 and done.location == "/private"
    assert client.get("/private").text == "private page"
    listed = client.get("/account/factors").text
    assert "last used" in listed


def test_a_wrong_or_malformed_totp_code_keeps_the_step(site: Site) -> None:
    client = site.client()
    login(client)
    secret = enroll_totp(site, client)
    logout(client)
    site.clock.advance(STEP)
    login(client)
    full_width, arabic_indic = "\uff11\uff12\uff13\uff14\uff15\uff16", "\u0660\u0661\u0662\u0663\u0664\u0665"
    for bad in ("12a456", full_width, "1234567", arabic_indic):
        refused = factor_step(client, bad)
        assert refused.status_code == 400 and "exactly 6 digits" in refused.text, bad
    for steps in (-2, 2):
        wrong = factor_step(client, totp_now(secret, site.clock, steps=steps))
        assert wrong.status_code == 401 and "That code was not accepted. Try again." in wrong.text
    refused_kind = factor_step(client, totp_now(secret, site.clock), kind="hotp")
    assert refused_kind.status_code == 400 and "does not take that kind of code" in refused_kind.text
    assert client.get("/account").status_code == 401
    assert factor_step(client, totp_now(secret, site.clock)).location == "/account"


def test_five_wrong_totp_codes_lock_the_account(site: Site) -> None:
    client = site.client()
    login(client)
    secret = enroll_totp(site, client)
    logout(client)
    site.clock.advance(STEP)
    login(client)
    right = totp_now(secret, site.clock)
    wrong = f"{(int(right) + 1) % 1_000_000:06d}"
    statuses = [factor_step(client, wrong).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 401]
    locked = factor_step(client, wrong)
    assert locked.status_code == 403 and "Too many failed attempts" in locked.text
    assert 'id="login-form"' in locked.text  # the login ended: back to the sign-in page
    assert client.get("/login/factor").location == "/login"
    assert login(client).status_code == 403  # the account is locked for the password too
    site.clock.advance(timedelta(minutes=16))
    login(client)
    assert factor_step(client, totp_now(secret, site.clock)).location == "/account"


def test_recovery_codes_are_shown_once_and_pass_the_step_instead_of_totp(site: Site) -> None:
    client = site.client()
    login(client)
    enroll_totp(site, client)
    codes, html = generate_recovery_codes(client)
    assert len(codes) == 10 and len(set(codes)) == 10
    page = parse(html)
    assert input_named(page, "code")["autocomplete"] == "off"
    assert "confirm-recovery-form" in page.forms
    reloaded = client.get("/account/factors/recovery-codes")  # a reload: never the codes again
    assert reloaded.status_code == 302 and reloaded.location == "/account/factors"
    listing = client.get("/account/factors").text
    assert not any(code in listing for code in codes)
    wrong = confirm_recovery_codes(client, html, "aaaaa-bbbbb")
    assert wrong.status_code == 400 and "That code was not accepted" in wrong.text
    assert not any(code in wrong.text for code in codes)
    assert confirm_recovery_codes(client, html, "not a code").status_code == 400
    done = confirm_recovery_codes(client, html, codes[0])
    assert done.status_code == 302 and done.location == "/account/factors?notice=recovery_added"
    listed = client.get(done.location).text
    assert "10 of 10 codes left" in listed and not any(code in listed for code in codes)

    # at the factor step, a recovery code is one of the alternatives
    logout(client)
    login(client)
    step = client.get("/login/factor").text
    step_page = parse(step)
    assert [f for f in step_page.forms if f.startswith("factor-form-")] == [
        "factor-form-totp",
        "factor-form-recovery_code",
    ]
    assert "factor-choices" in step_page.ids and step_page.labels["code-recovery_code"] == "Recovery code"
    assert factor_step(client, codes[1], kind="recovery_code").location == "/account"
    assert "9 of 10 codes left" in client.get("/account/factors").text

    # each code works once, in any later login too
    logout(client)
    login(client)
    again = factor_step(client, codes[1], kind="recovery_code")
    assert again.status_code == 401 and "That code was not accepted. Try again." in again.text
    assert client.get("/account").status_code == 401
    typed = codes[2].replace("-", "").upper()  # as people type them
    assert factor_step(client, typed, kind="recovery_code").location == "/account"


def test_new_recovery_codes_replace_the_old_set_once_confirmed(site: Site) -> None:
    client = site.client()
    login(client)
    enroll_totp(site, client)
    old, html = generate_recovery_codes(client)
    confirm_recovery_codes(client, html, old[0])
    new, html = generate_recovery_codes(client)
    assert not set(new) & set(old)
    assert "Generate new recovery codes" in client.get("/account/factors").text
    logout(client)
    login(client)
    assert factor_step(client, old[1], kind="recovery_code").location == "/account"  # not confirmed yet
    generated, html = generate_recovery_codes(client)
    assert (
        confirm_recovery_codes(client, html, generated[0]).location
        == "/account/factors?notice=recovery_added"
    )
    listed = client.get("/account/factors").text
    assert len(re.findall(r'data-kind="recovery_code"', listed)) == 1
    logout(client)
    login(client)
    assert factor_step(client, old[2], kind="recovery_code").status_code == 401  # the old set died
    assert factor_step(client, generated[3], kind="recovery_code").location == "/account"


def test_removing_a_factor_needs_a_fresh_login(site: Site) -> None:
    client, other = site.client(FIREFOX), site.client()
    login(client)
    secret = enroll_totp(site, client)
    site.clock.advance(STEP)
    login(other)
    assert factor_step(other, totp_now(secret, site.clock)).location == "/account"
    [factor_id] = re.findall(
        r'data-factor-id="([^"]+)" data-kind="totp"', client.get("/account/factors").text
    )
    site.clock.advance(FRESHNESS_PASSED)
    stale = client.post(f"/account/factors/{factor_id}/remove", data={"csrf_token": factors_token(client)})
    assert stale.status_code == 302 and stale.location == "/step-up?next=/account/factors"
    assert FactorKind.TOTP in site.backend.required_factors("default", site.user_id())
    assert other.get("/account").status_code == 200
    page = client.get(stale.location)
    parsed = parse(page.text)
    # the step-up asks for the second factor again, with the factor page's forms
    assert [f for f in parsed.forms if f.startswith("factor-form-")] == ["factor-form-totp"]
    assert parsed.forms["factor-form-totp"]["attrs"]["action"] == "/step-up"
    assert "step-up-form" not in parsed.forms and "step-up-password" not in parsed.ids
    assert "step-up-intro" in parsed.ids and input_named(parsed, "next")["value"] == "/account/factors"
    assert input_named(parsed, "kind")["value"] == "totp"
    assert "<script" not in page.text  # no security key: no script
    stepped = client.post(
        "/step-up",
        data={
            "kind": "totp",
            "code": totp_now(secret, site.clock),  # a later step than the code the other login used
            "next": "/account/factors",
            "csrf_token": csrf_of(page.text),
        },
    )
    assert stepped.status_code == 302 and stepped.location == "/account/factors"
    listing = client.get("/account/factors")
    assert f'id="remove-{factor_id}"' in listing.text
    removed = client.post(f"/account/factors/{factor_id}/remove", data={"csrf_token": csrf_of(listing.text)})
    assert removed.status_code == 302 and removed.location == "/account/factors?notice=factor_removed"
    assert "no-factors" in parse(client.get(removed.location).text).ids
    assert site.backend.required_factors("default", site.user_id()) == [FactorKind.PASSWORD]
    assert other.get("/account").status_code == 401  # a factor change ends the other sessions
    # The app's code, verified last in this login, still counts after its factor is gone:
    # no step-up is asked for the next change.
    token = factors_token(client)
    again = client.post(f"/account/factors/{factor_id}/remove", data={"csrf_token": token})
    assert again.status_code == 404 and "not one of yours" in again.text
    logout(client)
    assert login(client).location == "/account"  # the password alone again


def test_adding_a_factor_needs_a_fresh_login(site: Site) -> None:
    client = site.client()
    login(client)
    site.clock.advance(FRESHNESS_PASSED)
    token = factors_token(client)
    for path in ("/account/factors/totp", "/account/factors/recovery-codes"):
        response = client.post(path, data={"csrf_token": token})
        assert response.status_code == 302 and response.location == "/step-up?next=/account/factors"
    assert site.backend.list_user_factors("default", site.user_id(), include_pending=True) == [
        f
        for f in site.backend.list_user_factors("default", site.user_id(), include_pending=True)
        if f.kind is FactorKind.PASSWORD
    ]


def totp_factor_id(client: FlaskClient) -> str:
    [factor_id] = re.findall(
        r'data-factor-id="([^"]+)" data-kind="totp"', client.get("/account/factors").text
    )
    return factor_id


def remove(client: FlaskClient, factor_id: str) -> Any:
    return client.post(f"/account/factors/{factor_id}/remove", data={"csrf_token": factors_token(client)})


def step_up_with(client: FlaskClient, target: str = "/account/factors", **form: str) -> Any:
    """Open the step-up page (``next=target``) and post ``form`` from it."""
    page = client.get("/step-up", query_string={"next": target})
    assert page.status_code == 200, page.text
    return client.post("/step-up", data={"next": target, "csrf_token": csrf_of(page.text), **form})


NEW_PASSWORD = "a brand new passphrase, 2026"


def test_a_password_step_up_does_not_let_a_totp_user_change_factors(site: Site) -> None:
    client = site.client()
    login(client)
    secret = enroll_totp(site, client)
    factor_id = totp_factor_id(client)
    site.clock.advance(FRESHNESS_PASSED)
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"

    page = client.get("/step-up?next=/account/factors")
    parsed = parse(page.text)
    assert "step-up-form" not in parsed.forms
    assert not [i for i in parsed.inputs if i.get("type") == "password"]  # no password field at all
    assert {"factor-form-totp", "method-totp", "code-totp", "factor-submit-totp"} <= {
        *parsed.forms,
        *parsed.ids,
    }
    assert "Use your second factor again to continue." in page.text
    token = csrf_of(page.text)
    for form in ({"password": PASSWORD}, {"kind": "password", "password": PASSWORD}):
        refused = client.post("/step-up", data={**form, "next": "/account/factors", "csrf_token": token})
        assert refused.status_code == 400 and "Your password alone is not enough here" in refused.text
        assert 'id="factor-form-totp"' in refused.text and 'id="step-up-password"' not in refused.text
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"

    # The account's password change needs the second factor too: the current password alone
    # (a password step-up) is not enough, and nothing changes.
    changed = client.post(
        "/account/password",
        data={
            "current_password": PASSWORD,
            "new_password": NEW_PASSWORD,
            "new_password_confirm": NEW_PASSWORD,
            "csrf_token": account_token(client),
        },
    )
    assert changed.location == "/step-up?next=/account"
    assert client.get("/sensitive").status_code == 401  # not refreshed either
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    assert client.post("/account/factors/totp", data={"csrf_token": factors_token(client)}).location == (
        "/step-up?next=/account/factors"
    )
    assert FactorKind.TOTP in site.backend.required_factors("default", site.user_id())

    stepped = step_up_with(client, kind="totp", code=totp_now(secret, site.clock))
    assert stepped.location == "/account/factors"
    assert remove(client, factor_id).location == "/account/factors?notice=factor_removed"


def test_a_wrong_code_at_the_step_up_changes_nothing(app_factory) -> None:
    site = make_site(app_factory, AUTHFLOW_LOCKOUT_MAX_FAILURES=3)
    client = site.client()
    login(client)
    secret = enroll_totp(site, client)
    factor_id = totp_factor_id(client)
    site.clock.advance(FRESHNESS_PASSED)
    page = client.get("/step-up?next=/account/factors")
    token = csrf_of(page.text)
    right = totp_now(secret, site.clock)
    wrong = f"{(int(right) + 1) % 1_000_000:06d}"

    def post(**form: str) -> Any:
        return client.post("/step-up", data={"next": "/account/factors", "csrf_token": token, **form})

    refused = post(kind="totp", code=wrong)
    assert refused.status_code == 401 and "That code was not accepted. Try again." in refused.text
    again = parse(refused.text)  # the page again, for another try
    assert "factor-form-totp" in again.forms and input_named(again, "next")["value"] == "/account/factors"
    assert client.get("/private").status_code == 200  # a failed step-up keeps the login
    assert client.get("/sensitive").status_code == 401  # ... and does not refresh it
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    assert FactorKind.TOTP in site.backend.required_factors("default", site.user_id())

    # bad input: 400 with the reason, nothing counted, never a 500
    bad_forms: list[tuple[dict[str, str], str]] = [
        ({"kind": "totp", "code": "12a456"}, "exactly 6 digits"),
        ({"kind": "totp", "code": "  "}, "Enter the code."),
        ({"kind": "totp", "code": "9" * 300}, "too long"),
        ({"kind": "hotp", "code": right}, "does not take that kind of code"),
        ({"kind": "webauthn", "credential": "{}"}, "does not take that kind of code"),
        ({"kind": "no such kind", "code": right}, "does not take that kind of code"),
        ({"kind": "email_otp", "action": "send"}, "does not take that kind of code"),
        ({"kind": "totp", "action": "send"}, "does not send codes"),
    ]
    for form, message in bad_forms:
        response = post(**form)
        assert response.status_code == 400 and message in response.text, form
    forged = client.post("/step-up", data={"kind": "totp", "code": right, "csrf_token": "forged"})
    assert forged.status_code == 400 and "This form has expired" in forged.text

    assert post(kind="totp", code=wrong).status_code == 401
    locked = post(kind="totp", code=wrong)  # the third wrong answer
    assert locked.status_code == 403 and "Too many failed attempts" in locked.text
    assert post(kind="totp", code=right).status_code == 403  # locked: not even the right code
    assert client.get("/private").status_code == 200  # locked out of re-verifying, not logged out
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    site.clock.advance(timedelta(minutes=16))
    assert step_up_with(client, kind="totp", code=totp_now(secret, site.clock)).location == "/account/factors"
    assert remove(client, factor_id).location == "/account/factors?notice=factor_removed"


def test_a_recovery_code_passes_the_step_up(site: Site) -> None:
    client = site.client()
    login(client)
    enroll_totp(site, client)
    codes, html = generate_recovery_codes(client)
    assert confirm_recovery_codes(client, html, codes[0]).location == "/account/factors?notice=recovery_added"
    factor_id = totp_factor_id(client)
    site.clock.advance(FRESHNESS_PASSED)
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    page = parse(client.get("/step-up?next=/account/factors").text)
    forms = [f for f in page.forms if f.startswith("factor-form-")]
    assert forms == ["factor-form-totp", "factor-form-recovery_code"]
    assert all(page.forms[f]["attrs"]["action"] == "/step-up" for f in forms)
    assert "factor-choices" in page.ids and page.labels["code-recovery_code"] == "Recovery code"
    stepped = step_up_with(client, kind="recovery_code", code=codes[1].replace("-", " ").upper())
    assert stepped.status_code == 302 and stepped.location == "/account/factors"
    # each code works once: a spent one does not pass a later step-up
    site.clock.advance(FRESHNESS_PASSED)
    spent = step_up_with(client, kind="recovery_code", code=codes[1])
    assert spent.status_code == 401 and "That code was not accepted. Try again." in spent.text
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    assert step_up_with(client, kind="recovery_code", code=codes[2]).location == "/account/factors"
    assert remove(client, factor_id).location == "/account/factors?notice=factor_removed"
    assert "8 of 10 codes left" in client.get("/account/factors").text


def test_factor_forms_need_a_login_and_the_token(site: Site) -> None:
    guest = site.client()
    assert guest.get("/account/factors", headers=HTML).location == "/login?next=/account/factors"
    assert guest.get("/account/factors").status_code == 401
    paths = [
        "/account/factors/totp",
        "/account/factors/totp/confirm",
        "/account/factors/recovery-codes",
        "/account/factors/recovery-codes/confirm",
        "/account/factors/email",
        "/account/factors/email/confirm",
        "/account/factors/webauthn/confirm",
        "/account/factors/abc/remove",
    ]
    for path in paths:
        response = guest.post(path, data={"csrf_token": "x"})
        assert response.status_code == 302 and response.location == "/login?next=/account/factors", path
    client = site.client()
    login(client)
    for path in paths:
        response = client.post(path, data={"csrf_token": "forged", "factor_id": "abc", "code": "123456"})
        assert response.status_code == 400 and "This form has expired" in response.text, path
    options = client.post("/account/factors/webauthn/options", data={"csrf_token": "forged"})
    assert options.status_code == 400 and options.json is not None and options.json["error"] == "csrf"
    assert guest.post("/account/factors/webauthn/options").json["location"] == "/login?next=/account/factors"
    pending = site.backend.list_user_factors("default", site.user_id(), include_pending=True)
    assert [f.kind for f in pending] == [FactorKind.PASSWORD]


@pytest.mark.parametrize("factor_id", ["..", "a" * 65, "a b", "x%2Fy"])
def test_a_malformed_or_foreign_factor_id_is_a_404(site: Site, factor_id: str) -> None:
    bob = site.client()
    login(bob, username="bob", password="bob's own password")
    enroll_totp(site, bob)
    [bobs] = re.findall(r'data-factor-id="([^"]+)"', bob.get("/account/factors").text)
    client = site.client()
    login(client)
    token = factors_token(client)
    for target in (factor_id, bobs):
        response = client.post(f"/account/factors/{target}/remove", data={"csrf_token": token})
        assert response.status_code in (404, 405) if target == ".." else response.status_code == 404
    assert FactorKind.TOTP in site.backend.required_factors("default", site.user_id("bob"))


def test_confirming_with_a_made_up_factor_id_starts_again(site: Site) -> None:
    client = site.client()
    login(client)
    token = factors_token(client)
    for factor_id in ("", "no such id", "x" * 80):
        response = client.post(
            "/account/factors/totp/confirm",
            data={"factor_id": factor_id, "code": "123456", "csrf_token": token},
        )
        assert response.status_code == 400 and "Start again" in response.text
    unknown = client.post(
        "/account/factors/totp/confirm", data={"factor_id": "abcdefgh", "code": "123456", "csrf_token": token}
    )
    assert unknown.status_code == 400 and "start again" in unknown.text and 'id="totp-qr"' not in unknown.text


# --- the factor step's buttons: e-mail me a code, security keys, passkeys ------------------------


@dataclass
class FakeMailCode(FixedCode):
    """An e-mail code stand-in: sent on request when the step has other kinds."""

    kind: FactorKind = FactorKind.EMAIL_OTP
    sent: int = 0
    challenge_on_request: bool = True
    digits: int | None = 8

    def challenge(self, ctx: FactorContext) -> dict[str, Any]:  # type: ignore[override]
        if self.sent >= 2:
            return {"error": "too_many_sends"}
        self.sent += 1
        return {"sent": True}


def test_e_mail_me_a_code_sends_on_request(site: Site) -> None:
    mail = FakeMailCode("87654321")
    service = get_state(site.app).service
    service.register_factor(FixedCode("123456"))
    service.register_factor(mail)
    site.backend.enroll_factor("default", site.user_id(), FactorKind.TOTP, "seed")
    site.backend.enroll_factor("default", site.user_id(), FactorKind.EMAIL_OTP, "seed")
    client = site.client()
    assert login(client, next="/private").location == "/login/factor?next=/private"
    assert mail.sent == 0  # an alternative: nothing is sent before the user asks
    html = client.get("/login/factor?next=/private").text
    page = parse(html)
    send = page.forms["send-code-form"]
    assert send["attrs"]["action"] == "/login/factor/send" and [b["id"] for b in send["buttons"]] == [
        "send-code-submit"
    ]
    assert "E-mail me a code" in html
    refused = client.post("/login/factor/send", data={"kind": "email_otp"})
    assert refused.status_code == 400 and mail.sent == 0
    token = csrf_of(html)
    sent = client.post(
        "/login/factor/send", data={"kind": "email_otp", "next": "/private", "csrf_token": token}
    )
    assert sent.status_code == 302 and sent.location == "/login/factor?next=/private&notice=code_sent"
    assert mail.sent == 1 and "We sent a code" in client.get(sent.location).text
    assert client.post("/login/factor/send", data={"kind": "totp", "csrf_token": token}).status_code == 400
    assert (
        client.post("/login/factor/send", data={"kind": "email_otp", "csrf_token": token}).status_code == 302
    )
    too_many = client.post("/login/factor/send", data={"kind": "email_otp", "csrf_token": token})
    assert too_many.status_code == 429 and "Start over" in too_many.text
    done = factor_step(client, "87654321", kind="email_otp", next="/private")
    assert done.location == "/private"
    assert (
        client.post("/login/factor/send", data={"kind": "email_otp", "csrf_token": token}).location
        == "/account"
    )


def test_the_webauthn_and_passkey_endpoints_refuse_without_a_step_or_token(site: Site) -> None:
    client = site.client()
    token = csrf_of(client.get("/login").text)
    no_step = client.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assert no_step.status_code == 409 and no_step.json["location"] == "/login"
    assert no_step.headers["Cache-Control"] == "no-store"
    assert client.post("/login/passkey/options", data={}).json["error"] == "csrf"
    not_configured = client.post("/login/passkey/options", data={"csrf_token": token})
    assert not_configured.status_code == 400 and not_configured.json["error"] == "factor_not_registered"
    assert client.post("/login/passkey", data={"csrf_token": token}).status_code == 400
    assert (
        client.post("/login/passkey", data={"csrf_token": token, "credential": "x" * 20000}).status_code
        == 400
    )
    assert "passkey-button" not in parse(client.get("/login").text).ids  # not offered either


# --- the WebAuthn script, run in Node against the real endpoints ---------------------------------

HARNESS = Path(__file__).resolve().parent / "webauthn_script_harness.js"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


AUTHENTICATOR = {
    "rawId": b64url(b"key-\x00\xff-1"),
    "clientDataJSON": b64url(b'{"type":"webauthn.get"}'),
    "authenticatorData": b64url(b"\x49\x96authdata\xfe"),
    "signature": b64url(b"\x30\x45signature\xff\xfe"),
    "userHandle": b64url(b"\x01handle"),
    "attestationObject": b64url(b"\xa3attestation\x00"),
}


@dataclass
class FakeKey(StoredEnrollment):
    """A WebAuthn stand-in that accepts the harness's authenticator: options out, the
    browser's JSON in (checked field by field), enrollment, and passkey sign-in."""

    challenge_bytes: bytes = b"\x00challenge\xff\xfe-0123456789abcdef"
    kind: FactorKind = FactorKind.WEBAUTHN
    replaces_kind: bool = False
    issued: int = 0
    expensive: bool = False
    challenge_on_request: bool = False
    digits: int | None = None

    def check_input(self, credential: FactorCredential) -> None:
        try:
            value = json.loads(credential.secret_bytes())
        except ValueError:
            raise InvalidInput("the credential is not JSON") from None
        if not isinstance(value, dict) or value.get("type") != "public-key":
            raise InvalidInput("the credential is not a PublicKeyCredential")

    def _options(self) -> dict[str, Any]:
        self.issued += 1
        return {
            "challenge": b64url(self.challenge_bytes),
            "allowCredentials": [{"type": "public-key", "id": AUTHENTICATOR["rawId"], "transports": ["usb"]}],
            "rpId": "example.com",
            "userVerification": "preferred",
            "timeout": 60000,
        }

    def challenge(self, ctx: FactorContext) -> dict[str, Any]:
        return {"publicKey": self._options()}

    def verify(self, ctx: FactorContext, credential: FactorCredential) -> Accepted | Rejected:
        value = json.loads(credential.secret_bytes())
        expected = {key: AUTHENTICATOR[key] for key in ("clientDataJSON", "authenticatorData", "signature")}
        response = value.get("response", {})
        ok = (
            value.get("rawId") == AUTHENTICATOR["rawId"]
            and value.get("id") == AUTHENTICATOR["rawId"]
            and all(response.get(key) == v for key, v in expected.items())
            and response.get("userHandle") == AUTHENTICATOR["userHandle"]
        )
        return Accepted() if ok else Rejected()

    def passkey_challenge(self, ctx: FactorContext) -> dict[str, Any]:
        ctx.flow_update = {"challenge": b64url(self.challenge_bytes)}
        options = self._options()
        del options["allowCredentials"]
        return {"publicKey": options}

    def find_passkey(self, store: Any, tenant: str, credential: FactorCredential) -> Any:
        raw = json.loads(credential.secret_bytes()).get("rawId")
        return store.find_factor_by_lookup(tenant, FactorKind.WEBAUTHN, raw) if isinstance(raw, str) else None

    def begin(self, ctx: EnrollContext, params: Mapping[str, Any]) -> EnrollmentStart:
        factor_id = secrets.token_urlsafe(16)
        ctx.store.add_factor(
            ctx.tenant,
            FactorConfig(
                user_id=ctx.user_id, kind=self.kind, created_at=ctx.now, factor_id=factor_id, confirmed=False,
                data={"label": params["label"], "passkey": params["passkey"]}, lookup=AUTHENTICATOR["rawId"],
            ),
        )  # fmt: skip
        options = {
            "challenge": b64url(self.challenge_bytes),
            "rp": {"id": "example.com", "name": "Example"},
            "user": {
                "id": b64url(b"\x02user-handle"),
                "name": ctx.account_name,
                "displayName": ctx.account_name,
            },
            "pubKeyCredParams": [{"type": "public-key", "alg": -7}],
            "excludeCredentials": [{"type": "public-key", "id": b64url(b"old-key")}],
        }
        return EnrollmentStart(factor_id, self.kind, public={"publicKey": options})

    def confirm(
        self, ctx: EnrollContext, factor_id: str, credential: FactorCredential
    ) -> Accepted | Rejected:
        response = json.loads(credential.secret_bytes()).get("response", {})
        ok = response.get("attestationObject") == AUTHENTICATOR["attestationObject"]
        return Accepted(factor_id) if ok and response.get("transports") == ["usb", "nfc"] else Rejected()


class _Elements(HTMLParser):
    """The elements the script touches (forms with their fields, buttons, status lines) and
    the inline script itself."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: dict[str, dict[str, Any]] = {}
        self.script = ""
        self._form: dict[str, Any] | None = None
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v if v is not None else "" for k, v in attrs}
        if tag == "script":
            self._in_script = True
        elif tag == "form":
            self._form = {
                "id": a.get("id"),
                "tag": "form",
                "attrs": a,
                "action": a.get("action"),
                "fields": {},
            }
            self._form["submit"] = None
            if a.get("id"):
                self.elements[a["id"]] = self._form
        elif tag == "input" and self._form is not None and a.get("name"):
            if a.get("type") != "checkbox" or "checked" in a:
                self._form["fields"][a["name"]] = a.get("value", "")
        elif tag == "button" and a.get("id"):
            self.elements[a["id"]] = {"id": a["id"], "tag": "button", "attrs": a, "fields": {}}
            if self._form is not None and a.get("type") == "submit" and self._form["submit"] is None:
                self._form["submit"] = a["id"]
        elif a.get("id") and a.get("role") == "status":
            self.elements[a["id"]] = {"id": a["id"], "tag": tag, "attrs": a, "fields": {}}

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "script":
            self._in_script = False


def run_webauthn_script(
    html: str, start: str, responses: dict[str, tuple[int, Any]], fields: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run the page's WebAuthn script in Node: ``start`` is clicked (a button) or submitted
    (a form); ``responses`` answer its requests by URL."""
    require_marker("interop", "Node.js")
    node = shutil.which("node")
    if node is None:
        missing_part("Node.js is not installed (scripts/test provisions it): the WebAuthn script cannot run")
        raise AssertionError("unreachable")
    parser = _Elements()
    parser.feed(html)
    assert parser.script.strip(), "no inline script on the page"
    for name, value in (fields or {}).items():
        parser.elements[start]["fields"][name] = value
    request = {
        "script": parser.script,
        "elements": list(parser.elements.values()),
        "start": start,
        "responses": {url: list(answer) for url, answer in responses.items()},
        "authenticator": AUTHENTICATOR,
    }
    done = subprocess.run(
        [node, str(HARNESS)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture
def key_site(app_factory: AppFactory) -> tuple[Site, FakeKey]:
    site = make_site(
        app_factory,
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"],
        AUTHFLOW_PASSKEY_LOGIN=True,
    )
    key = FakeKey()
    get_state(site.app).service.register_factor(key)
    return site, key


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_the_security_key_button_passes_the_step(key_site: tuple[Site, FakeKey]) -> None:
    site, key = key_site
    get_state(site.app).service.register_factor(FixedCode("123456"))
    site.backend.enroll_factor("default", site.user_id(), FactorKind.TOTP, "seed")
    site.backend.enroll_factor("default", site.user_id(), FactorKind.WEBAUTHN, "seed")
    client = site.client()
    assert login(client, next="/private").location == "/login/factor?next=/private"
    html = client.get("/login/factor?next=/private").text
    page = parse(html)
    assert {"factor-form-totp", "webauthn-form"} <= set(page.forms) and "factor-choices" in page.ids
    button = next(b for b in page.forms["webauthn-form"]["buttons"] if b["id"] == "webauthn-button")
    assert button["type"] == "button" and "disabled" in button  # enabled by the script only
    assert page.external == []
    token = csrf_of(html)
    options = client.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assert options.status_code == 200 and options.headers["Cache-Control"] == "no-store"
    assert options.json["publicKey"]["challenge"] == b64url(key.challenge_bytes)
    assert client.post("/login/factor/webauthn-options", data={}).status_code == 400

    report = run_webauthn_script(
        html, "webauthn-button", {"/login/factor/webauthn-options": (200, options.json)}
    )
    assert report["enabled"] and report["errors"] == [] and report["status"] == {}
    [fetched] = report["fetches"]
    assert fetched["url"] == "/login/factor/webauthn-options" and fetched["method"] == "POST"
    assert fetched["credentials"] == "same-origin" and fetched["body"]["csrf_token"] == token
    seen = report["options"]["get"]
    assert seen["challenge"] == {"arrayBuffer": b64url(key.challenge_bytes)}
    assert seen["allowCredentials"][0]["id"] == {"arrayBuffer": AUTHENTICATOR["rawId"]}
    assert seen["rpId"] == "example.com" and seen["timeout"] == 60000
    submitted = report["submitted"]
    assert submitted["form"] == "webauthn-form" and submitted["action"] == "/login/factor"
    sent = submitted["fields"]
    assert (sent["kind"], sent["next"], sent["csrf_token"]) == ("webauthn", "/private", token)
    credential = json.loads(sent["credential"])
    assert credential == {
        "id": AUTHENTICATOR["rawId"],
        "rawId": AUTHENTICATOR["rawId"],
        "type": "public-key",
        "response": {
            k: AUTHENTICATOR[k] for k in ("clientDataJSON", "authenticatorData", "signature", "userHandle")
        },
        "clientExtensionResults": {"credProps": {"rk": True}},
        "authenticatorAttachment": "cross-platform",
    }
    wrong = {**sent, "credential": sent["credential"].replace(AUTHENTICATOR["signature"], b64url(b"forged"))}
    refused = client.post("/login/factor", data=wrong)
    assert refused.status_code == 401 and "Your security key was not accepted. Try again." in refused.text
    done = client.post("/login/factor", data=sent)
    assert done.status_code == 302 and done.location == "/private"


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_the_script_reports_refusals_and_follows_locations(key_site: tuple[Site, FakeKey]) -> None:
    site, _ = key_site
    site.backend.enroll_factor("default", site.user_id(), FactorKind.WEBAUTHN, "seed")
    client = site.client()
    login(client)
    html = client.get("/login/factor").text
    gone = site.client().post("/login/factor/webauthn-options", data={"csrf_token": "x"})  # a guest's answer
    assert gone.status_code == 409
    moved = run_webauthn_script(html, "webauthn-button", {"/login/factor/webauthn-options": (409, gone.json)})
    assert moved["location"] == "/login" and moved["submitted"] is None
    refused = run_webauthn_script(
        html,
        "webauthn-button",
        {"/login/factor/webauthn-options": (400, {"error": "csrf", "message": "Expired."})},
    )
    assert refused["status"] == {"webauthn-status": "Expired."} and refused["submitted"] is None


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_add_a_security_key_through_the_page(key_site: tuple[Site, FakeKey]) -> None:
    site, key = key_site
    client, other = site.client(), site.client()
    login(client)
    login(other)
    html = client.get("/account/factors").text
    page = parse(html)
    assert {"add-webauthn-form", "webauthn-confirm-form"} <= set(page.forms)
    assert page.labels["webauthn-label"] == "Name of the key" and "webauthn-passkey" in page.labels
    token = csrf_of(html)
    options = client.post(
        "/account/factors/webauthn/options",
        data={"csrf_token": token, "label": " Blue   key ", "passkey": "1"},
    )
    assert options.status_code == 200 and set(options.json) == {"factor_id", "publicKey"}
    report = run_webauthn_script(
        html,
        "add-webauthn-form",
        {"/account/factors/webauthn/options": (200, options.json)},
        fields={"label": "Blue key", "passkey": "1"},
    )
    assert report["enabled"] and report["errors"] == []
    assert report["fetches"][0]["body"] == {"csrf_token": token, "label": "Blue key", "passkey": "1"}
    created = report["options"]["create"]
    assert created["challenge"] == {"arrayBuffer": b64url(key.challenge_bytes)}
    assert (
        created["user"]["id"] == {"arrayBuffer": b64url(b"\x02user-handle")}
        and created["user"]["name"] == "alice"
    )
    assert created["excludeCredentials"][0]["id"] == {"arrayBuffer": b64url(b"old-key")}
    submitted = report["submitted"]
    assert submitted["form"] == "webauthn-confirm-form"
    assert submitted["fields"]["factor_id"] == options.json["factor_id"]
    attestation = json.loads(submitted["fields"]["credential"])
    assert attestation["response"] == {
        "clientDataJSON": AUTHENTICATOR["clientDataJSON"],
        "attestationObject": AUTHENTICATOR["attestationObject"],
        "transports": ["usb", "nfc"],
    }
    done = client.post(submitted["action"], data=submitted["fields"])
    assert done.status_code == 302 and done.location == "/account/factors?notice=webauthn_added"
    listed = client.get(done.location).text
    assert "Blue key" in listed and 'data-kind="webauthn"' in listed and "Passkey" in listed
    assert other.get("/account").status_code == 401


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_adding_a_key_on_a_stale_login_goes_to_the_step_up(key_site: tuple[Site, FakeKey]) -> None:
    site, _ = key_site
    client = site.client()
    login(client)
    html = client.get("/account/factors").text
    site.clock.advance(FRESHNESS_PASSED)
    stale = client.post("/account/factors/webauthn/options", data={"csrf_token": csrf_of(html)})
    assert stale.status_code == 401 and stale.json["location"] == "/step-up?next=/account/factors"
    report = run_webauthn_script(
        html, "add-webauthn-form", {"/account/factors/webauthn/options": (401, stale.json)}
    )
    assert report["location"] == "/step-up?next=/account/factors" and report["options"] is None
    too_long = client.post(
        "/account/factors/webauthn/options", data={"csrf_token": csrf_of(html), "label": "k" * 65}
    )
    assert too_long.status_code == 400


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_sign_in_with_a_passkey(key_site: tuple[Site, FakeKey]) -> None:
    site, key = key_site
    enrolling = site.client()
    login(enrolling)
    options = enrolling.post(
        "/account/factors/webauthn/options",
        data={
            "csrf_token": csrf_of(enrolling.get("/account/factors").text),
            "label": "Phone",
            "passkey": "1",
        },
    )
    attestation = {"type": "public-key", "response": {"attestationObject": AUTHENTICATOR["attestationObject"],
                                                      "transports": ["usb", "nfc"]}}  # fmt: skip
    confirmed = enrolling.post(
        "/account/factors/webauthn/confirm",
        data={
            "factor_id": options.json["factor_id"],
            "credential": json.dumps(attestation),
            "csrf_token": csrf_of(enrolling.get("/account/factors").text),
        },
    )
    assert confirmed.location == "/account/factors?notice=webauthn_added"

    client = site.client()
    html = client.get("/login?next=/private").text
    page = parse(html)
    assert "passkey-form" in page.forms and "passkey-button" in page.ids
    token = csrf_of(html)
    begun = client.post("/login/passkey/options", data={"csrf_token": token})
    assert begun.status_code == 200 and begun.json["publicKey"]["challenge"] == b64url(key.challenge_bytes)
    report = run_webauthn_script(
        html,
        "passkey-button",
        {
            "/login/passkey/options": (200, begun.json),
            "/login/passkey": (200, {"status": "authenticated", "location": "/private"}),
        },
    )
    assert "allowCredentials" not in report["options"]["get"]
    options_call, finish_call = report["fetches"]
    assert options_call["url"] == "/login/passkey/options" and finish_call["url"] == "/login/passkey"
    assert finish_call["body"]["next"] == "/private" and finish_call["body"]["csrf_token"] == token
    assert report["location"] == "/private"
    forged = {**finish_call["body"], "credential": finish_call["body"]["credential"].replace(
        AUTHENTICATOR["signature"], b64url(b"forged"))}  # fmt: skip
    refused = client.post("/login/passkey", data=forged)
    assert refused.status_code == 401 and refused.json["error"] == "invalid_credential"
    client.post("/login/passkey/options", data={"csrf_token": token})
    done = client.post("/login/passkey", data=finish_call["body"])
    assert done.status_code == 200 and done.json == {"status": "authenticated", "location": "/private"}
    assert client.get("/private").text == "private page"
    assert client.post("/login/passkey", data=finish_call["body"]).status_code == 400  # the token rotated


# --- the real e-mail and WebAuthn factors behind the pages ---------------------------------------


def real_factors(app: Flask) -> None:
    """The e-mail factor, and WebAuthn when configured, as ``init_app`` registers them
    (registered here too, in case this app's wiring predates them)."""
    state = get_state(app)
    service = state.service
    if service.factor(FactorKind.EMAIL_OTP) is None:
        assert state.sealer is not None
        service.register_factor(EmailOtpFactor(state.sealer, lambda: get_state(app).mail_sender))
    if state.config.factors.webauthn_rp_id is not None and service.factor(FactorKind.WEBAUTHN) is None:
        service.register_factor(WebAuthnFactor(WebAuthnSettings.from_config(app.config)))


@pytest.fixture
def outbox(site: Site) -> Outbox:
    real_factors(site.app)
    mail = Outbox()
    get_state(site.app).mail_sender = mail
    return mail


def mailed_code(outbox: Outbox) -> str:
    match = re.search(r"^\s+(\d{8})$", outbox[-1].body, re.MULTILINE)
    assert match is not None, outbox[-1].body
    return match.group(1)


def enroll_email(client: FlaskClient, outbox: Outbox, address: str = "alice@example.com") -> None:
    page = client.post(
        "/account/factors/email", data={"address": address, "csrf_token": factors_token(client)}
    )
    assert page.status_code == 200 and outbox[-1].to == address
    done = client.post(
        "/account/factors/email/confirm",
        data={
            "factor_id": hidden_value(page.text, "factor_id"),
            "address": address,
            "code": mailed_code(outbox),
            "csrf_token": csrf_of(page.text),
        },
    )
    assert done.location == "/account/factors?notice=email_added"


def test_add_e_mail_codes_and_sign_in_with_one(site: Site, outbox: Outbox) -> None:
    client, other = site.client(), site.client()
    login(client)
    login(other)
    html = client.get("/account/factors").text
    page = parse(html)
    assert (
        input_named(page, "address")["autocomplete"] == "email"
        and page.labels["email-address"] == "E-mail address"
    )
    token = csrf_of(html)
    assert (
        client.post("/account/factors/email", data={"address": " ", "csrf_token": token}).status_code == 400
    )
    bad = client.post("/account/factors/email", data={"address": "not an address", "csrf_token": token})
    assert bad.status_code == 400 and len(outbox) == 0
    sent = client.post("/account/factors/email", data={"address": "alice@example.com", "csrf_token": token})
    assert sent.status_code == 200 and "alice@example.com" in sent.text and len(outbox) == 1
    code = mailed_code(outbox)
    form = {
        "factor_id": hidden_value(sent.text, "factor_id"),
        "address": "alice@example.com",
        "csrf_token": token,
    }
    malformed = client.post("/account/factors/email/confirm", data={**form, "code": "1234"})
    assert malformed.status_code == 400 and "8 digits" in malformed.text
    wrong = client.post(
        "/account/factors/email/confirm", data={**form, "code": f"{(int(code) + 1) % 10**8:08d}"}
    )
    assert wrong.status_code == 400 and "That code was not accepted" in wrong.text
    assert (
        'id="confirm-email-form"' in wrong.text and hidden_value(wrong.text, "factor_id") == form["factor_id"]
    )
    done = client.post(
        "/account/factors/email/confirm", data={**form, "code": code}
    )  # a try counted, not the end
    assert done.location == "/account/factors?notice=email_added"
    listed = client.get(done.location).text
    assert "a***@example.com" in listed and "alice@example.com" not in listed
    assert other.get("/account").status_code == 401

    logout(client)
    assert login(client).location == "/login/factor"
    assert len(outbox) == 2 and outbox[-1].to == "alice@example.com"  # the only way: sent at once
    step = client.get("/login/factor").text
    assert "E-mail me a new code" in step and parse(step).labels["code-email_otp"] == "Code from your e-mail"
    assert factor_step(client, mailed_code(outbox), kind="email_otp").location == "/account"


def test_totp_or_an_e_mail_code_sent_on_request(site: Site, outbox: Outbox) -> None:
    client = site.client()
    login(client)
    enroll_totp(site, client)
    enroll_email(client, outbox)
    logout(client)
    before = len(outbox)
    login(client)
    assert len(outbox) == before  # an alternative to the app: nothing sent unasked
    html = client.get("/login/factor").text
    assert "E-mail me a code" in html and {"factor-form-totp", "factor-form-email_otp"} <= set(
        parse(html).forms
    )
    sent = client.post("/login/factor/send", data={"kind": "email_otp", "csrf_token": csrf_of(html)})
    assert sent.location == "/login/factor?notice=code_sent" and len(outbox) == before + 1
    code = mailed_code(outbox)
    assert factor_step(client, code, kind="email_otp").location == "/account"
    logout(client)
    login(client)
    again = factor_step(client, code, kind="email_otp")  # bound to the login it was sent for
    assert again.status_code == 401


@pytest.fixture
def webauthn_site(app_factory: AppFactory) -> Site:
    site = make_site(
        app_factory,
        AUTHFLOW_WEBAUTHN_RP_ID="example.com",
        AUTHFLOW_WEBAUTHN_ORIGINS=["https://example.com"],
        AUTHFLOW_PASSKEY_LOGIN=True,
    )
    real_factors(site.app)
    return site


def add_key(client: FlaskClient, key: SoftAuthenticator, **form: str) -> Any:
    token = factors_token(client)
    options = client.post("/account/factors/webauthn/options", data={"csrf_token": token, **form})
    assert options.status_code == 200, options.text
    attestation, _ = key.register(options.json["publicKey"])
    return client.post(
        "/account/factors/webauthn/confirm",
        data={"factor_id": options.json["factor_id"], "credential": attestation, "csrf_token": token},
    )


def test_a_security_key_with_the_real_factor(webauthn_site: Site) -> None:
    site, key = webauthn_site, SoftAuthenticator()
    client = site.client()
    login(client)
    assert add_key(client, key, label="Blue key").location == "/account/factors?notice=webauthn_added"
    assert "Blue key" in client.get("/account/factors").text
    logout(client)
    assert login(client).location == "/login/factor"
    html = client.get("/login/factor").text
    assert "webauthn-button" in parse(html).ids
    token = csrf_of(html)
    options = client.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assertion = key.assert_(options.json["publicKey"])
    forged = key.assert_(options.json["publicKey"], tamper_signature=True)
    refused = client.post(
        "/login/factor", data={"kind": "webauthn", "credential": forged, "csrf_token": token}
    )
    assert refused.status_code == 401 and "Your security key was not accepted" in refused.text
    options = client.post("/login/factor/webauthn-options", data={"csrf_token": token})  # a new challenge
    assertion = key.assert_(options.json["publicKey"])
    done = client.post(
        "/login/factor", data={"kind": "webauthn", "credential": assertion, "csrf_token": token}
    )
    assert done.location == "/account"
    logout(client)
    login(client)
    token = csrf_of(client.get("/login/factor").text)
    replayed = client.post(
        "/login/factor", data={"kind": "webauthn", "credential": assertion, "csrf_token": token}
    )
    assert replayed.status_code == 401
    malformed = client.post(
        "/login/factor", data={"kind": "webauthn", "credential": "[1]", "csrf_token": token}
    )
    assert malformed.status_code == 400


def test_a_passkey_with_the_real_factor(webauthn_site: Site) -> None:
    site, key = webauthn_site, SoftAuthenticator()
    enrolling = site.client()
    login(enrolling)
    assert 'id="webauthn-passkey"' in enrolling.get("/account/factors").text
    assert (
        add_key(enrolling, key, label="Phone", passkey="1").location
        == "/account/factors?notice=webauthn_added"
    )
    assert "Passkey" in enrolling.get("/account/factors").text
    client = site.client()
    html = client.get("/login?next=/private").text
    token = csrf_of(html)
    options = client.post("/login/passkey/options", data={"csrf_token": token})
    assert options.status_code == 200 and not options.json["publicKey"].get("allowCredentials")
    assertion = key.assert_(options.json["publicKey"])
    done = client.post(
        "/login/passkey", data={"credential": assertion, "next": "/private", "csrf_token": token}
    )
    assert done.status_code == 200 and done.json == {"status": "authenticated", "location": "/private"}
    assert client.get("/private").text == "private page"


# --- step-up with e-mail codes and security keys -------------------------------------------------


def test_step_up_with_an_e_mailed_code(site: Site, outbox: Outbox) -> None:
    client = site.client()
    login(client)
    enroll_totp(site, client)
    enroll_email(client, outbox)
    site.clock.advance(FRESHNESS_PASSED)
    before = len(outbox)
    html = client.get("/step-up?next=/account/factors").text
    assert len(outbox) == before  # an alternative to the app: nothing is sent unasked
    page = parse(html)
    assert {"factor-form-totp", "factor-form-email_otp"} <= set(page.forms)
    send = page.forms["send-code-form"]
    assert send["attrs"]["action"] == "/step-up" and [b["id"] for b in send["buttons"]] == [
        "send-code-submit"
    ]
    assert "E-mail me a code" in html
    token = csrf_of(html)
    form = {"kind": "email_otp", "next": "/account/factors", "csrf_token": token}
    sent = client.post("/step-up", data={**form, "action": "send"})
    assert sent.status_code == 302 and sent.location == "/step-up?next=/account/factors&notice=code_sent"
    assert len(outbox) == before + 1 and outbox[-1].to == "alice@example.com"
    shown = client.get(sent.location)
    assert "We sent a code" in shown.text and 'id="notice"' in shown.text
    assert len(outbox) == before + 1  # showing the page again keeps the step-up and its code
    done = client.post("/step-up", data={**form, "code": mailed_code(outbox)})
    assert done.status_code == 302 and done.location == "/account/factors"
    # fresh with a second factor: adding one needs no further step-up
    assert client.post("/account/factors/recovery-codes", data={"csrf_token": token}).status_code == 200


def test_step_up_when_e_mail_codes_are_the_only_second_factor(site: Site, outbox: Outbox) -> None:
    client = site.client()
    login(client)
    enroll_email(client, outbox)
    [factor_id] = re.findall(
        r'data-factor-id="([^"]+)" data-kind="email_otp"', client.get("/account/factors").text
    )
    site.clock.advance(FRESHNESS_PASSED)
    before = len(outbox)
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    html = client.get("/step-up?next=/account/factors").text
    assert len(outbox) == before + 1  # the only way: the code goes out with the page
    assert "E-mail me a new code" in html and parse(html).labels["code-email_otp"] == "Code from your e-mail"
    client.get("/step-up?next=/account/factors")
    assert len(outbox) == before + 1  # a reload sends nothing more
    code = mailed_code(outbox)
    wrong = f"{(int(code) + 1) % 10**8:08d}"
    refused = client.post("/step-up", data={"kind": "email_otp", "code": wrong, "csrf_token": csrf_of(html)})
    assert refused.status_code == 401 and "That code was not accepted. Try again." in refused.text
    assert len(outbox) == before + 2  # the failure ended that step-up: a new one, a new code
    stale = client.post("/step-up", data={"kind": "email_otp", "code": code, "csrf_token": csrf_of(html)})
    assert stale.status_code == 401  # the first code died with its step-up
    assert step_up_with(client, kind="email_otp", code=mailed_code(outbox)).location == "/account/factors"
    assert remove(client, factor_id).location == "/account/factors?notice=factor_removed"


def test_step_up_with_a_security_key(webauthn_site: Site) -> None:
    site, key = webauthn_site, SoftAuthenticator()
    client = site.client()
    login(client)
    assert add_key(client, key, label="Blue key").location == "/account/factors?notice=webauthn_added"
    [factor_id] = re.findall(
        r'data-factor-id="([^"]+)" data-kind="webauthn"', client.get("/account/factors").text
    )
    site.clock.advance(FRESHNESS_PASSED)
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    html = client.get("/step-up?next=/account/factors").text
    page = parse(html)
    form = page.forms["webauthn-form"]
    assert form["attrs"]["action"] == "/step-up" and "step-up-form" not in page.forms
    button = next(b for b in form["buttons"] if b["id"] == "webauthn-button")
    assert button["data-options-url"] == "/login/factor/webauthn-options" and "disabled" in button
    assert "<script" in html and page.external == []
    token = csrf_of(html)
    fields = {"kind": "webauthn", "next": "/account/factors", "csrf_token": token}

    options = client.post("/login/factor/webauthn-options", data=fields)
    assert options.status_code == 200 and options.headers["Cache-Control"] == "no-store"
    forged = key.assert_(options.json["publicKey"], tamper_signature=True)
    refused = client.post("/step-up", data={**fields, "credential": forged})
    assert refused.status_code == 401 and "Your security key was not accepted. Try again." in refused.text
    assert "webauthn-button" in parse(refused.text).ids
    assert remove(client, factor_id).location == "/step-up?next=/account/factors"
    malformed = client.post("/step-up", data={**fields, "credential": "[1]"})
    assert malformed.status_code == 400
    assert client.post("/step-up", data=fields).status_code == 400  # no response from the key

    options = client.post("/login/factor/webauthn-options", data=fields)  # the new step-up's challenge
    done = client.post("/step-up", data={**fields, "credential": key.assert_(options.json["publicKey"])})
    assert done.status_code == 302 and done.location == "/account/factors"
    assert remove(client, factor_id).location == "/account/factors?notice=factor_removed"
    # signed in, no step-up waiting: the options endpoint sends the script to the step-up page
    gone = client.post("/login/factor/webauthn-options", data={**fields, "csrf_token": factors_token(client)})
    assert gone.status_code == 409 and gone.json["location"] == "/step-up?next=/account/factors"


@pytest.mark.interop  # runs the page's WebAuthn script in Node
def test_the_security_key_button_on_the_step_up_page(key_site: tuple[Site, FakeKey]) -> None:
    site, key = key_site
    client = site.client()
    login(client)
    site.backend.enroll_factor("default", site.user_id(), FactorKind.WEBAUTHN, "seed")
    site.clock.advance(FRESHNESS_PASSED)
    denied = client.get("/sensitive", headers=HTML)
    assert denied.location == "/step-up?next=/sensitive"
    html = client.get(denied.location).text
    token = csrf_of(html)
    options = client.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assert options.status_code == 200 and options.json["publicKey"]["challenge"] == b64url(
        key.challenge_bytes
    )
    report = run_webauthn_script(
        html, "webauthn-button", {"/login/factor/webauthn-options": (200, options.json)}
    )
    assert report["enabled"] and report["errors"] == []
    [fetched] = report["fetches"]
    assert fetched["url"] == "/login/factor/webauthn-options" and fetched["body"]["next"] == "/sensitive"
    submitted = report["submitted"]
    assert submitted["form"] == "webauthn-form" and submitted["action"] == "/step-up"
    assert (submitted["fields"]["kind"], submitted["fields"]["csrf_token"]) == ("webauthn", token)
    done = client.post(submitted["action"], data=submitted["fields"])
    assert done.status_code == 302 and done.location == "/sensitive"
    assert client.get("/sensitive").text == "sensitive page"
    # the step-up is over: the script is sent back to the step-up page
    gone = client.post("/login/factor/webauthn-options", data={"csrf_token": token, "next": "/sensitive"})
    moved = run_webauthn_script(html, "webauthn-button", {"/login/factor/webauthn-options": (409, gone.json)})
    assert moved["location"] == "/step-up?next=/sensitive" and moved["submitted"] is None
