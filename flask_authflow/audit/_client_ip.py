"""Which address is the client: the TCP peer, or what trusted proxies say it is.

``X-Forwarded-For`` is written by whoever sends the request, so it is believed only
as far as the chain of proxies we trust: we start at the peer and walk the header from
the right, skipping addresses of trusted proxies; the first address that is not a
trusted proxy is the client. Anything malformed stops the walk and we keep the last
address we could vouch for, so garbage can never choose the client address.

``X-Real-IP`` (one address, as nginx's ``proxy_set_header X-Real-IP $remote_addr``
writes it) is read under the same rule: only from a trusted peer, only when the request
has no ``X-Forwarded-For`` (which wins when both are present), and only when it is one
bare address; anything else leaves the peer as the client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Literal

from flask_authflow.errors import ConfigurationError

__all__ = [
    "MAX_ADDRESS_CHARS",
    "MAX_FORWARDED_BYTES",
    "MAX_FORWARDED_HOPS",
    "IpSource",
    "TrustedProxies",
    "parse_ip",
]

IpSource = Literal["peer", "forwarded", "unknown"]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Hops of ``X-Forwarded-For`` examined at most.
MAX_FORWARDED_HOPS = 32
#: Longest ``X-Forwarded-For`` (all values together) that is parsed at all.
MAX_FORWARDED_BYTES = 4096


#: Longest text taken for one address (an IPv6 address with a scope id fits).
MAX_ADDRESS_CHARS = 64


def parse_ip(value: str | None) -> IpAddress | None:
    """A bare IPv4/IPv6 address (IPv4-mapped IPv6 unwrapped), or ``None`` if ``value`` is anything else."""
    if not value or not isinstance(value, str) or len(value) > MAX_ADDRESS_CHARS:
        return None
    text = value.strip(" \t")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(text.split("%", 1)[0])
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
    return address


def _refuse_everything(networks: list[IpNetwork]) -> None:
    """Raise when the networks, merged, cover a whole address family."""
    for version in (4, 6):
        family = [n for n in networks if n.version == version]
        merged = ipaddress.collapse_addresses(family)  # type: ignore[type-var]
        if any(net.prefixlen == 0 for net in merged):
            everything = "0.0.0.0/0" if version == 4 else "::/0"
            raise ConfigurationError(
                f"the trusted proxies cover every IPv{version} address ({everything}): any client could "
                "then forge its address in X-Forwarded-For; list only your reverse proxies' addresses"
            )


class TrustedProxies:
    """The address ranges whose ``X-Forwarded-For`` entries are believed.

    :param cidrs: networks (``"10.0.0.0/8"``) or single addresses; a comma-separated
        string is accepted too. Host bits set in a network are an error (a typo such as
        ``10.0.0.1/8`` must not silently trust a whole /8). A list that covers every
        address of a family (``0.0.0.0/0``, ``::/0``, ``::ffff:0:0/96``, or halves that
        add up to it) is refused: it would let any client write its own address.
    """

    __slots__ = ("_networks",)

    def __init__(self, cidrs: Iterable[str] | str = ()) -> None:
        if isinstance(cidrs, str):
            cidrs = [part for part in (p.strip() for p in cidrs.split(",")) if part]
        networks: list[IpNetwork] = []
        for cidr in cidrs:
            if not isinstance(cidr, str):
                raise ConfigurationError(f"trusted proxy entries must be strings, got {type(cidr).__name__}")
            try:
                network = ipaddress.ip_network(cidr.strip(), strict=True)
            except ValueError as exc:
                raise ConfigurationError(f"invalid trusted proxy network {cidr!r}: {exc}") from exc
            if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped:
                mapped = network.network_address.ipv4_mapped
                prefix = max(0, network.prefixlen - 96)
                networks.append(ipaddress.ip_network(f"{mapped}/{prefix}", strict=False))
            networks.append(network)
        _refuse_everything(networks)
        self._networks: tuple[IpNetwork, ...] = tuple(networks)

    @classmethod
    def loopback_only(cls) -> TrustedProxies:
        """Trust a proxy on this machine only (a development server behind a local proxy)."""
        return cls(["127.0.0.0/8", "::1/128"])

    @classmethod
    def none(cls) -> TrustedProxies:
        """Trust nobody: the peer address is always the client."""
        return cls([])

    @property
    def networks(self) -> tuple[IpNetwork, ...]:
        return self._networks

    def is_trusted(self, address: IpAddress | str | None) -> bool:
        ip = parse_ip(address) if isinstance(address, str) or address is None else address
        if ip is None:
            return False
        return any(ip.version == net.version and ip in net for net in self._networks)

    def resolve(
        self, peer: str | None, x_forwarded_for: Iterable[str] = (), x_real_ip: str | None = None
    ) -> tuple[str | None, IpSource]:
        """The client address and where it came from; never raises.

        ``x_real_ip`` is the ``X-Real-IP`` header: used only when the peer is trusted and
        ``x_forwarded_for`` is empty, and only when it is a single bare address (source
        ``"forwarded"``, as the proxy reported it).
        """
        peer_ip = parse_ip(peer)
        if peer_ip is None:
            return None, "unknown"
        if not self.is_trusted(peer_ip):
            return str(peer_ip), "peer"
        values = [v for v in x_forwarded_for if isinstance(v, str)] if x_forwarded_for else []
        header = ",".join(values)
        if not header.strip():
            real_ip = parse_ip(x_real_ip)
            return (str(real_ip), "forwarded") if real_ip is not None else (str(peer_ip), "peer")
        if len(header.encode("utf-8", "replace")) > MAX_FORWARDED_BYTES:
            return str(peer_ip), "peer"
        entries = header.split(",")
        current: IpAddress = peer_ip
        source: IpSource = "peer"
        for hops, entry in enumerate(reversed(entries)):
            if hops >= MAX_FORWARDED_HOPS:
                break
            ip = parse_ip(entry)
            if ip is None:
                break
            current, source = ip, "forwarded"
            if not self.is_trusted(ip):
                return str(ip), "forwarded"
        # Every examined hop was a trusted proxy, or the walk stopped: keep the last
        # address we reached through trusted hops only.
        return str(current), source

    def __repr__(self) -> str:
        return f"TrustedProxies({[str(n) for n in self._networks]!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrustedProxies) and set(self._networks) == set(other._networks)

    def __hash__(self) -> int:
        return hash(frozenset(self._networks))
