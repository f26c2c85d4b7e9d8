"""TrustedProxies: which address is the client."""

from __future__ import annotations

import pytest

from flask_authflow.audit._client_ip import TrustedProxies, parse_ip
from flask_authflow.errors import ConfigurationError

PROXIES = TrustedProxies(["10.0.0.0/8", "2001:db8:ffff::/48"])


def test_untrusted_peer_spoofed_header_is_ignored() -> None:
    assert PROXIES.resolve("198.51.100.9", ["1.2.3.4"]) == ("198.51.100.9", "peer")
    assert TrustedProxies.none().resolve("127.0.0.1", ["1.2.3.4"]) == ("127.0.0.1", "peer")


def test_no_peer_is_unknown() -> None:
    assert PROXIES.resolve(None, ["1.2.3.4"]) == (None, "unknown")
    assert PROXIES.resolve("", []) == (None, "unknown")
    assert PROXIES.resolve("unix:/tmp/sock", []) == (None, "unknown")


def test_trusted_peer_without_header_is_the_client() -> None:
    assert PROXIES.resolve("10.0.0.1", []) == ("10.0.0.1", "peer")
    assert PROXIES.resolve("10.0.0.1", ["  "]) == ("10.0.0.1", "peer")


def test_single_proxy() -> None:
    assert PROXIES.resolve("10.0.0.1", ["203.0.113.5"]) == ("203.0.113.5", "forwarded")


def test_multi_hop_chain_skips_trusted_hops_right_to_left() -> None:
    # client-supplied junk, the real client, then two of our proxies
    header = "6.6.6.6, 203.0.113.5, 10.1.1.1, 10.2.2.2"
    assert PROXIES.resolve("10.0.0.1", [header]) == ("203.0.113.5", "forwarded")


def test_several_header_values_are_one_list() -> None:
    assert PROXIES.resolve("10.0.0.1", ["6.6.6.6, 203.0.113.5", "10.1.1.1"]) == ("203.0.113.5", "forwarded")


def test_all_hops_trusted_gives_leftmost() -> None:
    assert PROXIES.resolve("10.0.0.1", ["10.9.9.9, 10.1.1.1"]) == ("10.9.9.9", "forwarded")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("203.0.113.5, garbage", ("10.0.0.1", "peer")),
        ("203.0.113.5, 10.1.1.1:8080", ("10.0.0.1", "peer")),
        ("203.0.113.5, [2001:db8::1]:443", ("10.0.0.1", "peer")),
        ("garbage, 10.1.1.1", ("10.1.1.1", "forwarded")),
        ("203.0.113.5,, 10.1.1.1", ("10.1.1.1", "forwarded")),
        ("203.0.113.5, unknown", ("10.0.0.1", "peer")),
        ("203.0.113.5, 010.1.1.1", ("10.0.0.1", "peer")),
        ("203.0.113.5, 10.1.1.1\n", ("10.0.0.1", "peer")),
        ("203.0.113.5, 300.1.1.1", ("10.0.0.1", "peer")),
    ],
)
def test_malformed_entries_stop_the_walk(header: str, expected: tuple[str, str]) -> None:
    assert PROXIES.resolve("10.0.0.1", [header]) == expected


def test_too_many_hops_never_reach_the_left() -> None:
    header = ", ".join(["6.6.6.6"] + ["10.0.0.2"] * 40)
    assert PROXIES.resolve("10.0.0.1", [header]) == ("10.0.0.2", "forwarded")


def test_32_trusted_hops_still_resolve() -> None:
    header = ", ".join(["203.0.113.5"] + ["10.0.0.2"] * 31)
    assert PROXIES.resolve("10.0.0.1", [header]) == ("203.0.113.5", "forwarded")


def test_oversized_header_ignored() -> None:
    header = "203.0.113.5, " + " " * 5000 + "10.0.0.2"
    assert PROXIES.resolve("10.0.0.1", [header]) == ("10.0.0.1", "peer")


def test_ipv6() -> None:
    assert PROXIES.resolve("2001:db8:ffff::1", ["2001:db8:1::7"]) == ("2001:db8:1::7", "forwarded")
    assert PROXIES.resolve("2001:db8:1::1", ["203.0.113.5"]) == ("2001:db8:1::1", "peer")
    assert PROXIES.resolve("2001:DB8:FFFF:0::1", ["203.0.113.5"]) == ("203.0.113.5", "forwarded")


def test_ipv4_mapped_addresses() -> None:
    assert PROXIES.resolve("::ffff:10.0.0.1", ["::ffff:203.0.113.5"]) == ("203.0.113.5", "forwarded")
    assert PROXIES.resolve("::ffff:198.51.100.1", ["1.2.3.4"]) == ("198.51.100.1", "peer")
    mapped = TrustedProxies(["::ffff:10.0.0.0/104"])
    assert mapped.resolve("10.0.0.1", ["203.0.113.5"]) == ("203.0.113.5", "forwarded")


def test_loopback_only() -> None:
    lo = TrustedProxies.loopback_only()
    assert lo.resolve("127.0.0.1", ["203.0.113.5"]) == ("203.0.113.5", "forwarded")
    assert lo.resolve("::1", ["203.0.113.5"]) == ("203.0.113.5", "forwarded")
    assert lo.resolve("192.168.1.1", ["203.0.113.5"]) == ("192.168.1.1", "peer")


@pytest.mark.parametrize("bad", ["10.0.0.1/8", "not-a-net", "10.0.0.0/33", "", "::1/129"])
def test_bad_cidrs_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        TrustedProxies([bad])


def test_non_string_cidr_refused() -> None:
    with pytest.raises(ConfigurationError):
        TrustedProxies([10])  # type: ignore[list-item]


def test_comma_separated_string_and_single_addresses() -> None:
    proxies = TrustedProxies("10.0.0.0/8, 192.0.2.1")
    assert proxies.is_trusted("192.0.2.1") and not proxies.is_trusted("192.0.2.2")
    assert proxies == TrustedProxies(["192.0.2.1/32", "10.0.0.0/8"])
    assert "10.0.0.0/8" in repr(proxies)


def test_parse_ip() -> None:
    assert str(parse_ip(" 1.2.3.4 ")) == "1.2.3.4"
    assert str(parse_ip("fe80::1%eth0")) == "fe80::1"
    assert parse_ip("1.2.3.4:80") is None
    assert parse_ip(None) is None
    assert parse_ip("x" * 100) is None


def test_x_real_ip_from_a_trusted_proxy_is_the_client() -> None:
    assert PROXIES.resolve("10.0.0.1", [], "203.0.113.5") == ("203.0.113.5", "forwarded")
    assert PROXIES.resolve("10.0.0.1", ["  "], " 2001:db8:1::7 ") == ("2001:db8:1::7", "forwarded")
    assert PROXIES.resolve("10.0.0.1", [], "::ffff:203.0.113.5") == ("203.0.113.5", "forwarded")


def test_x_real_ip_from_an_untrusted_peer_is_ignored() -> None:
    assert PROXIES.resolve("198.51.100.9", [], "203.0.113.5") == ("198.51.100.9", "peer")
    assert TrustedProxies.none().resolve("127.0.0.1", [], "203.0.113.5") == ("127.0.0.1", "peer")


def test_x_forwarded_for_wins_over_x_real_ip() -> None:
    assert PROXIES.resolve("10.0.0.1", ["203.0.113.5"], "198.51.100.77") == ("203.0.113.5", "forwarded")
    # A present but unusable X-Forwarded-For is not replaced by X-Real-IP either.
    assert PROXIES.resolve("10.0.0.1", ["garbage"], "198.51.100.77") == ("10.0.0.1", "peer")
    oversized = "203.0.113.5, " + " " * 5000 + "10.0.0.2"
    assert PROXIES.resolve("10.0.0.1", [oversized], "198.51.100.77") == ("10.0.0.1", "peer")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "garbage",
        "unknown",
        "203.0.113.5, 198.51.100.7",  # a repeated header, joined by the server
        "203.0.113.5:8080",
        "[2001:db8::1]:443",
        "010.1.1.1",
        "300.1.1.1",
        "203.0.113.5\n",
        "1" * 100,
    ],
)
def test_malformed_x_real_ip_is_ignored(bad: str) -> None:
    assert PROXIES.resolve("10.0.0.1", [], bad) == ("10.0.0.1", "peer")
