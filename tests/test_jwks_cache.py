"""The provider key cache: single-flight, debounce, max-age, unusable keys, provider outages."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError, TokenVerificationError, UnknownKeyId
from flask_authflow.federation._errors import Discovery, ProviderUnreachable
from flask_authflow.federation._http import HttpResponse, RequestsHttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache, cache_max_age
from flask_authflow.issuer import LocalIdpSigningKey
from flask_authflow.jose._keys import public_jwk
from flask_authflow.testing._provider import TestOpenIDProvider

JWKS_URI = "https://op.test/jwks"
ISS = "https://op.test"
CLIENT = "client-1"
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DEBOUNCE = timedelta(seconds=10)


class FakeProvider:
    """An HttpClient serving one JWK set; counts GETs, can fail or block on a gate."""

    timeout = (5.0, 10.0)

    def __init__(self, *keys: Any, cache_control: str | None = None) -> None:
        self.document: Any = {"keys": list(keys)}
        self.cache_control = cache_control
        self.status = 200
        self.content_type = "application/json"
        self.raw: bytes | None = None
        self.error: Exception | None = None
        self.gate: threading.Event | None = None
        self.calls = 0
        self._lock = threading.Lock()

    def serve(self, *keys: Mapping[str, Any]) -> None:
        self.document = {"keys": list(keys)}

    def get(self, url: str, *, headers: Mapping[str, str] | None = None) -> HttpResponse:
        assert url == JWKS_URI
        with self._lock:
            self.calls += 1
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        if self.error is not None:
            raise self.error
        response_headers = {"Content-Type": self.content_type}
        if self.cache_control is not None:
            response_headers["Cache-Control"] = self.cache_control
        body = self.raw if self.raw is not None else json.dumps(self.document).encode()
        return HttpResponse(self.status, response_headers, body, url)

    def post_form(self, url: str, data: Mapping[str, str], **_: Any) -> HttpResponse:
        raise AssertionError("the key cache only reads")

    def mount_into(self, session: Any) -> None:
        raise AssertionError("the key cache only reads")


def sign(key: LocalIdpSigningKey, clock: MockClock, **extra: Any) -> str:
    now = int(clock.now().timestamp())
    claims = {"iss": ISS, "aud": CLIENT, "sub": "alice", "iat": now, "exp": now + 300, **extra}
    header = {"alg": key.algorithm, "kid": key.kid, "typ": "JWT"}
    signing_input = (
        b64url_encode(json.dumps(header).encode()) + "." + b64url_encode(json.dumps(claims).encode())
    )
    return signing_input + "." + b64url_encode(key.sign(signing_input.encode("ascii")))


def verify(cache: ProviderKeyCache, token: str) -> str:
    claims = cache.verifier(["ES256", "RS256"]).verify(token, CLIENT, issuer=ISS)
    assert claims.sub is not None
    return claims.sub


def kids(cache: ProviderKeyCache) -> list[str | None]:
    return [key.kid for key in cache.snapshot().keys]


@pytest.fixture(scope="module")
def old_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256().with_key_id("old")


@pytest.fixture(scope="module")
def new_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256().with_key_id("new")


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START)


def cache_for(provider: FakeProvider, clock: MockClock, **options: Any) -> ProviderKeyCache:
    """A cache with a 10 s floor and keys without alg skipped unless ``options`` say otherwise."""
    options = {"debounce": DEBOUNCE, "require_alg": True, **options}
    return ProviderKeyCache(JWKS_URI, provider, clock=clock, **options)


# --- loading and verifying -----------------------------------------------------------------------


def test_load_fetches_the_keys_and_tokens_verify(old_key: LocalIdpSigningKey, clock: MockClock) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    assert not cache.loaded and kids(cache) == []
    cache.load()
    assert cache.loaded and kids(cache) == ["old"] and cache.fetch_count == provider.calls == 1
    assert verify(cache, sign(old_key, clock)) == "alice"
    assert cache.verifier(["ES256"]) is cache.verifier(("ES256",))  # one verifier per allowlist
    with pytest.raises(TokenVerificationError):  # the allowlist is the caller's, not the token's
        cache.verifier(["RS256"]).verify(sign(old_key, clock), CLIENT)
    with pytest.raises(ConfigurationError):
        cache.verifier("ES256")


def test_the_first_ensure_fresh_loads(old_key: LocalIdpSigningKey, clock: MockClock) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.ensure_fresh()
    cache.ensure_fresh()
    assert provider.calls == 1 and kids(cache) == ["old"]


def test_a_rotated_key_is_fetched_once_and_verifies(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.load()
    provider.serve(old_key.public_jwk(), new_key.public_jwk())
    clock.advance(DEBOUNCE)
    token = sign(new_key, clock)
    with pytest.raises(UnknownKeyId) as caught:
        verify(cache, token)
    assert cache.refresh_for_unknown_kid(caught.value.kid) is True
    assert verify(cache, token) == "alice" and verify(cache, sign(old_key, clock)) == "alice"
    assert provider.calls == 2
    assert cache.refresh_for_unknown_kid("new") is True and provider.calls == 2  # known: no fetch


# --- single-flight -------------------------------------------------------------------------------


def test_64_threads_meeting_one_unknown_kid_cause_one_fetch(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.load()
    provider.serve(new_key.public_jwk())
    provider.gate = threading.Event()
    clock.advance(DEBOUNCE)
    threads = 64
    start = threading.Barrier(threads)
    results: list[bool | None] = [None] * threads

    def meet(index: int) -> None:
        start.wait()
        results[index] = cache.refresh_for_unknown_kid("new")

    workers = [threading.Thread(target=meet, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 30
    while cache.waiting < threads - 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    waiting = cache.waiting
    provider.gate.set()
    for worker in workers:
        worker.join(timeout=30)
    assert waiting == threads - 1  # all but the one fetching waited for its result
    assert provider.calls == 2 and cache.fetch_count == 2  # the load, then exactly one refresh
    assert results == [True] * threads
    assert verify(cache, sign(new_key, clock)) == "alice"


def test_a_hung_fetch_does_not_hold_other_callers_forever(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock, wait_timeout=timedelta(milliseconds=50))
    cache.load()
    provider.serve(new_key.public_jwk())
    provider.gate = threading.Event()
    clock.advance(timedelta(hours=2))  # the keys are stale too
    leader_result: list[bool] = []
    leader = threading.Thread(target=lambda: leader_result.append(cache.refresh_for_unknown_kid("new")))
    leader.start()
    deadline = time.monotonic() + 30
    while provider.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert cache.refresh_for_unknown_kid("new") is False  # gave up waiting
    cache.ensure_fresh()  # stale keys still serve: no waiting, no second fetch
    assert verify(cache, sign(old_key, clock)) == "alice"
    assert provider.calls == 2
    provider.gate.set()
    leader.join(timeout=30)
    assert leader_result == [True] and cache.knows("new")


def test_stale_keys_serve_without_waiting_for_a_running_refresh(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock, wait_timeout=timedelta(minutes=5))
    cache.load()
    provider.serve(new_key.public_jwk())
    provider.gate = threading.Event()
    clock.advance(timedelta(hours=2))
    refresher = threading.Thread(target=cache.ensure_fresh)
    refresher.start()
    deadline = time.monotonic() + 30
    while provider.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    served: list[str] = []

    def read() -> None:
        cache.ensure_fresh()
        served.append(verify(cache, sign(old_key, clock)))

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=20)
    finished_while_fetching = not reader.is_alive()
    provider.gate.set()
    refresher.join(timeout=30)
    reader.join(timeout=30)
    assert finished_while_fetching and served == ["alice"]
    assert provider.calls == 2 and kids(cache) == ["new"]


# --- debounce ------------------------------------------------------------------------------------


def test_unknown_kids_inside_the_debounce_window_cause_no_fetch(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.load()
    provider.serve(old_key.public_jwk(), new_key.public_jwk())
    clock.advance(timedelta(seconds=9))
    assert cache.refresh_for_unknown_kid("new") is False and provider.calls == 1  # inside the window
    clock.advance(timedelta(seconds=1))
    assert cache.refresh_for_unknown_kid("new") is True and provider.calls == 2
    for made_up in ("a", "b", "c"):
        assert cache.refresh_for_unknown_kid(made_up) is False
    assert provider.calls == 2
    clock.advance(DEBOUNCE)
    assert cache.refresh_for_unknown_kid("d") is False and provider.calls == 3  # one per window
    assert cache.refresh_for_unknown_kid("e") is False and provider.calls == 3


def test_the_debounce_window_is_per_provider(old_key: LocalIdpSigningKey, clock: MockClock) -> None:
    first, second = FakeProvider(old_key.public_jwk()), FakeProvider(old_key.public_jwk())
    one, other = cache_for(first, clock), cache_for(second, clock)
    one.load()
    assert other.refresh_for_unknown_kid("old") is True and second.calls == 1
    assert one.refresh_for_unknown_kid("x") is False and first.calls == 1


def test_a_clock_set_back_does_not_lock_refreshes_out(
    old_key: LocalIdpSigningKey, new_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.load()
    provider.serve(new_key.public_jwk())
    clock.set(START - timedelta(hours=1))
    assert cache.refresh_for_unknown_kid("new") is True and provider.calls == 2
    assert cache.refresh_for_unknown_kid("newer") is False and provider.calls == 2


# --- max-age -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "fresh_for"),
    [
        ("max-age=120", timedelta(seconds=120)),
        ("public, max-age=300, must-revalidate", timedelta(seconds=300)),
        ('max-age="600"', timedelta(seconds=600)),
        ("max-age=900, max-age=60", timedelta(seconds=60)),  # the stricter one
        ("max-age=99999999", timedelta(days=1)),  # capped
        ("max-age=0", DEBOUNCE),  # never shorter than the debounce window
        ("no-store", DEBOUNCE),
        ("no-cache, max-age=600", DEBOUNCE),
        (None, timedelta(hours=1)),  # the default
        ("max-age=soon", timedelta(hours=1)),  # unreadable: the default
        ("private", timedelta(hours=1)),
    ],
)
def test_keys_are_refreshed_after_their_max_age(
    old_key: LocalIdpSigningKey, clock: MockClock, header: str | None, fresh_for: timedelta
) -> None:
    provider = FakeProvider(old_key.public_jwk(), cache_control=header)
    cache = cache_for(provider, clock)
    cache.load()
    assert cache.fresh_until == START + fresh_for
    clock.advance(fresh_for - timedelta(seconds=1))
    cache.ensure_fresh()
    assert provider.calls == 1
    clock.advance(timedelta(seconds=1))
    cache.ensure_fresh()
    assert provider.calls == 2 and cache.fresh_until == START + 2 * fresh_for


@pytest.mark.parametrize(
    ("header", "age"),
    [
        ("max-age=60", timedelta(seconds=60)),
        ("MAX-AGE=60", timedelta(seconds=60)),
        ("no-store", timedelta(0)),
        ("No-Cache", timedelta(0)),
        ("", None),
        (None, None),
        ("max-age=-5", None),
        ("max-age=1e3", None),
        ("max-age=٣", None),  # a non-ASCII digit
        ("s-maxage=60", None),
    ],
)
def test_cache_control_is_read_strictly(header: str | None, age: timedelta | None) -> None:
    assert cache_max_age(header) == age


# --- the provider is down ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        "unreachable",
        "status 503",
        "not an object",
        "no keys list",
        "keys not a list",
        "html",
        "no usable key",
    ],
)
def test_a_failed_refresh_keeps_the_known_keys(
    old_key: LocalIdpSigningKey, clock: MockClock, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = FakeProvider(old_key.public_jwk(), cache_control="max-age=60")
    cache = cache_for(provider, clock)
    cache.load()
    if failure == "unreachable":
        provider.error = ProviderUnreachable("op.test: connection failed")
    elif failure == "status 503":
        provider.status = 503
    elif failure == "not an object":
        provider.document = [old_key.public_jwk()]
    elif failure == "no keys list":
        provider.document = {"jwks": [old_key.public_jwk()]}
    elif failure == "keys not a list":
        provider.document = {"keys": old_key.public_jwk()}
    elif failure == "html":
        provider.content_type = "text/html"
        provider.raw = b"<html>maintenance</html>"
    else:
        provider.serve({**old_key.public_jwk(), "use": "enc"})
    clock.advance(timedelta(minutes=5))
    cache.ensure_fresh()  # no error: the stale keys stay in use
    assert provider.calls == 2 and cache.failure_count == 1 and cache.last_error
    assert kids(cache) == ["old"] and verify(cache, sign(old_key, clock)) == "alice"
    assert "JWKS fetch from https://op.test/jwks failed" in caplog.text
    assert "keeping the keys known" in caplog.text
    # Unknown kids: no fetch inside the window after the failure, one after it, still unknown.
    assert cache.refresh_for_unknown_kid("new") is False and provider.calls == 2
    clock.advance(DEBOUNCE)
    assert cache.refresh_for_unknown_kid("new") is False and provider.calls == 3
    assert cache.failure_count == 2 and kids(cache) == ["old"]
    with pytest.raises(ProviderUnreachable, match="could not fetch the provider's keys"):
        cache.load()  # an explicit load reports the failure
    assert kids(cache) == ["old"]


def test_a_provider_coming_back_is_fetched_again(old_key: LocalIdpSigningKey, clock: MockClock) -> None:
    provider = FakeProvider(old_key.public_jwk(), cache_control="max-age=60")
    cache = cache_for(provider, clock)
    cache.load()
    provider.status = 500
    clock.advance(timedelta(seconds=60))
    cache.ensure_fresh()
    assert cache.last_error == "the JWKS answered HTTP 500"
    clock.advance(timedelta(seconds=5))
    cache.ensure_fresh()  # inside the window of the failed attempt: no new attempt
    assert provider.calls == 2
    provider.status = 200
    clock.advance(timedelta(seconds=5))
    cache.ensure_fresh()
    assert provider.calls == 3 and cache.last_error is None and cache.failure_count == 1


def test_fetch_listeners_hear_of_every_fetch_and_its_outcome(
    old_key: LocalIdpSigningKey, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    provider = FakeProvider(old_key.public_jwk(), cache_control="max-age=60")
    cache = cache_for(provider, clock)
    heard: list[bool] = []

    def broken(ok: bool) -> None:
        raise RuntimeError("a listener bug")

    cache.add_fetch_listener(heard.append)
    cache.add_fetch_listener(heard.append)  # once per listener
    cache.add_fetch_listener(broken)  # logged, never fails the fetch
    cache.load()
    cache.ensure_fresh()  # fresh: no fetch, nothing to hear
    assert heard == [True]
    provider.status = 503
    clock.advance(timedelta(seconds=60))
    cache.ensure_fresh()
    assert cache.refresh_for_unknown_kid("new") is False  # inside the window: no fetch
    clock.advance(DEBOUNCE)
    provider.status = 200
    assert cache.refresh_for_unknown_kid("new") is False
    assert heard == [True, False, True] and provider.calls == 3
    assert "a JWKS fetch listener of https://op.test/jwks failed" in caplog.text


def test_a_failed_first_load_raises_and_is_retried_after_the_window(
    old_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    provider = FakeProvider(old_key.public_jwk())
    provider.error = ProviderUnreachable("op.test: timed out connecting")
    cache = cache_for(provider, clock)
    with pytest.raises(ProviderUnreachable, match=r"op\.test: timed out connecting"):
        cache.load()
    with pytest.raises(ProviderUnreachable, match="timed out connecting"):
        cache.ensure_fresh()  # nothing to serve; inside the window: no new request
    assert provider.calls == 1 and not cache.loaded
    assert cache.refresh_for_unknown_kid("old") is False and provider.calls == 1
    provider.error = None
    clock.advance(DEBOUNCE)
    cache.ensure_fresh()
    assert provider.calls == 2 and cache.loaded and verify(cache, sign(old_key, clock)) == "alice"


# --- unusable keys -------------------------------------------------------------------------------


def _coordinate(value: int, size: int) -> str:
    return b64url_encode(value.to_bytes(size, "big"))


def _ec_jwk(curve: ec.EllipticCurve, crv: str, size: int, alg: str) -> dict[str, Any]:
    numbers = ec.generate_private_key(curve).public_key().public_numbers()
    return {"kty": "EC", "crv": crv, "x": _coordinate(numbers.x, size), "y": _coordinate(numbers.y, size),
            "kid": crv, "alg": alg, "use": "sig"}  # fmt: skip


def unusable_keys() -> dict[str, Any]:
    enc = LocalIdpSigningKey.generate_rsa("RS256", 2048).with_key_id("enc").public_jwk()
    no_alg = LocalIdpSigningKey.generate_es256().with_key_id("no-alg").public_jwk()
    del no_alg["alg"]
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    return {
        "use=enc": {**enc, "use": "enc"},
        "oct": {"kty": "oct", "k": b64url_encode(b"k" * 32), "kid": "hmac", "alg": "HS256"},
        "secp256k1": _ec_jwk(ec.SECP256K1(), "secp256k1", 32, "ES256K"),
        "missing alg": no_alg,
        "RSA 1024": public_jwk(small, kid="small", alg="RS256"),
        "key_ops without verify": {**enc, "kid": "ops", "key_ops": ["encrypt"]},
        "alg none": {**enc, "kid": "none", "alg": "none"},
        "not an object": "a string",
        "EC without y": {"kty": "EC", "crv": "P-256", "x": "AAAA", "kid": "broken", "alg": "ES256"},
    }


def test_unusable_keys_are_skipped_and_the_good_one_kept(
    old_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    bad = unusable_keys()
    provider = FakeProvider(*bad.values(), old_key.public_jwk())
    cache = cache_for(provider, clock)
    cache.load()
    assert kids(cache) == ["old"] and cache.snapshot().skipped == len(bad)
    assert verify(cache, sign(old_key, clock)) == "alice"
    for key in bad.values():
        if isinstance(key, dict) and "kid" in key:
            assert cache.refresh_for_unknown_kid(key["kid"]) is False


def test_each_unusable_key_alone_is_skipped(old_key: LocalIdpSigningKey, clock: MockClock) -> None:
    for label, key in unusable_keys().items():
        cache = cache_for(FakeProvider(key, old_key.public_jwk()), clock)
        cache.load()
        assert kids(cache) == ["old"] and cache.snapshot().skipped == 1, label


def test_keys_without_alg_are_kept_when_not_required(clock: MockClock) -> None:
    key = LocalIdpSigningKey.generate_es256().with_key_id("no-alg")
    jwk = key.public_jwk()
    del jwk["alg"]
    cache = cache_for(FakeProvider(jwk), clock, require_alg=False)
    cache.load()
    assert kids(cache) == ["no-alg"] and verify(cache, sign(key, clock)) == "alice"
    with pytest.raises(ProviderUnreachable, match="no usable signature key"):
        cache_for(FakeProvider(jwk), clock).load()  # required here: nothing usable


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"debounce": timedelta(seconds=-1)},
        {"default_max_age": timedelta(0)},
        {"max_age_cap": timedelta(seconds=-5)},
        {"wait_timeout": timedelta(0)},
        {"debounce": 10},
    ],
)
def test_bad_durations_are_refused(clock: MockClock, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        cache_for(FakeProvider(), clock, **options)


@pytest.mark.parametrize("uri", ["http://op.test/jwks", "https://u:p@op.test/jwks", "ftp://op.test/jwks"])
def test_the_jwks_uri_must_be_https(clock: MockClock, uri: str) -> None:
    with pytest.raises(Discovery, match="jwks_uri"):
        ProviderKeyCache(uri, FakeProvider(), clock=clock)


# --- end to end with the in-process provider -----------------------------------------------------


def test_the_test_provider_rotating_its_key(clock: MockClock) -> None:
    provider = TestOpenIDProvider(algorithm="ES256", clock=clock)
    http = RequestsHttpClient(adapters=provider.http_adapters())
    cache = ProviderKeyCache(provider.discovery_document()["jwks_uri"], http, clock=clock, debounce=DEBOUNCE)
    cache.load()
    first = provider.id_token(CLIENT, "alice")
    assert cache.verifier(["ES256"]).verify(first, CLIENT, issuer=provider.issuer).sub == "alice"
    provider.rotate_key(keep_old=False)
    second = provider.id_token(CLIENT, "bob")
    with pytest.raises(UnknownKeyId):
        cache.verifier(["ES256"]).verify(second, CLIENT, issuer=provider.issuer)
    assert cache.refresh_for_unknown_kid(provider.current_kid) is False  # inside the window
    clock.advance(DEBOUNCE)
    assert cache.refresh_for_unknown_kid(provider.current_kid) is True
    assert cache.verifier(["ES256"]).verify(second, CLIENT, issuer=provider.issuer).sub == "bob"
    assert cache.fetch_count == 2
    # The provider says max-age=0: kept for the debounce window, then refreshed.
    assert cache.fresh_until == clock.now() + DEBOUNCE
