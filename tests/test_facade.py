"""The facade only re-exports, and every module imports on its own (no import cycles)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import flask_authflow


def test_every_public_name_resolves_and_is_defined_elsewhere() -> None:
    for name in flask_authflow.__all__:
        value = getattr(flask_authflow, name)
        module = getattr(value, "__module__", None)
        if module is not None and name != "__version__":
            assert module != "flask_authflow", f"{name} is defined in the facade"


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = [
        info.name
        for info in pkgutil.walk_packages(flask_authflow.__path__, "flask_authflow.")
        if not info.name.endswith("pytest_plugin")
    ]
    # One interpreter; before each module, forget every flask_authflow module so that
    # the module is imported first (a cycle through it would raise ImportError).
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'flask_authflow']:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(modules) > 30
