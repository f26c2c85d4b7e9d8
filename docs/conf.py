"""Sphinx configuration of the flask-authflow documentation.

Built with ``sphinx-build -n -W`` (``tests/test_docs.py``): every cross-reference must
resolve. Needs only Sphinx and the package itself (``pip install -e .[docs]``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import typing
from typing import Any

import flask_authflow

project = "flask-authflow"
author = "the flask-authflow authors"
copyright = "2026, the flask-authflow authors"
release = flask_authflow.__version__
extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"

autodoc_member_order = "bysource"
# flask_authflow.testing holds the pytest plugin: document it without installing pytest
# (building the docs needs Sphinx and the package, never the test dependencies).
autodoc_mock_imports = ["pytest"]
# Docstrings of dict or Flask base classes (``update``, ``keys``, ``open_session``) are not
# ours and talk about ``D`` and ``E``: document what flask-authflow says, nothing inherited.
autodoc_inherit_docstrings = False

# The documentation is built offline (no intersphinx), so links into the standard
# library and the third-party packages flask-authflow builds on cannot resolve. They are
# listed here by package; flask-authflow's public names are never ignored: a reference to
# one of them that does not resolve is an error (document it in api.rst). A private one
# (a signature's type from a private module) is shown as text: see _resolve_alias.
_THIRD_PARTY = (
    "argon2",
    "blinker",
    "click",
    "cryptography",
    "flask",
    "joserfc",
    "limits",
    "pytest",
    "requests",
    "sqlalchemy",
    "werkzeug",
)
_OUTSIDE = sorted(set(_THIRD_PARTY) | set(sys.stdlib_module_names))
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(_OUTSIDE)})(\..+)?"),
]
# Bare third-party names from annotations that only exist under ``TYPE_CHECKING``, and
# Flask's own session-interface methods named in our overrides' docstrings.
nitpick_ignore = [
    ("py:class", "Blueprint"),
    ("py:class", "Flask"),
    ("py:class", "FlaskClient"),
    ("py:class", "Redis"),
    ("py:class", "SessionMixin"),
    ("py:meth", "is_null_session"),
    ("py:meth", "make_null_session"),
]


def _import_dotted(path: str) -> Any:
    """The object named by ``path`` (``pkg.module.Class.attr``), or ``None``."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return None
        return obj
    return None


_DOCUMENTED: dict[int, str] = {}


def _import_for_docs(path: str) -> Any:
    """:func:`_import_dotted` with the modules autodoc mocks mocked, as autodoc imports them."""
    from sphinx.ext.autodoc.mock import mock

    with mock(autodoc_mock_imports):
        return _import_dotted(path)


def _documented_names(env: Any) -> dict[int, str]:
    """``id(object) -> name`` for every Python object documented in these pages."""
    if not _DOCUMENTED:
        for name in env.get_domain("py").objects:
            obj = _import_for_docs(name)
            if obj is not None and not isinstance(obj, str | int | float | bool | type(None)):
                _DOCUMENTED.setdefault(id(obj), name)
    return _DOCUMENTED


def _resolve_alias(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a reference to one of our objects written with another of its import paths.

    Each object is documented once, under its public name (``flask_authflow.issuer.LocalIdp``);
    docstrings and pages also name the defining module (``flask_authflow.issuer.LocalIdp``,
    ``flask_authflow.issuer.LocalIdp``) or, inside a module, the bare name. Such a
    reference is resolved by importing it and finding where that same object is documented.
    A type variable in a signature is shown as plain text. Anything else stays unresolved
    (and fails the ``-n`` build).
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if cls and module:
        candidates.append(f"{module}.{cls}.{target}")
    if module:
        candidates.append(f"{module}.{target}")
    if cls and module:  # a name in a signature of a class documented under another path
        defining = getattr(_import_for_docs(f"{module}.{cls}"), "__module__", None)
        if isinstance(defining, str):
            candidates.append(f"{defining}.{target}")
    candidates.append(f"flask_authflow.{target}")  # a bare name in a page: the facade's first
    documented = _documented_names(env)
    domain = env.get_domain("py")
    for candidate in candidates:
        if not candidate.startswith("flask_authflow."):
            continue
        obj = _import_for_docs(candidate)
        if obj is None:
            continue
        if isinstance(obj, typing.TypeVar):
            return contnode
        name = documented.get(id(obj))
        if name is None:
            continue
        resolved = domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], name, node, contnode
        ) or domain.resolve_xref(env, node["refdoc"], app.builder, "obj", name, node, contnode)
        if resolved is not None:
            return resolved
    # A bare name (``MockClock``, ``SessionStore.save``): the one object documented under it.
    matches = [
        name for name in domain.objects if name.startswith("flask_authflow.") and name.endswith(f".{target}")
    ]
    if len(matches) == 1:
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode
        ) or domain.resolve_xref(env, node["refdoc"], app.builder, "obj", matches[0], node, contnode)
    # Every public name is documented (tests/test_public_names.py), so one of ours that is
    # importable but not documented is private (a signature's clock, a record, a subclass
    # of an exported error): its name, as text, without a link. A name nobody defines (a
    # typo, a removed method) still fails the build.
    importable = any(_import_for_docs(candidate) is not None for candidate in candidates)
    if importable or target.split(".")[0] in _private_names():
        return contnode
    return None


_PRIVATE: set[str] = set()


def _private_names() -> set[str]:
    """The classes and functions the package defines and does not export (``FederationService``
    of a private module, ``StoreBusy`` of ``errors``), for a bare name in a docstring."""
    if not _PRIVATE:
        from sphinx.ext.autodoc.mock import mock

        with mock(autodoc_mock_imports):
            for info in pkgutil.walk_packages(flask_authflow.__path__, "flask_authflow."):
                if ".versions." in info.name or info.name.endswith(".env"):
                    continue
                module = importlib.import_module(info.name)
                exported = () if "._" in info.name else getattr(module, "__all__", ())
                _PRIVATE.update(
                    name
                    for name, value in vars(module).items()
                    if getattr(value, "__module__", None) == info.name
                    and callable(value)
                    and name not in exported
                )
    return _PRIVATE


_GROUPED_PARAM = re.compile(r"^(\s*):param ((?:\w+, )+\w+):(.*)$")


def _split_grouped_params(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Our docstrings document related arguments together (``:param time_cost, memory_cost:
    Argon2 parameters``); Sphinx reads one name per field, so give each name the field."""
    result: list[str] = []
    index = 0
    while index < len(lines):
        match = _GROUPED_PARAM.match(lines[index])
        if match is None:
            result.append(lines[index])
            index += 1
            continue
        indent, names, text = match.groups()
        body = [text]
        index += 1
        while index < len(lines) and lines[index].strip() and not lines[index].lstrip().startswith(":"):
            if len(lines[index]) - len(lines[index].lstrip()) <= len(indent):
                break
            body.append(lines[index])
            index += 1
        for param in names.split(", "):
            result.append(f"{indent}:param {param}:{body[0]}")
            result.extend(body[1:])
    lines[:] = result


def _dataclass_factories(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, annotation: str | None
) -> tuple[str | None, str | None]:
    """A dataclass field with a ``default_factory`` shows as ``= <factory>``, which is not
    Python: Sphinx then cannot parse the signature and links its pieces as class names.
    Show such defaults as ``...``."""
    if signature is not None:
        signature = signature.replace("= <factory>", "= ...").replace("=<factory>", "=...")
    return signature, annotation


def _reset(app: Any, env: Any, docnames: Any) -> None:
    _DOCUMENTED.clear()


def setup(app: Any) -> None:
    app.connect("env-before-read-docs", _reset)
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-process-docstring", _split_grouped_params)
    app.connect("autodoc-process-signature", _dataclass_factories)
