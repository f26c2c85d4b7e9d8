"""The ready pages in German and French, in real headless Chromium (Debian's chromium +
chromium-driver): the browser asks for a language (``Accept-Language``), an app with
Flask-Babel and no locale selector of its own serves the pages, and no English string of the
package's catalogue is left on the sign-in, factor, account and sign-in methods pages (text,
title and the attributes people read: labels, placeholders, button values)."""

from __future__ import annotations

import email
import email.policy
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyotp
import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po
from flask import Flask
from werkzeug.serving import make_server

from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow._i18n import DOMAIN, TRANSLATIONS_DIRECTORY
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.test_browser import Page, browsers  # noqa: F401 - the Chromium fixture

pytestmark = pytest.mark.browser
flask_babel = pytest.importorskip("flask_babel", reason="Flask-Babel is in the [babel] and [dev] extras")

PASSWORD = "a long passphrase for the locales"
ACCEPT = {"de": "de-DE,de;q=0.9", "fr": "fr-FR,fr;q=0.9"}
#: What people read besides the text: the title and these attributes.
READABLE = """
return [document.title].concat(Array.from(document.querySelectorAll(
  '[placeholder], [aria-label], [title], [alt], input[type=submit], input[type=button]'
  )).flatMap(e => [e.getAttribute('placeholder'),
  e.getAttribute('aria-label'), e.getAttribute('title'), e.getAttribute('alt'),
  /^(submit|button)$/.test(e.type || '') ? e.value : null]).filter(Boolean),
  [document.body.innerText]).join('\\n');
"""


def english_fragments(locale: str) -> dict[str, re.Pattern[str]]:
    """The English texts of every msgid the ``locale`` catalogue translates differently:
    each literal part (markup and ``%(name)s`` values cut out), as a whole-word pattern."""
    with open(TRANSLATIONS_DIRECTORY / locale / "LC_MESSAGES" / f"{DOMAIN}.po", "rb") as handle:
        catalogue: Catalog = read_po(handle, locale=locale)
    patterns: dict[str, re.Pattern[str]] = {}
    translated = "\n".join(
        text
        for message in catalogue
        if message.id
        for text in ([message.string] if isinstance(message.string, str) else message.string)
    )
    for message in catalogue:
        if not message.id:
            continue
        ids = [message.id] if isinstance(message.id, str) else list(message.id)
        strings = [message.string] if isinstance(message.string, str) else list(message.string)
        for text in ids:
            if text in strings:  # the same in both languages ("6 digits" may be "6 chiffres")
                continue
            for part in re.split(r"<[^>]+>|%\([a-z_]+\)[sd]", text):
                part = part.strip(" .,:;()“”\n")
                pattern = re.compile(rf"(?<![\w-]){re.escape(part)}(?![\w-])")
                if len(part) >= 4 and not pattern.search(translated):  # "Link" is German too
                    patterns[part] = pattern
    return patterns


def english_left(page: Page, locale: str) -> list[str]:
    shown = str(page.driver.execute_script(READABLE))
    return [text for text, pattern in english_fragments(locale).items() if pattern.search(shown)]


@pytest.fixture
def localized_site(
    app_factory: AppFactory, mock_clock: MockClock, tmp_path: Path
) -> Iterator[tuple[str, Flask]]:
    """An app with Flask-Babel (no locale selector) and the ready views, password reset and
    sign-up on (mails into a folder), on a real server."""
    app = app_factory(
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_COOKIE_SECURE=False,
        AUTHFLOW_ALLOW_INSECURE_LOOPBACK=True,
        AUTHFLOW_PASSWORD_RESET=True,
        AUTHFLOW_REGISTRATION=True,
        AUTHFLOW_MAIL_OUTBOX=str(tmp_path / "outbox"),
    )
    flask_babel.Babel(app, default_timezone="Europe/Paris")
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    for name in ("anna", "louis"):
        add_user(
            backend,
            "default",
            name,
            PASSWORD,
            email=f"{name}@example.org",
            email_verified_at=mock_clock.now(),
        )
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", app
    finally:
        server.shutdown()
        thread.join(timeout=10)


def _in(driver: Any, locale: str) -> Any:
    """Make the browser ask for ``locale`` first (as a user's language settings would)."""
    agent = str(driver.execute_script("return navigator.userAgent"))
    driver.execute_cdp_cmd(
        "Network.setUserAgentOverride", {"userAgent": agent, "acceptLanguage": ACCEPT[locale]}
    )
    return driver


def _check(page: Page, locale: str, where: str) -> None:
    lang = page.driver.execute_script("return document.documentElement.lang")
    assert lang == locale, where
    left = english_left(page, locale)
    assert left == [], f"English left on {where}: {left}"


@pytest.mark.parametrize(("locale", "user"), [("de", "anna"), ("fr", "louis")])
def test_the_pages_have_no_english_left(
    browsers: Any,  # noqa: F811
    localized_site: tuple[str, Flask],
    mock_clock: MockClock,
    locale: str,
    user: str,
) -> None:
    base, _app = localized_site
    page = Page(_in(browsers(), locale), base)
    page.open("/login")
    _check(page, locale, "the sign-in page")
    page.type("username", user)
    page.type("password", "not the passphrase")
    page.submit("login-submit")
    _check(page, locale, "the sign-in page with its error")
    page.type("password", PASSWORD)
    page.submit("login-submit")
    assert page.path == "/account"
    _check(page, locale, "the account page")

    page.open("/account/factors")
    _check(page, locale, "the sign-in methods page")
    page.submit("add-totp-submit")
    _check(page, locale, "the authenticator app set-up page")
    totp = pyotp.TOTP(page.text_of("totp-secret").replace(" ", ""))
    page.type("totp-code", totp.at(mock_clock.now()))
    page.submit("confirm-totp-submit")
    assert page.path.startswith("/account/factors?notice=totp_added")
    _check(page, locale, "the sign-in methods page with a method")

    page.open("/account")
    page.submit("logout-submit")
    page.open("/login")
    page.type("username", user)
    page.type("password", PASSWORD)
    page.submit("login-submit")
    assert page.path.startswith("/login/factor")
    _check(page, locale, "the factor page")
    mock_clock.advance(timedelta(seconds=31))  # a new code (a code is accepted once)
    page.type("code-totp", "000000" if totp.at(mock_clock.now()) != "000000" else "111111")
    page.submit("factor-submit-totp")
    _check(page, locale, "the factor page with its error")
    page.type("code-totp", totp.at(mock_clock.now()))
    page.submit("factor-submit-totp")
    assert page.path == "/account"
    _check(page, locale, "the account page after two steps")


def _text(html: str) -> str:
    """The text of a page (no markup, style or script)."""
    return re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S))


def test_the_check_finds_english(localized_site: tuple[str, Flask]) -> None:
    """The fragments the browser test looks for do match English pages: an English page
    would fail it (this check can fail)."""
    _base, app = localized_site
    fragments = english_fragments("de")
    english = _text(app.test_client().get("/login").text)
    left = sorted(text for text, pattern in fragments.items() if pattern.search(english))
    assert {"Password", "Sign in", "Username", "Forgot password?"} <= set(left)
    german = _text(app.test_client().get("/login", headers={"Accept-Language": "de"}).text)
    assert [text for text, pattern in fragments.items() if pattern.search(german)] == []


def _last_mail(outbox: Path) -> tuple[str, str]:
    """(subject, text) of the newest mail in the outbox folder."""
    files = sorted(outbox.glob("*.eml"))
    assert files, "no mail was written"
    message = email.message_from_bytes(files[-1].read_bytes(), policy=email.policy.default)
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    return str(message["Subject"]), str(body.get_content())


@pytest.mark.parametrize(("locale", "user"), [("de", "anna"), ("fr", "louis")])
def test_the_reset_pages_and_mail_have_no_english_left(
    browsers: Any,  # noqa: F811
    localized_site: tuple[str, Flask],
    locale: str,
    user: str,
) -> None:
    base, app = localized_site
    outbox = Path(app.config["AUTHFLOW_MAIL_OUTBOX"])
    page = Page(_in(browsers(), locale), base)
    page.open("/login")
    _check(page, locale, "the sign-in page with its account links")
    page.open("/password/forgot")
    _check(page, locale, "the forgot-password page")
    page.type("username", user)
    page.submit("forgot-submit")
    _check(page, locale, "the forgot-password page, sent")
    subject, text = _last_mail(outbox)
    fragments = english_fragments(locale)
    words = re.sub(r"https?://\S+", " ", f"{subject}\n{text}")  # the link's path is not for reading
    left = [t for t, pattern in fragments.items() if pattern.search(words)]
    assert left == [], f"English left in the reset mail: {left}"
    link = re.search(r"https?://\S+/password/reset\?token=\S+", text)
    assert link is not None, text
    page.driver.get(link.group(0))
    _check(page, locale, "the reset page")
    page.type("password", "x")
    page.type("password_confirm", "y")
    page.submit("reset-submit")
    _check(page, locale, "the reset page with its error")
    page.driver.get(link.group(0))
    page.type("password", PASSWORD + " again")
    page.type("password_confirm", PASSWORD + " again")
    page.submit("reset-submit")
    _check(page, locale, "the reset page, done")
    page.open("/signup")
    _check(page, locale, "the sign-up page")
