"""Audit rows, where they go, and the login counters.

A login that cannot be audited does not happen: sinks raise
:class:`~flask_authflow.errors.AuditWriteError` and the service refuses the operation
rather than lose the row silently.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from flask_authflow.core.session import sid_hash
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


def hash_session_id(sid: str | None) -> str | None:
    """SHA-256 (hex) of a session id: rows can be correlated, but a leaked log cannot be replayed."""
    return None if sid is None else sid_hash(sid)


def escape_text(value: str) -> str:
    """``value`` with every non-printable character written as ``\\uXXXX``.

    Controls (CR, LF, NEL U+0085), line and paragraph separators (U+2028, U+2029) and
    other invisible characters cannot then forge a line or a field in a text log or an
    export of the audit trail. The result is printable, so escaping is idempotent: a row
    read back from a store or the spool is not escaped twice. Printable text, the common
    case, is returned as it is.
    """
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in value)


_TEXT_FIELDS = (
    "event",
    "status",
    "tenant",
    "user_id",
    "identifier",
    "session_id",
    "factor",
    "client_ip",
    "ip_source",
    "user_agent",
    "request_id",
    "reason",
)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit row.

    ``event`` is ``login_begin``, ``factor_verify``, ``step_up_begin`` or ``logout``;
    ``status`` is ``started``, ``success``, ``failure``, ``locked`` or ``error``.
    ``user_id`` is ``None`` when the identifier matched no account. ``session_id`` is the
    SHA-256 of the session id the client holds after the operation. ``seq``, ``mac``
    and ``key_id`` are set by a store that chains its rows (see
    :mod:`flask_authflow.audit.chain`), ``None`` otherwise.
    """

    time: datetime
    event: str
    status: str
    tenant: str | None = None
    user_id: str | None = None
    identifier: str | None = None
    session_id: str | None = None
    factor: str | None = None
    client_ip: str | None = None
    ip_source: str = "unknown"
    user_agent: str | None = None
    request_id: str | None = None
    reason: str | None = None
    device_id: str | None = None
    seq: int | None = None
    mac: str | None = None
    key_id: str | None = None

    def __post_init__(self) -> None:
        # Every text field is escaped once, here, so no sink can store a forged line.
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str):
                escaped = escape_text(value)
                if escaped is not value:
                    object.__setattr__(self, name, escaped)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class AuditSink(Protocol):
    """Somewhere audit rows are written durably."""

    def write(self, record: AuditRecord) -> None:
        """Store ``record`` or raise :class:`AuditWriteError`."""
        ...


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
        <flask_authflow.federation.jwks_cache.ProviderKeyCache.add_fetch_listener>` listener)."""
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
