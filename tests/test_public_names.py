"""Private by default (issue 33 point 1): what an application can import is small, listed
and documented.

* A **public module** is one whose path has no component starting with ``_``: the facade
  ``flask_authflow``, ``errors``, ``signals``, the feature packages and
  ``storage.migrations``. Every other module is private (``flask_authflow.login._password``,
  ``flask_authflow._web``...), and may change in any release.
* Each public module says what it exports with ``__all__``; the union of those names (the
  facade's re-exports counted once) is the public surface: at most :data:`MOST` names, and
  each is documented in docs/api.rst under the module it is imported from.
* The manual and the example apps import only public names from public modules (every
  ``import`` line of the pages, README.rst and examples/, code blocks and all).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import flask_authflow
from tests.test_docs import documented_names

PACKAGE = Path(flask_authflow.__file__).parent
REPO = PACKAGE.parent
DOCS = REPO / "docs"

#: The ceiling of the public surface. A new public name has to displace one, or argue for
#: raising this number in review.
MOST = 150

#: The public modules as of 0.8; a new one is a decision (add it here and to api.rst).
PUBLIC_MODULES = (
    "flask_authflow",
    "flask_authflow.api_auth",
    "flask_authflow.audit",
    "flask_authflow.authz",
    "flask_authflow.devices",
    "flask_authflow.errors",
    "flask_authflow.federation",
    "flask_authflow.issuer",
    "flask_authflow.jose",
    "flask_authflow.login",
    "flask_authflow.mfa",
    "flask_authflow.sessions",
    "flask_authflow.signals",
    "flask_authflow.storage",
    "flask_authflow.storage.migrations",
    "flask_authflow.testing",
)


def module_paths() -> Iterator[str]:
    """Every module of the package, dotted."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def public_names() -> dict[str, list[str]]:
    """``module -> __all__`` for every public module."""
    return {module: list(importlib.import_module(module).__all__) for module in PUBLIC_MODULES}


def surface() -> set[int]:
    """The distinct public objects (a re-export is the same object), dunders aside."""
    objects: set[int] = set()
    for module, names in public_names().items():
        loaded = importlib.import_module(module)
        objects |= {id(getattr(loaded, name)) for name in names if not name.startswith("__")}
    return objects


def test_every_module_but_the_listed_ones_is_private() -> None:
    public = [module for module in module_paths() if is_public(module)]
    assert public == sorted(PUBLIC_MODULES)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_each_public_module_declares_what_it_exports(module: str) -> None:
    loaded = importlib.import_module(module)
    exported = loaded.__all__
    assert exported, f"{module} has no __all__"
    assert len(set(exported)) == len(exported)
    missing = [name for name in exported if not hasattr(loaded, name)]
    assert missing == []


def test_the_public_surface_is_small() -> None:
    assert len(surface()) <= MOST, {module: len(names) for module, names in public_names().items()}


def test_every_public_name_is_documented_where_it_is_imported_from() -> None:
    documented = documented_names((DOCS / "api.rst").read_text(encoding="utf-8"))
    missing = [
        f"{module}.{name}"
        for module, names in public_names().items()
        for name in names
        if f"{module}.{name}" not in documented
        and not (module != "flask_authflow" and name in flask_authflow.__all__)  # documented in the facade
    ]
    assert missing == [], "document these in docs/api.rst"


def test_the_reference_documents_nothing_private() -> None:
    documented = documented_names((DOCS / "api.rst").read_text(encoding="utf-8"))
    assert sorted(name for name in documented if not is_public(name.replace(".__version__", ""))) == []


_IMPORT = re.compile(
    r"^\s*(?:from\s+(flask_authflow[\w.]*)\s+import\s+(\([^)]*\)|.+)|import\s+(flask_authflow[\w.]*))", re.M
)


def imports_of(text: str) -> Iterator[tuple[str, str | None]]:
    """``(module, name)`` for each name a text imports from flask_authflow (``name`` is
    ``None`` for ``import flask_authflow.x``)."""
    for found in _IMPORT.finditer(text):
        if found.group(3):
            yield found.group(3), None
            continue
        listed = re.sub(r"#[^\n]*", "", found.group(2)).strip("()")
        for item in listed.split(","):
            if item.strip():
                yield found.group(1), item.split(" as ")[0].strip()


def test_the_reader_sees_every_kind_of_import() -> None:
    text = (
        "    from flask_authflow import AuthFlow, login_required\n"
        "    from flask_authflow.login import (\n        Accounts,  # the service\n        Login,\n    )\n"
        "    import flask_authflow.storage\n"
        "    from flask_authflow.login._password import PasswordHasher as Hasher\n"
    )
    assert list(imports_of(text)) == [
        ("flask_authflow", "AuthFlow"),
        ("flask_authflow", "login_required"),
        ("flask_authflow.login", "Accounts"),
        ("flask_authflow.login", "Login"),
        ("flask_authflow.storage", None),
        ("flask_authflow.login._password", "PasswordHasher"),
    ]


def _importable(module: str, name: str | None, names: dict[str, list[str]]) -> bool:
    if module not in names:
        return False
    return name is None or name in names[module] or f"{module}.{name}" in names


def test_the_manual_and_the_examples_import_only_public_names() -> None:
    names = public_names()
    pages = [*sorted(DOCS.glob("*.rst")), REPO / "README.rst", *sorted((REPO / "examples").rglob("*.py"))]
    wrong = [
        f"{page.name}: from {module} import {name}"
        for page in pages
        for module, name in imports_of(page.read_text(encoding="utf-8"))
        if not _importable(module, name, names)
    ]
    assert wrong == []


def test_the_check_refuses_a_private_import() -> None:
    names = public_names()
    assert not _importable("flask_authflow.login._password", "PasswordHasher", names)
    assert not _importable("flask_authflow.login", "Operation", names)
    assert _importable("flask_authflow.login", "PasswordHasher", names)
    assert _importable("flask_authflow.storage", "migrations", names)
