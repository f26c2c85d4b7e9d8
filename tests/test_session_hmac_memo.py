"""The remembered HMAC answers of ``AuthFlowSessionInterface``.

An interface remembers which cookie values verify, and under which of its keys
(``_remembered_verification``), and each of its keys remembers the fingerprints of the
User-Agent strings it has seen (``_KeySlot.remembered_fingerprint``), so a client's
requests cost no HMAC after its first. These tests check that a cookie is verified once
for all its requests, and that nothing remembered weakens a check: forged, oversized and
non-ASCII cookies are refused on every request, memos are per interface (a key removed is
a cookie refused), a session stays bound to its User-Agent, and both memos are bounded.
"""

from __future__ import annotations

import hmac
from typing import Any

import pytest
from flask import Flask

from flask_authflow.clock import MockClock
from flask_authflow.session.crypto import derive_key
from flask_authflow.session.interface import (
    FINGERPRINT_MEMO_MAX_CHARS,
    FINGERPRINT_PURPOSE,
    HMAC_MEMO_SIZE,
    MAX_COOKIE_LENGTH,
    AuthFlowSessionInterface,
    _CookieSigner,
)
from tests.test_session_interface import (
    KEY,
    OLD_KEY,
    OTHER_KEY,
    UA,
    SpyStore,
    _flip,
    _signed,
    client_for,
    cookie_value,
    make_app,
    raw_get,
    set_cookies,
    sid_of,
)

OTHER_UA = "Mozilla/5.0 (Macintosh) OtherBrowser/2.0"


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def store(clock: MockClock) -> SpyStore:
    return SpyStore(clock)


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids each signature check ran for (one per key tried), in order."""
    calls: list[str] = []
    original = _CookieSigner.verify_decoded

    def counting(self: _CookieSigner, value: str, signature: bytes) -> bool:
        calls.append(value)
        return original(self, value, signature)

    monkeypatch.setattr(_CookieSigner, "verify_decoded", counting)
    return calls


@pytest.fixture
def interface(store: SpyStore, clock: MockClock, verifications: list[str]) -> AuthFlowSessionInterface:
    return AuthFlowSessionInterface(store, KEY, clock=clock)


@pytest.fixture
def app(interface: AuthFlowSessionInterface, clock: MockClock) -> Flask:
    return make_app(interface, clock)


def memo_size(interface: AuthFlowSessionInterface) -> int:
    return int(interface._remembered_verification.cache_info().currsize)


def fingerprint_memo(interface: AuthFlowSessionInterface, slot: int = 0) -> Any:
    return interface._slots[slot].remembered_fingerprint


def logged_in_cookie(app: Flask, ua: str = UA, **custom: str) -> str:
    """A new login (with ``custom`` data set after it); its cookie, never sent yet."""
    client = client_for(app, ua)
    assert client.post("/login").status_code == 200
    for key, value in custom.items():
        assert client.post(f"/set/{key}/{value}").status_code == 200
    return cookie_value(client)


def body(app: Flask, cookie: str, ua: str = UA) -> dict[str, Any]:
    response = raw_get(app, cookie, ua=ua)
    assert response.status_code == 200
    answer = response.get_json()
    assert isinstance(answer, dict)
    return answer


def assert_guest(app: Flask, cookie: str, ua: str = UA) -> None:
    response = raw_get(app, cookie, ua=ua)
    answer = response.get_json()
    assert answer == {"state": "guest", "user": None, "mismatch": False, "new": True, "custom": {}}
    assert set_cookies(response) == []


# --- one HMAC per cookie ----------------------------------------------------------------------------


def test_a_cookie_is_verified_once_for_all_its_requests(
    app: Flask, interface: AuthFlowSessionInterface, verifications: list[str]
) -> None:
    first = logged_in_cookie(app, who="first")
    second = logged_in_cookie(app, who="second")
    assert verifications == [sid_of(first), sid_of(second)]  # the /set requests of each login
    del verifications[:]
    hits = interface._remembered_verification.cache_info().hits
    for _ in range(4):
        answer = body(app, first)
        assert answer["state"] == "authenticated" and answer["user"] == "alice"
        assert answer["custom"] == {"who": "first"}
        answer = body(app, second)
        assert answer["state"] == "authenticated" and answer["custom"] == {"who": "second"}
    assert verifications == []  # both remembered since their first request
    assert interface._remembered_verification.cache_info().hits == hits + 8
    third = logged_in_cookie(app, who="third")
    assert verifications == [sid_of(third)]  # a new cookie: one HMAC more
    for _ in range(3):
        assert body(app, third)["custom"] == {"who": "third"}
        assert body(app, first)["custom"] == {"who": "first"}
    assert verifications == [sid_of(third)]


def test_a_cookie_verified_once_still_loads_the_store_every_time(
    app: Flask, store: SpyStore, verifications: list[str]
) -> None:
    """The memo answers the signature, never the session: a logout elsewhere is seen."""
    cookie = logged_in_cookie(app)
    assert body(app, cookie)["state"] == "authenticated"
    store.delete(sid_of(cookie))  # a logout on another device
    for _ in range(2):
        answer = body(app, cookie)
        assert answer["state"] == "guest" and answer["user"] is None and answer["new"] is True
    assert verifications == [sid_of(cookie)]


# --- forged, oversized and non-ASCII cookies ---------------------------------------------------------------

FORGERIES = {
    "wrong-signature": lambda value: _flip(value, -5),
    "signature-of-another-key": lambda value: _signed(OTHER_KEY, sid_of(value)),
    "tampered-sid": lambda value: _flip(value, 3),
    "signature-of-another-sid": lambda value: sid_of(value) + "." + _signed(KEY, "B" * 43).rpartition(".")[2],
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_cookie_is_refused_every_time_it_is_sent(
    app: Flask, interface: AuthFlowSessionInterface, store: SpyStore, verifications: list[str], name: str
) -> None:
    genuine = logged_in_cookie(app)
    assert body(app, genuine)["state"] == "authenticated"  # remembered
    forged = FORGERIES[name](genuine)
    assert forged != genuine and len(forged) == len(genuine)
    saves = store.saves
    for _ in range(3):
        assert_guest(app, forged)
        assert interface._verify_cookie(forged) is None
    assert store.saves == saves
    assert body(app, genuine)["state"] == "authenticated"
    verified = interface._verify_cookie(genuine)
    assert verified is not None and verified[0] == sid_of(genuine) and verified[1] is interface._current


def test_the_genuine_cookie_remembered_first_does_not_make_a_forgery_pass(
    app: Flask, interface: AuthFlowSessionInterface
) -> None:
    """The same session id under every wrong signature, after the right one was remembered."""
    genuine = logged_in_cookie(app)
    assert body(app, genuine)["state"] == "authenticated"
    sid, _, signature = genuine.rpartition(".")
    for index in range(len(signature)):
        forged = f"{sid}.{_flip(signature, index)}"
        assert interface._verify_cookie(forged) is None
        assert interface._verify_cookie(forged) is None  # remembered as refused
    assert body(app, genuine)["state"] == "authenticated"


def test_oversized_and_non_ascii_cookies_never_enter_the_memo(
    app: Flask, interface: AuthFlowSessionInterface, verifications: list[str]
) -> None:
    genuine = logged_in_cookie(app)
    assert body(app, genuine)["state"] == "authenticated"
    del verifications[:]
    size = memo_size(interface)
    refused = [
        genuine + "A" * (MAX_COOKIE_LENGTH - len(genuine) + 1),  # one character too long
        _signed(KEY, "A" * MAX_COOKIE_LENGTH),  # a valid signature, too long
        genuine + "A" * 10 * 1024,
        sid_of(genuine)[:-1] + "é." + genuine.rpartition(".")[2],
        sid_of(genuine) + "." + "é" * 43,
        "",
    ]
    for cookie in refused:
        for _ in range(2):
            if cookie:
                assert_guest(app, cookie)
            assert interface._verify_cookie(cookie) is None
    assert memo_size(interface) == size
    assert verifications == []  # refused unread: no HMAC either
    # the bound is inclusive: a value of exactly MAX_COOKIE_LENGTH is read (and refused)
    longest = "A" * MAX_COOKIE_LENGTH
    assert interface._verify_cookie(longest) is None
    assert memo_size(interface) == size + 1
    assert body(app, genuine)["state"] == "authenticated"


# --- key rotation: memos are per interface -------------------------------------------------------------


def test_a_previous_key_verifies_only_on_the_interface_that_keeps_it(
    store: SpyStore, clock: MockClock, verifications: list[str]
) -> None:
    old_app = make_app(AuthFlowSessionInterface(store, OLD_KEY, clock=clock), clock)
    old_cookie = logged_in_cookie(old_app)
    sid = sid_of(old_cookie)

    current_only = AuthFlowSessionInterface(store, KEY, clock=clock)
    current_app = make_app(current_only, clock)
    assert_guest(current_app, old_cookie)  # its refusal remembered by this interface only

    rotated = current_only.with_previous_signing_key(OLD_KEY)
    rotated_app = make_app(rotated, clock)
    del verifications[:]
    response = raw_get(rotated_app, old_cookie)
    assert response.get_json()["state"] == "authenticated"
    assert verifications == [sid, sid]  # the current key, then the previous one
    (header,) = set_cookies(response)
    resigned = header.split(";")[0].partition("=")[2]
    assert resigned == _signed(KEY, sid)  # re-signed with the current key
    verified = rotated._verify_cookie(old_cookie)
    assert verified is not None and verified == (sid, rotated._slots[1])

    # The interface without the previous key still refuses it, on every request, although
    # another interface remembers it as valid.
    for _ in range(3):
        assert_guest(current_app, old_cookie)
        assert current_only._verify_cookie(old_cookie) is None
    # The re-signed cookie works on both; on the rotated one it is not re-signed again.
    assert body(current_app, resigned)["state"] == "authenticated"
    response = raw_get(rotated_app, resigned)
    assert response.get_json()["state"] == "authenticated"
    assert set_cookies(response) == []
    # An interface that never had the previous key refuses the old cookie too.
    fresh = make_app(AuthFlowSessionInterface(store, KEY, clock=clock), clock)
    assert_guest(fresh, old_cookie)


# --- User-Agent fingerprints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ua",
    [
        UA,
        "",
        "Agent/1.0 (é; ☃)",
        "lone \udcff surrogate",
        "A" * FINGERPRINT_MEMO_MAX_CHARS,
        "A" * (FINGERPRINT_MEMO_MAX_CHARS + 1),
    ],
)
def test_a_fingerprint_is_the_hmac_of_the_user_agent(interface: AuthFlowSessionInterface, ua: str) -> None:
    slot = interface._current
    assert slot.fingerprint_key == derive_key(KEY, FINGERPRINT_PURPOSE)
    expected = hmac.digest(slot.fingerprint_key, ua.encode("utf-8", "surrogatepass"), "sha256").hex()
    before = fingerprint_memo(interface).cache_info()
    for _ in range(3):
        assert interface.fingerprint(ua) == expected
    after = fingerprint_memo(interface).cache_info()
    if len(ua) <= FINGERPRINT_MEMO_MAX_CHARS:
        assert after.currsize == before.currsize + 1
        assert after.hits == before.hits + 2
    else:  # fingerprinted every time, never remembered
        assert after.currsize == before.currsize
        assert after.hits == before.hits and after.misses == before.misses


def test_fingerprints_are_remembered_per_key(store: SpyStore, clock: MockClock) -> None:
    rotated = AuthFlowSessionInterface(store, KEY, clock=clock, previous_signing_keys=[OLD_KEY])
    current, previous = rotated._slots
    assert current.fingerprint(UA) != previous.fingerprint(UA)
    assert (
        previous.fingerprint(UA)
        == hmac.digest(derive_key(OLD_KEY, FINGERPRINT_PURPOSE), UA.encode(), "sha256").hex()
    )
    assert current.remembered_fingerprint is not previous.remembered_fingerprint
    # the previous key's fingerprint is the one an interface with that key as current made
    assert AuthFlowSessionInterface(store, OLD_KEY, clock=clock).fingerprint(UA) == previous.fingerprint(UA)
    assert rotated.fingerprint(None) == current.fingerprint("")


def test_a_remembered_fingerprint_does_not_unbind_a_session(
    app: Flask, interface: AuthFlowSessionInterface
) -> None:
    cookie = logged_in_cookie(app, ua=UA)
    fingerprint_of_other = interface.fingerprint(OTHER_UA)  # remembered before it is sent
    for _ in range(3):
        answer = body(app, cookie, ua=OTHER_UA)
        assert answer["state"] == "guest" and answer["user"] is None and answer["mismatch"] is True
        answer = body(app, cookie, ua=UA)
        assert answer["state"] == "authenticated" and answer["mismatch"] is False
    assert interface.fingerprint(OTHER_UA) == fingerprint_of_other
    assert fingerprint_memo(interface).cache_info().currsize >= 2


def test_a_long_user_agent_binds_without_being_remembered(
    app: Flask, interface: AuthFlowSessionInterface
) -> None:
    long_ua = "L" * (FINGERPRINT_MEMO_MAX_CHARS + 1)
    cookie = logged_in_cookie(app, ua=long_ua)
    size = fingerprint_memo(interface).cache_info().currsize
    for _ in range(2):
        assert body(app, cookie, ua=long_ua)["state"] == "authenticated"
        answer = body(app, cookie, ua=long_ua[:-1] + "M")
        assert answer["state"] == "guest" and answer["mismatch"] is True
    assert fingerprint_memo(interface).cache_info().currsize == size


# --- bounded ------------------------------------------------------------------------------------------


def test_the_memos_are_bounded_and_right_after_evictions(
    app: Flask, interface: AuthFlowSessionInterface, verifications: list[str]
) -> None:
    assert interface._remembered_verification.cache_info().maxsize == HMAC_MEMO_SIZE
    assert fingerprint_memo(interface).cache_info().maxsize == HMAC_MEMO_SIZE
    genuine = logged_in_cookie(app)
    assert body(app, genuine)["state"] == "authenticated"
    del verifications[:]
    client = app.test_client(use_cookies=False)
    for number in range(HMAC_MEMO_SIZE + 10):
        forged = _signed(OTHER_KEY, f"{number:043d}")
        response = client.get(
            "/", headers={"Cookie": f"authflow_session={forged}", "User-Agent": f"UA/{number}"}
        )
        assert response.get_json()["state"] == "guest"
    assert len(verifications) == HMAC_MEMO_SIZE + 10
    assert memo_size(interface) <= HMAC_MEMO_SIZE
    assert fingerprint_memo(interface).cache_info().currsize <= HMAC_MEMO_SIZE
    # the genuine cookie and the fingerprint of its User-Agent were evicted: checked afresh
    del verifications[:]
    assert body(app, genuine)["state"] == "authenticated"
    assert verifications == [sid_of(genuine)]
    assert body(app, genuine, ua=OTHER_UA)["mismatch"] is True
    assert interface._verify_cookie(_signed(OTHER_KEY, f"{0:043d}")) is None
