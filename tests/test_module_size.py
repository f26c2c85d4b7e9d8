"""The house's rule on rooms: no module of the package is over 600 lines, and the rooms the
second pass cut (the memory store, the federation, the emulated provider) stay at most 400
lines a module, so that none grows back into the one-class file it was (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest

import flask_authflow

PACKAGE = Path(flask_authflow.__file__).parent
LIMIT = 600
#: The cut rooms and their tighter limit.
CUT_ROOMS = ("storage/_memory", "federation", "testing/_provider")
CUT_LIMIT = 400


def sizes() -> dict[str, int]:
    """Every module's line count, by its path under the package (generated migrations aside:
    alembic writes them and they never grow)."""
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
        if "migrations/versions" not in path.as_posix()
    }


def test_no_module_is_over_six_hundred_lines() -> None:
    assert {name: lines for name, lines in sizes().items() if lines > LIMIT} == {}


@pytest.mark.parametrize("room", CUT_ROOMS)
def test_a_cut_room_keeps_every_module_at_most_four_hundred_lines(room: str) -> None:
    found = {name: lines for name, lines in sizes().items() if name.startswith(f"{room}/")}
    assert len(found) > 3, f"{room} is no longer a package of small modules"
    assert {name: lines for name, lines in found.items() if lines > CUT_LIMIT} == {}
