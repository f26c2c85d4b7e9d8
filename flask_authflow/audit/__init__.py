"""Who asked (client address, user agent, request id), what happened (audit rows), how often (counters)."""

from __future__ import annotations

from flask_authflow.audit.client_ip import TrustedProxies
from flask_authflow.audit.context import AuditContext, audit_context, resolve_audit_context
from flask_authflow.audit.sinks import AuditRecord, AuditSink, AuthCounters, MemoryAuditSink, hash_session_id

__all__ = [
    "AuditContext",
    "AuditRecord",
    "AuditSink",
    "AuthCounters",
    "MemoryAuditSink",
    "TrustedProxies",
    "audit_context",
    "hash_session_id",
    "resolve_audit_context",
]
