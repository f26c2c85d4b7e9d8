"""Server-side sessions: the record, its codec, the stores, the Flask session interface,
and :class:`Sessions` (``authflow.sessions``), a user's sessions listed and revoked."""

from __future__ import annotations

from flask_authflow._core.ports.sessions import SessionStore
from flask_authflow._core.session._record import new_guest_record
from flask_authflow.sessions._interface import AuthFlowSessionInterface
from flask_authflow.sessions._service import Sessions
from flask_authflow.sessions._stores import MemorySessionStore

__all__ = [
    "AuthFlowSessionInterface",
    "MemorySessionStore",
    "SessionStore",
    "Sessions",
    "new_guest_record",
]
