"""The plugin's ``mock_clock`` starts at the real time, and ``flask_authflow.testing`` names
its extra when pytest is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow import get_state
from flask_authflow._clock import MockClock

REPO = Path(__file__).resolve().parent.parent


def test_mock_clock_starts_at_the_real_time_in_whole_seconds(mock_clock: MockClock) -> None:
    now = mock_clock.now()
    real = datetime.now(UTC)
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert now.microsecond == 0
    assert real - timedelta(seconds=5) < now <= real


def test_mock_clock_is_frozen_until_advanced(mock_clock: MockClock) -> None:
    start = mock_clock.now()
    time.sleep(1.05)  # more than the whole second it was rounded to
    assert mock_clock.now() == start
    assert mock_clock.advance(timedelta(minutes=90)) == start + timedelta(minutes=90)
    assert mock_clock.now() == start + timedelta(minutes=90)


def test_the_default_app_and_its_sessions_read_mock_clock(
    authflow_app: Flask, mock_clock: MockClock, login_client: Callable[..., FlaskClient]
) -> None:
    assert get_state(authflow_app).clock is mock_clock
    client = login_client("alice")
    with client.session_transaction(environ_base=client.environ_base) as session:
        authenticated_at = session.authenticated_at  # type: ignore[attr-defined]
    assert authenticated_at == mock_clock.now()  # not 2026-01-01, not the wall clock


def _run(code: str, cwd: Path, *extra_path: Path) -> subprocess.CompletedProcess[str]:
    path = [str(p) for p in extra_path]
    program = f"import sys\nsys.path[:0] = {path!r}\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow  # a fresh interpreter
def test_testing_without_pytest_raises_missing_extra_error_naming_the_extra(tmp_path: Path) -> None:
    run = _run(
        """
        sys.modules["pytest"] = None  # as if pytest were not installed
        from flask_authflow.errors import MissingExtraError
        try:
            import flask_authflow.testing
        except MissingExtraError as error:
            assert isinstance(error, ImportError)
            print(error.extra)
            print(error)
        else:
            raise SystemExit("imported without pytest")
        """,
        tmp_path,
        REPO,
    )
    assert run.returncode == 0, run.stderr
    extra, message = run.stdout.splitlines()
    assert extra == "testing"
    assert "pip install 'flask-authflow[testing]'" in message
    assert "'pytest'" in message


@pytest.mark.slow  # a fresh interpreter
def test_a_broken_pytest_install_is_not_reported_as_a_missing_extra(tmp_path: Path) -> None:
    """Only pytest itself missing means the extra is missing; another missing module inside
    pytest is that module's error, unchanged."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pytest.py").write_text("import authflow_no_such_module_here\n")
    run = _run(
        """
        from flask_authflow.errors import MissingExtraError
        try:
            import flask_authflow.testing
        except MissingExtraError:
            raise SystemExit("reported as a missing extra")
        except ModuleNotFoundError as error:
            print(error.name)
        """,
        tmp_path,
        fake,
        REPO,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "authflow_no_such_module_here"
