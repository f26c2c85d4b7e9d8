"""The plugin waits to be asked; asked, it wires apps built during a test: mock_clock, fast
hasher, in-memory stores.

Run through ``pytester`` in a subprocess, as a user's suite with the package installed (the
plugin found through its entry point). A fresh project whose app is configured for SQLite
sees exactly its own configuration; the same project with the opt-in (the ini option, the
``authflow_wired`` marker) sees the wiring. The user's factory configures a SQLite file in a
"development" folder outside the test's temporary folder: with the wiring asked for, that
file is never created; with ``authflow_stores("sql")`` the run is refused with a message.
The last tests drive :class:`PluginWiring` in this process: it passes its adapters to
``init_app`` as keyword arguments while it applies, replaces the wiring around it (the
plugin's, in this suite) instead of being layered under it, and leaves ``init_app`` as it
was after.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from flask import Flask

from flask_authflow import AuthFlow, get_state
from flask_authflow._clock import MockClock, SystemClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._wiring import PluginWiring

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

from flask_authflow import get_state
from flask_authflow.storage._memory import InMemoryBackend


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
    # the user's own settings, opting in for the whole suite: no ancestor's config applies
    pytester.makeini("[pytest]\nauthflow_autowire = true\n")
    pytester.makepyfile(myapp=MYAPP.format(dev_db=str(dev_db)), conftest=CONFTEST, test_myapp=TESTS)


@pytest.mark.slow  # pytest runs in a subprocess, as a user's suite
def test_the_opted_in_wiring_keeps_tests_off_the_development_database(
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


@pytest.mark.slow  # pytest runs in a subprocess, as a user's suite
def test_sql_wiring_accepts_a_database_inside_tmp_path(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")  # the marker alone asks for the wiring
    pytester.makepyfile(
        myapp=MYAPP.format(dev_db="unused.db"),
        test_sql="""
import pytest

from flask_authflow import get_state
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
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


FRESH_APP = """
import secrets

from flask import Flask

from flask_authflow import AuthFlow, current_user, login_required

authflow = AuthFlow()


def create_app(test_config=None):
    app = Flask(__name__)
    app.config["AUTHFLOW_SIGNING_KEY"] = secrets.token_bytes(32)
    app.config.update(test_config or {})
    authflow.init_app(app)

    @app.get("/dashboard")
    @login_required
    def dashboard():
        return f"hello {current_user.identifier}"

    return app
"""

FRESH_CONFTEST = """
import pytest

from myapp import create_app


@pytest.fixture
def app(tmp_path):
    return create_app(
        {
            "TESTING": True,
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path}/own.db",
            "AUTHFLOW_ARGON2_TIME_COST": 1,  # cheap Argon2id: allowed with TESTING only
            "AUTHFLOW_ARGON2_MEMORY_COST": 8,
            "AUTHFLOW_ARGON2_PARALLELISM": 1,
        }
    )
"""

FRESH_TESTS = """
import inspect

import pytest

from flask_authflow import AuthFlow, get_state
from flask_authflow._clock import SystemClock
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend


def test_the_plugin_is_installed_and_patches_nothing(request):
    assert request.config.pluginmanager.get_plugin("authflow") is not None  # the entry point
    assert inspect.unwrap(AuthFlow.init_app) is AuthFlow.init_app


def test_the_app_runs_on_its_own_configuration(app, tmp_path, login_client, authflow_hasher):
    state = get_state(app)
    assert isinstance(state.backend, SqlAlchemyBackend)
    assert isinstance(state.clock, SystemClock)
    assert app.config["AUTHFLOW_DATABASE_URL"] == f"sqlite:///{tmp_path}/own.db"
    assert app.config["AUTHFLOW_AUDIT_SPOOL_PATH"] != str(tmp_path / "authflow-audit-spool.jsonl")
    assert state.hasher is not authflow_hasher  # its own (cheap) test settings, not the plugin's
    assert login_client("alice").get("/dashboard").text == "hello alice"
    with app.app_context():
        assert state.backend.find_user("default", "alice") is not None  # in its own SQL store


@pytest.mark.authflow_wired
def test_the_marker_asks_for_the_wiring(app, mock_clock, authflow_hasher):
    state = get_state(app)
    assert isinstance(state.backend, InMemoryBackend)
    assert state.clock is mock_clock and state.hasher is authflow_hasher


@pytest.mark.authflow_stores("app")
def test_the_app_marker_keeps_the_wiring_off(app):
    assert isinstance(get_state(app).backend, SqlAlchemyBackend)
"""


@pytest.mark.slow  # pytest runs in a subprocess, twice, as a user's suite
def test_a_fresh_project_sees_its_own_configuration_unless_it_opts_in(pytester: pytest.Pytester) -> None:
    """A project with the package installed and its own SQLite-configured app: its tests see
    exactly their own configuration; the ``authflow_wired`` marker, or the ini option for the
    whole suite, asks for the wiring; ``authflow_stores("app")`` keeps it off either way."""
    pytester.makeini("[pytest]\n")  # the project's own (empty) settings: no ancestor's config applies
    pytester.makepyfile(myapp=FRESH_APP, conftest=FRESH_CONFTEST, test_myapp=FRESH_TESTS)
    result = pytester.runpytest_subprocess(*RUN_ARGS)
    result.assert_outcomes(passed=4)
    result = pytester.runpytest_subprocess(*RUN_ARGS, "-o", "authflow_autowire=true")
    result.assert_outcomes(passed=2, failed=2)  # wired: neither the clean init_app nor its own store
    result.stdout.fnmatch_lines(
        ["FAILED *test_the_plugin_is_installed_and_patches_nothing*", "FAILED *test_the_app_runs_on_its_own*"]
    )


@pytest.mark.parametrize("kind", ["nosuch", ""])
def test_an_unknown_store_kind_is_a_usage_error(pytester: pytest.Pytester, kind: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_kind=f"""
import pytest


@pytest.mark.authflow_stores({kind!r})
def test_kind():
    pass
"""
    )
    result = pytester.runpytest(*RUN_ARGS)
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*authflow_stores({kind!r}): use 'memory', 'sql' or 'app'*"])


# -- the wiring itself, in this process ------------------------------------------------------------


def _factory_app(**config: object) -> Flask:
    app = Flask(__name__)
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), **config)
    return app


@pytest.mark.authflow_stores("app")  # an app built after the block must see no wiring at all
def test_the_wiring_passes_its_adapters_to_init_app_and_then_goes(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    dev_db = tmp_path_factory.mktemp("dev") / "dev.db"
    wiring = PluginWiring(clock=MockClock(), hasher=PasswordHasher.fast_for_tests(), tmp_path=tmp_path)
    original = AuthFlow.init_app
    own_clock = MockClock()
    with wiring.applied():
        app = _factory_app(AUTHFLOW_DATABASE_URL=f"sqlite:///{dev_db}")
        AuthFlow(app)
        explicit = _factory_app()
        AuthFlow(explicit, clock=own_clock)
    state = get_state(app)
    assert state.clock is wiring.clock and state.hasher is wiring.hasher
    assert isinstance(state.backend, InMemoryBackend)
    assert isinstance(state.session_store, MemorySessionStore)
    assert app.config["AUTHFLOW_AUDIT_SPOOL_PATH"] == str(tmp_path / "authflow-audit-spool.jsonl")
    assert get_state(explicit).clock is own_clock  # what the application passes wins
    assert not dev_db.exists()
    assert AuthFlow.init_app is original  # nothing is left behind after the test
    after = _factory_app(AUTHFLOW_SESSION_STORE="memory")
    AuthFlow(after, backend=InMemoryBackend(), hasher=wiring.hasher)
    assert isinstance(get_state(after).clock, SystemClock)


def test_sql_wiring_keeps_the_database_inside_tmp_path(  # inside the plugin's memory wiring
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    wiring = PluginWiring(
        clock=MockClock(), hasher=PasswordHasher.fast_for_tests(), tmp_path=tmp_path, stores="sql"
    )
    outside = tmp_path_factory.mktemp("dev") / "dev.db"
    with wiring.applied():
        app = _factory_app()
        AuthFlow(app)
        refused = _factory_app(AUTHFLOW_DATABASE_URL=f"sqlite:///{outside}")
        with pytest.raises(ConfigurationError, match="outside this test's temporary folder"):
            AuthFlow(refused)
        backend = SqlAlchemyBackend(f"sqlite:///{outside}")
        try:
            with pytest.raises(ConfigurationError, match=r"the backend's database is .*dev\.db, outside"):
                AuthFlow(_factory_app(AUTHFLOW_SESSION_STORE="memory"), backend=backend)
        finally:
            backend.close()
    try:
        assert isinstance(get_state(app).backend, SqlAlchemyBackend)
        assert app.config["AUTHFLOW_DATABASE_URL"] == f"sqlite:///{tmp_path / 'authflow.db'}"
        assert "authflow" not in refused.extensions
    finally:
        get_state(app).backend.close()


def test_a_nested_wiring_replaces_the_plugins_and_gives_it_back(tmp_path: Path) -> None:
    """The plugin wires this test with in-memory stores; a ``stores="sql"`` block inside it
    gets SQL stores (not the plugin's memory ones under its own), and after the block the
    plugin's wiring is back."""
    wired = AuthFlow.init_app
    wiring = PluginWiring(
        clock=MockClock(), hasher=PasswordHasher.fast_for_tests(), tmp_path=tmp_path, stores="sql"
    )
    with wiring.applied():
        inner = _factory_app()
        AuthFlow(inner)
    try:
        assert isinstance(get_state(inner).backend, SqlAlchemyBackend)
        assert get_state(inner).clock is wiring.clock
        assert AuthFlow.init_app is wired
        outer = _factory_app()
        AuthFlow(outer)
        assert isinstance(get_state(outer).backend, InMemoryBackend)
    finally:
        get_state(inner).backend.close()


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://host/db"])
def test_sql_wiring_leaves_a_bad_database_url_to_the_configuration_check(tmp_path: Path, url: str) -> None:
    """Under ``stores="sql"`` an unparsable URL gets the extension's ConfigurationError, not
    the URL parser's own exception from inside the wiring."""
    wiring = PluginWiring(
        clock=MockClock(), hasher=PasswordHasher.fast_for_tests(), tmp_path=tmp_path, stores="sql"
    )
    app = _factory_app(AUTHFLOW_DATABASE_URL=url)
    with wiring.applied(), pytest.raises(ConfigurationError, match="AUTHFLOW_DATABASE_URL"):
        AuthFlow(app)
    assert "authflow" not in app.extensions


def test_this_suite_opts_in_to_the_wiring(request: pytest.FixtureRequest, mock_clock: MockClock) -> None:
    """flask-authflow's own suite asks for the wiring in pyproject.toml (the plugin's default
    is off), so its tests never write into a development database."""
    assert request.config.getini("authflow_autowire") is True
    app = _factory_app()
    AuthFlow(app)
    assert isinstance(get_state(app).backend, InMemoryBackend)
    assert get_state(app).clock is mock_clock
