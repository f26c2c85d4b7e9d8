"""Whether an object has every method of a port (a ``typing.Protocol``).

The package's ports are not ``runtime_checkable``: nothing in the package asks a store what
it is (tests/test_no_probing.py). A test that an adapter implements a port checks its
methods by name here; mypy checks their signatures where the package wires the adapters.
"""

from __future__ import annotations

from typing import Any


def protocol_members(protocol: type) -> set[str]:
    """The public methods and properties ``protocol`` and its protocol bases declare."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False):
            continue
        names.update(name for name in vars(cls) if not name.startswith("_"))
    return names


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (empty: it implements the port)."""
    return sorted(name for name in protocol_members(protocol) if not hasattr(obj, name))
