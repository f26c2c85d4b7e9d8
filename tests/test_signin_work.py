"""What a sign-in no longer repeats must still come out the same: the audit row's dict, the
client address's keys (parsed once per consumer), the session's record after a transition."""

from __future__ import annotations

import dataclasses
import ipaddress
import random
from datetime import UTC, datetime, timedelta

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.audit import AuditRecord
from flask_authflow._core.ports import PAIR_SEPARATOR
from flask_authflow._core.session import (
    AuthSession,
    AuthState,
    begin_flow,
    new_guest_record,
    pass_factor,
    start_login,
)
from flask_authflow._outcomes import InvalidCredential, Locked
from flask_authflow._throttle import Throttle, parse_limits
from flask_authflow._throttle.keys import UNKNOWN, AddressKeys, address_key, host_key, network_key
from flask_authflow.audit._context import resolve_audit_context
from flask_authflow.errors import Throttled
from flask_authflow.login._lockout import Lockout, LockoutPolicy, network_subject, pair_subject
from flask_authflow.login._service import AuthnService
from flask_authflow.sessions._request import RequestSession
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.test_throttle import RIGHT, CountingHasher, attempt

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
WRONG = "wrong password 1"


# --- the audit row's dict ------------------------------------------------------------------------


def test_an_audit_rows_dict_is_what_asdict_gave() -> None:
    """Same keys in the same order, equal values: the SQL insert, the spool and the chain's MAC
    read the same document."""
    row = AuditRecord(
        time=T0,
        event="factor_verify",
        status="failure",
        tenant="acme",
        user_id="u1",
        identifier="alice",
        session_id="ab" * 32,
        factor="password",
        client_ip="203.0.113.7",
        ip_source="forwarded",
        user_agent="UA\nforged",
        request_id="r1",
        reason="invalid_credential",
        device_id="d1",
        seq=7,
        mac="m",
        key_id="k",
    )
    document = row.to_dict()
    expected = dataclasses.asdict(row)
    assert list(document) == list(expected)
    assert document == expected
    assert document["user_agent"] == "UA\\u000aforged"  # escaped once, at construction
    assert AuditRecord(**document) == row


# --- the client address's keys -------------------------------------------------------------------

#: REMOTE_ADDR -> (audit field, throttle address key, lockout host, throttle/lockout network)
ADDRESSES = {
    "203.0.113.77": ("203.0.113.77", "203.0.113.77", "203.0.113.77", "203.0.113.0/24"),
    "::ffff:203.0.113.77": ("203.0.113.77", "203.0.113.77", "203.0.113.77", "203.0.113.0/24"),
    "2001:db8:abcd:12ff:1::1": (
        "2001:db8:abcd:12ff:1::1",
        "2001:db8:abcd:12ff:1::1",
        "2001:db8:abcd:12ff::/64",
        "2001:db8:abcd:1200::/56",
    ),
    "fe80::1%eth0": ("fe80::1", "fe80::1", "fe80::/64", "fe80::/56"),
    "not an address": (None, UNKNOWN, UNKNOWN, UNKNOWN),
    "": (None, UNKNOWN, UNKNOWN, UNKNOWN),
}


@pytest.mark.parametrize("remote", list(ADDRESSES))
def test_each_consumer_of_a_remote_addr_gets_the_keys_it_got_before(remote: str) -> None:
    audit_ip, by_address, host, network = ADDRESSES[remote]
    ctx = resolve_audit_context({"REMOTE_ADDR": remote})
    assert ctx.client_ip == audit_ip
    assert ctx.ip_source == ("peer" if audit_ip is not None else "unknown")
    # What the flows pass on is the audit field: every key comes from it, whether parsed once
    # for several keys or once per key.
    keys = AddressKeys(ctx.client_ip)
    assert (keys.address, keys.host, keys.network) == (by_address, host, network)
    assert (address_key(ctx.client_ip), host_key(ctx.client_ip), network_key(ctx.client_ip)) == (
        by_address,
        host,
        network,
    )
    pairs = [f"alice{PAIR_SEPARATOR}{host}", f"alice{PAIR_SEPARATOR}net:{network}"]
    assert Lockout.pairs("alice", ctx.client_ip) == pairs
    assert [pair_subject("alice", ctx.client_ip), network_subject("alice", ctx.client_ip)] == pairs


def test_networks_and_hosts_are_what_ipaddress_gives_for_the_address_text() -> None:
    """The keys are built from the parsed address's number; they equal the networks the text
    ``"<address>/<prefix>"`` names, for addresses all over both families."""
    rng = random.Random(30)
    addresses = [str(ipaddress.IPv4Address(rng.getrandbits(32))) for _ in range(200)]
    addresses += [str(ipaddress.IPv6Address(rng.getrandbits(128))) for _ in range(200)]
    addresses += ["0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::1"]
    for text in addresses:
        keys = AddressKeys(text)
        v4 = ipaddress.ip_address(text).version == 4
        network = ipaddress.ip_network(f"{text}/{24 if v4 else 56}", strict=False)
        host = text if v4 else str(ipaddress.ip_network(f"{text}/64", strict=False))
        assert (keys.address, keys.host, keys.network) == (text, host, str(network))


def _service(clock: MockClock, limits: dict[str, str | None]) -> tuple[AuthnService, InMemoryBackend]:
    backend = InMemoryBackend(clock=clock)
    add_user(backend, "acme", "alice", RIGHT, hasher=CountingHasher())
    service = AuthnService(
        backend,
        backend,
        hasher=CountingHasher(),
        clock=clock,
        lockout=LockoutPolicy(max_failures=3),
        throttle=Throttle(parse_limits("t", limits)),
        account_tokens=backend,
    )
    return service, backend


def test_a_mapped_address_shares_its_ipv4_lock() -> None:
    clock = MockClock()
    service, _ = _service(clock, {})
    forms = ["::ffff:203.0.113.66", "203.0.113.66", "::ffff:203.0.113.66"]
    outcomes = [attempt(service, clock, address, WRONG) for address in forms]
    assert outcomes == [InvalidCredential(), InvalidCredential(), Locked(clock.now() + timedelta(minutes=15))]
    # Another host of the same /24 still gets its answer: the host's pair locked, not the account.
    assert attempt(service, clock, "203.0.113.67", WRONG) == InvalidCredential()


def test_an_ipv6_64_is_one_host_and_garbage_one_unknown_host() -> None:
    clock = MockClock()
    service, _ = _service(clock, {})
    for address in ("2001:db8:1:2::a", "2001:db8:1:2::b"):
        assert attempt(service, clock, address, WRONG) == InvalidCredential()
    assert isinstance(attempt(service, clock, "2001:db8:1:2:ffff::1", WRONG), Locked)
    for address in ("garbage", None):
        assert attempt(service, clock, address, WRONG) == InvalidCredential()
    assert isinstance(attempt(service, clock, "1.2.3.4.5", WRONG), Locked)


@pytest.mark.parametrize(
    ("first", "second"),
    [("::ffff:198.51.100.9", "198.51.100.9"), ("not an address", None)],
)
def test_two_forms_of_one_address_spend_one_throttle_budget(first: str | None, second: str | None) -> None:
    clock = MockClock()
    service, backend = _service(clock, {"login.address": "2/minute"})
    for address in (first, second):
        assert attempt(service, clock, address, WRONG) == InvalidCredential()
    with pytest.raises(Throttled) as refused:
        attempt(service, clock, first, RIGHT)
    assert refused.value.scope == "login.address"
    assert [row.reason for row in backend.audit_rows if row.status == "throttled"] == ["login.address"]


def test_a_throttled_network_counts_every_address_of_it() -> None:
    clock = MockClock()
    service, _ = _service(clock, {"login.network": "2/minute"})
    for address in ("2001:db8:abcd:1201::1", "2001:db8:abcd:12ff::1"):  # one /56
        assert attempt(service, clock, address, WRONG) == InvalidCredential()
    with pytest.raises(Throttled) as refused:
        attempt(service, clock, "2001:db8:abcd:1200::9", RIGHT)
    assert refused.value.scope == "login.network"


# --- the session's record after a transition -----------------------------------------------------


def test_start_login_with_its_flow_is_start_login_then_begin_flow() -> None:
    guest = new_guest_record(T0, sid="s")
    flow = {"identifier": "alice", "tx": "t1"}
    both = start_login(guest, tenant="acme", user_id="u1", factors=["password"], now=T0, flow=flow)
    assert both == begin_flow(
        start_login(guest, tenant="acme", user_id="u1", factors=["password"], now=T0), flow
    )
    assert both.flow == flow and both.flow is not flow
    earlier = begin_flow(guest, {"old": 1})
    assert start_login(earlier, tenant="acme", user_id="u1", factors=["password"], now=T0).flow is None


def test_a_transition_binds_rotates_and_keeps_the_data_in_one_step() -> None:
    sids = iter(["second", "third"])
    session = AuthSession(
        new_guest_record(T0, sid="first"),
        new=False,
        request_fingerprint="fp",
        sid_factory=lambda: next(sids),
    )
    session.request_user_agent = "Mozilla/5.0\tTest"
    session["cart"] = [1, 2]
    began = session.transition(
        lambda r: start_login(r, tenant="acme", user_id="u1", factors=["password"], now=T0, flow={"k": "v"})
    )
    assert (began.sid, began.fingerprint, began.device) == ("second", "fp", "Mozilla/5.0 Test")
    assert began.flow == {"k": "v"} and began.custom == {"cart": [1, 2]}
    assert session.record == began and session.dead_sids == ["first"]
    passed = session.transition(lambda r: pass_factor(r, "password", now=T0))
    assert (passed.state, passed.sid, passed.fingerprint) == (AuthState.AUTHENTICATED, "third", "fp")
    assert session.dead_sids == ["first", "second"]
    # A change of the flow alone keeps the id; the data written meanwhile is in the record.
    session["theme"] = "dark"
    flowed = session.transition(lambda r: begin_flow(r, {"x": 1}))
    assert flowed.sid == "third" and flowed.custom == {"cart": [1, 2], "theme": "dark"}
    assert session.record == flowed and session.dead_sids == ["first", "second"]


def test_the_record_follows_every_change_of_the_data_and_of_the_record() -> None:
    session = RequestSession(
        new_guest_record(T0, sid="s"),
        new=False,
        request_fingerprint="fp",
        custom_limit=1024,
        cookie_sent=True,
    )
    assert session.record.custom == {}
    session["n"] = 1
    assert session.record.custom == {"n": 1}
    session["n"] = True  # equal to 1, yet another value: the record has the new one
    assert session.record.custom["n"] is True
    session["items"] = []
    session["items"].append("x")  # a nested change, which no callback sees
    assert session.record.custom == {"n": True, "items": ["x"]}
    snapshot = session.snapshot()
    del session["n"]
    assert session.record.custom == {"items": ["x"]}
    dict.clear(session)  # as the interface drops data over the size limit
    assert session.record.custom == {}
    session.restore(snapshot)
    assert session.record.custom == {"n": True, "items": ["x"]}
    session.rebind("fp2")  # the interface assigns a new record
    assert session.record.fingerprint == "fp2"
    assert session.record.custom == {"n": True, "items": ["x"]}
    session.rotate_id()
    assert session.record.sid != "s" and session.dead_sids == ["s"]
