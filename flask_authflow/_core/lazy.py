"""A package's public names, loaded from their private modules on first use (PEP 562).

``flask_authflow.federation``, ``.issuer``, ``.mfa`` and ``.storage`` name classes whose
modules import optional or heavy libraries (``requests``, ``joserfc``, ``webauthn``,
``redis``, SQLAlchemy): importing the package loads none of them, using a name loads its
module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: each name of ``modules`` (name ->
    the private module that defines it) is imported on first use; any other name is an
    ``AttributeError``, as on a plain module."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
