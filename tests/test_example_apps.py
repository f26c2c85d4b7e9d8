"""The apps under ``tests/apps/`` run their own test suites, as their authors would.

``tests/apps/notes`` is built only from README.rst and docs/ (a Flask-SQLAlchemy ``User``
model, the factory pattern, the ready views, ``current_user`` in a template, a custom 401
page) and tested with the pytest plugin at its defaults (one test asks for the wiring with
``authflow_wired``). It runs in a subprocess with its own ``pytest.ini``, so flask-authflow's
own settings (``authflow_autowire = true``) do not apply to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

APPS = Path(__file__).resolve().parent / "apps"


@pytest.mark.slow  # the example app's own suite in a subprocess
def test_the_notes_app_suite_passes(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-W", "error", "-q", "--basetemp", str(tmp_path / "t")),
            *("--junitxml", str(report)),
        ],
        cwd=APPS / "notes",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # How many ran and how: the JUnit report's counts, not the wording of pytest's summary line.
    root = ElementTree.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    counts = {name: suite.get(name) for name in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "3", "failures": "0", "errors": "0", "skipped": "0"}
    assert not (APPS / "notes" / "instance").exists()  # no development database was written
