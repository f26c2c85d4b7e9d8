"""Audit rows in SQL: written (in the open unit of work, if one is), purged and read."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, bindparam, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from flask_authflow.audit.sinks import AuditRecord
from flask_authflow.clock import utc
from flask_authflow.errors import AuditWriteError
from flask_authflow.storage.sql.engine import run_statement
from flask_authflow.storage.sql.schema import UTCDateTime, audit_table
from flask_authflow.storage.sql.uow import SqlConnections

__all__ = ["AUDIT_PURGE_BATCH", "SqlAudit"]

_AUDIT_INSERT = insert(audit_table)
_PURGE_AUDIT_BATCH = delete(audit_table).where(
    audit_table.c.id.in_(
        select(audit_table.c.id)
        .where(audit_table.c.time < bindparam("before", type_=UTCDateTime()))
        .order_by(audit_table.c.id)
        .limit(bindparam("batch", type_=Integer()))
        .scalar_subquery()
    )
)
#: Audit rows deleted per transaction by :meth:`SqlAlchemyBackend.purge_audit`.
AUDIT_PURGE_BATCH = 5000


class SqlAudit(SqlConnections):
    """The audit rows of :class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend`."""

    def write(self, record: AuditRecord) -> None:
        """Insert one audit row (in the open unit of work, if one is, else on its own)."""
        values = record.to_dict()
        values["time"] = utc(record.time)
        if values["device_id"] is None:  # a row without a device also fits a schema before 0007
            del values["device_id"]
        unit = self._unit()
        try:
            if unit is not None:
                try:
                    unit.connection().execute(_AUDIT_INSERT, values)
                except BaseException:
                    unit.failed = True
                    raise
                return
            # One statement: in AUTOCOMMIT on a server database (one round trip), never
            # retried (a row that may have been written is not written twice).
            run_statement(self.engine, self._read_engine, _AUDIT_INSERT, values, idempotent=False)
        except SQLAlchemyError as exc:
            raise AuditWriteError() from exc

    def purge_audit(self, before: datetime) -> int:
        """Delete the audit rows written before ``before``, in transactions of at most
        ``AUDIT_PURGE_BATCH`` (5,000) rows, oldest first; returns how many were deleted.

        The caller decides the cut-off (``flask authflow audit purge`` never passes one
        younger than ``AUTHFLOW_AUDIT_RETENTION``)."""
        params = {"before": utc(before), "batch": AUDIT_PURGE_BATCH}
        purged = 0
        while True:
            with self._tx() as conn:
                deleted = int(conn.execute(_PURGE_AUDIT_BATCH, params).rowcount)
            purged += deleted
            if deleted < AUDIT_PURGE_BATCH:
                return purged

    @property
    def audit_rows(self) -> list[AuditRecord]:
        columns = [c for c in audit_table.c if c.name != "id"]
        query = select(*columns).order_by(audit_table.c.id)
        rows = self._fetch(lambda conn: conn.execute(query).all())
        return [AuditRecord(**{**row._asdict(), "time": utc(row.time)}) for row in rows]
