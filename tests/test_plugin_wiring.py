"""The plugin wires apps built during a test: mock_clock, fast hasher, in-memory stores.

Run through ``pytester`` with the defaults a user gets (flask-authflow's own suite turns
the wiring off in its ini file). The user's factory configures a SQLite file in a
"development" folder outside the test's temporary folder: with the default wiring that
file is never created; with ``authflow_stores("sql")`` the run is refused with a message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

RUN_ARGS = ("--strict-markers", "-p", "no:cacheprovider", "-W", "error")

MYAPP = """
import secrets

from flask import Flask

from flask_authflow import AuthFlow, current_user, login_required

authflow = AuthFlow()
DEV_DB = {dev_db!r}


def create_app(test_config=None):
    app = Flask(__name__)
    app.config.update(
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_DATABASE_URL="sqlite:///" + DEV_DB,
    )
    app.config.update(test_config or {{}})
    authflow.init_app(app)

    @app.get("/dashboard")
    @login_required
    def dashboard():
        return f"hello {{current_user.identifier}}"

    return app
"""

CONFTEST = """
import pytest

from myapp import create_app


@pytest.fixture
def app():
    return create_app({"TESTING": True})
"""

TESTS = """
from datetime import timedelta

import pytest

from flask_authflow import InMemoryBackend, get_state


def test_mock_clock_reaches_the_app(logged_in_client, mock_clock):
    assert logged_in_client.get("/dashboard").text == "hello alice"
    mock_clock.advance(timedelta(hours=13))
    assert logged_in_client.get("/dashboard").status_code == 401


def test_stores_are_in_memory_and_the_hasher_fast(app, mock_clock, authflow_hasher):
    state = get_state(app)
    assert isinstance(state.backend, InMemoryBackend)
    assert state.clock is mock_clock
    assert state.hasher is authflow_hasher


@pytest.mark.authflow_stores("sql")
def test_sql_stores_must_stay_in_tmp_path(app):
    pass
"""


def _write_project(pytester: pytest.Pytester, dev_db: Path) -> None:
    pytester.makeini("[pytest]\n")  # the user's own (empty) settings: no ancestor's config applies
    pytester.makepyfile(myapp=MYAPP.format(dev_db=str(dev_db)), conftest=CONFTEST, test_myapp=TESTS)


def test_default_wiring_keeps_tests_off_the_development_database(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    dev_db = tmp_path_factory.mktemp("dev") / "dev.db"
    _write_project(pytester, dev_db)
    result = pytester.runpytest_subprocess(*RUN_ARGS)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*AUTHFLOW_DATABASE_URL points at*dev.db, outside this test's temporary folder*"]
    )
    assert not dev_db.exists()


def test_sql_wiring_accepts_a_database_inside_tmp_path(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        myapp=MYAPP.format(dev_db="unused.db"),
        test_sql="""
import pytest

from flask_authflow import SqlAlchemyBackend, get_state
from myapp import create_app


@pytest.mark.authflow_stores("sql")
def test_sql_in_tmp_path(tmp_path, login_client, mock_clock):
    pass


@pytest.fixture
def app(tmp_path):
    return create_app({"TESTING": True, "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path}/t.db"})


@pytest.mark.authflow_stores("sql")
def test_sql_store_used(app, login_client, tmp_path):
    assert isinstance(get_state(app).backend, SqlAlchemyBackend)
    assert login_client("alice").get("/dashboard").text == "hello alice"
    assert (tmp_path / "t.db").exists()
""",
    )
    result = pytester.runpytest_subprocess(*RUN_ARGS)
    result.assert_outcomes(passed=2)


def test_app_marker_and_ini_turn_the_wiring_off(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        myapp=MYAPP.format(dev_db="unused.db"),
        test_off="""
import pytest

from flask_authflow import InMemoryBackend, SystemClock, get_state
from myapp import create_app


@pytest.fixture
def app(tmp_path):
    return create_app({"TESTING": True, "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path}/t.db"})


@pytest.mark.authflow_stores("app")
def test_marker_app(app):
    assert isinstance(get_state(app).clock, SystemClock)
    assert not isinstance(get_state(app).backend, InMemoryBackend)


def test_default(app):
    assert isinstance(get_state(app).backend, InMemoryBackend)
""",
    )
    result = pytester.runpytest_subprocess(*RUN_ARGS)
    result.assert_outcomes(passed=2)
    pytester.makeini("[pytest]\nauthflow_autowire = false\n")
    result = pytester.runpytest_subprocess(*RUN_ARGS)
    result.assert_outcomes(passed=1, failed=1)  # test_default: the wiring is off
