"""No capability probing of stores, services or app state.

What a store, a backend or a service can do is decided by configuration at wiring time
(:class:`~flask_authflow._core.ports.StorePorts`: the ports a backend declares, ``None``
for what it lacks), never discovered at run time. This test reads every module of the
package with ``ast`` and fails on a call of ``isinstance``, ``getattr`` or ``hasattr``
that asks a store, a backend, a service or the app's state what it is or has.

The rule. A call is probing when

* its subject (the first argument) names a store, backend, service, sink, registry or
  the app's state/extensions: one of the ``_``-separated words of the name the expression
  ends in (``self._store``, ``state.backend``, ``issuer.key_store``,
  ``app.extensions.get(...)``) is in :data:`SUBJECT_WORDS`;
* or, for ``isinstance``, a class it checks against names a store, backend or service
  (:data:`CLASS_SUFFIXES`, e.g. ``AccountTokenStore``, ``SqlAlchemyBackend``,
  ``FederationService``) or the app state (``AuthFlowState``);
* unless it is ``isinstance`` against plain value types only (:data:`VALUE_TYPES`: an
  OAuth ``state`` parameter is a ``str``, a value read from a store a ``dict``).

Type checks on *values* are not probing and do not match the rule: an exception's class
(``isinstance(exc, StoreUnavailable)``), a JSON value's type, a factor's outcome, a
session class the session interface made itself (``isinstance(session, RequestSession)``).
The few calls the rule matches that are not about our stores are in :data:`ALLOWED`, each
with its reason.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import flask_authflow

PACKAGE = Path(flask_authflow.__file__).parent

PROBES = frozenset({"isinstance", "getattr", "hasattr"})
#: A subject whose last name has one of these words is a store, backend, service or state.
SUBJECT_WORDS = frozenset(
    {
        "store",
        "stores",
        "backend",
        "service",
        "svc",
        "sink",
        "registry",
        "state",
        "extension",
        "extensions",
        "federation",
    }
)
#: ``isinstance(x, C)`` with a class named like this asks what a store/service is.
CLASS_SUFFIXES = ("Store", "Backend", "Service", "Sink", "AuthFlowState")
#: ``isinstance`` against only these checks a value's type, whatever the subject's name.
VALUE_TYPES = frozenset(
    {"str", "bytes", "int", "float", "bool", "dict", "list", "tuple", "Mapping", "Sequence"}
)

#: (module path relative to the package, the call as ``ast.unparse`` writes it) -> why it is not probing.
ALLOWED: dict[tuple[str, str], str] = {
    # get_state() checks that app.extensions["authflow"] holds the state init_app put there
    # (a type assertion on the value under the package's own key, for mypy), not a capability.
    ("_web/state.py", "isinstance(state, AuthFlowState)"): "the package's own value under its own key",
    # Flask-WTF's CSRFProtect, another library's extension under its documented key: we
    # follow its CSRF rules when the app installed it. Not one of our stores or services.
    ("_web/csrf.py", "isinstance(extension, CSRFProtect)"): "Flask-WTF's extension, not ours",
    (
        "_web/ssf_views.py",
        "getattr(app.extensions.get('csrf'), 'exempt', None)",
    ): "Flask-WTF's extension, not ours",
}


def _last_name(node: ast.expr) -> str:
    """The name an expression ends in: ``a.b.c`` -> ``c``, ``f(x).get(k)`` -> ``get``'s owner."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Call):
            func = node.func
            # ``x.get("k")`` names ``x``: the mapping the value came from
            node = func.value if isinstance(func, ast.Attribute) and func.attr == "get" else func
            continue
        if isinstance(node, ast.Subscript):
            node = node.value
            continue
        return ""


def _class_names(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [name for elt in node.elts for name in _class_names(elt)]
    if isinstance(node, ast.BinOp):  # A | B
        return _class_names(node.left) + _class_names(node.right)
    return [_last_name(node)]


def _is_probe(call: ast.Call) -> bool:
    if not isinstance(call.func, ast.Name) or call.func.id not in PROBES or not call.args:
        return False
    classes = _class_names(call.args[1]) if call.func.id == "isinstance" and len(call.args) > 1 else []
    if classes and all(name in VALUE_TYPES for name in classes):
        return False
    words = set(_last_name(call.args[0]).lower().strip("_").split("_"))
    if words & SUBJECT_WORDS:
        return True
    return any(name.endswith(CLASS_SUFFIXES) for name in classes)


#: Where a probe may start; only these calls are parsed (parsing every module whole is the
#: slow part of an AST walk, and a probe is one call).
_CANDIDATE = re.compile(r"\b(?:isinstance|getattr|hasattr)\(")


def _call_text(source: str, start: int) -> str:
    """The text of the call that starts at ``start``: up to its balanced closing parenthesis."""
    depth = 0
    for index in range(source.index("(", start), len(source)):
        depth += {"(": 1, ")": -1}.get(source[index], 0)
        if depth == 0:
            return source[start : index + 1]
    return source[start:]


def _calls(source: str) -> list[tuple[int, ast.Call]]:
    """(line, parsed call) of every candidate call of ``source``; a module whose candidates
    do not parse alone (a parenthesis inside a string) is parsed whole instead."""
    found = []
    for match in _CANDIDATE.finditer(source):
        try:
            node = ast.parse(_call_text(source, match.start()), mode="eval").body
        except SyntaxError:
            tree = ast.parse(source)
            return [(n.lineno, n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
        if isinstance(node, ast.Call):
            found.append((source.count("\n", 0, match.start()) + 1, node))
    return found


@functools.cache
def matches() -> tuple[tuple[str, int, str], ...]:
    """(module, line, source text) of every call the rule matches, allowed or not; the
    package is read once per test session."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, node in _calls(path.read_text(encoding="utf-8")):
            if _is_probe(node):
                found.append((rel, line, ast.unparse(node)))
    return tuple(found)


def probes() -> list[tuple[str, int, str]]:
    return [(rel, line, text) for rel, line, text in matches() if (rel, text) not in ALLOWED]


def test_no_store_service_or_state_is_probed() -> None:
    found = probes()
    assert not found, "capability probing (decide it at wiring time instead):\n" + "\n".join(
        f"  flask_authflow/{rel}:{line}: {text}" for rel, line, text in found
    )


def test_the_rule_catches_each_kind_of_probe() -> None:
    """The rule itself: each probe shape is caught, each value check passes."""
    caught = [
        "isinstance(store, AccountTokenStore)",
        "isinstance(self._store, StagedRotationStore)",
        "getattr(state, 'device_context', None)",
        "getattr(sender.extensions.get('authflow'), 'federation', None)",
        "hasattr(backend, 'engine')",
        "isinstance(service, FederationService)",
        "getattr(svc, 'hasher', None)",
        "isinstance(x, SqlAlchemyBackend | Other)",
    ]
    passed = [
        "isinstance(exc, StoreUnavailable)",
        "isinstance(value, str)",
        "isinstance(checked, Rejected)",
        "getattr(self, name)",
        "isinstance(state, str)",  # an OAuth state parameter
        "isinstance(stored, dict)",  # a value read from a store
        "isinstance(session, RequestSession)",
    ]
    for text in caught:
        call = ast.parse(text, mode="eval").body
        assert isinstance(call, ast.Call) and _is_probe(call), text
    for text in passed:
        call = ast.parse(text, mode="eval").body
        assert isinstance(call, ast.Call) and not _is_probe(call), text


def test_every_allowance_is_still_used() -> None:
    """An allowance whose call went away is removed, so the list stays the real exceptions."""
    seen = {(rel, text) for rel, _, text in matches()}
    assert set(ALLOWED) <= seen, set(ALLOWED) - seen
