"""The package is cut by feature, and its imports point one way.

Every ``flask_authflow`` import in every module (at any depth, including imports inside
functions, but not those under ``if TYPE_CHECKING:``) is read from the source with ``ast``
and checked against these rules:

* **Layers.** core (shared records, ports and helpers) <- features <- storage adapters <-
  web and cli (composition) <- testing <- the facade. A module imports its own layer or a
  lower one, never a higher one.
* **Features stand alone.** A feature package imports the core and itself, never another
  feature; where two features meet, the meeting point is a port in ``core``.
* **The core is ordered too.** Its modules (``errors``, ``settings``, ``core/*``, ``audit``, …)
  have an order of their own, :data:`CORE_ORDER`, bottom first: each imports only what is
  below it (and its own room), so two core packages cannot lean on each other (the audit
  row once lived in ``audit`` while ``core/ports`` imported it and ``audit`` imported
  ``core/session``: a cycle the one lumped core layer hid).
* **Storage receives hashes.** No ``storage`` module imports ``login``: the adapters store
  the password hashes ``login`` made, they never hash.

A new top-level module or package must be given a layer here, and a new core module a
place in :data:`CORE_ORDER`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flask_authflow

PACKAGE = Path(flask_authflow.__file__).parent

CORE, FEATURE, STORAGE, COMPOSITION, TESTING, FACADE = range(6)

#: The layer of each top-level module or package of flask_authflow.
LAYERS: dict[str, int] = {
    "_clock": CORE,
    "errors": CORE,
    "_i18n": CORE,
    "signals": CORE,
    "_settings": CORE,
    "_config_values": CORE,
    "_moved": CORE,
    "_origins": CORE,
    "_extras": CORE,
    "_mail": CORE,
    "_outcomes": CORE,
    "_responses": CORE,
    "_core": CORE,
    "jose": CORE,
    "audit": CORE,
    "_throttle": CORE,
    "sessions": FEATURE,
    "login": FEATURE,
    "mfa": FEATURE,
    "federation": FEATURE,
    "issuer": FEATURE,
    "authz": FEATURE,
    "api_auth": FEATURE,
    "devices": FEATURE,
    "storage": STORAGE,
    "_web": COMPOSITION,
    "_cli": COMPOSITION,
    "testing": TESTING,
    "__init__": FACADE,
}

#: The core layer's rooms, bottom first: a core module imports only modules of its own room
#: or of a room listed before its own. A room is a module (``errors``, ``core/ports``) or a
#: package with everything under it (``core/session``, ``audit``).
CORE_ORDER: tuple[str, ...] = (
    "_moved",
    "_i18n",
    "_clock",
    "signals",
    "errors",
    "_extras",
    "_mail",
    "_outcomes",
    "_responses",
    "_origins",
    "_config_values",
    "_settings",
    "_core/lazy",
    "_core/encoding",
    "_core/crypto",
    "_core/identifiers",
    "_core/service",
    "_core/roles",
    "_core/devices",
    "_core/session",
    "_core/audit",
    "_core/ports",
    "_core/factors",
    "_core/factor_data",
    "_core/app_users",
    "_core/__init__",
    "jose",
    "audit",
    "_throttle",
)


def top_of(module: str) -> str:
    """``login`` for ``login/service``; ``__init__`` for the facade itself."""
    return module.split("/")[0]


def layer_of(module: str) -> int:
    top = top_of(module)
    if top not in LAYERS:
        raise AssertionError(f"flask_authflow/{top} has no layer in tests/test_import_layers.py")
    return LAYERS[top]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _target(module: str, node: ast.ImportFrom) -> list[str]:
    """Module paths (relative to the package, slash form) that ``node`` imports."""
    if node.level:
        package = module.split("/")[:-1]
        base = package[: len(package) - (node.level - 1)]
        parts = [*base, *(node.module.split(".") if node.module else [])]
    elif node.module and node.module.split(".")[0] == "flask_authflow":
        parts = node.module.split(".")[1:]
    else:
        return []
    if not parts:  # from flask_authflow import x: x is a module or a name of the facade
        return [alias.name if (PACKAGE / f"{alias.name}.py").exists() else "__init__" for alias in node.names]
    if node.module is None:  # from . import x: x is a module of that package
        return ["/".join([*parts, alias.name]) for alias in node.names]
    return ["/".join(parts)]


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module path) of every runtime ``flask_authflow`` import in ``source``,
    the text of module ``module`` (a path relative to the package, without ``.py``)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, target) for target in _target(module, node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "flask_authflow":
                    found.append((node.lineno, "/".join(alias.name.split(".")[1:]) or "__init__"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def _module(path: Path) -> str:
    return str(path.relative_to(PACKAGE).with_suffix(""))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    module = _module(path)
    own = layer_of(module)
    upward = [
        f"line {line}: imports {target} (layer {layer_of(target)} > {own})"
        for line, target in imported_modules(path.read_text(encoding="utf-8"), module)
        if top_of(target) != top_of(module) and layer_of(target) > own
    ]
    assert not upward, f"flask_authflow/{module}.py imports upward:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if LAYERS.get(top_of(_module(p))) == FEATURE],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_features_import_only_core_and_themselves(path: Path) -> None:
    module = _module(path)
    crossing = [
        f"line {line}: imports {target}"
        for line, target in imported_modules(path.read_text(encoding="utf-8"), module)
        if top_of(target) != top_of(module) and layer_of(target) != CORE
    ]
    assert not crossing, f"flask_authflow/{module}.py reaches into another feature:\n" + "\n".join(crossing)


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if top_of(_module(p)) == "storage"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_storage_never_imports_login(path: Path) -> None:
    """The adapters receive password hashes: hashing happens in ``login/`` (AccountAdmin,
    sign-up, reset and change of password), so no storage module imports ``login`` (its
    hasher least of all)."""
    module = _module(path)
    found = [
        f"line {line}: imports {target}"
        for line, target in imported_modules(path.read_text(encoding="utf-8"), module)
        if top_of(target) == "login"
    ]
    assert not found, f"flask_authflow/{module}.py imports the login feature:\n" + "\n".join(found)


def test_the_checker_sees_upward_and_sideways_imports() -> None:
    """The checks themselves can fail: upward and cross-feature imports are found,
    TYPE_CHECKING ones are not, and relative imports resolve from the importing module."""
    source = (
        "from flask_authflow._web.extension import AuthFlow\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from flask_authflow._web.state import get_state\n"
        "def later():\n"
        "    from flask_authflow._cli import authflow_cli\n"
    )
    assert [t for _, t in imported_modules(source, "_clock")] == ["_web/extension", "_cli"]
    assert [t for _, t in imported_modules("from .model import X\n", "sessions/_stores")] == [
        "sessions/model"
    ]
    assert [t for _, t in imported_modules("from .. import signals\n", "login/_service")] == ["signals"]
    assert [t for _, t in imported_modules("from flask_authflow import signals\n", "login/x")] == ["signals"]
    assert layer_of("_web/extension") > layer_of("_clock")
    assert layer_of("federation/_login") == layer_of("login/_service") == FEATURE


def test_every_top_level_module_has_a_layer() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert modules | packages <= set(LAYERS), sorted((modules | packages) - set(LAYERS))


def core_room(module: str) -> int | None:
    """The place in :data:`CORE_ORDER` of the room ``module`` is in (the longest entry that
    is the module or a package above it), ``None`` when no entry covers it."""
    rooms = [i for i, room in enumerate(CORE_ORDER) if module == room or module.startswith(room + "/")]
    return max(rooms, key=lambda i: len(CORE_ORDER[i]), default=None)


def core_imports_upward(module: str, source: str) -> list[str]:
    """The imports of core module ``module`` (text ``source``, deferred ones included) that
    reach a core room above its own."""
    own = core_room(module)
    assert own is not None, f"flask_authflow/{module}.py has no place in CORE_ORDER"
    found = []
    for line, target in imported_modules(source, module):
        room = core_room(target)
        if layer_of(target) == CORE and room is not None and room > own:
            found.append(f"line {line}: imports {target} ({CORE_ORDER[room]} is above {CORE_ORDER[own]})")
    return found


CORE_MODULES = [p for p in MODULES if LAYERS.get(top_of(_module(p))) == CORE]


def test_core_modules_import_only_what_is_below_them() -> None:
    """Each core module imports only its own room and the rooms below it in CORE_ORDER
    (deferred imports count: a deferred import that closes a cycle only hides it)."""
    upward = {
        _module(path): found
        for path in CORE_MODULES
        if (found := core_imports_upward(_module(path), path.read_text(encoding="utf-8")))
    }
    assert not upward, "core imports pointing up CORE_ORDER:\n" + "\n".join(
        f"flask_authflow/{module}.py {line}" for module, lines in sorted(upward.items()) for line in lines
    )


def test_every_core_module_has_a_place_in_the_order() -> None:
    """Every core module is in a room of CORE_ORDER, and every room holds a module."""
    placeless = [_module(p) for p in CORE_MODULES if core_room(_module(p)) is None]
    assert placeless == [], f"give these a place in CORE_ORDER: {placeless}"
    empty = [
        room for i, room in enumerate(CORE_ORDER) if all(core_room(_module(p)) != i for p in CORE_MODULES)
    ]
    assert empty == [], f"CORE_ORDER names rooms with no module: {empty}"


def test_the_core_order_sees_the_cycle_it_was_written_for() -> None:
    """The checker can fail: the audit row imported by the ports from ``audit`` (above
    ``core/ports``) is refused, deferred or not; the same import from ``core/audit`` is not,
    nor is ``audit`` reading the core."""
    assert (
        core_room("_core/session/_record") == core_room("_core/session") == CORE_ORDER.index("_core/session")
    )
    assert core_room("audit/__init__") == CORE_ORDER.index("audit")
    assert core_room("_core/new_module") is None
    at_top = "from flask_authflow.audit._sinks import AuditRecord\n"
    deferred = "def later():\n    from flask_authflow.audit import _sinks\n"
    assert core_imports_upward("_core/ports", at_top) == [
        "line 1: imports audit/_sinks (audit is above _core/ports)"
    ]
    assert len(core_imports_upward("_core/ports", deferred)) == 1
    assert core_imports_upward("_core/ports", "from flask_authflow._core.audit import AuditRecord\n") == []
    assert core_imports_upward("audit/_sinks", "from flask_authflow._core.session import sid_hash\n") == []
    # a feature is not the core order's business (the layer rule refuses it already)
    assert core_imports_upward("errors", "from flask_authflow.login import _service\n") == []


def _login_graph() -> dict[str, set[str]]:
    """Which modules of the login feature each of its modules imports (deferred imports
    included); ``from flask_authflow.login import begin`` names the module ``login/begin``."""
    login = PACKAGE / "login"
    names = {p.stem for p in login.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in login.glob("*.py"):
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "flask_authflow.login":
                edges |= {alias.name for alias in node.names if alias.name in names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flask_authflow.login."):
                edges.add((node.module or "").split(".")[2])
        graph[path.stem] = edges - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, if it has any."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            found = visit(target, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c), None)


def test_login_flows_import_the_template_and_never_the_service() -> None:
    """Each flow module imports the operation template and the core; only the thin
    service imports the flows, so the login feature has no import cycle, deferred or not."""
    graph = _login_graph()
    flows = {"_begin", "_verify", "_establish", "_step_up", "_enrollment", "_passkey", "_logout"}
    assert flows <= set(graph)
    assert all("_operation" in graph[flow] for flow in flows)
    below_the_service = flows | {"_operation", "_challenges", "_lockout", "_password"}
    assert not any(graph[m] & {"_service", "_accounts", "__init__"} for m in below_the_service)
    assert flows <= graph["_service"]
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _module_level_imports(source: str, module: str) -> set[str]:
    """The ``flask_authflow`` modules that importing ``module`` runs: its imports outside
    functions and classes' methods (an import inside a function runs later), without those
    under ``if TYPE_CHECKING:``; each with the packages above it that ``module``'s own
    import has not already started."""
    found = _imports_run(source, module, deferred=False)
    own = {*_packages_above(module), module}
    return {step for target in found for step in [target, *_packages_above(target)] if step not in own}


def _run_by(node: ast.Import | ast.ImportFrom, module: str) -> set[str]:
    """The modules one import statement runs: its targets, and for ``from package import
    name`` the submodule ``name`` when there is one."""
    targets = {target for _, target in imported_modules(ast.unparse(node), module)}
    if isinstance(node, ast.ImportFrom):
        for target in list(targets):
            targets.update(f"{target}/{a.name}" for a in node.names if _exists(f"{target}/{a.name}"))
    return {_as_module(target) for target in targets if _exists(target)}


def _exists(target: str) -> bool:
    return (PACKAGE / f"{target}.py").exists() or (PACKAGE / target / "__init__.py").exists()


def _packages_above(module: str) -> list[str]:
    """``login/__init__`` for ``login/verify`` (and so on up, without the facade, which
    every import starts first)."""
    parts = module.split("/")[:-1]
    return ["/".join([*parts[: i + 1], "__init__"]) for i in range(len(parts))]


def _as_module(target: str) -> str:
    """A package's import target (``login``) as its ``__init__`` module."""
    return f"{target}/__init__" if (PACKAGE / target).is_dir() else target


def test_no_module_level_import_cycle() -> None:
    """Any module can be imported first: no chain of imports that run at import time leads
    back to where it started (the static form of importing each module into a fresh
    interpreter, which took a minute of the suite)."""
    graph = {_module(path): _module_level_imports(path.read_text(), _module(path)) for path in MODULES}
    assert _cycle(graph) is None


def test_the_module_level_reader_skips_deferred_and_typing_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from flask_authflow._core import session\n"
        "if TYPE_CHECKING:\n    from flask_authflow._web import state\n"
        "def later():\n    from flask_authflow.login import _service\n"
        "try:\n    from flask_authflow.audit import _sinks\nexcept ImportError:\n    pass\n"
    )
    found = _module_level_imports(source, "login/_verify")
    assert {"_core/session/__init__", "_core/__init__", "audit/_sinks", "audit/__init__"} <= found
    assert not found & {"_web/state", "login/_service", "login/__init__"}


def _all_imports(source: str, module: str) -> set[str]:
    """Every ``flask_authflow`` module that ``module`` imports, at module level or inside a
    function (not under ``if TYPE_CHECKING:``), without the packages above it (importing
    ``login.verify`` has started ``login/__init__`` already)."""
    return _imports_run(source, module, deferred=True) - {module, *_packages_above(module)}


def _imports_run(source: str, module: str, *, deferred: bool) -> set[str]:
    """The modules ``source``'s import statements run (:func:`_run_by`), not those under
    ``if TYPE_CHECKING:``; inside functions and lambdas too when ``deferred``."""
    nodes: list[ast.AST] = list(ast.parse(source).body)
    found: set[str] = set()
    while nodes:
        node = nodes.pop()
        if not deferred and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            nodes.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_run_by(node, module))
            continue
        nodes.extend(ast.iter_child_nodes(node))
    return found


def test_no_import_cycle_even_deferred() -> None:
    """No chain of imports leads back to where it started, counting the imports inside
    functions too: a deferred import that closes a cycle only hides it (the house's rule)."""
    graph = {_module(path): _all_imports(path.read_text(), _module(path)) for path in MODULES}
    assert _cycle(graph) is None


def test_the_deferred_reader_sees_imports_inside_functions() -> None:
    source = "def later():\n    from flask_authflow.login import _service\n"
    assert "login/_service" in _all_imports(source, "_web/state")
