"""The audit row and the port it is written through: the record every flow writes inside its
unit of work, and the sink protocol a store implements. The sinks themselves (memory, the
spool file, the chain) and the counters are in :mod:`flask_authflow.audit`, which re-exports
these names."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from flask_authflow._core.session import sid_hash

__all__ = ["AuditRecord", "AuditSink", "escape_text", "hash_session_id"]


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
    :mod:`flask_authflow.audit._chain`), ``None`` otherwise.
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
        """Every field by name, values as they are: they are immutable (text, numbers,
        ``None``, an aware ``datetime``), so unlike :func:`dataclasses.asdict` nothing is
        deep-copied."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}


#: The row's field names, in declaration order (the keys of :meth:`AuditRecord.to_dict`).
_FIELD_NAMES = tuple(f.name for f in fields(AuditRecord))


@runtime_checkable
class AuditSink(Protocol):
    """Somewhere audit rows are written durably."""

    def write(self, record: AuditRecord) -> None:
        """Store ``record`` or raise :class:`AuditWriteError`."""
        ...
