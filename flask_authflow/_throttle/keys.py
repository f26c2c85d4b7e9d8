"""What a limit counts against: an address, its network, an account or a mail recipient.

Addresses are normalised with :func:`~flask_authflow.audit._client_ip.parse_ip` (an
IPv4-mapped IPv6 address counts as its IPv4 address); an address that is missing or
malformed counts as ``unknown``, one shared bucket, so garbage never gets a fresh budget.
A network is the address's /24 (IPv4) or /56 (IPv6): what one customer of a provider
usually holds, so rotating through the addresses of one's own network does not help. A
host is an IPv4 address or an IPv6 /64: one device picks any address of its /64 at will
(privacy addresses), so an IPv6 address alone names nothing an attacker cannot change.
Accounts and recipients are hashed (SHA-256) before they become keys: a shared limiter
store (Redis) then holds no e-mail addresses in clear.
"""

from __future__ import annotations

import hashlib
import ipaddress

from flask_authflow.audit._client_ip import IpAddress, parse_ip

__all__ = [
    "IPV4_NETWORK_PREFIX",
    "IPV6_HOST_PREFIX",
    "IPV6_NETWORK_PREFIX",
    "UNKNOWN",
    "AddressKeys",
    "address_key",
    "digest",
    "host_key",
    "network_key",
]

#: The prefix length of an IPv4 network counted as one.
IPV4_NETWORK_PREFIX = 24
#: The prefix length of an IPv6 network counted as one (a typical end-site allocation).
IPV6_NETWORK_PREFIX = 56
#: The prefix length of the IPv6 subnet counted as one host (the one a device's addresses share).
IPV6_HOST_PREFIX = 64
#: The key of every request whose address is missing or malformed.
UNKNOWN = "unknown"


class AddressKeys:
    """What one client address counts as, from ONE parse of it: its ``address``, ``host`` and
    ``network`` keys (each as :func:`address_key`, :func:`host_key` and :func:`network_key`
    give it), for a caller that needs more than one of them."""

    __slots__ = ("_ip",)

    def __init__(self, address: str | None) -> None:
        self._ip = parse_ip(address)

    @property
    def address(self) -> str:
        """The normalised address, or ``"unknown"``."""
        return str(self._ip) if self._ip is not None else UNKNOWN

    @property
    def host(self) -> str:
        """The address (IPv4) or its /64 (IPv6), or ``"unknown"``."""
        ip = self._ip
        if ip is None:
            return UNKNOWN
        return str(ip) if ip.version == 4 else _network(ip, IPV6_HOST_PREFIX)

    @property
    def network(self) -> str:
        """The address's /24 (IPv4) or /56 (IPv6) network, or ``"unknown"``."""
        ip = self._ip
        if ip is None:
            return UNKNOWN
        return _network(ip, IPV4_NETWORK_PREFIX if ip.version == 4 else IPV6_NETWORK_PREFIX)


def _network(ip: IpAddress, prefix: int) -> str:
    """The ``prefix``-bit network of the parsed ``ip``, built from its number with the host
    bits cleared (not by formatting it as text and parsing that again)."""
    host_bits = ip.max_prefixlen - prefix
    first = int(ip) >> host_bits << host_bits
    if ip.version == 4:
        return str(ipaddress.IPv4Network((first, prefix)))
    return str(ipaddress.IPv6Network((first, prefix)))


def address_key(address: str | None) -> str:
    """The normalised address, or ``"unknown"``."""
    return AddressKeys(address).address


def host_key(address: str | None) -> str:
    """The address (IPv4) or its /64 (IPv6), or ``"unknown"``."""
    return AddressKeys(address).host


def network_key(address: str | None) -> str:
    """The address's /24 (IPv4) or /56 (IPv6) network, or ``"unknown"``."""
    return AddressKeys(address).network


def digest(*parts: str) -> str:
    """A fixed-length key for an account (tenant, user) or a recipient address."""
    joined = "\x00".join(part.strip().casefold() for part in parts)
    return hashlib.sha256(joined.encode("utf-8", "replace")).hexdigest()[:40]
