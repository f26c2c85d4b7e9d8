"""Audit rows in memory, with their chains' heads and checkpoints (see audit/chain.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask_authflow._clock import utc
from flask_authflow.audit._chain import AuditChain, ChainedRow, ChainHead, ChainSnapshot, Checkpoint, chain_of
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryAudit"]


class MemoryAudit(MemoryState):
    """The audit sink of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def fail_next_write(self, count: int = 1) -> None:
        """Make the next ``count`` audit writes fail with AuditWriteError."""
        with self._lock:
            self._fail_writes = count

    def write(self, record: AuditRecord) -> None:
        with self._lock:
            if self._fail_writes > 0:
                self._fail_writes -= 1
                raise AuditWriteError()
            chain = self._audit_chain
            if chain is not None:  # numbered and MACed after its chain's head, which moves
                name = chain_of(record.tenant)
                sealed, head = chain.seal(self._chain_heads.get(name, ChainHead()), [record])
                self._put(self._chain_heads, name, head)
                record = sealed[0]
            self._append(self._audit, ChainedRow(next(self._audit_ids), record))

    @property
    def audit_rows(self) -> list[AuditRecord]:
        with self._lock:
            return [row.record for row in self._audit]

    def use_audit_chain(self, chain: AuditChain | None) -> None:
        """MAC every row written from now on under ``chain`` (``None``: write rows unchained)."""
        with self._lock:
            self._audit_chain = chain

    def audit_chains(self) -> list[str]:
        with self._lock:
            names = {chain_of(row.record.tenant) for row in self._audit} | set(self._chain_heads)
        return sorted(names)

    def read_audit_chain(self, chain: str) -> ChainSnapshot:
        with self._lock:
            rows = [row for row in self._audit if chain_of(row.record.tenant) == chain]
            return ChainSnapshot(chain, rows, self._chain_heads.get(chain), self._checkpoints.get(chain))

    def drop_audit_prefix(self, checkpoint: Checkpoint) -> int:
        def dropped(row: ChainedRow) -> bool:
            seq = row.record.seq
            return (
                chain_of(row.record.tenant) == checkpoint.chain and seq is not None and seq <= checkpoint.seq
            )

        return self._drop_audit(dropped, checkpoint)

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Drop the audit rows written before ``before`` (with ``unchained_only``, only
        those without a ``seq``); returns how many went."""

        def dropped(row: ChainedRow) -> bool:
            return utc(row.record.time) < utc(before) and not (unchained_only and row.record.seq is not None)

        return self._drop_audit(dropped, None)

    def _drop_audit(self, dropped: Any, checkpoint: Checkpoint | None) -> int:
        with self._lock:
            kept = [row for row in self._audit if not dropped(row)]
            purged = len(self._audit) - len(kept)
            self._audit.clear()  # in place: a unit's journal refers to this deque
            self._audit.extend(kept)
            if checkpoint is not None:
                self._checkpoints[checkpoint.chain] = checkpoint
        return purged
