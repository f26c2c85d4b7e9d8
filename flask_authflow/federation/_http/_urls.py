"""Provider URLs: https only (plain http on a loopback host), no credentials, no fragment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

from flask_authflow.federation._errors import Discovery

__all__ = ["LOOPBACK_HOSTS", "check_provider_url", "host_of"]

#: Hosts on which plain http is allowed (development servers and tests).
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_MAX_URL_LENGTH: Final = 4096


def _shown(url: str) -> str:
    """``url`` as it may appear in a message (bounded length)."""
    return url if len(url) <= 200 else url[:200] + "..."


def check_provider_url(
    url: str, what: str = "provider URL", *, error: Callable[[str], Exception] = Discovery
) -> str:
    """Return ``url`` when a provider may be reached at it (or redirected back to it).

    Accepted: ``https://host/...``, and ``http://`` on a loopback host only
    (:data:`LOOPBACK_HOSTS`). Refused: other schemes, http elsewhere, a URL without a
    host, with credentials (``https://user:pw@host``), with a fragment, with whitespace,
    control characters or backslashes (which parsers disagree on).

    :param what: the name of the setting or document field, for the message.
    :param error: the exception class to raise, called with the message (e.g.
        :class:`~flask_authflow.errors.ConfigurationError` when checking configuration).
    :raises Discovery: (by default) naming ``what`` (``jwks_uri``, ``token_endpoint``,
        ...); the message never repeats credentials.
    """
    refusal = f"{what} must be an https URL (http only on loopback)"
    if not isinstance(url, str) or not url:
        raise error(f"{refusal}: {url!r}")
    if len(url) > _MAX_URL_LENGTH:
        raise error(f"{what} is longer than {_MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise error(f"{what} contains whitespace, control characters or a backslash")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises ValueError
    except ValueError:
        raise error(f"{refusal}: {_shown(url)}") from None
    if "@" in parts.netloc:
        raise error(f"{what} must not carry credentials (user:password@host)")
    if not host:
        raise error(f"{refusal}: {_shown(url)}")
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        if "#" in url:
            raise error(f"{what} must not have a fragment: {_shown(url)}")
        return url
    raise error(f"{refusal}: {_shown(url)}")


def host_of(url: str) -> str:
    try:
        return urlsplit(url).hostname or "the provider"
    except ValueError:
        return "the provider"
