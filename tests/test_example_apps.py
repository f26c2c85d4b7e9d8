"""The apps under ``tests/apps/`` run their own test suites, as their authors would.

``tests/apps/notes`` is built only from README.rst and docs/ (a Flask-SQLAlchemy ``User``
model, the factory pattern, the ready views, ``current_user`` in a template, a custom 401
page) and tested with the pytest plugin at its defaults. It runs in a subprocess with its
own ``pytest.ini``, so flask-authflow's own settings (``authflow_autowire = false``) do not
apply to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parent / "apps"


@pytest.mark.slow  # the example app's own suite in a subprocess
def test_the_notes_app_suite_passes(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-W", "error", "-q", "--basetemp", str(tmp_path / "t")],
        cwd=APPS / "notes",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout
    assert not (APPS / "notes" / "instance").exists()  # no development database was written
