"""The package's imports point one way (DESIGN §3): core → parts → wiring → testing.

Every ``flask_authflow`` import in every module (at any depth, including imports inside
functions, but not those under ``if TYPE_CHECKING:``) is read from the source with
``ast`` and checked against the layer table below: a module may import its own layer
or a lower one, never a higher one. A new module must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flask_authflow
from flask_authflow import errors

PACKAGE = Path(flask_authflow.__file__).parent

#: Lower numbers are lower layers. Keys are module paths relative to the package, a key
#: ending in "/" covers a whole sub-package.
LAYERS: dict[str, int] = {
    # core: no flask_authflow imports beyond this layer
    "clock": 0,
    "errors": 0,
    "settings": 0,  # the key table; each feature's settings live in its package
    "signals": 0,
    "responses": 0,
    "mail": 0,
    "crypto": 0,
    "extras": 0,  # which optional packages a configuration needs
    # the parts
    "session/": 1,
    "jose/": 1,
    "jose": 1,
    "audit/": 2,
    "authn/": 3,
    "issuer/": 4,
    "federation/": 4,
    "stores/": 5,
    # per-app state, then the wiring and what uses it
    "config": 6,  # every feature's settings side by side, for the state
    "state": 6,
    "users": 6,  # current_user: reads the state's hooks and backend
    "issuer/wiring": 6,  # builds the app's issuer on the store its config names (stores/)
    "federation/views": 7,  # the authflow_oauth blueprint reads the app's state
    "federation/wiring": 7,  # builds the app's federation (uses the views)
    "extension": 7,
    "decorators": 7,
    "cli/": 7,
    "views/": 7,
    "testing/": 8,
    "__init__": 9,
}


def layer_of(module: str) -> int:
    """The layer of ``a/b`` (a module path relative to the package, without ``.py``)."""
    path = module.removesuffix("/__init__")
    candidates = [
        key for key in LAYERS if path == key.rstrip("/") or (key.endswith("/") and path.startswith(key))
    ]
    if not candidates:
        raise AssertionError(f"flask_authflow/{module}.py has no layer in tests/test_import_layers.py")
    return LAYERS[max(candidates, key=len)]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module path) of every runtime ``flask_authflow`` import in ``source``,
    the text of module ``module`` (a path relative to the package, without ``.py``).
    """
    tree = ast.parse(source)
    package_parts = module.split("/")[:-1]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
                if node.module is None:  # from . import x: x is a module of that package
                    found.extend((node.lineno, "/".join([*target, alias.name])) for alias in node.names)
                else:
                    found.append((node.lineno, "/".join(target)))
            elif node.module and node.module.split(".")[0] == "flask_authflow":
                found.append((node.lineno, "/".join(node.module.split(".")[1:]) or "__init__"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "flask_authflow":
                    found.append((node.lineno, "/".join(alias.name.split(".")[1:]) or "__init__"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(target: str) -> str:
    """A module path for an imported name: a package resolves to its ``__init__``."""
    if (PACKAGE / target).is_dir():
        return f"{target}/__init__"
    return target


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    module = str(path.relative_to(PACKAGE).with_suffix(""))
    own = layer_of(module)
    upward = []
    for line, target in imported_modules(path.read_text(encoding="utf-8"), module):
        target = _resolve(target)
        if target.split("/")[0] == module.split("/")[0] and "/" in module:
            continue  # inside one sub-package: its own business
        if layer_of(target) > own:
            upward.append(f"line {line}: imports {target} (layer {layer_of(target)} > {own})")
    assert not upward, f"flask_authflow/{module}.py imports upward:\n" + "\n".join(upward)


def test_the_checker_sees_upward_imports() -> None:
    """The check itself can fail: upward imports are found, TYPE_CHECKING ones are not."""
    source = (
        "from .extension import AuthFlow\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .state import get_state\n"
        "def later():\n"
        "    from flask_authflow.cli import authflow_cli\n"
    )
    assert [t for _, t in imported_modules(source, "clock")] == ["extension", "cli"]
    assert [t for _, t in imported_modules("from .model import X\n", "session/stores")] == ["session/model"]
    assert [t for _, t in imported_modules("from .. import signals\n", "authn/service")] == ["signals"]
    assert layer_of("extension") > layer_of("clock")


def test_every_public_error_is_exported_from_the_facade() -> None:
    public = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception) and not name.startswith("_")
    }
    assert public <= set(flask_authflow.__all__), sorted(public - set(flask_authflow.__all__))
    assert public <= set(errors.__all__), sorted(public - set(errors.__all__))
