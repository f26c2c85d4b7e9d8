"""The locked development environments (requirements/*.lock): every pin exact and hashed, each
lock covering what pyproject.toml asks for with its extras, the reference app's pins within the
test environment's, and ``./scripts/ensure-venv`` refusing a lock whose hash was edited by hand
(the real pip, in a throwaway copy of the repository)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.locks import read_lock

REPO = Path(__file__).resolve().parent.parent
LOCKS = REPO / "requirements"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def lock_extras(path: Path) -> list[str]:
    (line,) = [line for line in path.read_text().splitlines() if line.startswith("# extras: ")]
    return line.removeprefix("# extras: ").split(",")


def wanted(extras: list[str]) -> list[Requirement]:
    """What pyproject.toml asks for with ``extras``, for this interpreter and platform."""
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    requirements = [Requirement(line) for line in lines]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


@pytest.mark.parametrize("name", ["test", "reference", "tools"])
def test_every_pin_is_exact_hashed_and_the_header_says_how_it_was_made(name: str) -> None:
    path = LOCKS / f"{name}.lock"
    header = [line for line in path.read_text().splitlines() if line.startswith("# ")][:4]
    assert any("./scripts/update-locks" in line for line in header)
    assert any("--require-hashes" in line for line in header)
    pins = read_lock(path)
    assert pins
    for pin in pins:
        assert pin.hashes, f"{pin.name}=={pin.version} has no --hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in pin.hashes), pin.name
    # one version of a package for one interpreter: two pins of a name need exclusive markers
    applying = [pin.name for pin in pins if pin.applies()]
    assert len(applying) == len(set(applying))


@pytest.mark.parametrize("name", ["test", "reference"])
def test_the_lock_covers_what_pyproject_asks_for_with_its_extras(name: str) -> None:
    path = LOCKS / f"{name}.lock"
    pins = {pin.name: pin.version for pin in read_lock(path) if pin.applies()}
    for requirement in wanted(lock_extras(path)):
        version = pins.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement} is not in {path.name}: run ./scripts/update-locks"
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)


def test_the_test_lock_has_the_extras_scripts_test_installs_and_the_tools_ci_runs() -> None:
    assert lock_extras(LOCKS / "test.lock") == ["dev", "oidc", "postgres", "testing", "cedar"]
    assert lock_extras(LOCKS / "reference.lock") == ["oidc", "accounts", "babel"]
    pinned = {pin.name for pin in read_lock(LOCKS / "test.lock")}
    ci = (REPO / ".ci" / "run").read_text()
    for tool in ("ruff", "mypy"):
        assert f".venv/bin/{tool}" in ci and tool in pinned
    assert "./scripts/ensure-venv test" in (REPO / "scripts" / "test").read_text()
    assert "./scripts/ensure-venv reference" in (REPO / "scripts" / "serve-reference").read_text()


def test_the_reference_apps_pins_are_the_test_environments() -> None:
    """Both install into the one .venv: the reference lock is resolved within the test lock."""
    test = {(pin.name, pin.version) for pin in read_lock(LOCKS / "test.lock")}
    for pin in read_lock(LOCKS / "reference.lock"):
        assert (pin.name, pin.version) in test, f"{pin.name}=={pin.version} is not test.lock's"


def test_the_locks_carry_what_builds_the_package_and_the_tool_that_made_them() -> None:
    venv_in = [
        line for line in (LOCKS / "venv.in").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert set(PYPROJECT["build-system"]["requires"]) <= set(venv_in) and "packaging>=23" in venv_in
    for name in ("test", "reference"):
        pins = {pin.name: pin.version for pin in read_lock(LOCKS / f"{name}.lock")}
        for line in venv_in:
            requirement = Requirement(line)
            assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)])
    (tool,) = [line for line in (LOCKS / "tools.in").read_text().splitlines() if "==" in line]
    (pin,) = read_lock(LOCKS / "tools.lock")
    assert tool == f"{pin.name}=={pin.version}"


def test_read_lock_refuses_nothing_silently(tmp_path: Path) -> None:
    """The parser the checks above rest on sees a pin without hashes, and markers."""
    lock = tmp_path / "x.lock"
    lock.write_text(
        "# header\n"
        "a==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via b\n"
        "c==2.0 ; python_full_version < '3.0' \\\n    --hash=sha256:" + "1" * 64 + "\n"
        "d==3.0 \\\n    # via nothing\n"
    )
    pins = read_lock(lock)
    assert [(p.name, p.version, len(p.hashes), p.applies()) for p in pins] == [
        ("a", "1.0", 1, True),
        ("c", "2.0", 1, False),
        ("d", "3.0", 0, True),
    ]


# --- the real pip, in a copy of the repository -------------------------------------------------


@pytest.fixture(scope="module")
def new_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv as ensure-venv's first step makes it (``$PYTHON -m venv .venv``), made once:
    each test's copy of the repository gets a copy of it (``ensurepip`` costs seconds), so
    ensure-venv goes straight to pip, which is what these tests are about."""
    venv = tmp_path_factory.mktemp("venv") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    return venv


def _copy_repo(tmp_path: Path, lock_text: str, venv: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(venv, root / ".venv", symlinks=True)
    shutil.copytree(REPO / "scripts", root / "scripts")
    shutil.copytree(
        REPO / "flask_authflow", root / "flask_authflow", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "setup.cfg", "MANIFEST.in", "README.rst", "LICENSE"):
        shutil.copy2(REPO / name, root / name)
    (root / "requirements").mkdir()
    (root / "requirements" / "test.lock").write_text(lock_text)
    return root


def _one_package_lock(names: tuple[str, ...], *, tamper: str | None = None) -> str:
    """The real test lock's entries of ``names``, with ``tamper``'s hashes edited by hand."""
    entries = [pin for pin in read_lock(LOCKS / "test.lock") if pin.name in names and pin.applies()]
    lines = ["# extras: testing"]
    for pin in entries:
        lines.append(f"{pin.name}=={pin.version} \\")
        hashes = pin.hashes
        if pin.name == tamper:
            hashes = tuple(hashlib.sha256(f"edited {digest}".encode()).hexdigest() for digest in hashes)
        lines += [f"    --hash=sha256:{digest} \\" for digest in hashes[:-1]]
        lines.append(f"    --hash=sha256:{hashes[-1]}")
    return "\n".join(lines) + "\n"


def _ensure_venv(root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(
        ["bash", str(root / "scripts" / "ensure-venv"), "test"],
        cwd=root,
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _importable(root: Path, module: str) -> bool:
    probe = [str(root / ".venv" / "bin" / "python"), "-c", f"import {module}"]
    return subprocess.run(probe, capture_output=True, check=False, timeout=60).returncode == 0


@pytest.mark.slow
def test_ensure_venv_refuses_a_lock_whose_hash_was_edited_by_hand(tmp_path: Path, new_venv: Path) -> None:
    lock = _one_package_lock(("blinker", "setuptools", "packaging"), tamper="blinker")
    root = _copy_repo(tmp_path, lock, new_venv)
    refused = _ensure_venv(root)
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "pip refused or failed to install requirements/test.lock" in refused.stderr
    assert not _importable(root, "blinker")
    assert not _importable(root, "flask_authflow")
    assert not (root / ".venv" / ".authflow-installed-test").exists()


@pytest.mark.slow
def test_ensure_venv_names_what_a_lock_lacks_and_records_nothing(tmp_path: Path, new_venv: Path) -> None:
    """The same lock with its true hashes installs, then the check finds pyproject's other
    dependencies missing: an out-of-date lock is named, not silently completed."""
    root = _copy_repo(tmp_path, _one_package_lock(("blinker", "setuptools", "packaging")), new_venv)
    lacking = _ensure_venv(root)
    assert lacking.returncode == 1, lacking.stderr[-2000:]
    assert _importable(root, "blinker")
    assert "requirements/test.lock does not cover pyproject.toml" in lacking.stderr
    assert re.search(r"flask\S* is not installed", lacking.stderr)  # pyproject.toml: flask>=3.0
    assert "run ./scripts/update-locks" in lacking.stderr
    assert not (root / ".venv" / ".authflow-installed-test").exists()
