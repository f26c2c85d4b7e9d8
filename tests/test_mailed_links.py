"""Mailed links start with the configured origin, never with the request's ``Host``.

The attack: ``POST /password/forgot {"username": "alice"}`` sent with ``Host: evil.example``
(or ``X-Forwarded-Host: evil.example`` through ``ProxyFix``) mailed alice a genuine message
whose link was ``http://evil.example/password/reset?token=...``. Each flow that mails a link
is sent here with forged host headers, with and without ``ProxyFix``, and every link of
every mail (text and HTML) must start with ``AUTHFLOW_EXTERNAL_URL``. Then ``init_app``'s
refusals, the development fallback on loopback and ``SERVER_NAME`` as the origin.
"""

from __future__ import annotations

import email
import email.policy
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response

from flask_authflow import AuthFlow
from flask_authflow._web.state import EXTENSION_KEY, get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory, HtmlOutbox
from tests.test_views import PASSWORD, Site, csrf_of, make_site

ORIGIN = "https://app.example.com"
#: What an attacker sends: a forged Host, and the header ProxyFix(x_host=1) believes.
FORGED = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "http"}
NEW_PASSWORD = "a brand new passphrase 2024"
LINK = re.compile(r"https?://[^\s\"'<>]+")


def mailing_site(app_factory: AppFactory, *, proxy: bool = False, **config: Any) -> tuple[Site, HtmlOutbox]:
    """The ready views with sign-up and reset on ``ORIGIN``; alice has a confirmed address;
    with ``proxy`` the app believes ``X-Forwarded-Host`` and ``X-Forwarded-Proto``."""
    settings: dict[str, Any] = {
        "AUTHFLOW_REGISTRATION": True,
        "AUTHFLOW_PASSWORD_RESET": True,
        "AUTHFLOW_EXTERNAL_URL": ORIGIN,
        **config,
    }
    outbox = HtmlOutbox()
    site = make_site(app_factory, mail_sender=outbox, **settings)
    site.backend.set_email(
        "default", site.user_id("alice"), "alice@example.com", verified_at=site.clock.now()
    )
    if proxy:
        site.app.wsgi_app = ProxyFix(site.app.wsgi_app, x_for=1, x_proto=1, x_host=1)  # type: ignore[method-assign]
    return site, outbox


def only_origin_links(outbox: HtmlOutbox, origin: str = ORIGIN) -> list[str]:
    """Every link of every mail, each checked to start with ``origin``; no mail names the
    forged host at all."""
    assert outbox.messages, "nothing was mailed"
    assert len(outbox.html) == len(outbox.messages)  # every mail went with its HTML part
    links: list[str] = []
    for text in [message.body for message in outbox.messages] + outbox.html:
        assert "evil.example" not in text
        found = LINK.findall(text)
        assert all(link.startswith(origin + "/") for link in found), found
        links += found
    return links


def token_link(outbox: HtmlOutbox, path: str, origin: str = ORIGIN) -> str:
    """The token of the one link to ``path``, which is on ``origin`` in the text and the HTML."""
    links = only_origin_links(outbox, origin)
    tokens = {
        m.group(1)
        for link in links
        if (m := re.fullmatch(re.escape(origin + path) + r"\?token=([\w-]{43})", link))
    }
    assert len(tokens) == 1, links
    return tokens.pop()


def forged_login(client: Any) -> Any:
    """Alice signs in through the sign-in form, every request with the forged headers."""
    form = client.get("/login", headers=FORGED)
    data = {"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(form.text)}
    return client.post("/login", data=data, headers=FORGED)


def sent(answer: Any, status: int = 202) -> Any:
    answer.close()  # the mail goes out once the answer was sent
    assert answer.status_code == status, answer.text
    return answer


# --- every flow that mails a link, with forged host headers --------------------------------------

PROXIED = pytest.mark.parametrize("proxy", [False, True], ids=["direct", "proxyfix"])


@PROXIED
def test_forgot_password_json_mails_a_link_on_the_configured_origin(
    app_factory: AppFactory, proxy: bool
) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    sent(site.client().post("/password/forgot", json={"username": "alice"}, headers=FORGED))
    token = token_link(outbox, "/password/reset")
    done = site.client().post("/password/reset", json={"token": token, "password": NEW_PASSWORD})
    assert done.status_code == 200  # the genuine token, on the genuine site


@PROXIED
def test_forgot_password_form_mails_a_link_on_the_configured_origin(
    app_factory: AppFactory, proxy: bool
) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    client = site.client()
    form = client.get("/password/forgot", headers=FORGED)
    answer = client.post(
        "/password/forgot", data={"username": "alice", "csrf_token": csrf_of(form.text)}, headers=FORGED
    )
    sent(answer, 200)
    token_link(outbox, "/password/reset")


@PROXIED
def test_sign_up_mails_a_link_on_the_configured_origin(app_factory: AppFactory, proxy: bool) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    body = {"username": "carol", "email": "carol@example.com", "password": NEW_PASSWORD}
    sent(site.client().post("/signup", json=body, headers=FORGED))
    token = token_link(outbox, "/signup/verify")
    assert site.client().post("/signup/verify", json={"token": token}).status_code == 200


@PROXIED
def test_sign_up_form_mails_a_link_on_the_configured_origin(app_factory: AppFactory, proxy: bool) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    client = site.client()
    form = client.get("/signup", headers=FORGED)
    data = {
        "username": "carol",
        "email": "carol@example.com",
        "password": NEW_PASSWORD,
        "password_confirm": NEW_PASSWORD,
        "csrf_token": csrf_of(form.text),
    }
    sent(client.post("/signup", data=data, headers=FORGED), 200)
    token_link(outbox, "/signup/verify")


@PROXIED
def test_the_sign_up_notice_links_to_forgot_password_on_the_configured_origin(
    app_factory: AppFactory, proxy: bool
) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    body = {"username": "someone", "email": "alice@example.com", "password": NEW_PASSWORD}
    sent(site.client().post("/signup", json=body, headers=FORGED))  # alice's address: a notice
    [notice] = outbox.messages
    assert notice.to == "alice@example.com"
    assert f"{ORIGIN}/password/forgot" in only_origin_links(outbox)


@PROXIED
def test_a_resent_sign_up_link_is_on_the_configured_origin(app_factory: AppFactory, proxy: bool) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    body = {"username": "carol", "email": "carol@example.com", "password": NEW_PASSWORD}
    sent(site.client().post("/signup", json=body))
    outbox.messages.clear()
    outbox.html.clear()
    sent(site.client().post("/signup/resend", json={"username": "carol"}, headers=FORGED))
    token_link(outbox, "/signup/verify")


@PROXIED
def test_the_e_mail_change_link_is_on_the_configured_origin(app_factory: AppFactory, proxy: bool) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy)
    client = site.client()
    assert forged_login(client).status_code == 302  # the session cookie is the forged host's
    sent(client.post("/account/email", json={"email": "alice.new@example.com"}, headers=FORGED))
    token = token_link(outbox, "/account/email/confirm")
    assert site.client().post("/account/email/confirm", json={"token": token}).status_code == 200


@PROXIED
def test_the_new_device_mail_names_no_host_of_the_request(app_factory: AppFactory, proxy: bool) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy, AUTHFLOW_DEVICE_NEW_DEVICE_MAIL=True)
    assert forged_login(site.client()).status_code == 302
    [message] = outbox.messages
    assert message.to == "alice@example.com" and "new device" in message.subject
    assert all("evil.example" not in text for text in [message.body, *outbox.html])
    assert all(
        link.startswith(ORIGIN + "/") for text in [message.body, *outbox.html] for link in LINK.findall(text)
    )


def test_the_command_line_reset_link_is_on_the_configured_origin(app_factory: AppFactory) -> None:
    site, outbox = mailing_site(app_factory)
    result = site.app.test_cli_runner().invoke(args=["authflow", "users", "send-reset", "alice"])
    assert result.exit_code == 0, result.output
    token_link(outbox, "/password/reset")


# --- the origin: SERVER_NAME, a path prefix ---------------------------------------------------------


def test_server_name_and_scheme_are_the_origin_without_an_external_url(app_factory: AppFactory) -> None:
    site, outbox = mailing_site(
        app_factory,
        TESTING=False,
        AUTHFLOW_EXTERNAL_URL=None,
        SERVER_NAME="app.example.com",
        PREFERRED_URL_SCHEME="https",
        APPLICATION_ROOT="/portal",
    )
    sent(site.client().post("/password/forgot", json={"username": "alice"}, headers=FORGED))
    token_link(outbox, "/password/reset", origin="https://app.example.com/portal")


def test_an_external_url_with_a_path_prefix(app_factory: AppFactory) -> None:
    """The app mounted under ``/app`` (SCRIPT_NAME): the prefix is in the link once."""
    site, outbox = mailing_site(app_factory, AUTHFLOW_EXTERNAL_URL="https://example.com/app/")
    site.app.wsgi_app = DispatcherMiddleware(Response("not here", 404), {"/app": site.app.wsgi_app})  # type: ignore[method-assign]
    sent(site.client().post("/app/password/forgot", json={"username": "alice"}, headers=FORGED))
    token = token_link(outbox, "/password/reset", origin="https://example.com/app")
    done = site.client().post("/app/password/reset", json={"token": token, "password": NEW_PASSWORD})
    assert done.status_code == 200


@pytest.mark.parametrize(
    "value",
    [
        "http://localhost:5000",
        "http://127.0.0.1:8080/app",
        "http://[::1]:5000",
        "https://app.example.com:8443",
    ],
)
def test_http_on_loopback_and_any_https_origin_are_accepted(app_factory: AppFactory, value: str) -> None:
    site, outbox = mailing_site(app_factory, AUTHFLOW_EXTERNAL_URL=value)
    sent(site.client().post("/password/forgot", json={"username": "alice"}, headers=FORGED))
    token_link(outbox, "/password/reset", origin=value)


# --- init_app's refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize("feature", ["AUTHFLOW_REGISTRATION", "AUTHFLOW_PASSWORD_RESET"])
def test_a_link_mail_feature_without_an_origin_is_refused(
    app_factory: AppFactory, tmp_path: Path, feature: str
) -> None:
    app = Flask(__name__)  # only to compare: the refused one stays untouched
    with pytest.raises(ConfigurationError) as refused:
        app = app_factory(TESTING=False, AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"), **{feature: True})
    message = refused.value.message
    assert feature in message and "AUTHFLOW_EXTERNAL_URL" in message and "SERVER_NAME" in message
    assert "Host" in message
    assert EXTENSION_KEY not in app.extensions


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("/reset", "absolute http(s) URL"),  # relative
        ("app.example.com", "absolute http(s) URL"),  # no scheme
        ("https://app.example.com/?next=/x", "no query"),
        ("https://app.example.com/#top", "no query"),
        ("javascript:alert(document.cookie)", "absolute http(s) URL"),
        ("ftp://app.example.com", "absolute http(s) URL"),
        ("http://app.example.com", "http is allowed for a loopback host only"),
        ("http://10.0.0.5:8000", "http is allowed for a loopback host only"),
        ("https://user:secret@app.example.com", "no user or password"),
        ("https://app.example.com:99999", "not a URL"),
        ("https://straße.example", "'xn--' form"),  # IDNA 2003 and 2008 name different hosts
        ("https://bücher.example/shop", "'xn--' form"),
        ("https://app.example.com/a b", "spaces"),
        ("https://app.example.com/../admin", "'..'"),
        ("", "or unset"),
        (42, "or unset"),
    ],
)
def test_a_bad_external_url_is_refused(app_factory: AppFactory, value: Any, reason: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app_factory(AUTHFLOW_EXTERNAL_URL=value)  # refused in testing too, with no mail feature on
    assert "AUTHFLOW_EXTERNAL_URL" in refused.value.message and reason in refused.value.message
    assert "https://app.example.com" in refused.value.message  # what to set


def test_server_name_with_plain_http_on_a_public_host_is_refused(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app_factory(
            TESTING=False,
            SERVER_NAME="app.example.com",
            AUTHFLOW_PASSWORD_RESET=True,
            AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"),
        )
    message = refused.value.message
    assert "PREFERRED_URL_SCHEME='https'" in message and "http is allowed for a loopback host only" in message


@pytest.mark.parametrize(
    "feature", ["AUTHFLOW_REGISTRATION", "AUTHFLOW_PASSWORD_RESET", "AUTHFLOW_DEVICE_NEW_DEVICE_MAIL"]
)
def test_a_mail_feature_without_a_mail_sender_is_refused(app_factory: AppFactory, feature: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app_factory(TESTING=False, AUTHFLOW_EXTERNAL_URL=ORIGIN, **{feature: True})
    message = refused.value.message
    assert feature in message and "no mail sender is configured" in message
    assert "AUTHFLOW_SMTP_HOST" in message and "mail_sender=" in message and "AUTHFLOW_MAIL_OUTBOX" in message


def test_mail_sender_given_to_the_extension_is_used(app_factory: AppFactory) -> None:
    outbox = HtmlOutbox()
    app = app_factory(
        authflow=AuthFlow(mail_sender=outbox),
        TESTING=False,
        AUTHFLOW_EXTERNAL_URL=ORIGIN,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_VIEWS=True,
    )
    assert get_state(app).mail_sender is outbox
    add_user(get_state(app).backend, "default", "dave", NEW_PASSWORD, email="dave@example.com")
    sent(app.test_client().post("/password/forgot", json={"username": "dave"}, headers=FORGED))
    token_link(outbox, "/password/reset")


# --- development on loopback ---------------------------------------------------------------------


def test_loopback_development_falls_back_to_the_request_address_and_says_so_once(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    site, outbox = mailing_site(app_factory, AUTHFLOW_EXTERNAL_URL=None)  # TESTING=True
    with caplog.at_level(logging.WARNING, logger="flask_authflow.mail"):
        sent(site.client().post("/password/forgot", json={"username": "alice"}))
        sent(site.client().post("/password/forgot", json={"username": "alice"}))
    assert len(outbox) == 2
    only_origin_links(outbox, "http://localhost")
    warnings = [r for r in caplog.records if r.name == "flask_authflow.mail" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "AUTHFLOW_EXTERNAL_URL" in warnings[0].getMessage() and "loopback" in warnings[0].getMessage()


@PROXIED
def test_development_without_an_origin_mails_no_link_to_a_forged_host(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture, proxy: bool
) -> None:
    site, outbox = mailing_site(app_factory, proxy=proxy, AUTHFLOW_EXTERNAL_URL=None)
    with caplog.at_level(logging.ERROR, logger="flask_authflow.mail"):
        answer = site.client().post("/password/forgot", json={"username": "alice"}, headers=FORGED)
        answer.close()
    assert answer.status_code == 503 and answer.json["error"] == "mail_delivery_failed"
    assert "evil.example" not in answer.text and "AUTHFLOW_EXTERNAL_URL" not in answer.text
    assert outbox.messages == []
    assert any(
        "AUTHFLOW_EXTERNAL_URL" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR
    )


@pytest.mark.parametrize(
    "development",
    [{"DEBUG": True}, {"AUTHFLOW_COOKIE_SECURE": False, "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": True}],
    ids=["debug", "loopback-only"],
)
def test_development_modes_start_without_an_origin(
    app_factory: AppFactory, tmp_path: Path, development: dict[str, Any]
) -> None:
    app = app_factory(
        TESTING=False,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"),
        **development,
    )
    add_user(get_state(app).backend, "default", "dave", NEW_PASSWORD, email="dave@example.com")
    sent(
        app.test_client().post(
            "/password/forgot", json={"username": "dave"}, base_url="http://127.0.0.1:5000"
        )
    )
    [mail] = (tmp_path / "outbox").glob("*.eml")
    message = email.message_from_bytes(mail.read_bytes(), policy=email.policy.default)
    text = message.get_body(preferencelist=("plain",)).get_content()  # type: ignore[union-attr]
    assert re.search(r"http://127\.0\.0\.1:5000/password/reset\?token=[\w-]{43}", text)


def test_the_e_mail_change_without_an_origin_is_refused_outside_development(app_factory: AppFactory) -> None:
    """The change of e-mail has no key init_app could check: its request is refused instead."""
    outbox = HtmlOutbox()
    site = make_site(app_factory, TESTING=False, mail_sender=outbox)
    https = "https://app.example.com"  # Secure cookies travel over https only
    client = site.client()
    form = client.get("/login", base_url=https)
    data = {"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(form.text)}
    assert client.post("/login", data=data, base_url=https).status_code == 302
    answer = client.post("/account/email", json={"email": "alice.new@example.com"}, base_url=https)
    answer.close()
    assert answer.status_code == 503 and answer.json["error"] == "mail_delivery_failed"
    assert outbox.messages == []
