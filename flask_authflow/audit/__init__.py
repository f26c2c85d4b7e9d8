"""Who asked (client address, user agent, request id), what happened (audit rows), how often (counters)."""

from __future__ import annotations

from .client_ip import TrustedProxies
from .context import AuditContext, audit_context, resolve_audit_context
from .sinks import AuditRecord, AuditSink, AuthCounters, MemoryAuditSink, hash_session_id

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
