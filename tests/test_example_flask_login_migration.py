"""The Flask-Login example (examples/flask_login_migration) moves to flask-authflow with its
integer-keyed ``User`` table: the four users of an old database sign in with their old
passwords (Werkzeug scrypt and pbkdf2 hashes) as the same rows, an import row without a row
of the app is refused whole, a new account never takes over an existing row by its address,
and the app's own test suite passes unchanged before and after (the plugin waits to be asked;
opted in to its wiring, the suite's own database is refused)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from xml.etree import ElementTree

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.doc_examples import without_unused_plugins

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flask_login_migration"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 1024,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
#: e-mail, name, password, tea: the four customers of the old shop.
PEOPLE = [
    ("alice@example.com", "Alice", "alice's long tea passphrase", "Assam"),
    ("bob@example.com", "Bob", "bob's long tea passphrase", "Sencha"),
    ("carol@example.com", "Carol", "carol's long tea passphrase", "Darjeeling"),
    ("dave@example.com", "Dave", "dave's long tea passphrase", "Rooibos"),
]

# The migration runs on the app's own SQL stores, as an operator runs it.
pytestmark = pytest.mark.authflow_stores("app")


def _load(version: str) -> ModuleType:
    """``teashop`` of ``before/`` or ``after/``, under a name of its own (both are ``teashop``)."""
    name = f"teashop_{version}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / version / "teashop" / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


before = _load("before")
after = _load("after")


@dataclass
class Shop:
    """The old shop's database and the migrated app on it."""

    database: str
    ids: dict[str, int]
    tmp_path: Path

    def app(self, **config: Any) -> Flask:
        return after.create_app(
            {"TESTING": True, "SQLALCHEMY_DATABASE_URI": self.database, **FAST_ARGON2, **config}
        )

    def run(self, app: Flask, *args: str, stdin: str | None = None) -> Any:
        return app.test_cli_runner().invoke(args=list(args), input=stdin)

    def export(self, app: Flask, *extra: tuple[str, str]) -> Path:
        path = self.tmp_path / "users.csv"
        result = self.run(app, "teashop", "export-users", str(path))
        assert result.exit_code == 0, result.output
        if extra:
            with path.open("a", newline="", encoding="utf-8") as handle:
                csv.writer(handle).writerows(extra)
        return path

    def import_users(self, app: Flask, path: Path) -> dict[str, Any]:
        result = self.run(app, "authflow", "users", "import", str(path), "--json")
        assert result.exit_code == 0, result.output
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    def linked(self, app: Flask) -> dict[str, str | None]:
        with app.app_context():
            rows = after.db.session.execute(after.db.select(after.User)).scalars().all()
            return {row.email: row.authflow_id for row in rows}


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Shop]:
    """The old Flask-Login shop with its four users (one with a pbkdf2 hash) and their orders."""
    database = f"sqlite:///{tmp_path / 'teashop.db'}"
    old = before.create_app({"TESTING": True, "SQLALCHEMY_DATABASE_URI": database})
    ids: dict[str, int] = {}
    with old.app_context():
        before.db.create_all()
        for email, name, password, tea in PEOPLE:
            user = before.add_user(email, name, password)
            before.add_order(user, tea)
            ids[email] = user.id
        carol = before.db.session.get(before.User, ids["carol@example.com"])
        carol.password_hash = generate_password_hash(PEOPLE[2][2], method="pbkdf2:sha256:1000")
        before.db.session.commit()
        before.db.engine.dispose()
    yield Shop(database, ids, tmp_path)


def _client(app: Flask) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    return client


def _signs_in(app: Flask, email: str, password: str) -> FlaskClient | None:
    client = _client(app)
    response = client.post("/login", data={"email": email, "password": password})
    return client if response.status_code == 302 else None


def _migrate(shop: Shop, app: Flask) -> dict[str, Any]:
    assert shop.run(app, "teashop", "link-column").exit_code == 0
    report = shop.import_users(app, shop.export(app))
    result = shop.run(app, "teashop", "drop-old-hashes")
    assert result.exit_code == 0, result.output
    return report


def test_the_four_users_sign_in_as_the_same_rows_with_their_old_passwords(shop: Shop) -> None:
    app = shop.app()
    report = _migrate(shop, app)
    assert (report["imported"], report["already_present"], report["refused"]) == (4, 0, [])
    links = shop.linked(app)
    assert all(links.values()) and len(set(links.values())) == 4
    for email, name, password, tea in PEOPLE:
        client = _signs_in(app, email, password)
        assert client is not None, email
        assert f"Hello, {name}!" in client.get("/").text
        orders = client.get("/orders").text  # the integer keys of the old rows still hold
        assert tea in orders and all(other[3] not in orders for other in PEOPLE if other[0] != email)
        with app.app_context():
            user = after.db.session.get(after.User, shop.ids[email])
            assert user is not None and user.authflow_id == links[email]
        assert _signs_in(app, email, password + " not") is None


def test_after_one_sign_in_each_hash_is_argon2id(shop: Shop) -> None:
    app = shop.app()
    _migrate(shop, app)
    for email, _name, password, _tea in PEOPLE:
        assert _signs_in(app, email, password) is not None
    no_legacy = shop.app(AUTHFLOW_LEGACY_PASSWORD_SCHEMES=[])  # the Werkzeug verifier is gone
    for email, _name, password, _tea in PEOPLE:
        assert _signs_in(no_legacy, email, password) is not None, email


def test_an_import_row_without_a_teashop_user_is_refused_whole(shop: Shop) -> None:
    app = shop.app()
    assert shop.run(app, "teashop", "link-column").exit_code == 0
    stranger = ("zoe@example.com", generate_password_hash("zoe's long tea passphrase"))
    report = shop.import_users(app, shop.export(app, stranger))
    assert report["imported"] == 4
    [refused] = report["refused"]
    assert refused["identifier"] == "zoe@example.com" and "user_created" in refused["reason"]
    assert "zoe@example.com" not in shop.linked(app)
    assert _signs_in(app, "zoe@example.com", "zoe's long tea passphrase") is None
    listed = shop.run(app, "authflow", "users", "list", "--json")
    assert "zoe@example.com" not in {user["identifier"] for user in json.loads(listed.stdout)}


def test_a_new_account_never_takes_over_a_row_by_its_address(shop: Shop) -> None:
    app = shop.app()
    _migrate(shop, app)
    with app.app_context():  # a customer the shop keeps without an account (phone orders)
        after.db.session.add(after.User(email="erin@example.com", name="Erin"))
        after.db.session.commit()
    # Someone makes an account with Erin's address (the CLI here; sign-up alike): the hook
    # makes a new row for a new person, which the address of Erin's row refuses, and the
    # account is not kept.
    taken = shop.run(
        app,
        "authflow",
        "create-user",
        "erin@example.com",
        "--password-stdin",
        stdin="an attacker's passphrase\n",
    )
    assert taken.exit_code != 0
    assert shop.linked(app)["erin@example.com"] is None
    listed = shop.run(app, "authflow", "users", "list", "--json")
    assert "erin@example.com" not in {user["identifier"] for user in json.loads(listed.stdout)}
    assert _signs_in(app, "erin@example.com", "an attacker's passphrase") is None
    # Only the operator's import links an account to an existing row.
    erin = shop.tmp_path / "erin.csv"
    erin_hash = generate_password_hash("erin's passphrase")
    erin.write_text(f"identifier,hash\nerin@example.com,{erin_hash}\n")
    assert shop.import_users(app, erin)["imported"] == 1
    client = _signs_in(app, "erin@example.com", "erin's passphrase")
    assert client is not None and "Hello, Erin!" in client.get("/").text


def test_the_migration_steps_are_safe_to_repeat_and_in_order(shop: Shop) -> None:
    app = shop.app()
    assert shop.run(app, "teashop", "link-column").exit_code == 0
    refused = shop.run(app, "teashop", "drop-old-hashes")  # nobody is linked yet: the hashes stay
    assert refused.exit_code != 0 and "4 user(s)" in refused.output
    first = shop.import_users(app, shop.export(app))
    assert first["imported"] == 4
    assert shop.run(app, "teashop", "link-column").exit_code == 0  # again: nothing changes
    again = shop.import_users(app, shop.export(app))  # every row is linked: nothing to export
    assert (again["imported"], again["already_present"], again["refused"]) == (0, 0, [])
    assert shop.run(app, "teashop", "drop-old-hashes").exit_code == 0
    assert shop.run(app, "teashop", "drop-old-hashes").exit_code == 0


# --- the app's own suite, unchanged -------------------------------------------------------------


def _run_suite(tmp_path: Path, *options: str) -> tuple[int, dict[str, str | None], list[str]]:
    """Run the example's suite in a subprocess (its own pytest.ini); the exit code, the JUnit
    report's counts (not the wording of pytest's summary line) and its error messages."""
    tmp_path.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", "-W", "error", "-q", "--basetemp", str(tmp_path / "t")]
    command += without_unused_plugins()  # as the app's own environment: its plugin, not ours
    result = subprocess.run(
        [*command, "--junitxml", str(report), *options],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert report.exists(), result.stdout[-4000:] + result.stderr[-2000:]
    root = ElementTree.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    counts = {name: suite.get(name) for name in ("tests", "failures", "errors", "skipped")}
    errors = [str(error.get("message")) for error in suite.iter("error")]
    return result.returncode, counts, errors


@pytest.mark.slow  # the example's own suite in a subprocess, three times
def test_the_apps_own_suite_passes_before_and_after(tmp_path: Path) -> None:
    clean = {"tests": "8", "failures": "0", "errors": "0", "skipped": "0"}
    assert _run_suite(tmp_path / "before", "-o", "pythonpath=before tests") == (0, clean, [])
    assert _run_suite(tmp_path / "after") == (0, clean, [])
    # Opted in to the plugin's wiring, the suite's tempfile database is refused.
    code, counts, errors = _run_suite(tmp_path / "wired", "-o", "authflow_autowire=true")
    assert code != 0 and counts["errors"] == "8"
    assert all("ConfigurationError" in message for message in errors)
    assert not (EXAMPLE / "after" / "instance").exists()  # no development database was written
