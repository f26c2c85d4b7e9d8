"""Sign-in by e-mailed code (issue 31, point 1): the pages, their JSON twins, every refusal.

The code is the first factor (kind ``login_code``); a user with a second factor is asked
for it after the code. Unknown addresses get the same answers; the link signs in only the
browser that asked, after a click.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import flask_babel
import pytest
from flask.testing import FlaskClient

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.mfa._login_code import LoginCodeFactor
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.test_views import Site, csrf_of, enroll_totp, login, logout, make_site, totp_now

ORIGIN = "https://app.example.com"
ALICE = "alice@example.com"
BOB = "bob@example.com"


def code_site(app_factory: AppFactory, **config: Any) -> Site:
    site = make_site(app_factory, AUTHFLOW_LOGIN_BY_CODE=True, AUTHFLOW_EXTERNAL_URL=ORIGIN, **config)
    get_state(site.app).mail_sender = Outbox()
    now = site.clock.now()
    add_user(site.backend, "default", "carol", "carol's long passphrase", email=ALICE, email_verified_at=now)
    add_user(site.backend, "default", "dave", "dave's long passphrase", email=BOB, email_verified_at=now)
    add_user(site.backend, "default", "eve", "eve's long passphrase", email="eve@example.com")  # unverified
    return site


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return code_site(app_factory)


def outbox(site: Site) -> Outbox:
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox)
    return sender


def ask(client: FlaskClient, username: str, **headers: str) -> Any:
    """Ask for a code on the page; the answer is closed (the mail goes out after it)."""
    token = csrf_of(client.get("/login/code", headers=headers).text)
    answer = client.post("/login/code", data={"username": username, "csrf_token": token}, headers=headers)
    answer.close()
    return answer


def mailed(site: Site, to: str = ALICE) -> tuple[str, str]:
    """The code and the link of the last mail to ``to``."""
    message = [m for m in outbox(site).messages if m.to == to][-1]
    code = re.search(r"code: ([0-9]{8})", message.body)
    link = re.search(r"^(https://\S+)$", message.body, re.MULTILINE)
    assert code is not None and link is not None, message.body
    return code.group(1), link.group(1)


def enter(client: FlaskClient, code: str) -> Any:
    token = csrf_of(client.get("/login/factor").text)
    return client.post("/login/factor", data={"code": code, "kind": "login_code", "csrf_token": token})


def signed_in(client: FlaskClient) -> bool:
    return client.get("/private").status_code == 200


def _main(page: str) -> str:
    """A page without its CSRF token (which differs per session)."""
    return re.sub(r'name="csrf_token" value="[^"]+"', "", page)


def other(code: str) -> str:
    return f"{(int(code) + 1) % 10**8:08d}"


# --- on and off ----------------------------------------------------------------------------------


def test_off_by_default_no_page_no_link(app_factory: AppFactory) -> None:
    plain = make_site(app_factory)
    client = plain.client()
    assert client.get("/login/code").status_code == 404
    assert client.get("/login/code/link?code=12345678").status_code == 404
    assert "login-code-link" not in client.get("/login").text
    assert plain.app.extensions["authflow"].service.factor(FactorKind.LOGIN_CODE) is None


def test_the_sign_in_page_offers_e_mail_me_a_code(site: Site) -> None:
    page = site.client().get("/login")
    assert 'id="login-code-link"' in page.text and 'href="/login/code"' in page.text
    assert isinstance(get_state(site.app).service.factor(FactorKind.LOGIN_CODE), LoginCodeFactor)


@pytest.mark.parametrize(
    ("config", "missing"),
    [
        ({"AUTHFLOW_MAIL_OUTBOX": "outbox"}, "AUTHFLOW_EXTERNAL_URL"),
        ({"AUTHFLOW_EXTERNAL_URL": ORIGIN}, "AUTHFLOW_SMTP_HOST"),
    ],
)
def test_init_app_refuses_sign_in_by_code_without_a_sender_or_an_origin(
    app_factory: AppFactory, config: dict[str, str], missing: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app_factory(TESTING=False, AUTHFLOW_LOGIN_BY_CODE=True, **config)
    assert "AUTHFLOW_LOGIN_BY_CODE" in refused.value.message and missing in refused.value.message


@pytest.mark.parametrize(
    ("key", "value"), [("AUTHFLOW_LOGIN_CODE_TTL", timedelta(hours=1)), ("AUTHFLOW_LOGIN_CODE_MAX_TRIES", 0)]
)
def test_unsafe_code_settings_are_refused(app_factory: AppFactory, key: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app_factory(AUTHFLOW_LOGIN_BY_CODE=True, AUTHFLOW_EXTERNAL_URL=ORIGIN, **{key: value})
    assert key in refused.value.message


# --- signing in ----------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["carol", ALICE, "Alice@Example.com"])
def test_sign_in_by_the_code_from_the_mail(site: Site, given: str) -> None:
    client = site.client()
    asked = ask(client, given)
    assert asked.status_code == 200 and 'id="notice"' in asked.text  # the factor page, with its notice
    page = client.get("/login/factor")
    assert 'id="code-login_code"' in page.text and 'id="send-code-submit"' not in page.text
    code, link = mailed(site)
    assert link == f"{ORIGIN}/login/code/link?code={code}"  # the configured origin, never Host
    assert not signed_in(client)
    assert enter(client, code).location == "/account"
    assert signed_in(client)
    rows = [(r.event, r.status, r.factor) for r in site.backend.audit_rows if r.factor == "login_code"]
    assert rows == [("login_begin", "sent", "login_code"), ("factor_verify", "success", "login_code")]


def test_the_mail_link_goes_to_the_configured_origin_whatever_the_host(site: Site) -> None:
    ask(site.client(), "carol", Host="evil.example")
    _, link = mailed(site)
    assert link.startswith(f"{ORIGIN}/login/code/link?code=") and "evil" not in outbox(site).messages[-1].body


def test_the_link_signs_in_the_browser_that_asked_after_a_click(site: Site) -> None:
    asking, phone = site.client(), site.client()
    ask(asking, "carol")
    code, link = mailed(site)
    path = link.removeprefix(ORIGIN)
    # Opened elsewhere (the phone, a mail scanner): nothing signs in, no try is spent.
    elsewhere = phone.get(path)
    assert elsewhere.status_code == 200 and 'id="login-code-elsewhere"' in elsewhere.text
    assert 'id="login-code-link-form"' not in elsewhere.text and not signed_in(phone)
    # Opened in the asking browser: a button, nothing done by the GET alone.
    here = asking.get(path)
    assert 'id="login-code-link-form"' in here.text and not signed_in(asking)
    done = asking.post(
        "/login/factor", data={"kind": "login_code", "code": code, "csrf_token": csrf_of(here.text)}
    )
    assert done.location == "/account" and signed_in(asking) and not signed_in(phone)


def test_a_totp_user_is_asked_for_totp_after_the_code(site: Site) -> None:
    setup = site.client()
    login(setup, "carol", "carol's long passphrase")
    secret = enroll_totp(site, setup)
    client = site.client()
    ask(client, ALICE)
    code, _ = mailed(site)
    assert enter(client, code).location == "/login/factor"
    page = client.get("/login/factor")
    assert 'id="code-totp"' in page.text and not signed_in(client)
    token = csrf_of(page.text)
    site.clock.advance(30)
    done = client.post(
        "/login/factor", data={"code": totp_now(secret, site.clock), "kind": "totp", "csrf_token": token}
    )
    assert done.location == "/account" and signed_in(client)


def test_json_mode(site: Site) -> None:
    client = site.client()
    token = client.get("/csrf").json["csrf_token"]
    asked = client.post("/login/code", json={"username": "carol"}, headers={"X-CSRF-Token": token})
    asked.close()
    assert asked.status_code == 200
    assert asked.json == {"status": "factor_required", "kinds": ["login_code"], "location": "/login/factor"}
    code, _ = mailed(site)
    wrong = client.post(
        "/login/factor", json={"kind": "login_code", "code": other(code)}, headers={"X-CSRF-Token": token}
    )
    assert wrong.status_code == 401 and wrong.json["error"] == "retry_code"
    done = client.post(
        "/login/factor", json={"kind": "login_code", "code": code}, headers={"X-CSRF-Token": token}
    )
    assert done.status_code == 200 and done.json["status"] == "authenticated"
    assert signed_in(client)


def test_a_signed_in_session_asking_for_a_code_ends_its_login_first(site: Site) -> None:
    client = site.client()
    login(client, "dave", "dave's long passphrase")
    ask(client, "carol")
    assert not signed_in(client)
    code, _ = mailed(site)
    assert enter(client, code).location == "/account"
    logouts = [r for r in site.backend.audit_rows if r.event == "logout" and r.reason == "new_login"]
    assert len(logouts) == 1


# --- the same answers for unknown addresses ------------------------------------------------------


def test_unknown_disabled_and_unverified_accounts_get_the_same_answers(site: Site) -> None:
    add_user(
        site.backend,
        "default",
        "frank",
        "frank's long passphrase",
        email="frank@example.com",
        email_verified_at=site.clock.now(),
    )
    site.backend.set_disabled("default", "frank", True)
    answers = []
    for given in ("carol", "nobody", "nobody@example.com", "eve", "frank"):
        client = site.client()
        asked = ask(client, given)
        page = client.get("/login/factor")
        wrong = enter(client, "00000000")
        answers.append(
            (asked.status_code, _main(asked.text), page.status_code, wrong.status_code, _main(wrong.text))
        )
    assert len(set(answers)) == 1, answers
    assert [m.to for m in outbox(site).messages] == [ALICE]  # only the real account gets mail
    reasons = [r.reason for r in site.backend.audit_rows if r.event == "login_begin"]
    assert reasons == [
        None,
        "unknown_identifier",
        "unknown_identifier",
        "no_usable_address",
        "no_usable_address",
    ]


def test_the_unknown_path_composes_the_mail_too(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    from flask_authflow._web.views import login_code as views

    composed: list[str] = []
    real = views.compose_mail

    def counting(name: str, **context: Any) -> Any:
        composed.append(name)
        return real(name, **context)

    monkeypatch.setattr(views, "compose_mail", counting)
    ask(site.client(), "nobody@example.com")
    ask(site.client(), ALICE)
    assert composed == ["login_code", "login_code"]


def test_a_code_never_signs_in_an_unknown_account(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    issued: list[str] = []
    real = LoginCodeFactor.issue

    def keeping(factor: LoginCodeFactor, ctx: Any) -> str:
        issued.append(real(factor, ctx))
        return issued[-1]

    monkeypatch.setattr(LoginCodeFactor, "issue", keeping)
    client = site.client()
    ask(client, "nobody")
    assert enter(client, issued[-1]).status_code == 401 and not signed_in(client)


# --- each refusal with its bad input --------------------------------------------------------------


def test_a_wrong_code_is_refused_and_the_login_waits(site: Site) -> None:
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    wrong = enter(client, other(code))
    assert wrong.status_code == 401 and 'id="code-login_code"' in wrong.text
    assert enter(client, code).location == "/account"
    reasons = [
        r.reason for r in site.backend.audit_rows if r.factor == "login_code" and r.status == "failure"
    ]
    assert reasons == ["invalid_credential"]


def test_an_expired_code_is_refused(site: Site) -> None:
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    site.clock.advance(timedelta(minutes=10, seconds=1).total_seconds())
    assert enter(client, code).status_code == 401 and not signed_in(client)
    assert any(r.reason == "expired" for r in site.backend.audit_rows if r.factor == "login_code")


def test_a_used_code_does_not_sign_in_again(site: Site) -> None:
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    before = client.get("/login/factor")
    assert enter(client, code).location == "/account"
    logout(client)
    # The used code, posted again with the page it came from: no login waits for it any more.
    again = client.post(
        "/login/factor", data={"code": code, "kind": "login_code", "csrf_token": csrf_of(before.text)}
    )
    assert again.status_code in (302, 400) and not signed_in(client)
    # And in a new sign-in by code, the old code is not the new one's.
    ask(client, "carol")
    assert enter(client, code).status_code == 401 and not signed_in(client)


def test_too_many_wrong_codes_kill_the_code(app_factory: AppFactory) -> None:
    site = code_site(app_factory, AUTHFLOW_LOGIN_CODE_MAX_TRIES=2)
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    assert enter(client, other(code)).status_code == 401
    assert enter(client, other(other(code))).status_code == 401
    assert enter(client, code).status_code == 401 and not signed_in(client)  # the right one, too late
    assert any(r.reason == "too_many_tries" for r in site.backend.audit_rows if r.factor == "login_code")


def test_wrong_codes_lock_the_account_across_sign_ins(site: Site) -> None:
    for _ in range(5):  # a new code each time: the per-account count goes on
        client = site.client()
        ask(client, "carol")
        code, _ = mailed(site)
        enter(client, other(code))
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    locked = enter(client, code)
    assert locked.status_code == 403 and not signed_in(client)


def test_a_code_of_another_account_is_refused(site: Site) -> None:
    carols, daves = site.client(), site.client()
    ask(carols, "carol")
    ask(daves, "dave")
    carol_code, _ = mailed(site, ALICE)
    dave_code, _ = mailed(site, BOB)
    assert enter(daves, carol_code).status_code == 401 and not signed_in(daves)
    assert enter(daves, dave_code).location == "/account"


@pytest.mark.parametrize(
    "bad",
    ["", "1234", "abcdefgh", "123456789", "1234567%0A", "\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18"],
)
def test_a_tampered_link_is_refused(site: Site, bad: str) -> None:
    client = site.client()
    ask(client, "carol")
    page = client.get(f"/login/code/link?code={bad}")
    assert page.status_code == 400 and 'id="login-code-link-form"' not in page.text


def test_a_link_with_another_code_fails_like_a_wrong_code(site: Site) -> None:
    client = site.client()
    ask(client, "carol")
    code, _ = mailed(site)
    page = client.get(f"/login/code/link?code={other(code)}")
    refused = client.post(
        "/login/factor", data={"kind": "login_code", "code": other(code), "csrf_token": csrf_of(page.text)}
    )
    assert refused.status_code == 401 and not signed_in(client)


@pytest.mark.parametrize("username", ["", "   ", "x" * 300])
def test_malformed_requests_are_refused_before_anything_is_sent(site: Site, username: str) -> None:
    answer = ask(site.client(), username)
    assert answer.status_code == 400 and outbox(site).messages == []


def test_a_request_without_csrf_is_refused(site: Site) -> None:
    answer = site.client().post("/login/code", data={"username": "carol"})
    assert answer.status_code == 400 and outbox(site).messages == []


def test_code_requests_are_throttled_per_address(app_factory: AppFactory) -> None:
    site = code_site(app_factory, AUTHFLOW_THROTTLE_LIMITS={"login.address": "2/minute"})
    client = site.client()
    assert ask(client, "nobody").status_code == 200
    assert ask(client, "nobody").status_code == 200
    refused = ask(client, "carol")
    assert refused.status_code == 429 and refused.headers.get("Retry-After")
    assert outbox(site).messages == []


# --- the mail budget -----------------------------------------------------------------------------


def test_strangers_cannot_spend_her_codes(site: Site) -> None:
    own = site.client()
    own.environ_base["REMOTE_ADDR"] = "192.0.2.10"
    login(own, "carol", "carol's long passphrase")  # her network is now known
    logout(own)
    for number in range(20):
        stranger = site.client()
        stranger.environ_base["REMOTE_ADDR"] = ("203.0.113.7", "198.51.100.7")[number % 2]
        assert ask(stranger, ALICE).status_code == 200  # the same answer, mail or not
    assert len(outbox(site).messages) == 5  # the strangers' budget: 5 an hour reach her
    mine = site.client()
    mine.environ_base["REMOTE_ADDR"] = "192.0.2.77"  # her own network: her budget
    ask(mine, ALICE)
    assert len(outbox(site).messages) == 6
    code, _ = mailed(site)
    assert enter(mine, code).location == "/account"


# --- translated ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "title"), [("de", "Mit einem Code anmelden"), ("fr", "Se connecter avec un code")]
)
def test_the_pages_and_the_mail_are_translated(site: Site, language: str, title: str) -> None:
    flask_babel.Babel(site.app)
    client = site.client()
    headers = {"Accept-Language": language}
    assert title in client.get("/login/code", headers=headers).text
    ask(client, "carol", **headers)
    assert "Your flask-authflow sign-in code" not in outbox(site).messages[-1].subject
    assert "Your sign-in code" not in outbox(site).messages[-1].body
    page = client.get("/login/code/link?code=00000000", headers=headers)
    assert "Sign in" not in page.text.split("<main", 1)[-1]
