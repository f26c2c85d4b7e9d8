"""Translations of the package's pages, messages and e-mails (``flask_authflow._i18n``).

Without Flask-Babel on the app everything is the source's English; with ``Babel(app)`` the
package's catalogues answer in the locale of the app's selector, else of the browser's
``Accept-Language`` (German, French), and times follow the request's time zone.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from flask import Flask, render_template_string
from flask.testing import FlaskClient
from markupsafe import Markup

from flask_authflow import get_state, roles_required
from flask_authflow._i18n import (
    current_locale,
    format_date,
    format_datetime,
    gettext,
    lazy_gettext,
    ngettext,
    template_context,
    translate,
    translations_active,
)
from flask_authflow.errors import USER_FACING_DEFAULTS, PermissionDenied, Unauthenticated
from flask_authflow.mfa._email_otp import EmailOtpFactor
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory

flask_babel = pytest.importorskip("flask_babel", reason="Flask-Babel is in the [babel] and [dev] extras")
from babel.dates import get_month_names  # noqa: E402 - Babel comes with Flask-Babel

PASSWORD = "correct horse battery"
GERMAN = {"Accept-Language": "de-DE,de;q=0.9,en;q=0.5"}
FRENCH = {"Accept-Language": "fr-CH, fr;q=0.9"}


def make(app_factory: AppFactory, *, babel: bool = True, **babel_options: Any) -> Flask:
    app = app_factory(AUTHFLOW_VIEWS=True, **babel_options.pop("config", {}))
    if babel:
        flask_babel.Babel(app, **babel_options)
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    add_user(backend, "default", "alice", PASSWORD)
    return app


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match is not None
    return match.group(1)


def login(client: FlaskClient, headers: dict[str, str], password: str = PASSWORD) -> Any:
    page = client.get("/login", headers=headers)
    form = {"username": "alice", "password": password, "csrf_token": csrf_of(page.text)}
    return client.post("/login", data=form, headers=headers)


def shown_day(day: date, locale: str) -> re.Pattern[str]:
    """``day`` in the order of the locale's dates: German day.month.year in figures, French
    day, the month's name (the installed Babel's French abbreviation), year. What Babel's CLDR
    data changes between releases (zone names, the glue between date and time) is left open."""
    if locale == "de":
        return re.compile(rf"(?<!\d)0?{day.day}\.0?{day.month}\.{day.year}(?!\d)")
    month = get_month_names("abbreviated", locale=locale)[day.month]
    return re.compile(rf"(?<!\d){day.day}\s+{re.escape(month)}\s+{day.year}(?!\d)")


def assert_shown_in(text: str, instant: datetime, zone: str, locale: str) -> None:
    """``text`` shows ``instant`` in ``zone``: its day there in the locale's order and month
    names, and a wall time whose distance from the UTC instant is the zone's offset."""
    local = instant.astimezone(ZoneInfo(zone))
    assert shown_day(local.date(), locale).search(text), (text, local)
    wall = re.search(r"(?<!\d)(\d{1,2}):(\d\d)(?!\d)", text)
    assert wall is not None, text
    shown = datetime(local.year, local.month, local.day, int(wall[1]), int(wall[2]), tzinfo=UTC)
    offset = shown - instant.astimezone(UTC).replace(second=0, microsecond=0)
    assert offset == local.utcoffset() != timedelta(0), (text, local)


# --- without Flask-Babel: English, as before -------------------------------------------------------


def test_without_babel_the_functions_answer_formatted_english(app_factory: AppFactory) -> None:
    assert gettext("Sign in") == "Sign in"  # no app at all
    assert gettext("Sign in with %(provider)s", provider="Acme") == "Sign in with Acme"
    assert ngettext("%(num)d minute", "%(num)d minutes", 1) == "1 minute"
    assert ngettext("%(num)d minute", "%(num)d minutes", 5) == "5 minutes"
    app = make(app_factory, babel=False)
    with app.test_request_context("/", headers=GERMAN):
        assert not translations_active() and current_locale() == "en"
        assert gettext("Sign in") == "Sign in"
        assert str(lazy_gettext("Sign in")) == "Sign in"
        when = datetime(2026, 11, 25, 13, 40, tzinfo=UTC)
        assert format_datetime(when) == "2026-11-25 13:40 UTC"
        assert format_datetime(when.replace(tzinfo=None)) == "2026-11-25 13:40 UTC"
        assert format_date(when) == "2026-11-25"
    page = app.test_client().get("/login", headers=GERMAN)
    assert '<html lang="en">' in page.text and "<h1>Sign in</h1>" in page.text


@pytest.mark.slow  # a fresh interpreter without flask_babel
def test_without_flask_babel_installed_the_package_works_in_english(tmp_path) -> None:
    """``flask_babel`` cannot be imported (the extra is not installed): the functions answer
    English and the pages render."""
    script = tmp_path / "no_babel.py"
    script.write_text(
        "import secrets, sys\n"
        "sys.modules['flask_babel'] = None  # ImportError on import\n"
        "from flask import Flask\n"
        "from flask_authflow import AuthFlow\n"
        "from flask_authflow._i18n import gettext, lazy_gettext, ngettext\n"
        "app = Flask('no_babel')\n"
        "app.config.update(AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_VIEWS=True)\n"
        "AuthFlow(app)\n"
        "page = app.test_client().get('/login', headers={'Accept-Language': 'de'})\n"
        "assert page.status_code == 200 and '<h1>Sign in</h1>' in page.text, page.text\n"
        "with app.test_request_context(headers={'Accept-Language': 'fr'}):\n"
        "    assert gettext('Cancel') == 'Cancel' and str(lazy_gettext('Cancel')) == 'Cancel'\n"
        "    assert ngettext('%(num)d minute', '%(num)d minutes', 2) == '2 minutes'\n"
        "print('english')\n"
    )
    run = subprocess.run(
        [sys.executable, "-W", "error", str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "english"


# --- the locale ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "locale", "heading"),
    [
        ("de-DE,de;q=0.9,en;q=0.5", "de", "<h1>Anmelden</h1>"),
        ("fr-CH, fr;q=0.9", "fr", "<h1>Se connecter</h1>"),
        ("en-GB,de;q=0.5", "en", "<h1>Sign in</h1>"),
        ("es-ES,es;q=0.9", "en", "<h1>Sign in</h1>"),  # no catalogue: the app's default locale
        ("", "en", "<h1>Sign in</h1>"),
    ],
)
def test_without_a_selector_the_pages_follow_accept_language(
    app_factory: AppFactory, accept: str, locale: str, heading: str
) -> None:
    app = make(app_factory)
    page = app.test_client().get("/login", headers={"Accept-Language": accept} if accept else {})
    assert page.status_code == 200
    assert f'<html lang="{locale}">' in page.text and heading in page.text


@pytest.mark.parametrize("accept", ["de;q=0", "*", ";;;,,", "de;q=abc", "x" * 2000, "zz-ZZ, \u00e9"])
def test_odd_or_refusing_accept_language_headers_get_english(app_factory: AppFactory, accept: str) -> None:
    app = make(app_factory)
    page = app.test_client().get("/login", headers={"Accept-Language": accept.encode().decode("latin-1")})
    assert page.status_code == 200 and "<h1>Sign in</h1>" in page.text


def test_outside_a_request_the_default_locale_is_used(app_factory: AppFactory) -> None:
    """A CLI command runs in an app context without a request: the app's selector (which may
    read the request) is not called, and ``BABEL_DEFAULT_LOCALE`` applies."""

    def selector() -> str:
        raise AssertionError("the selector was called outside a request")

    app = make(app_factory, locale_selector=selector, default_locale="fr", default_timezone="Europe/Paris")
    with app.app_context():
        assert current_locale() == "fr"
        assert gettext("Cancel") == "Annuler"
        summer = datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
        assert_shown_in(format_datetime(summer), summer, "Europe/Paris", "fr")  # 1 juil. 2026, 12:00
    paris = make(app_factory, default_timezone="Europe/Paris")
    with paris.test_request_context("/", headers=GERMAN):  # 23:30 UTC is the next day in Paris
        assert shown_day(date(2026, 7, 2), "de").fullmatch(
            format_date(datetime(2026, 7, 1, 23, 30, tzinfo=UTC))
        )


def test_the_apps_locale_selector_wins_over_the_browser(app_factory: AppFactory) -> None:
    app = make(app_factory, locale_selector=lambda: "fr")
    page = app.test_client().get("/login", headers=GERMAN)
    assert '<html lang="fr">' in page.text and "Nom d\u2019utilisateur" in page.text


def test_a_selector_for_a_region_uses_the_language_catalogue(app_factory: AppFactory) -> None:
    app = make(app_factory, locale_selector=lambda: "de_AT")
    page = app.test_client().get("/login")
    assert "<h1>Anmelden</h1>" in page.text


def test_the_apps_own_templates_keep_the_apps_domain(app_factory: AppFactory) -> None:
    """The package's ``_`` is given to its own templates only: the app's ``_`` (its Babel domain,
    which has no catalogue here) still answers the app's English."""
    app = make(app_factory)
    with app.test_request_context("/", headers=GERMAN):
        assert render_template_string('{{ _("Sign in") }}') == "Sign in"
        assert gettext("Sign in") == "Anmelden"


@pytest.mark.parametrize("babel", [False, True])
def test_an_apps_own_page_may_extend_the_ready_layout(app_factory: AppFactory, babel: bool) -> None:
    """The app's own template extending ``authflow/base.html`` renders: without Flask-Babel the
    package's ``_`` is in every template; with it, the app's own ``_`` (its domain) is kept."""
    app = make(app_factory, babel=babel)

    @app.get("/mine")
    def mine() -> str:
        return render_template_string(
            '{% extends "authflow/base.html" %}'
            '{% block content %}<p id="mine">{{ _("Cancel") }}</p>{% endblock %}'
        )

    page = app.test_client().get("/mine", headers=GERMAN)
    assert page.status_code == 200
    assert '<p id="mine">Cancel</p>' in page.text and "<title>Account</title>" in page.text


# --- messages, errors and escaping -----------------------------------------------------------------


def test_a_refused_login_shows_the_error_in_the_browsers_language(app_factory: AppFactory) -> None:
    app = make(app_factory)
    wrong = login(app.test_client(), GERMAN, password="not the password")
    assert wrong.status_code == 401
    assert "Falscher Benutzername oder falsches Passwort." in wrong.text
    assert "Wrong username or password" not in wrong.text
    wrong = login(app.test_client(), FRENCH, password="not the password")
    assert "Nom d\u2019utilisateur ou mot de passe incorrect." in wrong.text


def test_the_lock_message_shows_the_time_in_the_apps_time_zone(app_factory: AppFactory, mock_clock) -> None:
    app = make(
        app_factory,
        config={"AUTHFLOW_LOCKOUT_MAX_FAILURES": 1, "AUTHFLOW_LOCKOUT_DURATION": timedelta(minutes=15)},
        default_timezone="Europe/Berlin",
    )
    client = app.test_client()
    login(client, GERMAN, password="wrong")
    locked = login(client, GERMAN)
    assert locked.status_code == 403
    shown = re.search(r"Versuchen Sie es nach ([^<]+?) erneut", locked.text)
    assert shown is not None and "Too many" not in locked.text, locked.text
    assert_shown_in(shown[1], mock_clock.now() + timedelta(minutes=15), "Europe/Berlin", "de")


def test_values_put_into_translated_markup_are_escaped(app_factory: AppFactory) -> None:
    app = make(app_factory)
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    add_user(backend, "default", "<b>eve</b>", PASSWORD)
    client = app.test_client()
    page = client.get("/login", headers=GERMAN)
    form = {"username": "<b>eve</b>", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    assert client.post("/login", data=form, headers=GERMAN).status_code == 302
    account = client.get("/account", headers=GERMAN)
    assert "Angemeldet als <strong>&lt;b&gt;eve&lt;/b&gt;</strong>." in account.text
    assert "<b>eve</b>" not in account.text
    again = client.get("/login", headers=GERMAN)
    assert "Sie sind als <strong>&lt;b&gt;eve&lt;/b&gt;</strong> angemeldet." in again.text


def test_the_account_page_shows_times_in_the_users_time_zone(app_factory: AppFactory, mock_clock) -> None:
    app = make(app_factory, timezone_selector=lambda: "America/New_York")
    client = app.test_client()
    assert login(client, FRENCH).status_code == 302
    account = client.get("/account", headers=FRENCH)
    shown = re.search(
        r"ouverte le <time datetime=\"([^\"]+)\"[^>]*>([^<]+)</time> avec mot de passe", account.text
    )
    assert shown is not None, account.text
    assert datetime.fromisoformat(shown[1]) == mock_clock.now()  # the instant, for the page's script
    assert_shown_in(shown[2], mock_clock.now(), "America/New_York", "fr")
    english = f"{mock_clock.now():%H:%M} UTC"  # how an app without Flask-Babel ends a time
    assert english not in account.text and "Last seen" not in account.text


def test_json_errors_are_translated_too(app_factory: AppFactory) -> None:
    app = make(app_factory)
    refused = app.test_client().post("/login/passkey/options", headers=GERMAN)
    assert refused.status_code == 400
    assert refused.json == {
        "error": "csrf",
        "message": "Dieses Formular ist abgelaufen oder stammt nicht von dieser Website. "
        "Bitte versuchen Sie es erneut.",
    }


def test_typed_errors_show_their_translated_default_message(app_factory: AppFactory) -> None:
    app = make(app_factory)
    with app.test_request_context("/", headers=FRENCH):
        assert translate(Unauthenticated().message) == "Authentification requise."
        assert translate(PermissionDenied().message).startswith("Vous êtes connecté")
        for message in USER_FACING_DEFAULTS:
            assert translate(message) != message, message
        assert translate("a message no catalogue has") == "a message no catalogue has"
        markup = Markup("<em>Cancel</em>")
        assert translate(markup) is markup  # a view's own markup is kept as it is


def test_the_errors_pages_show_have_their_default_message_marked() -> None:
    """The typed errors a page or a form shows by their default message are in the catalogue."""
    from flask_authflow.errors import ApiTokenNameTaken, StepUpNeeded, Throttled, UserExists
    from flask_authflow.login._account_tokens import (
        AccountTokenExpired,
        AccountTokenInvalid,
        AccountTokenUsed,
    )

    for error in (
        Unauthenticated,
        PermissionDenied,
        StepUpNeeded,
        UserExists,
        Throttled,
        ApiTokenNameTaken,
        AccountTokenInvalid,
        AccountTokenUsed,
        AccountTokenExpired,
    ):
        assert error.default_message() in USER_FACING_DEFAULTS, error


@pytest.mark.parametrize(
    ("password", "german"),
    [
        ("short", "Wählen Sie ein Passwort mit mindestens"),
        ("abcdefghijklmnopqrs", "Dieses Passwort ist ein wiederholtes oder fortlaufendes Muster"),
    ],
)
def test_the_password_policy_speaks_the_users_language(
    app_factory: AppFactory, password: str, german: str
) -> None:
    app = make(app_factory)
    client = app.test_client()
    assert login(client, GERMAN).status_code == 302
    account = client.get("/account", headers=GERMAN)
    form = {
        "current_password": PASSWORD,
        "new_password": password,
        "new_password_confirm": password,
        "csrf_token": csrf_of(account.text),
    }
    refused = client.post("/account/password", data=form, headers=GERMAN)
    assert refused.status_code == 400
    assert german in refused.text and "Choose a password" not in refused.text


def test_the_code_mails_are_in_the_users_language(app_factory: AppFactory) -> None:
    app = make(app_factory)
    factor = EmailOtpFactor(FactorSealer.from_key(secrets.token_bytes(32)), lambda: None, site_name="Acme")
    with app.test_request_context("/", headers=GERMAN):
        subject, body = factor.login_message("12345678")
        assert subject == "Ihr Anmeldecode für Acme"
        assert "    12345678\n" in body and "Er läuft in 5 Minuten ab" in body
        subject, body = factor.enrollment_message("87654321")
        assert subject == "Bestätigen Sie Ihre E-Mail-Adresse für Acme" and "87654321" in body
    with app.test_request_context("/", headers=FRENCH):
        subject, body = factor.login_message("12345678")
        assert subject == "Votre code de connexion à Acme" and "Il expire dans 5 minutes" in body
    with app.test_request_context("/"):
        assert factor.login_message("12345678")[0] == "Your Acme sign-in code"


def test_plural_forms_follow_the_locale(app_factory: AppFactory) -> None:
    app = make(app_factory)
    with app.test_request_context("/", headers=FRENCH):
        # French: 0 and 1 are singular
        assert ngettext("%(num)d code left", "%(num)d codes left", 0) == "0 code restant"
        assert ngettext("%(num)d code left", "%(num)d codes left", 2) == "2 codes restants"
    with app.test_request_context("/", headers=GERMAN):
        assert ngettext("%(num)d code left", "%(num)d codes left", 0) == "0 Codes übrig"
        assert ngettext("%(num)d code left", "%(num)d codes left", 1) == "1 Code übrig"


def test_the_template_context_gives_markup_with_escaped_values(app_factory: AppFactory) -> None:
    app = make(app_factory)
    with app.test_request_context("/", headers=GERMAN):
        context = template_context()
        assert context["authflow_locale"] == "de"
        underscore = context["_"]
        assert callable(underscore)
        shown = underscore("Signed in as <strong>%(name)s</strong>.", name="<i>x</i>")
        assert shown == "Angemeldet als <strong>&lt;i&gt;x&lt;/i&gt;</strong>."
        assert hasattr(shown, "__html__")
        text = template_context(html=False)
        plain = text["_"]
        assert callable(plain)
        # the text of an e-mail: nothing escaped
        assert plain("Sign in with %(provider)s", provider="A & B") == "Mit A & B anmelden"
        plural = text["ngettext"]
        assert callable(plural) and plural("%(num)d minute", "%(num)d minutes", 2) == "2 Minuten"


def test_the_forbidden_page_is_translated(app_factory: AppFactory) -> None:
    app = make(app_factory)

    @app.get("/admin")
    @roles_required("admin")
    def admin() -> str:
        return "admin"

    client = app.test_client()
    assert login(client, FRENCH).status_code == 302
    denied = client.get("/admin", headers={**FRENCH, "Accept": "text/html"})
    assert denied.status_code == 403
    assert "<h1>Non autorisé</h1>" in denied.text and "Not allowed" not in denied.text
