"""The store contract of audit rows (``AuditSink``, ``purge_audit``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_authflow._core.ports import AuditSink
from tests.protocols import missing_members
from tests.store_contract import T0, AuditRecord


class AuditContract:
    """Audit rows kept as written, purged by age."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, AuditSink) == []

    def test_audit_roundtrip(self, backend: Any) -> None:
        row = AuditRecord(
            time=T0,
            event="factor_verify",
            status="failure",
            tenant="acme",
            user_id=None,
            identifier="alice",
            session_id="ab" * 32,
            factor="password",
            client_ip="2001:db8::1",
            ip_source="forwarded",
            user_agent="ua",
            request_id="rid",
            reason="invalid_credential",
        )
        backend.write(row)
        assert backend.audit_rows == [row]

    def test_purge_audit_deletes_the_rows_written_before_the_cutoff(self, backend: Any) -> None:
        def row(minutes: int) -> AuditRecord:
            return AuditRecord(time=T0 + timedelta(minutes=minutes), event=f"e{minutes}", status="success")

        for minutes in (0, 5, 10):
            backend.write(row(minutes))
        assert backend.purge_audit(T0 + timedelta(minutes=5)) == 1  # strictly before the cutoff
        assert [r.event for r in backend.audit_rows] == ["e5", "e10"]
        assert backend.purge_audit(T0) == 0
        assert backend.purge_audit(T0 + timedelta(hours=1)) == 2
        assert backend.audit_rows == []
