"""The documentation: it builds with every reference resolved, documents every
configuration key and every public name, and the packaging files it promises exist."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import docutils.core
import docutils.utils
import pytest

import flask_authflow
from flask_authflow._web.config import DEFAULTS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

_DIRECTIVE = re.compile(r"^\s*\.\. (?:auto)?(?:class|exception|function|data|attribute|method)::\s+(\S+)")
_MODULE = re.compile(r"^\.\. (?:module|currentmodule|automodule)::\s+(\S+)")
_MEMBERS = re.compile(r"^\s+:members:\s*(.*)$")


def _listed_members(lines: list[str]) -> list[str]:
    """The names of a ``:members: a, b,`` option (continued on deeper-indented lines)."""
    listed: list[str] = []
    collecting = False
    for line in lines:
        option = _MEMBERS.match(line)
        if option is not None:
            collecting = True
            listed.append(option.group(1))
        elif collecting and line.startswith("  ") and not line.strip().startswith(":"):
            listed.append(line.strip())
        elif line.strip().startswith(":"):
            collecting = False
        else:
            break
    return [name.strip() for name in ",".join(listed).split(",") if name.strip()]


def documented_names(text: str) -> set[str]:
    """Fully qualified names that api.rst documents (``.. autoclass:: X`` under the current
    module, and the members an ``automodule`` lists)."""
    names: set[str] = set()
    module = ""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        found = _MODULE.match(line)
        if found is not None:
            module = found.group(1)
            names.add(module)
            if line.startswith(".. automodule::"):
                names.update(f"{module}.{member}" for member in _listed_members(lines[index + 1 :]))
            continue
        directive = _DIRECTIVE.match(line)
        if directive is not None:
            target = directive.group(1).split("(")[0]
            names.add(target if target.startswith("flask_authflow") else f"{module}.{target}")
    return names


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "config.rst").read_text()
    missing = [key for key in DEFAULTS if f"``{key}``" not in text]
    assert missing == []


def test_documented_names_are_read_from_directives() -> None:
    text = """\
.. module:: flask_authflow

.. autoclass:: AuthFlow
   :members:

.. data:: current_user

.. automodule:: flask_authflow.signals
   :members: login_succeeded, key_rotated,
             token_minted
"""
    assert documented_names(text) == {
        "flask_authflow",
        "flask_authflow.AuthFlow",
        "flask_authflow.current_user",
        "flask_authflow.signals",
        "flask_authflow.signals.login_succeeded",
        "flask_authflow.signals.key_rotated",
        "flask_authflow.signals.token_minted",
    }


#: Test and development dependencies: building the docs must not need any of them
#: (``pip install .[docs]`` installs Sphinx only).
NOT_FOR_DOCS = (
    "_pytest",
    "asgiref",
    "flask_login",
    "flask_security",
    "flask_sqlalchemy",
    "hypothesis",
    "jwt",
    "mypy",
    "psycopg",
    "pytest",
    "requests_mock",
    "selenium",
    "zxcvbn",
)
SPHINX_WITHOUT_TEST_DEPENDENCIES = f"""
import sys
from importlib.abc import MetaPathFinder

class NotForDocs(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {set(NOT_FOR_DOCS)!r}:
            raise ModuleNotFoundError(f"{{name}} is a test dependency, not a docs one", name=name)
        return None

sys.meta_path.insert(0, NotForDocs())
from sphinx.cmd.build import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a whole Sphinx build
def test_sphinx_build_resolves_every_reference_without_warnings(tmp_path: Path) -> None:
    """``sphinx-build -n -W``, with every test dependency made unimportable."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SPHINX_WITHOUT_TEST_DEPENDENCIES,
            "-q",
            "-n",
            "-W",
            "--keep-going",
            "-N",
            "-b",
            "html",
            str(DOCS),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for page in ("config", "api", "migrating"):
        assert (tmp_path / "html" / f"{page}.html").exists()
    api = (tmp_path / "html" / "api.html").read_text()
    assert 'id="flask_authflow.AuthFlow"' in api


def test_readme_renders_as_the_package_index_shows_it() -> None:
    """PyPI renders README.rst with plain docutils: no Sphinx-only markup, no warnings."""
    errors = io.StringIO()
    docutils.core.publish_string(
        (REPO / "README.rst").read_text(),
        writer="html",
        settings_overrides={
            "warning_stream": errors,
            "report_level": docutils.utils.Reporter.INFO_LEVEL + 1,
            "halt_level": 5,
        },
    )
    assert errors.getvalue() == ""


def test_packaging_promises() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert [requirement.split(">")[0] for requirement in extras["docs"]] == ["sphinx"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n\nCopyright (c) 2026 the flask-authflow authors\n")
    changes = (REPO / "CHANGES.rst").read_text()
    assert re.search(r"^Unreleased\n-+$", changes, re.MULTILINE)
    assert re.search(rf"^{re.escape(flask_authflow.__version__)}\n-+$", changes, re.MULTILINE)
