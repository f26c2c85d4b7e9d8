"""The package as it is published: ``python -m build`` makes an sdist and a wheel that
``twine check --strict`` accepts; the wheel, installed (not editable) into a new virtualenv
from local files only (``pip install --no-index``), carries its templates, migrations,
password blocklist and ``py.typed``, serves the reference app and passes the pytest
plugin's tests.

The tutorial (docs/tutorial.rst) is followed as a reader would: its install commands run
in a new folder with the wheel built here where the page names the wheel file, then the
tutorial's own tests pass with that virtualenv's pytest.

The package is built once per test session. The wheels it depends on are gathered with
``pip download`` (the pip cache and the configured indexes), at the versions that
``requirements/test.lock`` pins when it exists (the newest releases otherwise), or taken
from the folder named by ``AUTHFLOW_WHEELHOUSE`` on a machine without any index (it then
needs the wheels of ``[testing]``, the tutorial's extras and Flask-SQLAlchemy). Only that
download uses the network: every install is ``--no-index`` from the wheelhouse. Under
``CI=true`` a part that cannot run here fails these tests instead of skipping them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name

from tests.doc_examples import clean_environment, count_tests, parse_blocks, parse_console
from tests.federation_support import ServedProvider
from tests.locks import parse_lock
from tests.parts import missing_part
from tests.test_federation import FRESH_APP

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "flask_authflow"
#: What the sdist is built from: the repository's tracked layout, without local state.
SOURCE_FILES = ("pyproject.toml", "setup.cfg", "MANIFEST.in", "README.rst", "LICENSE", "CHANGES.rst")
SOURCE_FOLDERS = ("flask_authflow", "docs", "examples", "tests", "scripts", "requirements")
LOCAL_STATE = shutil.ignore_patterns(
    "__pycache__", "*.py[cod]", "*.egg-info", "node_modules", "instance", "_build", ".*", "*.db"
)
PASSWORD = "wonderland-rabbit-42"
#: The pins the wheelhouse is gathered at (hash-checked, for ``pip install --require-hashes``).
LOCK = REPO / "requirements" / "test.lock"
TUTORIAL = REPO / "docs" / "tutorial.rst"
#: A wheel file as the pages name it (``…/dist/flask_authflow-0.7.0-py3-none-any.whl[extras]``).
DOCUMENTED_WHEEL = re.compile(
    r"^(?:\S*/)?dist/(?P<name>flask_authflow-[^/\[\s]+\.whl)(?P<extras>\[[^\]]*\])?$"
)
_WHEEL_VERSION = re.compile(r"flask_authflow-(\d[^-\s/'\[]*)-py3-none-any\.whl")


#: A pinned line of a pip-compile lock: ``name[extras]==version ; markers \``.
@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


def _run(command: list[str], cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``command`` with this process's environment, less what would point it at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **extra_env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)


def _package_files() -> set[str]:
    """Every file of the package in this checkout, as the wheel names it."""
    return {
        path.relative_to(REPO).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    }


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """``python -m build`` of a copy of this checkout (sdist, then the wheel from the sdist)."""
    if importlib.util.find_spec("build") is None:
        missing_part("the 'build' package is not installed (it is in the [dev] extra)")
    base = tmp_path_factory.mktemp("packaging")
    source = base / "source"
    for folder in SOURCE_FOLDERS:
        shutil.copytree(REPO / folder, source / folder, ignore=LOCAL_STATE)
    for name in SOURCE_FILES:
        shutil.copy2(REPO / name, source / name)
    out = base / "dist"
    # --no-isolation: the [dev] extra's setuptools builds it, so no index is needed here
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], base)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dists(sdist, wheel)


def lock_pins(lock: str) -> list[str]:
    """The ``name==version ; markers`` lines of a pip-compile lock, as a constraints file
    may hold them: pip refuses hashes (and extras) there, so both are left out, as are
    comments and options."""
    return [pin.constraint() for pin in parse_lock(lock)]


@pytest.fixture(scope="session")
def constraints(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A pins-only copy of ``requirements/test.lock`` for ``pip -c``, or None while the
    repository has no lock (the wheelhouse then holds the newest releases)."""
    if not LOCK.is_file():
        return None
    pins = lock_pins(LOCK.read_text(encoding="utf-8"))
    assert pins, f"{LOCK} pins nothing (name==version lines)"
    path = tmp_path_factory.mktemp("constraints") / "test-pins.txt"
    path.write_text("\n".join(pins) + "\n", encoding="utf-8")
    return path


def _pip_constraint(constraints: Path | None) -> list[str]:
    return ["-c", str(constraints)] if constraints is not None else []


def _wheelhouse(base: Path, requirements: Sequence[str], constraints: Path | None) -> Path:
    """The wheels ``requirements`` need, at the lock's versions when there is a lock."""
    given = os.environ.get("AUTHFLOW_WHEELHOUSE")
    if given:
        return Path(given)
    wheelhouse = base / "wheelhouse"
    fetched = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary",
            ":all:",
            "-d",
            str(wheelhouse),
            *_pip_constraint(constraints),
            *requirements,
        ],
        base,
    )
    if fetched.returncode != 0:
        missing_part(
            "the wheels flask-authflow depends on cannot be gathered here (no index and no pip cache; "
            f"set AUTHFLOW_WHEELHOUSE to a folder of them): {fetched.stderr[-800:]}"
        )
    return wheelhouse


@pytest.fixture(scope="session")
def wheelhouse(dists: Dists, constraints: Path | None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheelhouse for the session: the wheels of the tutorial's install (the wheel with its
    extras, which include ``[testing]``, and what the page adds), so also of ``fresh_python``'s.
    pip resolves it once instead of once per virtualenv; each install still takes from it only
    what its own requirements need."""
    base = tmp_path_factory.mktemp("wheels")
    commands = [_as_run_here(words, base, dists.wheel) for words in _tutorial_install()]
    return _wheelhouse(base, [f"{dists.wheel}[testing]", *_requirements(commands)], constraints)


@pytest.fixture(scope="session")
def fresh_python(
    dists: Dists, constraints: Path | None, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The interpreter of a new virtualenv with the wheel (and ``[testing]``) installed from
    local files only: ``pip install --no-index``, not editable. The virtualenv is made without
    pip (``ensurepip`` costs seconds); this environment's pip installs into it (``--python``)."""
    base = tmp_path_factory.mktemp("fresh")
    requirement = f"{dists.wheel}[testing]"
    venv = base / "venv"
    created = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    if created.returncode != 0:
        missing_part(f"python -m venv cannot make a virtualenv here: {created.stderr[-500:]}")
    python = venv / "bin" / "python"
    installed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            *_pip_constraint(constraints),
            requirement,
        ],
        base,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    return python


# -- the dists as the package index sees them -------------------------------------------------------


def test_twine_accepts_the_sdist_and_the_wheel(dists: Dists) -> None:
    if importlib.util.find_spec("twine") is None:
        missing_part("the 'twine' package is not installed (it is in the [dev] extra)")
    checked = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)], REPO
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_wheels_metadata_says_what_pyproject_says(dists: Dists) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(dists.wheel) as wheel:
        meta = Parser().parsestr(
            wheel.read(f"flask_authflow-{project['version']}.dist-info/METADATA").decode()
        )
        entry_points = wheel.read(f"flask_authflow-{project['version']}.dist-info/entry_points.txt").decode()
    assert meta["Name"] == "flask-authflow" and meta["Version"] == project["version"]
    assert meta["License-Expression"] == "MIT"
    assert meta["Description-Content-Type"] == "text/x-rst"
    assert meta.get_payload().startswith(
        "flask-authflow\n=============="
    )  # README.rst, as the index shows it
    required = {re.split(r"[<>=\[; ]", line, maxsplit=1)[0] for line in meta.get_all("Requires-Dist") or []}
    assert {re.split(r"[<>=\[]", dep, maxsplit=1)[0] for dep in project["dependencies"]} <= required
    assert set(project["optional-dependencies"]) <= set(meta.get_all("Provides-Extra") or [])
    assert "[pytest11]\nauthflow = flask_authflow.testing._pytest_plugin" in entry_points


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
    package = {name for name in names if name.startswith("flask_authflow/")}
    assert package == _package_files()
    assert names - package == {name for name in names if ".dist-info/" in name}
    for needed in (
        "flask_authflow/py.typed",
        "flask_authflow/login/data/common-passwords.txt",
        "flask_authflow/_web/templates/authflow/login.html",
        "flask_authflow/storage/_sql/migrations/env.py",
        "flask_authflow/storage/_sql/migrations/script.py.mako",
        "flask_authflow/storage/_sql/migrations/versions/authflow_0001_baseline.py",
        "flask_authflow/translations/de/LC_MESSAGES/flask_authflow.mo",
        "flask_authflow/translations/fr/LC_MESSAGES/flask_authflow.mo",
    ):
        assert needed in package


def test_the_sdist_holds_the_package_docs_tests_and_examples(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        names = {name.removeprefix(f"{root}/") for name in sdist.getnames()}
    assert _package_files() <= names
    for needed in (
        "CHANGES.rst",
        "LICENSE",
        "README.rst",
        "docs/index.rst",
        "docs/conf.py",
        "examples/reference/app.py",
        "tests/conftest.py",
        "tests/parts.py",
        "tests/apps/notes/pytest.ini",
        "tests/interop/package-lock.json",
        "scripts/test",
        "requirements/test.lock",
        "requirements/reference.lock",
    ):
        assert needed in names, needed
    stray = [name for name in names if re.search(r"(__pycache__|node_modules|/instance/|\.pyc$)", name)]
    assert stray == []


# -- the wheel installed ----------------------------------------------------------------------------

INSTALLED_CHECK = """
import json
import sys
from importlib.metadata import distribution
from importlib.resources import files
from pathlib import Path

import flask_authflow
from flask_authflow.storage._sql.migrations import current, head, upgrade

root = files("flask_authflow")
direct = json.loads(distribution("flask-authflow").read_text("direct_url.json") or "{}")
blocklist = (root / "login" / "data" / "common-passwords.txt").read_text().split()
database = f"sqlite:///{Path(sys.argv[1]) / 'migrated.db'}"
upgrade(database)
print(json.dumps({
    "file": flask_authflow.__file__,
    "editable": direct.get("dir_info", {}).get("editable", False),
    "typed": (root / "py.typed").is_file(),
    "templates": sorted(p.name for p in (root / "_web" / "templates" / "authflow").iterdir()),
    "versions": sorted(p.name for p in (root / "storage" / "_sql" / "migrations" / "versions").iterdir()
                       if p.name.endswith(".py")),
    "mako": (root / "storage" / "_sql" / "migrations" / "script.py.mako").is_file(),
    "catalogues": sorted(p.name for p in (root / "translations").iterdir()
                         if (p / "LC_MESSAGES" / "flask_authflow.mo").is_file()),
    "blocklist": len(blocklist),
    "migrated": current(database) == head(),
}))
"""


def test_the_installed_wheel_has_its_templates_migrations_blocklist_and_types(
    fresh_python: Path, tmp_path: Path
) -> None:
    (tmp_path / "check.py").write_text(INSTALLED_CHECK)
    run = _run([str(fresh_python), "check.py", str(tmp_path)], tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout)
    assert "site-packages" in Path(found["file"]).parts and not found["editable"]
    assert found["typed"] and found["mako"] and found["migrated"]
    assert found["catalogues"] == ["de", "fr"]
    source = PACKAGE / "_web" / "templates" / "authflow"
    assert found["templates"] == sorted(p.name for p in source.iterdir())
    versions = PACKAGE / "storage" / "_sql" / "migrations" / "versions"
    assert found["versions"] == sorted(p.name for p in versions.glob("*.py"))
    assert found["blocklist"] == len(
        (PACKAGE / "login" / "data" / "common-passwords.txt").read_text().split()
    )


REFERENCE_SMOKE = """
import sys
from pathlib import Path

import flask_authflow
from app import create_app

assert "site-packages" in Path(flask_authflow.__file__).parts, flask_authflow.__file__
client = create_app().test_client()
page = client.get("/login")
assert page.status_code == 200 and 'name="password"' in page.text, page.text
answer = client.post("/login", json={"username": "alice", "password": sys.argv[1]})
assert answer.text == "authenticated\\n", answer.text
assert client.get("/dashboard").status_code == 200
account = client.get("/account")
assert account.status_code == 200 and "alice" in account.text
assert client.post("/logout", json={}).text == "logged out\\n"
assert client.get("/dashboard").status_code == 401
print("smoke ok")
"""


def test_the_reference_app_runs_on_the_installed_wheel(fresh_python: Path, tmp_path: Path) -> None:
    """Create a user with the installed ``flask authflow`` command, then log in, see the
    dashboard and the account page (templates from the wheel), log out."""
    shutil.copy2(REPO / "examples" / "reference" / "app.py", tmp_path / "app.py")
    env = {
        "FLASK_TESTING": "true",
        "FLASK_AUTHFLOW_SIGNING_KEY": "k" * 48,
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'reference.db'}",
    }
    flask = str(fresh_python.parent / "flask")
    command = [flask, "--app", "app.py", "authflow", "create-user", "alice", "--password-stdin"]
    created = subprocess.run(
        command,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env,
        input=f"{PASSWORD}\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    (tmp_path / "smoke.py").write_text(REFERENCE_SMOKE)
    run = _run([str(fresh_python), "smoke.py", PASSWORD], tmp_path, **env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip().endswith("smoke ok")


INSTALLED_PLUGIN_TEST = """
import flask_authflow.testing._pytest_plugin as plugin


def test_the_plugin_is_the_installed_one(request):
    assert "site-packages" in plugin.__file__
    assert request.config.pluginmanager.get_plugin("authflow") is plugin
"""


def test_the_plugin_tests_pass_against_the_installed_wheel(fresh_python: Path, tmp_path: Path) -> None:
    """``tests/test_pytest_plugin.py`` (it imports only the package), run by the new
    virtualenv's pytest with the plugin found through its entry point."""
    shutil.copy2(REPO / "tests" / "test_pytest_plugin.py", tmp_path / "test_pytest_plugin.py")
    (tmp_path / "test_installed_plugin.py").write_text(INSTALLED_PLUGIN_TEST)
    # as in this suite's pyproject.toml: the plugin's tests build their apps themselves
    (tmp_path / "pytest.ini").write_text("[pytest]\nauthflow_autowire = false\naddopts = --strict-markers\n")
    run = _run([str(fresh_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"], tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    module = ast.parse((REPO / "tests" / "test_pytest_plugin.py").read_text())
    tests = 1 + sum(
        isinstance(node, ast.FunctionDef) and node.name.startswith("test_") for node in module.body
    )
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed is not None and int(passed.group(1)) >= tests, run.stdout[-2000:]
    assert "failed" not in run.stdout and "skipped" not in run.stdout


# -- the tutorial, installed as it says -------------------------------------------------------------


def _tutorial_install() -> list[list[str]]:
    """The commands of the tutorial's console block that installs ``dist/flask_authflow-…whl``,
    word by word (the lines after ``$``)."""
    blocks, errors = parse_blocks(TUTORIAL, "docs/tutorial.rst")
    assert errors == []
    found: list[list[list[str]]] = []
    for block in blocks:
        if block.language != "console":
            continue
        commands = [shlex.split(command.text) for command in parse_console(block)]
        if any(DOCUMENTED_WHEEL.match(word) for words in commands for word in words):
            found.append(commands)
    assert len(found) == 1, "docs/tutorial.rst has no single console block that installs the built wheel"
    return found[0]


def _as_run_here(words: list[str], folder: Path, wheel: Path) -> list[str]:
    """A command of the page as this test runs it in ``folder``: ``python3`` is this
    interpreter (the wheelhouse holds wheels for it), ``.venv/bin/X`` is the folder's, and the
    wheel the page names is the one built here, which must have the name the page shows."""
    program, *arguments = words
    if program in ("python", "python3"):
        program = sys.executable
    elif program.startswith(".venv/bin/"):
        program = str(folder / program)
    else:
        pytest.fail(f"docs/tutorial.rst's install runs {program!r}; this test runs python3 and .venv/bin/")
    ran = [program]
    for word in arguments:
        documented = DOCUMENTED_WHEEL.match(word)
        if documented is not None:
            assert documented["name"] == wheel.name, (
                f"docs/tutorial.rst installs {documented['name']}, python -m build makes {wheel.name}"
            )
            word = f"{wheel}{documented['extras'] or ''}"
        ran.append(word)
    return ran


def _requirements(commands: list[list[str]]) -> list[str]:
    """What the ``pip install`` commands install: the wheelhouse needs their wheels."""
    wanted: list[str] = []
    for words in commands:
        if "install" in words:
            wanted += [word for word in words[words.index("install") + 1 :] if not word.startswith("-")]
    return wanted


def _write_tutorial_files(folder: Path) -> int:
    """The files the tutorial writes (``.. doc-example: file``), written into ``folder``;
    returns how many tests its ``test_*.py`` files define."""
    blocks, _ = parse_blocks(TUTORIAL, "docs/tutorial.rst")
    tests = 0
    for block in blocks:
        if block.marker != "file":
            continue
        target = folder / block.argument
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
        if Path(block.argument).name.startswith("test_") and block.argument.endswith(".py"):
            tests += count_tests(block.text)
    return tests


def _locked_versions(constraints: Path) -> dict[str, str]:
    """The lock's version of each package, for this interpreter (the markers evaluated)."""
    versions: dict[str, str] = {}
    for pin in constraints.read_text(encoding="utf-8").splitlines():
        requirement, _, marker = pin.partition(" ; ")
        if marker and not Marker(marker).evaluate():
            continue
        name, _, version = requirement.partition("==")
        versions[canonicalize_name(name)] = version
    return versions


def _unlocked_versions(
    python: Path, folder: Path, env: dict[str, str], locked: dict[str, str]
) -> dict[str, tuple[str, str]]:
    """The packages of ``python``'s virtualenv whose version is not the lock's: (installed, locked)."""
    listed = _reader_run([str(python), "-m", "pip", "list", "--format=json"], folder, env)
    assert listed.returncode == 0, listed.stderr
    seeded = {"pip", "setuptools"}  # python -m venv put these there, not the documented install
    installed = {
        canonicalize_name(package["name"]): package["version"] for package in json.loads(listed.stdout)
    }
    return {
        name: (version, locked[name])
        for name, version in installed.items()
        if name in locked and name not in seeded and version != locked[name]
    }


def _reader_run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)


def _reader_env(wheelhouse: Path, constraints: Path | None) -> dict[str, str]:
    """A reader's shell (none of this run's pytest, Flask or checkout settings) whose pip
    installs from the wheelhouse only, at the lock's versions when there is a lock."""
    env = {
        key: value
        for key, value in clean_environment().items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not key.startswith("PIP_")
    }
    # no configuration file either: nothing but the wheelhouse (and the pins) decides what pip takes
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheelhouse),
    )
    if constraints is not None:
        env["PIP_CONSTRAINT"] = str(constraints)
    return env


INSTALLED_WHERE = """
import json, flask_authflow, flask_sqlalchemy, email_validator, pytest
print(json.dumps({"file": flask_authflow.__file__, "version": flask_authflow.__version__}))
"""


def test_the_tutorial_passes_on_the_wheel_installed_as_it_says(
    dists: Dists, constraints: Path | None, wheelhouse: Path, tmp_path: Path
) -> None:
    """docs/tutorial.rst's install commands, run in a new folder with the wheel built here
    (installed from the wheelhouse only), then the tutorial's tests with that venv's pytest."""
    folder = tmp_path / "tasks-app"
    folder.mkdir()
    commands = [_as_run_here(words, folder, dists.wheel) for words in _tutorial_install()]
    env = _reader_env(wheelhouse, constraints)
    for command in commands:
        ran = _reader_run(command, folder, env)
        if ran.returncode != 0 and command[1:3] == ["-m", "venv"]:
            missing_part(f"python -m venv cannot make a virtualenv here: {ran.stderr[-500:]}")
        assert ran.returncode == 0, f"{shlex.join(command)}:\n{ran.stdout[-2000:]}{ran.stderr[-4000:]}"
    python = folder / ".venv" / "bin" / "python"
    where = _reader_run([str(python), "-c", INSTALLED_WHERE], folder, env)
    assert where.returncode == 0, where.stderr[-4000:]
    installed = json.loads(where.stdout)
    assert Path(installed["file"]).is_relative_to(folder / ".venv"), installed
    assert "site-packages" in Path(installed["file"]).parts
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert installed["version"] == project["version"]
    if constraints is not None:
        assert _unlocked_versions(python, folder, env, _locked_versions(constraints)) == {}
    tests = _write_tutorial_files(folder)
    assert tests > 0
    run = _reader_run(
        [str(folder / ".venv" / "bin" / "pytest"), "-q", "-W", "error", "-p", "no:cacheprovider"], folder, env
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert re.search(rf"^{tests} passed in ", run.stdout, re.MULTILINE), run.stdout[-2000:]


def test_lock_pins_keep_versions_and_markers_and_drop_hashes_and_extras() -> None:
    lock = (
        "# a comment\n"
        "--index-url https://example.invalid/simple\n"
        "alembic==1.20.1 \\\n"
        "    --hash=sha256:83490def \\\n"
        "    --hash=sha256:9970712c\n"
        "    # via flask-authflow (pyproject.toml)\n"
        "psycopg[binary]==3.3.9 \\\n"
        "    --hash=sha256:aa\n"
        "deprecated==1.3.1 ; python_full_version < '3.12' \\\n"
        "    --hash=sha256:bb\n"
        "colorama==0.4.6 ; os_name == 'nt' or sys_platform == 'win32'    # via click\n"
        "-e file:.\n"
    )
    assert lock_pins(lock) == [
        "alembic==1.20.1",
        "psycopg==3.3.9",
        "deprecated==1.3.1 ; python_full_version < '3.12'",
        "colorama==0.4.6 ; os_name == 'nt' or sys_platform == 'win32'",
    ]


def test_the_wheel_the_pages_name_has_pyprojects_version() -> None:
    """The pages name the wheel file, version included: it must be the version being built."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    named: dict[str, set[str]] = {}
    for page in [REPO / "README.rst", *sorted((REPO / "docs").glob("*.rst"))]:
        for found in _WHEEL_VERSION.finditer(page.read_text(encoding="utf-8")):
            named.setdefault(page.relative_to(REPO).as_posix(), set()).add(found.group(1))
    assert {"docs/installation.rst", "docs/tutorial.rst"} <= set(named)
    assert {page: versions for page, versions in named.items() if versions != {version}} == {}


@pytest.mark.http
def test_the_installed_wheel_serves_a_configured_providers_login_redirect(
    fresh_python: Path, tmp_path: Path
) -> None:
    """The wheel installed without the ``oidc`` extra (``[testing]`` adds pytest alone): a
    configured provider's login redirect works."""
    python = str(fresh_python)
    served = ServedProvider()
    try:
        served.provider.register_client("fresh", "fresh-secret", ["http://localhost/auth/callback/corp"])
        (tmp_path / "fresh_app.py").write_text(FRESH_APP)
        run = _run(
            [python, "fresh_app.py", served.provider.discovery_url, str(tmp_path / "instance")], tmp_path
        )
    finally:
        served.stop()
    assert run.returncode == 0, run.stderr[-4000:]
    status, location = run.stdout.split()
    assert status == "302"
    authorize = urlsplit(location)
    assert f"{authorize.scheme}://{authorize.netloc}{authorize.path}" == f"{served.provider.issuer}/authorize"
    query = parse_qs(authorize.query)
    assert query["client_id"] == ["fresh"] and query["code_challenge_method"] == ["S256"]
