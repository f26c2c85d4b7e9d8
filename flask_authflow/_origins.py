"""Origins: the address mailed links start with (``AUTHFLOW_EXTERNAL_URL``), and which
hosts are this machine (loopback). Read by the settings table and by
:mod:`flask_authflow._web.external_url`."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback_host(host: str | None) -> bool:
    """``host`` (a name or an address, without a port) is this machine: ``localhost``, a
    name under ``.localhost``, ``127.0.0.0/8`` or ``::1``."""
    if not host:
        return False
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def origin_problem(value: str) -> str | None:
    """Why ``value`` cannot be the address mailed links start with, or ``None``: it must be
    an absolute ``https`` URL (``http`` for a loopback host only), with a host, no user,
    query or fragment, and at most a path (``https://example.com/app``)."""
    if any(char.isspace() or ord(char) < 0x20 or char in "\x7f\\" for char in value):
        return "it holds spaces, control characters or a backslash"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "it is not a URL (a malformed host or port)"
    if parts.scheme.lower() not in ("https", "http") or not parts.netloc:
        return "it must be an absolute http(s) URL with a host, such as 'https://app.example.com'"
    if not parts.hostname or "@" in parts.netloc:
        return "it must name a host, and no user or password"
    if not parts.netloc.isascii():
        # IDNA 2003 (the codec in the standard library) and IDNA 2008 (browsers) encode some
        # names to different hosts: the operator says which one, in its ASCII form.
        return "its host must be written in ASCII: give an internationalised name in its 'xn--' form"
    if parts.query or parts.fragment or "?" in value or "#" in value:
        return "it may hold a path but no query (?...) or fragment (#...)"
    if port == 0 or any(segment in (".", "..") for segment in parts.path.split("/")):
        return "it has port 0 or a '.' or '..' path segment"
    if parts.scheme.lower() == "http" and not is_loopback_host(parts.hostname):
        return "http is allowed for a loopback host only (localhost, 127.0.0.1, ::1): links carry tokens"
    return None


def normal_origin(value: str) -> str:
    """``value`` (which :func:`origin_problem` accepted) with its scheme and host in lower
    case and no trailing slash: ``https://app.example.com/prefix``."""
    parts = urlsplit(value)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
