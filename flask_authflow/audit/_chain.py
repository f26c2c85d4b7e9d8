"""The tamper-evident audit chain: every row MACed over the previous row of its tenant.

Each audit row of a chained store carries ``seq`` (1, 2, 3, ... per tenant; the rows
without a tenant form one more chain) and ``mac`` = HMAC-SHA256 under the chain key of
the previous row's ``mac`` and the row's canonical encoding (every field, its ``seq``,
its tenant and the id of the key). Editing a row breaks its MAC; deleting one leaves a
gap in ``seq``; swapping two rows puts ``seq`` out of the order the store wrote them in;
a forged row needs the key. The key is not the signing key (``AUTHFLOW_AUDIT_CHAIN_KEY``)
and rotates the way the other secrets do: rows carry the id of the key that MACed them,
so a new key takes over for new rows and the old one still verifies the old rows.

A purge drops a verified prefix and leaves a **checkpoint** (the last dropped ``seq`` and
``mac``, MACed with the chain key), where verification starts from then on.

The standard library's ``hmac`` and ``hashlib`` do the cryptography.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import ConfigurationError

__all__ = [
    "GENESIS",
    "AuditChain",
    "ChainBreak",
    "ChainHead",
    "ChainReport",
    "ChainSnapshot",
    "ChainedAuditStore",
    "ChainedRow",
    "Checkpoint",
    "chain_of",
    "purge_chained",
    "verify_chains",
]

_KEY_ID_LABEL = b"flask-authflow audit chain key id"
_CHECKPOINT_LABEL = "flask-authflow audit checkpoint"
#: The ``mac`` before a chain's first row.
GENESIS = ""


def chain_of(tenant: str | None) -> str:
    """The stored name of a tenant's chain: the tenant, or ``""`` for rows without one
    (never a tenant: tenants are never empty)."""
    return "" if tenant is None else tenant


def _tenant_of(chain: str) -> str | None:
    return None if chain == "" else chain


def _time_text(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="microseconds")


def canonical(record: AuditRecord) -> bytes:
    """The bytes a row's MAC covers: every field but ``mac`` (its ``seq``, tenant and key
    id included), as sorted compact JSON with the time in UTC to the microsecond."""
    fields: dict[str, Any] = record.to_dict()
    del fields["mac"]
    fields["time"] = _time_text(record.time)
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The last link of a chain: its ``seq`` (0 before the first row) and ``mac``."""

    seq: int = 0
    mac: str = GENESIS


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a purged chain resumes: the last dropped row's ``seq`` and ``mac``, MACed
    (``sig``) under the key ``key_id`` so that it cannot be forged or moved."""

    chain: str
    seq: int
    mac: str
    key_id: str
    sig: str

    @property
    def head(self) -> ChainHead:
        return ChainHead(self.seq, self.mac)


@dataclass(frozen=True, slots=True)
class ChainedRow:
    """A stored row and its id in the store (the order the store wrote rows in)."""

    id: int
    record: AuditRecord


@dataclass(frozen=True, slots=True)
class ChainSnapshot:
    """One chain as stored: its rows in id order, its head and its checkpoint."""

    chain: str
    rows: Sequence[ChainedRow]
    head: ChainHead | None
    checkpoint: Checkpoint | None


class ChainedAuditStore(Protocol):
    """What verification and purging read and write on a store that keeps chained rows
    (both backends implement it)."""

    def use_audit_chain(self, chain: AuditChain | None) -> None:
        """MAC every audit row written from now on under ``chain`` (``None``: stop)."""
        ...

    def audit_chains(self) -> list[str]:
        """The names of the stored chains (see :func:`chain_of`), sorted."""
        ...

    def read_audit_chain(self, chain: str) -> ChainSnapshot:
        """One chain's rows, head and checkpoint, read in one transaction."""
        ...

    def drop_audit_prefix(self, checkpoint: Checkpoint) -> int:
        """Store ``checkpoint`` and delete the chain's rows up to its ``seq`` (in one
        transaction); returns how many rows went."""
        ...

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Delete rows written before ``before`` (only those without ``seq``, if asked)."""
        ...


class AuditChain:
    """The chain keys: ``key`` MACs new rows, ``previous_keys`` still verify older ones.

    Each key is known by its id (the first 16 hex digits of an HMAC of a fixed label, so
    the id tells nothing about the key)."""

    def __init__(self, key: bytes, previous_keys: Iterable[bytes] = ()) -> None:
        if len(key) < 32:
            raise ConfigurationError("the audit chain key must be at least 32 bytes")
        self._key = key
        self.key_id = self.id_of(key)
        self._keys = {self.id_of(k): k for k in (*previous_keys, key)}

    @staticmethod
    def id_of(key: bytes) -> str:
        return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]

    def knows(self, key_id: str | None) -> bool:
        return key_id is not None and key_id in self._keys

    def _mac(self, key_id: str, data: bytes) -> str:
        return hmac.new(self._keys[key_id], data, hashlib.sha256).hexdigest()

    def link(self, previous_mac: str, record: AuditRecord) -> str:
        """The MAC of ``record`` (sealed: ``seq`` and ``key_id`` set) after ``previous_mac``."""
        assert record.key_id is not None
        return self._mac(record.key_id, previous_mac.encode("ascii") + b"\n" + canonical(record))

    def seal(self, head: ChainHead, records: Sequence[AuditRecord]) -> tuple[list[AuditRecord], ChainHead]:
        """``records`` (of one chain, in order) numbered and MACed after ``head``; the new head."""
        sealed: list[AuditRecord] = []
        seq, mac = head.seq, head.mac
        for record in records:
            seq += 1
            numbered = replace(record, seq=seq, key_id=self.key_id, mac=None)
            mac = self.link(mac, numbered)
            sealed.append(replace(numbered, mac=mac))
        return sealed, ChainHead(seq, mac)

    def matches(self, previous_mac: str, record: AuditRecord) -> bool:
        """Whether ``record``'s stored MAC is the one its key gives after ``previous_mac``."""
        if record.mac is None or not self.knows(record.key_id):
            return False
        return hmac.compare_digest(self.link(previous_mac, record), record.mac)

    def _checkpoint_data(self, chain: str, seq: int, mac: str, key_id: str) -> bytes:
        fields = {"label": _CHECKPOINT_LABEL, "chain": chain, "seq": seq, "mac": mac, "key_id": key_id}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")

    def checkpoint(self, chain: str, head: ChainHead) -> Checkpoint:
        """A checkpoint at ``head`` of ``chain``, MACed under the current key."""
        sig = self._mac(self.key_id, self._checkpoint_data(chain, head.seq, head.mac, self.key_id))
        return Checkpoint(chain, head.seq, head.mac, self.key_id, sig)

    def checkpoint_valid(self, checkpoint: Checkpoint) -> bool:
        if not self.knows(checkpoint.key_id):
            return False
        data = self._checkpoint_data(checkpoint.chain, checkpoint.seq, checkpoint.mac, checkpoint.key_id)
        return hmac.compare_digest(self._mac(checkpoint.key_id, data), checkpoint.sig)


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first fault of a chain. ``kind``: ``broken`` (a row whose MAC does not verify:
    edited, or MACed with a key this app does not have), ``missing`` (a gap in ``seq``:
    rows deleted; ``row_id`` is the row after the gap, ``None`` at the chain's end),
    ``reordered`` (rows out of the order they were written in: moved or swapped),
    ``unchained`` (a row without a MAC after the chain began), ``checkpoint`` (a forged
    or altered checkpoint). ``seq`` is the sequence number expected there."""

    kind: str
    seq: int
    row_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seq": self.seq, "row_id": self.row_id}


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What :func:`verify_chains` found in one chain."""

    tenant: str | None
    verified: int  #: chained rows that verified (up to the break, if any)
    unchained_prefix: int  #: rows written before the chain was switched on
    checkpoint_seq: int  #: where verification started (0: the chain's beginning)
    last_seq: int
    fault: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.fault is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "ok": self.ok,
            "verified": self.verified,
            "unchained_prefix": self.unchained_prefix,
            "checkpoint_seq": self.checkpoint_seq,
            "last_seq": self.last_seq,
            "break": None if self.fault is None else self.fault.to_dict(),
        }


def _split(rows: Sequence[ChainedRow], start: int) -> tuple[int, list[ChainedRow], ChainedRow | None]:
    """The unchained prefix's size, the chained rows after ``start`` in seq order, and the
    first row without a MAC after the chain began (if any)."""
    prefix = 0
    chained: list[ChainedRow] = []
    stray: ChainedRow | None = None
    for row in rows:
        if row.record.seq is None:
            if not chained and stray is None:
                prefix += 1
            elif stray is None:
                stray = row
            continue
        if row.record.seq > start:
            chained.append(row)
    chained.sort(key=lambda row: (row.record.seq or 0, row.id))
    return prefix, chained, stray


def _walk(
    chain: AuditChain, start: ChainHead, rows: list[ChainedRow]
) -> tuple[int, ChainHead, ChainBreak | None]:
    """Check ``rows`` (seq order) after ``start``: verified count, last head, first fault."""
    head, last_id, verified = start, -1, 0
    for row in rows:
        seq = row.record.seq or 0
        expected = head.seq + 1
        if seq != expected:  # a gap (deleted rows) or a duplicate (a fork)
            return verified, head, ChainBreak("missing" if seq > expected else "broken", expected, row.id)
        if row.id < last_id:
            return verified, head, ChainBreak("reordered", seq, row.id)
        if not chain.matches(head.mac, row.record):
            return verified, head, ChainBreak("broken", seq, row.id)
        head, last_id, verified = ChainHead(seq, row.record.mac or GENESIS), row.id, verified + 1
    return verified, head, None


def verify_snapshot(chain: AuditChain, snapshot: ChainSnapshot) -> ChainReport:
    """Walk one chain in ``seq`` order from its checkpoint and report its first fault."""
    checkpoint = snapshot.checkpoint
    start = ChainHead() if checkpoint is None else checkpoint.head
    prefix, rows, stray = _split(snapshot.rows, start.seq)
    if checkpoint is not None:
        prefix = 0  # the checkpoint covers the rows before it, unchained ones included
    tenant = _tenant_of(snapshot.chain)

    def report(verified: int, last: int, fault: ChainBreak | None) -> ChainReport:
        return ChainReport(tenant, verified, prefix, start.seq, last, fault)

    if checkpoint is not None and (
        checkpoint.chain != snapshot.chain or not chain.checkpoint_valid(checkpoint)
    ):
        return report(0, start.seq, ChainBreak("checkpoint", start.seq, None))
    verified, head, fault = _walk(chain, start, rows)
    if fault is None and stray is not None:
        fault = ChainBreak("unchained", head.seq + 1, stray.id)
    stored = snapshot.head
    if fault is None and stored is not None and (stored.seq, stored.mac) != (head.seq, head.mac):
        # The head says rows were written after the last one found: they were deleted.
        fault = ChainBreak("missing", head.seq + 1, None)
    return report(verified, head.seq, fault)


def verify_chains(store: ChainedAuditStore, chain: AuditChain) -> list[ChainReport]:
    """Verify every chain of ``store`` (one per tenant); one report each."""
    return [verify_snapshot(chain, store.read_audit_chain(name)) for name in store.audit_chains()]


def _prefix_end(rows: Sequence[ChainedRow], start: int, before: datetime) -> ChainedRow | None:
    """The last chained row of the longest seq-ordered run after ``start`` written before ``before``."""
    last: ChainedRow | None = None
    ordered = sorted((r for r in rows if r.record.seq is not None and r.record.seq > start), key=_seq_of)
    for row in ordered:
        if row.record.time >= before:
            break
        last = row
    return last


def _seq_of(row: ChainedRow) -> int:
    return row.record.seq or 0


def purge_chained(
    store: ChainedAuditStore, chain: AuditChain, before: datetime
) -> tuple[int, list[ChainReport]]:
    """Drop each chain's verified prefix of rows written before ``before`` behind a new
    checkpoint, then the unchained rows written before it. A chain whose prefix does not
    verify keeps its rows: its report is returned among the faults (the second value)."""
    dropped, faults = 0, []
    for name in store.audit_chains():
        snapshot = store.read_audit_chain(name)
        start = 0 if snapshot.checkpoint is None else snapshot.checkpoint.seq
        end = _prefix_end(snapshot.rows, start, before)
        if end is None or end.record.seq is None:
            continue
        upto = end.record.seq
        prefix = [r for r in snapshot.rows if r.record.seq is None or r.record.seq <= upto]
        report = verify_snapshot(chain, replace(snapshot, rows=prefix, head=None))
        if report.fault is not None:
            faults.append(report)
            continue
        dropped += store.drop_audit_prefix(chain.checkpoint(name, ChainHead(upto, end.record.mac or GENESIS)))
    return dropped + store.purge_audit(before, unchained_only=True), faults
