"""Who is asking: the request facts every audit row carries.

:func:`audit_context` cannot fail. A row with ``ip_source="unknown"`` is better than a
login refused because a header was odd, and better than a row whose address an
attacker chose.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flask_authflow._responses import AUDIT_CONTEXT_KEY
from flask_authflow.audit._client_ip import IpSource, TrustedProxies
from flask_authflow.audit._sinks import AuditRecord

if TYPE_CHECKING:
    from flask import Flask

__all__ = [
    "MAX_USER_AGENT",
    "AuditContext",
    "AuditSource",
    "audit_context",
    "audit_source",
    "resolve_audit_context",
]

#: User agents are cut to this many characters in audit rows.
MAX_USER_AGENT = 512
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_G_KEY = AUDIT_CONTEXT_KEY
_LOOPBACK = TrustedProxies.loopback_only()
log = logging.getLogger("flask_authflow.audit")


@dataclass(frozen=True, slots=True)
class AuditContext:
    """Client address (and its source), user agent and request id of one request.

    With the device feature, also the request's device: ``device_id`` (from a valid device
    cookie, or the id a sign-in in this request will give the browser), ``device_user``
    (the id of the user the valid cookie was issued to) and ``device_refused`` (why
    a device cookie the browser sent was ignored: ``forged``, ``expired``, ``ua_mismatch``).
    """

    client_ip: str | None
    ip_source: IpSource
    user_agent: str | None
    request_id: str
    device_id: str | None = None
    device_user: str | None = None
    device_refused: str | None = None

    def row(self, time: datetime, event: str, status: str, **fields: Any) -> AuditRecord:
        """An audit row of this request: its client address (and source), user agent,
        request id and device filled in (a ``device_id`` in ``fields`` wins), the rest
        from ``fields`` (``tenant``, ``user_id``, ``factor``, ``reason`` ...)."""
        fields.setdefault("device_id", self.device_id)
        return AuditRecord(
            time=time,
            event=event,
            status=status,
            client_ip=self.client_ip,
            ip_source=self.ip_source,
            user_agent=self.user_agent,
            request_id=self.request_id,
            **fields,
        )

    @classmethod
    def unknown(cls) -> AuditContext:
        """Outside a request (CLI, background job): nothing known, a fresh request id."""
        return cls(client_ip=None, ip_source="unknown", user_agent=None, request_id=uuid.uuid4().hex)


def _clean_user_agent(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    cut = value[:MAX_USER_AGENT]
    if cut.isprintable():  # the usual header: nothing to replace, no copy character by character
        return cut
    # Control characters would let a client forge line breaks in text logs.
    return "".join(ch if ch.isprintable() else "?" for ch in cut)


def _environ_of(source: Any) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    environ = getattr(source, "environ", None)
    return environ if isinstance(environ, Mapping) else {}


def resolve_audit_context(environ_or_request: Any, trusted: TrustedProxies | None = None) -> AuditContext:
    """Build the context from a WSGI environ or a request object; never raises."""
    try:
        trusted = trusted if isinstance(trusted, TrustedProxies) else _LOOPBACK
        environ = _environ_of(environ_or_request)
        peer = environ.get("REMOTE_ADDR")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        client_ip, source = trusted.resolve(
            peer if isinstance(peer, str) else None,
            [forwarded] if isinstance(forwarded, str) else [],
            environ.get("HTTP_X_REAL_IP"),
        )
        incoming_id = environ.get("HTTP_X_REQUEST_ID")
        if (
            isinstance(incoming_id, str)
            and _REQUEST_ID.fullmatch(incoming_id)
            and trusted.is_trusted(peer if isinstance(peer, str) else None)
        ):
            request_id = incoming_id
        else:
            request_id = uuid.uuid4().hex
        return AuditContext(
            client_ip=client_ip,
            ip_source=source,
            user_agent=_clean_user_agent(environ.get("HTTP_USER_AGENT")),
            request_id=request_id,
        )
    except Exception:  # noqa: BLE001 - the extractor cannot fail, by contract
        return AuditContext.unknown()


@dataclass(eq=False)
class AuditSource:
    """What the web layer gives the audit context of an app's requests: ``init_app`` sets
    the trusted proxies, the device feature its hook. The audit context receives them; it
    never reads the app's state."""

    #: The proxies whose forwarded address is believed (``None``: the peer address only).
    trusted_proxies: TrustedProxies | None = None
    #: ``add_device(ctx, request)``: ``ctx`` with the request's device (``None``: no device).
    add_device: Callable[[AuditContext, Any], AuditContext] | None = None


_SOURCE_KEY = "authflow_audit_source"


def audit_source(app: Flask) -> AuditSource:
    """The :class:`AuditSource` of ``app`` (an empty one on first use); the web layer fills it."""
    source: AuditSource = app.extensions.setdefault(_SOURCE_KEY, AuditSource())
    return source


def audit_context() -> AuditContext:
    """The context of the current request, resolved once and kept on ``flask.g``, from what
    the web layer gave the app's :class:`AuditSource`."""
    try:
        from flask import current_app, g, has_request_context, request

        if not has_request_context():
            return AuditContext.unknown()
        cached = g.get(_G_KEY)
        if isinstance(cached, AuditContext):
            return cached
        source: AuditSource | None = current_app.extensions.get(_SOURCE_KEY)
        if source is None:  # flask-authflow is not on this app: the peer address only
            source = AuditSource()
        ctx = resolve_audit_context(request.environ, source.trusted_proxies)
        add_device = source.add_device
        if add_device is not None:  # the device feature: the request's device on every row
            try:
                ctx = add_device(ctx, request)
            except Exception:  # the row is written without the device, not lost
                log.warning("the device hook failed: this request's audit rows have no device", exc_info=True)
        setattr(g, _G_KEY, ctx)  # once per request, the hook's failure included
        return ctx
    except Exception:  # noqa: BLE001 - the extractor cannot fail, by contract
        return AuditContext.unknown()
