"""The guard of an app whose cookies travel without Secure: only clients on this machine.

Installed by ``init_app`` as a ``before_request`` hook only with
``AUTHFLOW_ALLOW_INSECURE_LOOPBACK`` and ``AUTHFLOW_COOKIE_SECURE=False``; every other app
has no hook of ours.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, current_app, request

from flask_authflow._responses import error_response
from flask_authflow.audit._client_ip import MAX_ADDRESS_CHARS, parse_ip
from flask_authflow.errors import LoopbackOnly

__all__ = ["loopback_only"]

log = logging.getLogger("flask_authflow")


def _is_loopback(address: str | None) -> bool:
    """The address is on this machine (the audit layer's strict parser: scope ids, IPv4-mapped)."""
    if not address or len(address) > MAX_ADDRESS_CHARS:  # what parse_ip refuses; never cached
        return False
    return _is_loopback_text(address)


@functools.lru_cache(maxsize=512)
def _is_loopback_text(address: str) -> bool:
    """:func:`_is_loopback` of a short string, remembered: every request of a plain-HTTP
    server on this machine asks it about the same peer address."""
    ip = parse_ip(address)
    return ip is not None and ip.is_loopback


def _is_loopback_request(environ: Mapping[str, Any]) -> bool:
    """The TCP peer, every ``X-Forwarded-For`` hop and any ``X-Real-IP`` of the request in
    ``environ`` are loopback addresses.

    A proxy on this machine that forwards a remote client (``X-Forwarded-For:
    203.0.113.9``) does not make that client local; a malformed hop counts as remote.
    """
    if not _is_loopback(environ.get("REMOTE_ADDR")):  # what request.remote_addr reads
        return False
    # WSGI joins repeated header lines into one comma-separated value, and the environ
    # lookup avoids walking every header as ``request.headers.getlist`` does.
    real_ip = environ.get("HTTP_X_REAL_IP")  # a local proxy's word for a remote client, too
    if real_ip is not None and not _is_loopback(real_ip.strip()):
        return False
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    if forwarded is None:
        return True
    return all(_is_loopback(hop.strip()) for hop in forwarded.split(","))


def loopback_only() -> Response | None:
    """Refuse remote clients of an app whose cookies travel without Secure (installed only
    with ``AUTHFLOW_ALLOW_INSECURE_LOOPBACK`` and ``AUTHFLOW_COOKIE_SECURE=False``)."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    if not (app.debug or app.testing) and not _is_loopback_request(request.environ):
        # Cookies without Secure may only travel on this machine. The client is told no
        # more than that; the operator reads what to set in the log.
        log.warning(
            "refused a non-loopback client: cookies are sent without Secure "
            "(set AUTHFLOW_COOKIE_SECURE=True and serve over HTTPS)"
        )
        return error_response(LoopbackOnly())
    return None
