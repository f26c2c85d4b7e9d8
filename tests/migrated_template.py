"""One migrated SQLite database per test process, copied into each fresh one an app opens.

``AuthFlow.init_app`` on a new SQLite file upgrades it to head with Alembic: some forty
revisions, about a second of CPU on a loaded machine, for every test of a SQL store. The
schema is the same every time, so :func:`fresh_upgrade` runs the real upgrade once per
process into a template file and then, for an *empty* SQLite file database at ``head``,
copies the template into it with SQLite's backup API: the same tables, indexes and
version stamp, and the same :class:`UpgradeResult` a real upgrade of an empty database
returns. Anything else (a database behind, adopted, downgraded, PostgreSQL, an in-memory
database, another revision) runs the real upgrade. The migrations themselves are tested
in ``tests/test_migrations.py``, where this is off (``conftest.py``).
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import inspect

from flask_authflow.storage._sql.engine import resolve_engine
from flask_authflow.storage._sql.migrations import UpgradeResult

__all__ = ["TemplateUpgrade"]


class TemplateUpgrade:
    """A stand-in for ``migrations.upgrade`` that copies a migrated template when it can."""

    def __init__(self, original: Callable[..., UpgradeResult]) -> None:
        self._original = original
        self._lock = threading.Lock()
        self._template: sqlite3.Connection | None = None
        self._head: str | None = None

    def _made(self) -> tuple[sqlite3.Connection, str | None]:
        with self._lock:
            if self._template is None:
                folder = Path(tempfile.mkdtemp(prefix="authflow-template-"))
                path = folder / "template.db"
                self._head = self._original(f"sqlite:///{path}").after
                template = sqlite3.connect(path, check_same_thread=False)
                template.execute("PRAGMA journal_mode=DELETE")  # one file, nothing in a WAL
                self._template = template
            return self._template, self._head

    def __call__(self, engine: Any, revision: str = "head") -> UpgradeResult:
        if revision != "head" or isinstance(engine, str):
            return self._original(engine, revision)
        bound = resolve_engine(engine)
        database = bound.url.database or ""
        if bound.dialect.name != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
            return self._original(engine, revision)
        if inspect(bound).get_table_names():
            return self._original(engine, revision)
        template, head = self._made()
        raw = bound.raw_connection()
        try:
            with self._lock:
                template.backup(raw.driver_connection)
        finally:
            raw.close()
        return UpgradeResult(None, head, [])
