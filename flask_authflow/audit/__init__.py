"""Who asked (client address, user agent, request id), what happened (audit rows), how often (counters)."""

from __future__ import annotations

from flask_authflow.audit._chain import AuditChain, ChainReport, verify_chains
from flask_authflow.audit._client_ip import TrustedProxies
from flask_authflow.audit._context import AuditContext, audit_context, resolve_audit_context
from flask_authflow.audit._sinks import AuditRecord, AuditSink, AuthCounters, MemoryAuditSink, hash_session_id

__all__ = [
    "AuditChain",
    "AuditContext",
    "AuditRecord",
    "AuditSink",
    "AuthCounters",
    "ChainReport",
    "MemoryAuditSink",
    "TrustedProxies",
    "audit_context",
    "hash_session_id",
    "resolve_audit_context",
    "verify_chains",
]
