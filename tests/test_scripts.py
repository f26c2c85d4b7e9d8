"""The developer scripts: ``./scripts/ensure-venv`` installs a lock file, hash-checked, and
the package, only when the lock or the packaging files changed; ``./scripts/serve-reference``
and ``./scripts/test`` use it with their own locks, and ``./scripts/test`` says what it will
install before it installs anything. They run on a copy of the repository whose ``.venv``
programs only record how they were called (tests/test_locks.py runs the real pip)."""

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
    shutil.copytree(REPO / "requirements", root / "requirements")
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
    # the scripts' own variables come from the test, not from the run (./scripts/test-latest
    # sets AUTHFLOW_VENV for the whole suite)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AUTHFLOW_")}
    environ = dict(inherited, FAKE_LOG=str(repo / "calls.log"), **env)
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


#: The pip runs of one install of a lock: the pins, hash-checked, then the package itself.
def _install(lock: str) -> list[str]:
    quiet = "pip -q --disable-pip-version-check install"
    return [
        f"{quiet} --require-hashes -r requirements/{lock}.lock",
        f"{quiet} --no-deps --no-build-isolation -e .",
    ]


def test_ensure_venv_installs_once_then_only_when_the_packaging_files_change(repo: Path) -> None:
    first = _run(repo, "ensure-venv", "test")
    assert first.returncode == 0, first.stderr
    assert "installing requirements/test.lock (hash-checked) and flask-authflow (editable)" in first.stderr
    assert _calls(repo) == _install("test")
    assert (repo / ".venv" / ".authflow-installed-test").exists()

    again = _run(repo, "ensure-venv", "test")
    assert again.returncode == 0 and again.stderr == ""
    assert len(_calls(repo)) == 2  # nothing changed: no pip at all

    with (repo / "pyproject.toml").open("a") as handle:
        handle.write("\n# a new dependency, say\n")
    changed = _run(repo, "ensure-venv", "test")
    assert "the lock or the packaging files changed" in changed.stderr
    assert len(_calls(repo)) == 4
    assert _run(repo, "ensure-venv", "test").stderr == ""


def test_a_changed_lock_reinstalls(repo: Path) -> None:
    assert _run(repo, "ensure-venv", "test").returncode == 0
    lock = repo / "requirements" / "test.lock"
    lock.write_text(lock.read_text().replace("\n", "\n# a pin moved, say\n", 1))
    changed = _run(repo, "ensure-venv", "test")
    assert changed.returncode == 0, changed.stderr
    assert "the lock or the packaging files changed" in changed.stderr
    assert _calls(repo) == _install("test") * 2


def test_ensure_venv_installs_for_another_lock_and_a_package_gone_missing(repo: Path) -> None:
    assert _run(repo, "ensure-venv", "reference").returncode == 0
    other = _run(repo, "ensure-venv", "test")
    assert "no install of this lock is recorded" in other.stderr
    assert _calls(repo)[-2:] == _install("test")
    gone = _run(repo, "ensure-venv", "reference", FAKE_IMPORT_RC="1")  # e.g. pip uninstall flask-authflow
    assert gone.returncode == 0
    assert len(_calls(repo)) == 6


def test_ensure_venv_refuses_an_unknown_lock(repo: Path) -> None:
    unknown = _run(repo, "ensure-venv", "oidc")  # the extras of old; locks have names now
    assert unknown.returncode == 2
    assert "no requirements/oidc.lock" in unknown.stderr and "test.lock" in unknown.stderr
    assert _calls(repo) == []


def test_a_failed_install_is_tried_again_next_time(repo: Path) -> None:
    failed = _run(repo, "ensure-venv", "test", FAKE_PIP_RC="1")
    assert failed.returncode != 0
    assert "nothing was recorded" in failed.stderr
    assert _calls(repo) == _install("test")[:1]  # the package is not installed over a refused lock
    assert _run(repo, "ensure-venv", "test").returncode == 0
    assert len(_calls(repo)) == 3  # the failed install left no stamp behind


def test_serve_reference_starts_without_reinstalling(repo: Path) -> None:
    assert _run(repo, "serve-reference").returncode == 0
    second = _run(repo, "serve-reference", PORT="5123")
    assert second.returncode == 0, second.stderr
    calls = _calls(repo)
    assert [call for call in calls if call.startswith("pip ")] == _install("reference")
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
    assert any("install requirements/test.lock (hash-checked)" in line for line in lines)
    assert any("npm ci" in line for line in lines)
    assert _calls(repo) == []  # a plan only: apt-get, pip and npm never ran


def test_scripts_test_says_when_it_cannot_install_system_packages(repo: Path, tmp_path: Path) -> None:
    plan = _run(repo, "test", path=_bare_path(tmp_path), AUTHFLOW_TEST_PLAN_ONLY="1")  # no apt-get
    assert plan.returncode == 0, plan.stderr
    refused = next(line for line in plan.stderr.splitlines() if "redis-server" in line)
    assert "no apt-get or no root" in refused and "skip" in refused
    assert _calls(repo) == []


def test_scripts_test_uses_another_virtualenv_as_it_is(repo: Path, tmp_path: Path) -> None:
    plan = _run(
        repo, "test", path=_bare_path(tmp_path), AUTHFLOW_TEST_PLAN_ONLY="1", AUTHFLOW_VENV=".venv-latest"
    )
    assert plan.returncode == 0, plan.stderr
    assert "use the virtualenv .venv-latest as it is" in plan.stderr
    assert "requirements/test.lock" not in plan.stderr  # ./scripts/test-latest made that one
