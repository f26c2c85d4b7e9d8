"""The ready views (the ``authflow_views`` blueprint): login with factors, logout, step-up,
the account page, CSRF (built in and Flask-WTF), ``next`` handling and template overrides."""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from flask_wtf.csrf import CSRFProtect
from markupsafe import escape

from flask_authflow import (
    AuthFlow,
    AuthFlowError,
    InvalidInput,
    MockClock,
    fresh_login_required,
    get_state,
    login_required,
)
from flask_authflow.authn.factors.base import Accepted, FactorContext, Rejected
from flask_authflow.authn.factors.password import PasswordHasher
from flask_authflow.authn.outcomes import FactorCredential, FactorKind
from flask_authflow.session.model import sid_hash
from flask_authflow.session.stores import MemorySessionStore
from flask_authflow.state import account_admin
from flask_authflow.stores.memory import InMemoryBackend
from flask_authflow.testing.pytest_plugin import TEST_USER_AGENT
from flask_authflow.views import VIEWS_BLUEPRINT, register_views
from flask_authflow.views.csrf import SESSION_KEY

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
    clock: MockClock,
    hasher: PasswordHasher,
    *,
    template_folder: str | None = None,
    register: bool = False,
    url_prefix: str | None = None,
    **config: Any,
) -> Site:
    app = Flask(__name__, template_folder=template_folder or "templates")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_VIEWS=not register,
        **config,
    )
    backend = InMemoryBackend(hasher=hasher, clock=clock)
    store = MemorySessionStore(clock=clock)
    authflow = AuthFlow(app, backend=backend, session_store=store, clock=clock, hasher=hasher)
    if register:
        register_views(app, url_prefix=url_prefix)
    backend.create_user("default", "alice", PASSWORD)
    backend.create_user("default", "bob", "bob's own password")

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
def site(mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Site:
    return make_site(mock_clock, authflow_hasher)


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
        if tag in ("link", "script", "img", "iframe") or (tag == "a" and "://" in (a.get("href") or "")):
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
    "authflow_views.logout": ("/logout", {"POST"}),
    "authflow_views.step_up": ("/step-up", {"GET", "POST"}),
    "authflow_views.account": ("/account", {"GET"}),
    "authflow_views.change_password": ("/account/password", {"POST"}),
    "authflow_views.revoke_session": ("/account/sessions/<session_hash>/revoke", {"POST"}),
    "authflow_views.revoke_other_sessions": ("/account/sessions/revoke-others", {"POST"}),
}


def _rules(app: Flask) -> dict[str, tuple[str, set[str]]]:
    return {
        rule.endpoint: (rule.rule, set(rule.methods or ()) - {"HEAD", "OPTIONS"})
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith(f"{VIEWS_BLUEPRINT}.")
    }


def test_config_key_registers_the_endpoints_at_their_paths(site: Site) -> None:
    assert _rules(site.app) == EXPECTED_RULES


def test_register_views_takes_a_prefix_and_is_idempotent(mock_clock, authflow_hasher) -> None:
    site = make_site(mock_clock, authflow_hasher, register=True, url_prefix="/auth")
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
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    authflow = AuthFlow(
        app, backend=InMemoryBackend(hasher=authflow_hasher, clock=mock_clock), clock=mock_clock
    )
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
    assert "Firefox on Linux" in account.text
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


def test_lockout_answers_403_with_the_lock_end_and_lifts(mock_clock, authflow_hasher) -> None:
    site = make_site(
        mock_clock,
        authflow_hasher,
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
    refused = client.post("/logout", data={"csrf_token": before})
    assert refused.status_code == 400 and "This form has expired" in refused.text
    assert client.get("/account").status_code == 200  # still signed in
    assert client.post("/logout").status_code == 400
    done = client.post("/logout", data={"csrf_token": after})
    assert done.status_code == 302 and done.location == "/login"
    assert client.get("/account").status_code == 401
    assert site.sessions() == []
    assert client.get("/logout").status_code == 405


def test_logout_of_a_guest_with_a_bad_token_shows_the_login_page(site: Site) -> None:
    response = site.client().post("/logout", data={"csrf_token": "nope"})
    assert response.status_code == 400 and 'id="login-form"' in response.text


# --- the factor step -----------------------------------------------------------------------------


@dataclass
class FixedCode:
    """A TOTP stand-in that accepts one code."""

    code: str
    kind: FactorKind = FactorKind.TOTP

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
    assert parsed.labels["code"] == "Authentication code"
    assert input_named(parsed, "next")["value"] == "/private"
    assert parsed.forms["factor-form"]["attrs"]["method"] == "post"
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
    assert 'id="factor-form"' in wrong.text
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
    ("kind", "label", "inputmode"),
    [
        (FactorKind.EMAIL_OTP, "Code from your e-mail", "numeric"),
        (FactorKind.RECOVERY_CODE, "Recovery code", "text"),
        (FactorKind.WEBAUTHN, "Verification code", "text"),
    ],
)
def test_the_factor_page_names_the_pending_factor(
    site: Site, kind: FactorKind, label: str, inputmode: str
) -> None:
    site.backend.enroll_factor("default", site.user_id(), kind, "seed")
    client = site.client()
    assert login(client).location == "/login/factor"
    page = parse(client.get("/login/factor").text)
    assert page.labels["code"] == label
    assert input_named(page, "code")["inputmode"] == inputmode
    assert page.forms["factor-form"]["attrs"]["data-factor"] == kind.value
    # no verifier for the kind is registered here: the service refuses the code like a wrong one
    token = csrf_of(client.get("/login/factor").text)
    assert client.post("/login/factor", data={"code": "000000", "csrf_token": token}).status_code == 401


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


def test_step_up_checks_token_input_and_lockout(mock_clock, authflow_hasher) -> None:
    site = make_site(mock_clock, authflow_hasher, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
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


def test_change_password_with_a_wrong_current_password_is_lockout_protected(
    mock_clock, authflow_hasher
) -> None:
    site = make_site(mock_clock, authflow_hasher, AUTHFLOW_LOCKOUT_MAX_FAILURES=2)
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


def test_an_app_template_overrides_the_packaged_one(mock_clock, authflow_hasher, tmp_path: Path) -> None:
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
    site = make_site(mock_clock, authflow_hasher, template_folder=str(tmp_path))
    client = site.client()
    page = client.get("/login")
    assert "Welcome to Example Corp" in page.text and "Sign in</h1>" not in page.text
    assert login(client, password="nope").text.endswith("<p>Wrong username or password.</p></form>")
    assert login(client).location == "/account"
    account = client.get("/account")  # not overridden: the packaged page
    assert account.status_code == 200 and 'id="change-password-form"' in account.text


def test_overriding_the_base_template_restyles_every_page(
    mock_clock, authflow_hasher, tmp_path: Path
) -> None:
    (tmp_path / "authflow").mkdir()
    (tmp_path / "authflow" / "base.html").write_text(
        "<!doctype html><title>{% block title %}{% endblock %} | Example</title>"
        "<nav>Example Corp</nav>{% block content %}{% endblock %}"
    )
    site = make_site(mock_clock, authflow_hasher, template_folder=str(tmp_path))
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


def _wtf_site(mock_clock: MockClock, hasher: PasswordHasher, **config: Any) -> tuple[Site, CSRFProtect]:
    site = make_site(mock_clock, hasher, SECRET_KEY=secrets.token_hex(32), **config)
    return site, CSRFProtect(site.app)


def test_with_flask_wtf_its_token_is_used_and_rotated_at_login(mock_clock, authflow_hasher) -> None:
    site, _ = _wtf_site(mock_clock, authflow_hasher)
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
    old = client.post("/logout", data={"csrf_token": token})
    assert old.status_code == 400 and "The CSRF tokens do not match." in old.text
    assert client.get("/account").status_code == 200
    assert client.post("/logout", data={"csrf_token": new_token}).location == "/login"
    assert client.get("/account").status_code == 401


def test_flask_wtf_rejects_a_missing_or_foreign_token_before_the_view(mock_clock, authflow_hasher) -> None:
    site, _ = _wtf_site(mock_clock, authflow_hasher)
    client = site.client()
    client.get("/login")
    missing = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert missing.status_code == 400 and "The CSRF token is missing." in missing.text
    builtin_style = client.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": secrets.token_urlsafe(32)}
    )
    assert builtin_style.status_code == 400 and "The CSRF token is invalid." in builtin_style.text
    assert client.get("/account").status_code == 401
    assert site.sessions() == []


@pytest.mark.parametrize("setup", ["check_default_off", "exempt"])
def test_the_views_run_flask_wtf_themselves_when_it_skipped_them(
    mock_clock, authflow_hasher, setup: str
) -> None:
    config = {"WTF_CSRF_CHECK_DEFAULT": False} if setup == "check_default_off" else {}
    site, csrf = _wtf_site(mock_clock, authflow_hasher, **config)
    if setup == "exempt":
        csrf.exempt(site.app.blueprints[VIEWS_BLUEPRINT])
    client = site.client()
    page = client.get("/login")
    refused = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert refused.status_code == 400 and "The CSRF token is missing." in refused.text
    assert site.sessions() == []
    done = client.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    )
    assert done.location == "/account"


def test_flask_wtf_disabled_leaves_the_built_in_token(mock_clock, authflow_hasher) -> None:
    site, _ = _wtf_site(mock_clock, authflow_hasher, WTF_CSRF_ENABLED=False)
    client = site.client()
    page = client.get("/login")
    with client.session_transaction() as session:
        assert session[SESSION_KEY] == csrf_of(page.text)
    refused = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert refused.status_code == 400 and "This form has expired" in refused.text
    assert login(client).location == "/account"


def test_flask_wtf_field_name_is_followed(mock_clock, authflow_hasher) -> None:
    site, _ = _wtf_site(mock_clock, authflow_hasher, WTF_CSRF_FIELD_NAME="xsrf")
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
