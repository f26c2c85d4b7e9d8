"""Who asked (client address, user agent, request id), what happened (audit rows), how often (counters)."""

from __future__ import annotations

from flask_authflow.audit._chain import verify_chains
from flask_authflow.audit._client_ip import TrustedProxies
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord, AuditSink

__all__ = [
    "AuditContext",
    "AuditRecord",
    "AuditSink",
    "TrustedProxies",
    "verify_chains",
]
