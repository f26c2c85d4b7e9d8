"""The facade only re-exports, and every module imports."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import flask_authflow
from flask_authflow import errors


def test_every_public_name_resolves_and_is_defined_elsewhere() -> None:
    for name in flask_authflow.__all__:
        value = getattr(flask_authflow, name)
        module = getattr(value, "__module__", None)
        if module is not None and name != "__version__":
            assert module != "flask_authflow", f"{name} is defined in the facade"


@pytest.mark.slow  # a fresh interpreter
def test_every_module_imports_in_a_fresh_interpreter() -> None:
    """Each module imports (that any module can be imported *first*, with no import cycle
    through it, tests/test_import_layers.py checks from the source)."""
    modules = [
        info.name
        for info in pkgutil.walk_packages(flask_authflow.__path__, "flask_authflow.")
        if not info.name.endswith("pytest_plugin")
    ]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(modules) > 30


#: The facade holds what an application uses every day (with the decorators and hooks of
#: the web layer, which has no public package of its own); the rest lives in its feature
#: package, and the whole public surface is bounded by tests/test_public_names.py.
MAX_FACADE_NAMES = 36


def test_the_facade_is_small_and_every_error_code_is_documented() -> None:
    """An error a caller catches by class is exported by ``errors``; the others (raised and
    answered inside, or subclasses of an exported one) are private classes whose ``code``
    a client still sees, so every code is in the reference's table."""
    assert len(flask_authflow.__all__) <= MAX_FACADE_NAMES, sorted(flask_authflow.__all__)
    codes = {
        value.code
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.AuthFlowError)
    }
    reference = (Path(__file__).resolve().parent.parent / "docs" / "api.rst").read_text(encoding="utf-8")
    assert sorted(code for code in codes if f"``{code}``" not in reference) == []
    assert "AuthFlowError" in flask_authflow.__all__


def _loaded_after(statement: str) -> list[str]:
    code = (
        f"import sys\n{statement}\n"
        "print(','.join(m for m in ('sqlalchemy', 'joserfc', 'requests', 'authlib') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return [name for name in result.stdout.strip().split(",") if name]


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_package_loads_no_database_or_token_library() -> None:
    assert _loaded_after("import flask_authflow") == []


@pytest.mark.slow  # a fresh interpreter per feature
def test_a_feature_loads_its_libraries_when_it_is_used() -> None:
    """The check above can fail: the issuer's names and the SQL store bring them in."""
    loaded = _loaded_after(
        "import flask_authflow.issuer as issuer\nissuer.LocalIdp\nimport flask_authflow.storage._sql.backend"
    )
    assert {"sqlalchemy", "joserfc"} <= set(loaded)
