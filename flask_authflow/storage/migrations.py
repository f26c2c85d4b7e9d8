"""The schema's migrations, from Python (``flask authflow db`` runs the same)."""

from __future__ import annotations

from flask_authflow.storage._sql.migrations import (
    current,
    exclude_authflow_objects,
    exclude_authflow_tables,
    head,
    upgrade,
)

__all__ = [
    "current",
    "exclude_authflow_objects",
    "exclude_authflow_tables",
    "head",
    "upgrade",
]
