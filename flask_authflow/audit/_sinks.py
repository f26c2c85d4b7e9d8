"""Audit rows, where they go, and the login counters.

The row (:class:`AuditRecord`) and its port (:class:`AuditSink`) are core records, defined in
``flask_authflow._core.audit`` and re-exported here; this module holds the sinks and counters.
A login that cannot be audited does not happen: sinks raise
:class:`~flask_authflow.errors.AuditWriteError` and the service refuses the operation
rather than lose the row silently.
"""

from __future__ import annotations

import threading

from flask_authflow._core.audit import AuditRecord, AuditSink, escape_text, hash_session_id
from flask_authflow.errors import AuditWriteError

__all__ = [
    "COUNTER_HELP",
    "AuditRecord",
    "AuditSink",
    "AuthCounters",
    "MemoryAuditSink",
    "escape_text",
    "hash_session_id",
]


class MemoryAuditSink:
    """Audit rows in a list (tests and development); ``broken``/``fail_next`` simulate outages."""

    def __init__(self) -> None:
        self._rows: list[AuditRecord] = []
        self._lock = threading.Lock()
        self._fail_next = 0
        #: While true, every write fails.
        self.broken = False

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` writes fail."""
        with self._lock:
            self._fail_next = count

    def write(self, record: AuditRecord) -> None:
        with self._lock:
            if self.broken or self._fail_next > 0:
                self._fail_next = max(0, self._fail_next - 1)
                raise AuditWriteError()
            self._rows.append(record)

    @property
    def records(self) -> list[AuditRecord]:
        with self._lock:
            return list(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()


#: Counter name (without prefix and ``_total``) → help text.
COUNTER_HELP: dict[str, str] = {
    "login_attempts": "Credential checks attempted (each verify_factor call).",
    "login_successes": "Logins that reached Authenticated (including step-ups).",
    "login_failures": "Credential checks refused (invalid credential, no login in progress, locked).",
    "lockouts": "Locks set by the lockout policy.",
    "session_binding_mismatches": "Sessions reset because the request fingerprint did not match.",
    "jwks_refreshes": "Provider JWK set fetches (every request to a jwks_uri, successful or not).",
    "jwks_refresh_failures": "Provider JWK set fetches that failed (the keys known before were kept).",
    "audit_fallback_writes": "Audit rows written to the spool file because the audit store failed.",
    "audit_lost_writes": "Audit rows that neither the audit store nor the spool file could take.",
    "workflows_started": "Workflows (sign-up, e-mail verification, password reset, custom) started.",
    "workflows_completed": "Workflows completed with their token or kind.",
    "workflows_aborted": "Workflows aborted, expired, or ended by a new login.",
}


class AuthCounters:
    """Thread-safe monotonic counters, exposed in Prometheus text format."""

    prefix = "authflow_"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = dict.fromkeys(COUNTER_HELP, 0)

    def increment(self, name: str, amount: int = 1) -> None:
        if name not in self._values:
            raise KeyError(f"unknown counter {name!r}")
        if amount < 0:
            raise ValueError("counters only go up")
        with self._lock:
            self._values[name] += amount

    def attempt(self) -> None:
        self.increment("login_attempts")

    def success(self) -> None:
        self.increment("login_successes")

    def failure(self) -> None:
        self.increment("login_failures")

    def lock(self) -> None:
        self.increment("lockouts")

    def binding_mismatch(self) -> None:
        self.increment("session_binding_mismatches")

    def jwks_refresh(self) -> None:
        self.increment("jwks_refreshes")

    def jwks_fetched(self, ok: bool) -> None:
        """One fetch of a provider's JWK set finished: count it, and its failure if ``ok`` is false
        (a :meth:`ProviderKeyCache.add_fetch_listener
        <flask_authflow.federation._jwks_cache.ProviderKeyCache.add_fetch_listener>` listener)."""
        with self._lock:
            self._values["jwks_refreshes"] += 1
            if not ok:
                self._values["jwks_refresh_failures"] += 1

    def snapshot(self) -> dict[str, int]:
        """A consistent copy of every counter."""
        with self._lock:
            return dict(self._values)

    def render_prometheus(self) -> str:
        """Prometheus text exposition format 0.0.4 (serve as ``text/plain; version=0.0.4``)."""
        lines: list[str] = []
        for name, value in self.snapshot().items():
            metric = f"{self.prefix}{name}_total"
            lines.append(f"# HELP {metric} {COUNTER_HELP[name]}")
            lines.append(f"# TYPE {metric} counter")
            lines.append(f"{metric} {value}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"AuthCounters({self.snapshot()!r})"
