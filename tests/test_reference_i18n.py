"""The reference app in German and French: with Flask-Babel installed it initialises it, so the
pages follow the browser's ``Accept-Language``; the account page's dates are shown in the
page's language (``<html lang>``), not the browser's default."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.reference.app import authflow, create_app
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.parts import missing_part, require_marker

pytest.importorskip("flask_babel", reason="Flask-Babel is in the [babel] and [dev] extras")

PASSWORD = "wonderland-rabbit-42 and more"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
HTML = {"Accept": "text/html"}
LOCAL_TIMES = re.compile(r'<script data-authflow="local-times">(.*?)</script>', re.S)
TIMES = re.compile(r'<time datetime="([^"]+)" data-local>')

#: Runs the page's script with a stand-in document (the page's lang, its <time> elements) and
#: prints what the elements show beside Intl's formatting of the same instants in the page's
#: language and in English (so the test compares with Intl, never with Intl's wording).
RUNNER = r"""
const vm = require("vm");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const nodes = input.times.map((t) => ({
  textContent: "as the server wrote it", title: "",
  getAttribute(name) { return name === "datetime" ? t : null; },
}));
const document = {
  documentElement: { getAttribute: (name) => (name === "lang" ? input.lang : null) },
  querySelectorAll: (selector) => (selector === "time[data-local]" ? nodes : []),
};
vm.runInNewContext(input.script, { document, Intl, Date, isNaN });
const options = { dateStyle: "medium", timeStyle: "short" };
const inLang = new Intl.DateTimeFormat(input.lang, options);
const inEnglish = new Intl.DateTimeFormat("en", options);
console.log(JSON.stringify({
  shown: nodes.map((n) => n.textContent),
  inLang: input.times.map((t) => inLang.format(new Date(t))),
  inEnglish: input.times.map((t) => inEnglish.format(new Date(t))),
}));
"""


def _app(tmp_path: Path) -> Flask:
    return create_app(
        {"TESTING": True, "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48), **FAST_ARGON2},
        instance_path=str(tmp_path / "instance"),
    )


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = _app(tmp_path)
    with app.app_context():
        authflow.accounts.create("alice", PASSWORD)
    return app


def _signed_in(app: Flask) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    response = client.post("/login", json={"username": "alice", "password": PASSWORD})
    assert response.status_code == 200, response.text
    return client


@pytest.mark.parametrize(
    ("accept", "lang", "heading"),
    [
        ("de-DE,de;q=0.9,en;q=0.5", "de", "<h1>Anmelden</h1>"),
        ("fr-CH, fr;q=0.9", "fr", "<h1>Se connecter</h1>"),
        ("en-GB,en;q=0.9", "en", "<h1>Sign in</h1>"),
        ("es, it;q=0.5", "en", "<h1>Sign in</h1>"),  # no catalogue for them: English
    ],
)
def test_the_sign_in_page_follows_accept_language(
    authflow_client: FlaskClient, accept: str, lang: str, heading: str
) -> None:
    page = authflow_client.get("/login", headers={**HTML, "Accept-Language": accept})
    assert page.status_code == 200
    assert f'<html lang="{lang}">' in page.text and heading in page.text


def test_the_account_page_is_translated_for_a_signed_in_user(app: Flask) -> None:
    client = _signed_in(app)
    german = client.get("/account", headers={**HTML, "Accept-Language": "de"})
    assert '<html lang="de">' in german.text and "Ihre Sitzungen" in german.text
    french = client.get("/account", headers={**HTML, "Accept-Language": "fr"})
    assert '<html lang="fr">' in french.text and "Vos sessions" in french.text


def test_without_flask_babel_the_reference_app_is_english(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "flask_babel", None)  # as if the extra were not installed
    app = _app(tmp_path)
    assert "babel" not in app.extensions
    page = app.test_client().get("/login", headers={**HTML, "Accept-Language": "de"})
    assert page.status_code == 200
    assert '<html lang="en">' in page.text and "<h1>Sign in</h1>" in page.text


@pytest.mark.interop  # runs the page's script in Node.js
@pytest.mark.parametrize("lang", ["de", "fr"])
def test_dates_on_the_account_page_follow_the_page_language(app: Flask, lang: str) -> None:
    require_marker("interop", "Node.js")
    node = shutil.which("node")
    if node is None:
        missing_part("Node.js is not installed (scripts/test provisions it): the page's script cannot run")
        raise AssertionError("unreachable")
    page = _signed_in(app).get("/account", headers={**HTML, "Accept-Language": lang})
    assert f'<html lang="{lang}">' in page.text
    [script] = LOCAL_TIMES.findall(page.text)
    times = TIMES.findall(page.text)
    assert times, "the account page shows no local times"
    done = subprocess.run(
        [node, "-e", RUNNER],
        input=json.dumps({"script": script, "lang": lang, "times": times}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["shown"] == result["inLang"]
    assert result["shown"] != result["inEnglish"]  # not the browser's (here English) default
