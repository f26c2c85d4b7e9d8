"""The suite's own markers and ``--fast`` (tests/conftest.py), and the run's shared PostgreSQL
server (tests/parts.py).

A test that needs PostgreSQL, Redis, Chromium, Node or child processes carries the marker
that ``-m "not postgres"`` and ``--fast`` select on: the fixtures' users are marked at
collection, and a test that reaches a part without its marker fails before the part starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FAST_DESELECTS, FAST_EXPRESSION
from tests.parts import (
    SHARED_POINTER,
    USERS,
    attach_shared_postgres,
    detach_shared_postgres,
    reap_orphaned_postgres,
)

pytest_plugins = ["pytester"]

# --assert=plain: the inner runs are in-process, and a worker that already imported
# tests.oidc_parts for another module would see it "already imported, cannot be rewritten",
# an error under -W error before any inner test runs.
INI = "[pytest]\naddopts = --strict-markers -p no:cacheprovider --assert=plain\nmarkers =\n" + "".join(
    f"    {name}: a part marker\n" for name in (*FAST_DESELECTS, "http")
)
CONFTEST = 'pytest_plugins = ["tests.conftest", "tests.oidc_parts"]\n'

UNMARKED = """
import multiprocessing

from tests.parts import start_postgres, start_redis


def test_asks_for_postgres_by_name(request):
    request.getfixturevalue("postgres_server")


def test_asks_for_redis_by_name(request):
    request.getfixturevalue("redis_server")


def test_asks_for_the_oidc_provider_by_name(request):
    request.getfixturevalue("oidc_op")


def test_starts_postgres_itself():
    start_postgres()


def test_starts_redis_itself():
    start_redis()


def test_starts_a_child_process():
    multiprocessing.get_context("spawn").Process(target=print).start()
"""

MARKED_FROM_FIXTURES = """
import pytest


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request):
    return request.param


def test_a_store(store):
    assert store in ("memory", "sqlite", "postgresql")


def test_on_postgres(postgres_server):
    raise AssertionError("never run here")


def test_on_redis(redis_server):
    raise AssertionError("never run here")


def test_against_the_provider(oidc_op):
    raise AssertionError("never run here")


@pytest.mark.slow
def test_slow():
    raise AssertionError("never run here")


def test_plain():
    assert True
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    return pytester


def test_a_test_that_reaches_a_part_without_its_marker_fails_loudly(project: pytest.Pytester) -> None:
    project.makepyfile(test_unmarked=UNMARKED)
    result = project.runpytest("-W", "error")
    result.assert_outcomes(failed=6)
    for test, marker in [
        ("test_asks_for_postgres_by_name", "postgres"),
        ("test_asks_for_redis_by_name", "redis"),
        ("test_asks_for_the_oidc_provider_by_name", "interop"),
        ("test_starts_postgres_itself", "postgres"),
        ("test_starts_redis_itself", "redis"),
        ("test_starts_a_child_process", "multiprocess"),
    ]:
        message = f"*test_unmarked.py::{test} uses * but is not marked @pytest.mark.{marker}*"
        result.stdout.fnmatch_lines([message])


def test_fixtures_and_parameters_mark_their_tests(project: pytest.Pytester) -> None:
    project.makepyfile(test_marked=MARKED_FROM_FIXTURES)
    selected = {
        marker: [
            line
            for line in project.runpytest("--collect-only", "-q", "-m", marker).stdout.lines
            if "::" in line
        ]
        for marker in ("postgres", "redis", "interop")
    }
    assert selected == {
        "postgres": ["test_marked.py::test_a_store[postgresql]", "test_marked.py::test_on_postgres"],
        "redis": ["test_marked.py::test_on_redis"],
        "interop": ["test_marked.py::test_against_the_provider"],
    }


def test_fast_deselects_the_marked_tests_says_so_and_combines_with_m(project: pytest.Pytester) -> None:
    project.makepyfile(test_marked=MARKED_FROM_FIXTURES)
    fast = project.runpytest("--fast", "-W", "error")
    fast.assert_outcomes(passed=3, deselected=5)
    fast.stdout.fnmatch_lines(
        [
            f"--fast: deselects the tests marked postgres, redis, browser, interop, multiprocess, slow "
            f"(runs -m '{FAST_EXPRESSION}')",
            "--fast deselected 5 tests (postgres 2, redis 1, browser 0, interop 1, multiprocess 0, slow 1; *",
        ]
    )
    combined = project.runpytest("--fast", "-m", "not http", "-k", "plain or store")
    combined.assert_outcomes(passed=3, deselected=5)
    combined.stdout.fnmatch_lines([f"*runs -m '(not http) and {FAST_EXPRESSION}'*"])
    nothing = project.runpytest("--fast", "-m", "postgres")
    nothing.assert_outcomes(deselected=8)


# -- the run's shared PostgreSQL server ------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.postgres
def test_the_shared_server_is_started_once_and_stopped_by_its_last_user(tmp_path: Path) -> None:
    server = attach_shared_postgres(tmp_path)
    again = attach_shared_postgres(tmp_path)
    assert again.port == server.port and server.accepts_connections()
    folder = server.datadir.parent
    # A worker that died without detaching: its pid stays in the users file.
    (folder / USERS).write_text(f"{_dead_pid()}\n{os.getpid()}\n")
    detach_shared_postgres(tmp_path)
    assert not server.accepts_connections()
    assert not folder.exists() and not (tmp_path / SHARED_POINTER).exists()
    detach_shared_postgres(tmp_path)  # nothing left to stop


@pytest.mark.postgres
def test_a_server_left_by_a_killed_run_is_reaped_by_the_next(tmp_path: Path) -> None:
    server = attach_shared_postgres(tmp_path / "killed-run")
    folder = server.datadir.parent
    (folder / USERS).write_text(f"{_dead_pid()}\n")  # every user of it is gone
    newer = attach_shared_postgres(tmp_path / "next-run")  # its start reaps the orphan
    try:
        assert not server.accepts_connections() and not folder.exists()
        assert newer.accepts_connections()
        assert reap_orphaned_postgres() == []  # the next run's own server is in use
    finally:
        detach_shared_postgres(tmp_path / "next-run")
    assert not newer.accepts_connections()
