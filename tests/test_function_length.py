"""The house's rule on size: no function of the package has a body over 60 lines (its
docstring aside). A longer one is cut into named steps, as ``AuthFlow.init_app`` is."""

from __future__ import annotations

import ast
from pathlib import Path

import flask_authflow

PACKAGE = Path(flask_authflow.__file__).parent
LIMIT = 60


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of ``function``'s body, from its first statement after the docstring to its
    last (comments and blank lines between them count)."""
    body = function.body
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return int(body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int]]:
    return [
        (node.name, body_lines(node))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and body_lines(node) > limit
    ]


def test_no_function_body_is_over_sixty_lines() -> None:
    found = {
        f"{path.relative_to(PACKAGE)}:{name}": lines
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in long_functions(path.read_text())
    }
    assert found == {}


def test_the_counter_skips_the_docstring_and_counts_the_body() -> None:
    source = 'def f():\n    """Doc.\n\n    More."""\n    a = 1\n\n    # note\n    return a\n'
    assert long_functions(source, limit=3) == [("f", 4)]
    assert long_functions(source, limit=4) == []
