"""Audit rows in SQL: written (buffered in the open unit of work, if one is), chained,
purged and read.

A unit of work's rows are written by ONE executemany INSERT just before the unit commits
(:meth:`UnitOfWork.commit <flask_authflow.storage._sql.uow.UnitOfWork.commit>`), in its
transaction. With the chain on (:meth:`SqlAudit.use_audit_chain`) that INSERT is preceded
by one compare-and-swap UPDATE of each chain's head: the process remembers the last head
it saw, MACs the rows after it, and moves the head only if it is still that head (``seq``
and ``mac``). A head another writer moved fails the UPDATE (on PostgreSQL the UPDATE first
waits for that writer's row lock, then re-checks its WHERE on the committed row); the head
is then read under a row lock (``FOR UPDATE``; SQLite's write lock, taken at the unit's
``BEGIN IMMEDIATE``, serialises writers already), the rows MACed again, and the UPDATE
repeated, which now matches. No two units take the same ``seq``; each unit's rows get ids
after those of the unit before it, so ``seq`` order is the store's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, bindparam, delete, insert, select, union, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from flask_authflow._clock import utc
from flask_authflow.audit._chain import AuditChain, ChainedRow, ChainHead, ChainSnapshot, Checkpoint, chain_of
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError, AuthFlowError
from flask_authflow.storage._sql.engine import run_statement
from flask_authflow.storage._sql.schema import UTCDateTime, audit_chain_heads_table, audit_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["AUDIT_PURGE_BATCH", "SqlAudit"]

_heads = audit_chain_heads_table
_AUDIT_INSERT = insert(audit_table)
_CHAIN_COLUMNS = ("seq", "mac", "key_id")


def _purge_batch(*, unchained_only: bool) -> Any:
    oldest = select(audit_table.c.id).where(audit_table.c.time < bindparam("before", type_=UTCDateTime()))
    if unchained_only:
        oldest = oldest.where(audit_table.c.seq.is_(None))
    limited = oldest.order_by(audit_table.c.id).limit(bindparam("batch", type_=Integer()))
    return delete(audit_table).where(audit_table.c.id.in_(limited.scalar_subquery()))


_PURGE_AUDIT_BATCH = _purge_batch(unchained_only=False)
_PURGE_UNCHAINED_BATCH = _purge_batch(unchained_only=True)
#: Audit rows deleted per transaction by :meth:`SqlAlchemyBackend.purge_audit`.
AUDIT_PURGE_BATCH = 5000

#: Move a chain's head if it is still the one the rows were MACed after.
_HEAD_SWAP = (
    update(_heads)
    .where(_heads.c.chain == bindparam("b_chain"), _heads.c.seq == bindparam("b_old_seq"))
    .where(_heads.c.mac == bindparam("b_old_mac"))
    .values(seq=bindparam("b_new_seq"), mac=bindparam("b_new_mac"), key_id=bindparam("b_key_id"))
)
_HEAD_READ = (
    select(_heads.c.seq, _heads.c.mac).where(_heads.c.chain == bindparam("b_chain")).with_for_update()
)
_HEAD_INSERT = insert(_heads).values(chain=bindparam("b_chain"), seq=0, mac="")
#: Per dialect: create a chain's head row unless another writer just did.
_HEAD_CREATE: dict[str, Any] = {
    name: dialect_insert(_heads).values(chain=bindparam("b_chain"), seq=0, mac="").on_conflict_do_nothing()
    for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}
_CHECKPOINT_SET = (
    update(_heads)
    .where(_heads.c.chain == bindparam("b_chain"))
    .values(
        checkpoint_seq=bindparam("b_seq"),
        checkpoint_mac=bindparam("b_mac"),
        checkpoint_key_id=bindparam("b_key_id"),
        checkpoint_sig=bindparam("b_sig"),
    )
)
#: How often a unit re-reads a head that moved under it (the second try holds its lock).
_SWAP_TRIES = 3


def _of_chain(chain: str) -> Any:
    return audit_table.c.tenant.is_(None) if chain == "" else audit_table.c.tenant == chain


def _values(records: Sequence[AuditRecord], *, chained: bool) -> list[dict[str, Any]]:
    """The INSERT's parameter sets: one set of keys for all (an executemany). Columns a
    schema before 0007 (``device_id``) or 0010 (the chain's) lacks are left out when unused."""
    rows = [{**record.to_dict(), "time": utc(record.time)} for record in records]
    dropped = [] if chained else list(_CHAIN_COLUMNS)
    if all(row["device_id"] is None for row in rows):
        dropped.append("device_id")
    for row in rows:
        for name in dropped:
            del row[name]
    return rows


def _record(row: Any) -> AuditRecord:
    fields = row._asdict()
    fields.pop("id", None)
    return AuditRecord(**{**fields, "time": utc(row.time)})


class SqlAudit(SqlConnections):
    """The audit rows of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    _audit_chain: AuditChain | None = None
    #: Each chain's head as this process last moved or read it (a guess: the swap checks it).
    _chain_heads: dict[str, ChainHead]

    def use_audit_chain(self, chain: AuditChain | None) -> None:
        """MAC every row written from now on under ``chain`` (``None``: write rows unchained)."""
        self._audit_chain = chain
        self._chain_heads = {}

    def write(self, record: AuditRecord) -> None:
        """Write one audit row: in the open unit of work, if one is, with the unit's other
        rows just before it commits; else at once, on its own."""
        unit = self._unit()
        if unit is not None:
            unit.queue_audit(record, self._insert_audit, early=self._audit_chain is None)
            return
        try:
            if self._audit_chain is not None:
                with self._tx(locking=True) as conn:
                    self._insert_audit(conn, [record])
                return
            # One statement: in AUTOCOMMIT on a server database (one round trip), never
            # retried (a row that may have been written is not written twice).
            values = _values([record], chained=False)[0]
            run_statement(self.engine, self._read_engine, _AUDIT_INSERT, values, idempotent=False)
        except (SQLAlchemyError, AuthFlowError) as exc:
            raise AuditWriteError() from exc

    def _insert_audit(self, conn: Connection, records: Sequence[AuditRecord]) -> None:
        """Write ``records`` with ONE INSERT (an executemany), chained first if the chain is on."""
        chain = self._audit_chain
        if chain is not None:
            records = self._sealed(conn, chain, records)
        conn.execute(_AUDIT_INSERT, _values(records, chained=chain is not None))

    def _sealed(
        self, conn: Connection, chain: AuditChain, records: Sequence[AuditRecord]
    ) -> list[AuditRecord]:
        """``records`` numbered and MACed, each chain's head moved (chains in name order, so
        two units of several tenants take the heads' locks in one order)."""
        groups: dict[str, list[AuditRecord]] = {}
        for record in records:
            groups.setdefault(chain_of(record.tenant), []).append(record)
        sealed: list[AuditRecord] = []
        for name in sorted(groups):
            sealed.extend(self._swap_head(conn, chain, name, groups[name]))
        return sealed

    def _swap_head(
        self, conn: Connection, chain: AuditChain, name: str, records: list[AuditRecord]
    ) -> list[AuditRecord]:
        head = self._chain_heads.get(name)
        for _ in range(_SWAP_TRIES):
            if head is None:
                head = self._read_head(conn, name)
            sealed, new = chain.seal(head, records)
            params = {
                "b_chain": name,
                "b_old_seq": head.seq,
                "b_old_mac": head.mac,
                "b_new_seq": new.seq,
                "b_new_mac": new.mac,
                "b_key_id": chain.key_id,
            }
            if conn.execute(_HEAD_SWAP, params).rowcount == 1:
                self._chain_heads[name] = new
                return sealed
            head = None
        raise AuditWriteError("the audit chain's head kept moving; nothing was written")

    def _read_head(self, conn: Connection, name: str) -> ChainHead:
        """The head under its row lock, its row created first if the chain is new."""
        key = {"b_chain": name}
        row = conn.execute(_HEAD_READ, key).first()
        if row is None:
            conn.execute(_HEAD_CREATE.get(conn.dialect.name, _HEAD_INSERT), key)
            row = conn.execute(_HEAD_READ, key).one()
        return ChainHead(int(row.seq), str(row.mac))

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Delete the audit rows written before ``before`` (with ``unchained_only``, only
        those without a ``seq``), in transactions of at most ``AUDIT_PURGE_BATCH`` (5,000)
        rows, oldest first; returns how many were deleted.

        The caller decides the cut-off (``flask authflow audit purge`` never passes one
        younger than ``AUTHFLOW_AUDIT_RETENTION``)."""
        statement = _PURGE_UNCHAINED_BATCH if unchained_only else _PURGE_AUDIT_BATCH
        params = {"before": utc(before), "batch": AUDIT_PURGE_BATCH}
        purged = 0
        while True:
            with self._tx() as conn:
                deleted = int(conn.execute(statement, params).rowcount)
            purged += deleted
            if deleted < AUDIT_PURGE_BATCH:
                return purged

    def audit_chains(self) -> list[str]:
        """The stored chains: every tenant with audit rows or a head (``""``: no tenant)."""
        query = union(select(audit_table.c.tenant).distinct(), select(_heads.c.chain))
        names = self._fetch(lambda conn: conn.execute(query).scalars().all())
        return sorted({chain_of(name) for name in names})

    def read_audit_chain(self, chain: str) -> ChainSnapshot:
        """One chain's rows (id order), head and checkpoint, read in one transaction."""
        query = select(audit_table).where(_of_chain(chain)).order_by(audit_table.c.id)
        head_query = select(_heads).where(_heads.c.chain == chain)
        with self._tx() as conn:
            rows = conn.execute(query).all()
            head = conn.execute(head_query).first()
        found = [ChainedRow(int(row.id), _record(row)) for row in rows]
        if head is None:
            return ChainSnapshot(chain, found, None, None)
        checkpoint = None
        if head.checkpoint_seq is not None:
            checkpoint = Checkpoint(
                chain,
                int(head.checkpoint_seq),
                head.checkpoint_mac,
                head.checkpoint_key_id,
                head.checkpoint_sig,
            )
        return ChainSnapshot(chain, found, ChainHead(int(head.seq), head.mac), checkpoint)

    def drop_audit_prefix(self, checkpoint: Checkpoint) -> int:
        """Store ``checkpoint`` on its chain's head and delete the chain's rows up to its
        ``seq``, in one transaction; returns how many rows went."""
        dropped = delete(audit_table).where(_of_chain(checkpoint.chain), audit_table.c.seq <= checkpoint.seq)
        params = {
            "b_chain": checkpoint.chain,
            "b_seq": checkpoint.seq,
            "b_mac": checkpoint.mac,
            "b_key_id": checkpoint.key_id,
            "b_sig": checkpoint.sig,
        }
        with self._tx(locking=True) as conn:
            conn.execute(_CHECKPOINT_SET, params)
            return int(conn.execute(dropped).rowcount)

    @property
    def audit_rows(self) -> list[AuditRecord]:
        columns = [c for c in audit_table.c if c.name != "id"]
        query = select(*columns).order_by(audit_table.c.id)
        rows = self._fetch(lambda conn: conn.execute(query).all())
        return [_record(row) for row in rows]
