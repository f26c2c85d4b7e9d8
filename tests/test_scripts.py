"""The developer scripts: ``./scripts/serve-reference`` installs only when the packaging
files changed (``./scripts/ensure-venv``), ``./scripts/test`` says what it will install
before it installs anything. They run on a copy of the repository whose ``.venv`` programs
only record how they were called."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: ``.venv/bin/python``: records pip runs (``FAKE_PIP_RC`` is their status) and answers the
#: import check with ``FAKE_IMPORT_RC``; anything else runs on the real interpreter.
FAKE_PYTHON = f"""#!/usr/bin/env bash
if [ "${{1:-}}" = "-m" ] && [ "${{2:-}}" = "pip" ]; then
  echo "pip ${{*:3}}" >> "$FAKE_LOG"
  exit "${{FAKE_PIP_RC:-0}}"
fi
if [ "${{1:-}}" = "-c" ]; then
  exit "${{FAKE_IMPORT_RC:-0}}"
fi
exec {sys.executable} "$@"
"""
FAKE_PROGRAM = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$FAKE_LOG"
"""
#: ``sudo``: "may I?" (``sudo -n true``) is answered yes; anything else is recorded.
FAKE_SUDO = """#!/usr/bin/env bash
[ "$*" = "-n true" ] && exit 0
echo "sudo $*" >> "$FAKE_LOG"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The scripts and packaging files, with a ``.venv`` of recording programs."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts")
    for name in ("pyproject.toml", "setup.cfg", "MANIFEST.in"):
        shutil.copy2(REPO / name, root / name)
    (root / "tests" / "interop").mkdir(parents=True)
    shutil.copy2(REPO / "tests" / "interop" / "package-lock.json", root / "tests" / "interop")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("flask", FAKE_PROGRAM)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return root


def _run(
    repo: Path, script: str, *args: str, path: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, FAKE_LOG=str(repo / "calls.log"), **env)
    if path is not None:
        environ["PATH"] = path
    return subprocess.run(
        ["bash", str(repo / "scripts" / script), *args],
        cwd=repo,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _calls(repo: Path) -> list[str]:
    log = repo / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_ensure_venv_installs_once_then_only_when_the_packaging_files_change(repo: Path) -> None:
    first = _run(repo, "ensure-venv", "oidc")
    assert first.returncode == 0, first.stderr
    assert "installing flask-authflow[oidc] into .venv" in first.stderr
    assert _calls(repo) == ["pip install -q --disable-pip-version-check -e .[oidc]"]

    again = _run(repo, "ensure-venv", "oidc")
    assert again.returncode == 0 and again.stderr == ""
    assert len(_calls(repo)) == 1  # nothing changed: no pip at all

    with (repo / "pyproject.toml").open("a") as handle:
        handle.write("\n# a new dependency, say\n")
    changed = _run(repo, "ensure-venv", "oidc")
    assert "its packaging files changed" in changed.stderr
    assert len(_calls(repo)) == 2
    assert _run(repo, "ensure-venv", "oidc").stderr == ""


def test_ensure_venv_installs_for_other_extras_and_a_package_gone_missing(repo: Path) -> None:
    assert _run(repo, "ensure-venv", "oidc").returncode == 0
    other = _run(repo, "ensure-venv", "dev,testing")
    assert "no install with these extras is recorded" in other.stderr
    assert _calls(repo)[-1].endswith("-e .[dev,testing]")
    gone = _run(repo, "ensure-venv", "oidc", FAKE_IMPORT_RC="1")  # e.g. pip uninstall flask-authflow
    assert gone.returncode == 0
    assert len(_calls(repo)) == 3


def test_a_failed_install_is_tried_again_next_time(repo: Path) -> None:
    failed = _run(repo, "ensure-venv", "oidc", FAKE_PIP_RC="1")
    assert failed.returncode != 0
    assert _run(repo, "ensure-venv", "oidc").returncode == 0
    assert len(_calls(repo)) == 2  # the failed install left no stamp behind


def test_serve_reference_starts_without_reinstalling(repo: Path) -> None:
    assert _run(repo, "serve-reference").returncode == 0
    second = _run(repo, "serve-reference", PORT="5123")
    assert second.returncode == 0, second.stderr
    calls = _calls(repo)
    assert [call for call in calls if call.startswith("pip ")] == [
        "pip install -q --disable-pip-version-check -e .[oidc,accounts]"
    ]
    assert calls[-1] == "flask --app examples/reference/app.py run --host 127.0.0.1 --port 5123"


def _bare_path(tmp_path: Path, *extra: str) -> str:
    """A PATH with the shell tools the script uses and ``extra`` recording programs, but no
    Node.js, Redis, Chromium (nor apt-get unless named)."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "dirname", "cat", "env", "basename"):
        found = shutil.which(tool)
        if found is not None:
            (bin_dir / tool).symlink_to(found)
    for name, text in [("sudo", FAKE_SUDO), *((name, FAKE_PROGRAM) for name in extra)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def test_scripts_test_says_what_it_will_install_before_installing(repo: Path, tmp_path: Path) -> None:
    plan = _run(repo, "test", path=_bare_path(tmp_path, "apt-get"), AUTHFLOW_TEST_PLAN_ONLY="1")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stderr.splitlines()
    assert lines[0] == "scripts/test: before running the tests, this will"
    apt = next(line for line in lines if "apt-get" in line)
    assert "redis-server" in apt and "nodejs" in apt and "chromium" in apt
    assert any("install flask-authflow[dev,oidc,postgres,testing,cedar]" in line for line in lines)
    assert any("npm ci" in line for line in lines)
    assert _calls(repo) == []  # a plan only: apt-get, pip and npm never ran


def test_scripts_test_says_when_it_cannot_install_system_packages(repo: Path, tmp_path: Path) -> None:
    plan = _run(repo, "test", path=_bare_path(tmp_path), AUTHFLOW_TEST_PLAN_ONLY="1")  # no apt-get
    assert plan.returncode == 0, plan.stderr
    refused = next(line for line in plan.stderr.splitlines() if "redis-server" in line)
    assert "no apt-get or no root" in refused and "skip" in refused
    assert _calls(repo) == []
