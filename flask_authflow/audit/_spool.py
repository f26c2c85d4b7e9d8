"""A durable fallback for audit rows: an append-only JSON-lines spool file.

Logging out is the safe direction, so a logout never fails because the audit store is
down: its row goes here instead (one JSON object a line, flushed and fsync'ed, the file
mode 0600, appends serialised across processes with ``flock``), and
:meth:`SpoolAuditSink.replay` moves the rows into the real store once it is back
(``flask authflow audit replay-spool``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

from flask_authflow.audit._sinks import AuditRecord, AuditSink
from flask_authflow.errors import AuditWriteError

__all__ = ["SpoolAuditSink"]

log = logging.getLogger("flask_authflow.audit")

_FIELDS = {f.name for f in fields(AuditRecord)}


def _encode(record: AuditRecord) -> bytes:
    doc = record.to_dict()
    doc["time"] = record.time.isoformat()
    return (json.dumps(doc, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def _decode(line: bytes) -> AuditRecord:
    doc: dict[str, Any] = json.loads(line)
    if not isinstance(doc, dict) or not set(doc) <= _FIELDS:
        raise ValueError("not an audit row")
    doc["time"] = datetime.fromisoformat(doc["time"])
    return AuditRecord(**doc)


class SpoolAuditSink:
    """An :class:`~flask_authflow.audit._sinks.AuditSink` that appends to a local file.

    :param path: the spool file; created with mode 0600 (its folder must exist or be creatable).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    @contextmanager
    def _locked(self, flags: int) -> Iterator[int]:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, flags | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield fd
            finally:
                os.close(fd)  # closing releases the flock

    def write(self, record: AuditRecord) -> None:
        """Append ``record`` durably, or raise :class:`AuditWriteError`."""
        data = _encode(record)
        try:
            with self._locked(os.O_WRONLY | os.O_APPEND) as fd:
                os.write(fd, data)
                os.fsync(fd)
        except OSError as exc:
            raise AuditWriteError() from exc

    def records(self) -> list[AuditRecord]:
        """The rows waiting in the spool (unreadable lines are skipped and logged)."""
        if not self.path.exists():
            return []
        with self._locked(os.O_RDONLY) as fd:
            return self._read(fd)

    def _read(self, fd: int) -> list[AuditRecord]:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        rows = []
        for number, line in enumerate(b"".join(chunks).splitlines(), 1):
            try:
                rows.append(_decode(line))
            except (ValueError, TypeError, KeyError):
                log.error("audit spool %s: line %d is not an audit row; left out", self.path, number)
        return rows

    def replay(self, sink: AuditSink) -> int:
        """Move every spooled row into ``sink``, oldest first; returns how many moved.

        Stops at the first row ``sink`` refuses and keeps that row and the ones after it
        in the spool, so nothing is lost and nothing is written twice by a later replay.
        """
        if not self.path.exists():
            return 0
        with self._locked(os.O_RDWR) as fd:
            rows = self._read(fd)
            moved = 0
            try:
                for row in rows:
                    sink.write(row)
                    moved += 1
            finally:
                rest = b"".join(_encode(row) for row in rows[moved:])
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                if rest:
                    os.write(fd, rest)
                os.fsync(fd)
        return moved

    def __repr__(self) -> str:
        return f"<SpoolAuditSink {self.path}>"
