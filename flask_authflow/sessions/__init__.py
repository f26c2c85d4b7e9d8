"""Server-side sessions: the record, its codec, the stores, the Flask session interface,
and :class:`Sessions` (``authflow.sessions``), a user's sessions listed and revoked."""

from flask_authflow.sessions._service import Sessions

__all__ = ["Sessions"]
