"""Shared fixtures of the flask-authflow test suite, its markers and its ``--fast`` option.

The markers say which real parts a test needs (docs/testing.rst, "flask-authflow's own suite"):
``postgres``, ``redis``, ``browser``, ``interop`` (Node: ``oidc-provider``, ``jose``),
``multiprocess`` (child processes) and ``slow``. A test that asks for a part's fixture, or
whose parameters name one (``database_url``'s "postgresql"), is marked here at collection; a
test that reaches a part in any other way without its marker fails (``tests.parts.require_marker``).
"""

from __future__ import annotations

import multiprocessing.process
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from flask import Flask

from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow.login._password import PasswordHasher
from tests.appfactory import AppFactory, make_app
from tests.parts import (
    PostgresServer,
    RedisServer,
    attach_shared_postgres,
    detach_shared_postgres,
    missing_part,
    require_marker,
    running_test,
    start_redis,
)

#: What ``--fast`` leaves out: every test that needs a real server, a browser, Node or child
#: processes, and the few that are slow on their own.
FAST_DESELECTS = ("postgres", "redis", "browser", "interop", "multiprocess", "slow")
FAST_EXPRESSION = f"not ({' or '.join(FAST_DESELECTS)})"

#: A test that uses one of these fixtures gets the marker.
FIXTURE_MARKERS = {
    "postgres_server": "postgres",
    "postgres_cluster": "postgres",
    "redis_server": "redis",
    "redis_process": "redis",
    "oidc_op": "interop",
    "oidc_op_process": "interop",
    "browsers": "browser",
}
#: A parametrized test with one of these values (a store kind, ``database_url``) gets the marker.
PARAMETER_MARKERS = {"postgresql": "postgres", "postgres": "postgres", "redis": "redis"}

#: A module's fixture that takes seconds to build (a fresh interpreter, hashes at their real
#: costs): the tests of that module that use it, directly or through another fixture, are
#: marked ``slow``.
SLOW_FIXTURES = {
    # migrates and fills a django-allauth project in a subprocess (Django's own migrations)
    "tests/test_allauth_migration.py": "project",
    # a Flask-Security-Too user per password scheme, each hashed at FST's real cost
    "tests/test_fst_migration.py": "fst_database",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f"the developer's loop: deselect the tests marked {', '.join(FAST_DESELECTS)} "
        f"(the same as -m '{FAST_EXPRESSION}'; a -m given too is combined with it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    given = config.option.markexpr
    if config.getoption("fast") and FAST_EXPRESSION not in given:
        config.option.markexpr = f"({given}) and {FAST_EXPRESSION}" if given else FAST_EXPRESSION
    _guard_child_processes()
    Flask.jinja_options = {**Flask.jinja_options, "bytecode_cache": SharedTemplateCode()}


class SharedTemplateCode(jinja2.BytecodeCache):
    """Compiled templates shared by the apps of this test process. Every test builds apps of
    its own, and compiling the same templates again for each was a quarter of a view test's
    time; a deployed app compiles each template once too. A template is found by its name,
    file and environment settings and used only while its source is unchanged (Jinja checks
    a checksum), so a test's own template or settings get their own compiled code."""

    def __init__(self) -> None:
        self.code: dict[str, bytes] = {}

    def get_bucket(
        self, environment: jinja2.Environment, name: str, filename: str | None, source: str
    ) -> jinja2.bccache.Bucket:
        autoescape = getattr(environment.autoescape, "__func__", environment.autoescape)
        settings = (
            sorted(environment.extensions),
            getattr(autoescape, "__qualname__", repr(autoescape)),
            environment.block_start_string,
            environment.variable_start_string,
            environment.comment_start_string,
            environment.line_statement_prefix,
            environment.trim_blocks,
            environment.lstrip_blocks,
            environment.newline_sequence,
            environment.keep_trailing_newline,
            environment.optimized,
            environment.is_async,
            environment.finalize is None,
        )
        key = f"{settings}|{self.get_cache_key(name, filename)}"
        bucket = jinja2.bccache.Bucket(environment, key, self.get_source_checksum(source))
        self.load_bytecode(bucket)
        return bucket

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self.code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not config.getoption("fast"):
        return []
    return [
        f"--fast: deselects the tests marked {', '.join(FAST_DESELECTS)} (runs -m '{config.option.markexpr}')"
    ]


#: What --fast deselected in this process: the total, then the count per marker (a test can
#: carry several); under xdist each worker sends its counts to the controller.
FAST_COUNTS = pytest.StashKey[dict[str, int]]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items or not items[0].config.getoption("fast"):
        return
    counts = items[0].config.stash.setdefault(FAST_COUNTS, {})
    counts["total"] = counts.get("total", 0) + len(items)
    for marker in FAST_DESELECTS:
        counts[marker] = counts.get(marker, 0) + sum(1 for item in items if item.get_closest_marker(marker))


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["authflow_fast"] = session.config.stash.get(FAST_COUNTS, {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller keeps one worker's counts: every worker collects the same tests."""
    counts = getattr(node, "workeroutput", {}).get("authflow_fast")
    if counts:
        node.config.stash[FAST_COUNTS] = counts


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not config.getoption("fast"):
        return
    counts = config.stash.get(FAST_COUNTS, {})
    detail = ", ".join(f"{marker} {counts.get(marker, 0)}" for marker in FAST_DESELECTS)
    terminalreporter.write_line(
        f"--fast deselected {counts.get('total', 0)} tests ({detail}; -m '{config.option.markexpr}'); "
        "./scripts/test without --fast runs them"
    )


def markers_from_fixtures(item: pytest.Item) -> set[str]:
    """The markers that ``item``'s fixtures, parameters and module call for."""
    names = getattr(item, "fixturenames", ())
    found = {marker for fixture, marker in FIXTURE_MARKERS.items() if fixture in names}
    if SLOW_FIXTURES.get(item.nodeid.partition("::")[0]) in names:
        found.add("slow")
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        values = [value for value in callspec.params.values() if isinstance(value, str)]
        found |= {PARAMETER_MARKERS[value] for value in values if value in PARAMETER_MARKERS}
    return found


#: Every warning is an error (``-W error``) but one: a psycopg connection that some
#: PostgreSQL test leaves open is reported by whichever later test the garbage collector
#: happens to run in (seen twice, in a browser test's set-up; never reproduced alone). The
#: leak is being tracked down; until then it does not fail an unrelated test.
_UNTRACED_LEAK = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in.*BaseConnection\.__del__:pytest.PytestUnraisableExceptionWarning"
)


@pytest.hookimpl(tryfirst=True)  # before -m (and --fast) deselect on the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(markers_from_fixtures(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        item.add_marker(_UNTRACED_LEAK)
    heavy_modules_first(items, fast=config.getoption("fast"))


#: Tests that take seconds each: a build or a fresh interpreter, a browser, Node, child processes.
HEAVY_MARKERS = ("slow", "browser", "interop", "multiprocess")

#: The fast loop's longest modules with their measured time (seconds of their tests in one
#: ``./scripts/test --fast --junitxml`` run on the 2-core development machine, busy, 2026-11-29;
#: only their ratios matter). Any other module weighs ``FAST_SECONDS_PER_TEST`` per selected
#: test, the mean of the rest. Re-measure when a module's time changes by seconds.
FAST_MODULE_SECONDS = {
    "test_testing_provider.py": 17,
    "test_fault_matrix.py": 16,
    "test_reference_app_mfa.py": 16,
    "test_rp_certification.py": 13,
    "test_federation.py": 13,
    "test_federation_defaults.py": 13,
    "test_headless_login.py": 11,
    "test_webauthn_factor.py": 11,
    "test_views.py": 11,
    "test_factors_otp.py": 9,
    "test_headless_password.py": 9,
    "test_headless_flows.py": 9,
    "test_fault_matrix_federation.py": 7,
    "test_fst_migration.py": 7,
    "test_login_code.py": 7,
    "test_import_layers.py": 7,
    "test_issuer_example.py": 6,
    "test_issuer_keystores.py": 6,
    "test_example_flask_login_migration.py": 6,
    "test_mailed_links.py": 6,
    "test_federation_email_linking.py": 6,
    "test_mfa_required.py": 6,
    "test_cli_factors.py": 6,
    "test_federation_presets.py": 5,
    "test_reference_headers.py": 5,
    "test_recovery.py": 5,
    "test_login_bursts.py": 5,
    "test_pages.py": 5,
    "test_password_reset.py": 5,
    "test_legacy_hashes.py": 4,
    "test_provider_tokens.py": 4,
    "test_cli_issuer.py": 4,
    "test_store_contracts.py": 4,
    "test_extension.py": 4,
    "test_email_otp.py": 4,
    "test_workflows.py": 4,
    "test_robustness.py": 4,
    "test_i18n.py": 3,
    "test_cli_operators.py": 3,
    "test_lockout_race.py": 3,
    # and those whose number of tests says otherwise
    "test_federation_linking.py": 3,
    "test_migrations.py": 2,
    "test_i18n_catalogues.py": 2,
    "test_fault_matrix_login.py": 2,
    "test_session_interface.py": 2,
    "test_password_policy.py": 2,
    "test_reference_app.py": 1,
    "test_cli.py": 1,
    "test_jose.py": 1,
    "test_federation_http.py": 1,
    "test_issuer_idp.py": 1,
    "test_audit_client_ip.py": 0,
    "test_session_model.py": 0,
}
FAST_SECONDS_PER_TEST = 0.04


def heavy_modules_first(items: list[pytest.Item], *, fast: bool) -> None:
    """Order the modules by their number of heavy tests, then of tests (a stable sort: each
    module's tests keep their order). ``./scripts/test`` hands xdist whole modules in this order
    (``--dist loadfile --no-loadscope-reorder``): the long modules start first and the short ones
    fill both workers at the end. xdist's own order (most tests first) left the modules of one
    long test (the Sphinx build, the example's suites) for last, on one worker, the other idle.
    Under ``--fast`` none of the tests that run is heavy: the modules go longest first by their
    measured time (:data:`FAST_MODULE_SECONDS`), so no module of a few long tests
    ends the run on one worker while the other waits."""
    weights: dict[str, list[float]] = {}
    for item in items:
        module = item.nodeid.partition("::")[0]
        weight = weights.setdefault(module, [0, 0])
        if fast and any(item.get_closest_marker(marker) for marker in FAST_DESELECTS):
            continue
        weight[0] += any(item.get_closest_marker(marker) for marker in HEAVY_MARKERS)
        weight[1] += 1
    if fast:
        for module, weight in weights.items():
            known = FAST_MODULE_SECONDS.get(module.removeprefix("tests/"))
            weights[module] = [known if known is not None else weight[1] * FAST_SECONDS_PER_TEST]
    items.sort(key=lambda item: [-count for count in weights[item.nodeid.partition("::")[0]]])


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[Any]:
    """Keep pytest's rewritten test modules (tests/__pycache__, ignored by git) even when
    PYTHONDONTWRITEBYTECODE is set: rewriting the 150 modules again costs every xdist worker
    about 10 s of CPU at each run; the cached ones are checked against their source."""
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    running_test.append(item)
    try:
        return (yield)
    finally:
        running_test.remove(item)


def _guard_child_processes() -> None:
    """A test that starts a ``multiprocessing`` child must be marked ``multiprocess``."""
    start: Callable[[Any], None] = multiprocessing.process.BaseProcess.start
    if getattr(start, "authflow_guard", False):
        return

    def guarded_start(process: Any) -> None:
        require_marker("multiprocess", "child processes (multiprocessing)")
        start(process)

    guarded_start.authflow_guard = True  # type: ignore[attr-defined]
    multiprocessing.process.BaseProcess.start = guarded_start  # type: ignore[method-assign]


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that every process of this run sees: under xdist, the parent of the workers'
    base temporary folders (the controller's), else this run's base temporary folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: The modules that test the migrations themselves: every upgrade there runs Alembic.
REAL_UPGRADE_MODULES = frozenset({"tests.test_migrations", "tests.test_migrations_email_case"})
_template_upgrade: list[Any] = []


@pytest.fixture(autouse=True)
def _migrated_template(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh SQLite database an app upgrades gets a copy of one migrated per process
    (``tests/migrated_template.py``): the same schema, without Alembic's forty revisions
    for every test of a SQL store."""
    if request.node.module is None or request.node.module.__name__ in REAL_UPGRADE_MODULES:
        return
    from flask_authflow.storage._sql import migrations
    from tests.migrated_template import TemplateUpgrade

    if not _template_upgrade:
        _template_upgrade.append(TemplateUpgrade(migrations.upgrade))
    monkeypatch.setattr(migrations, "upgrade", _template_upgrade[0])


@pytest.fixture(scope="session")
def postgres_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """The run's PostgreSQL server on 127.0.0.1, one for all xdist workers: the first to need
    it starts it, the last one done stops it. Tests ask for ``postgres_server``."""
    shared = _shared_folder(tmp_path_factory)
    try:
        server = attach_shared_postgres(shared)
    except Exception as exc:
        missing_part(f"could not start PostgreSQL: {exc}")
        raise
    yield server
    detach_shared_postgres(shared)


@pytest.fixture
def postgres_server(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """A real PostgreSQL server, for a test marked ``postgres`` (any other fails): the
    databases the test creates with ``new_database()`` are dropped after it."""
    require_marker("postgres", "the postgres_server fixture")
    server: PostgresServer = request.getfixturevalue("postgres_cluster")
    before = len(server.created)
    yield server
    server.drop_databases(server.created[before:])


@pytest.fixture(scope="session")
def redis_process() -> Iterator[RedisServer]:
    """A real redis-server on a free port of 127.0.0.1, started once per worker."""
    try:
        server = start_redis()
    except Exception as exc:
        missing_part(f"could not start redis-server: {exc}")
        raise
    yield server
    server.stop()


@pytest.fixture
def redis_server(request: pytest.FixtureRequest) -> RedisServer:
    """A real redis-server, for a test marked ``redis`` (any other fails)."""
    require_marker("redis", "the redis_server fixture")
    server: RedisServer = request.getfixturevalue("redis_process")
    return server


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'authflow.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def app_factory(
    tmp_path: Path, mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> Iterator[AppFactory]:
    """``make_app`` (tests/appfactory.py) bound to this test's instance folder, ``mock_clock``
    and fast hasher; keyword arguments override them and the base config. The SQL backends of
    the apps it made are closed after the test."""
    made: list[Flask] = []

    def factory(**overrides: Any) -> Flask:
        bound: dict[str, Any] = {
            "instance_path": tmp_path / "instance",
            "clock": mock_clock,
            "hasher": authflow_hasher,
        }
        app = make_app(**{**bound, **overrides})
        made.append(app)
        return app

    yield factory
    for app in made:
        _close_sql_backend(app)


def _close_sql_backend(app: Flask) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = get_state(app).backend
    if isinstance(backend, SqlAlchemyBackend):
        backend.close()
