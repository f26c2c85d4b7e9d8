"""LocalIdpFixture: the test issuer, its builders, JWT-SVIDs and issuance listeners."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_decode
from flask_authflow.errors import ConfigurationError, IssuanceError, TokenVerificationError, UnknownKeyId
from flask_authflow.issuer import LocalIdpSigningKey, MintClaims
from flask_authflow.jose import JwtVerifier
from flask_authflow.testing._fixture import (
    IssuanceEvent,
    IssuanceListener,
    LocalIdpFixture,
    MockIssuanceListener,
)

ISS = "https://issuer.test"
NOW = datetime(2026, 2, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def rsa_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_rsa("RS256", 2048)


@pytest.fixture
def clock() -> MockClock:
    return MockClock(NOW)


@pytest.fixture
def fixture(rsa_key: LocalIdpSigningKey, clock: MockClock) -> LocalIdpFixture:
    return LocalIdpFixture.with_signing_key(ISS, rsa_key, clock=clock)


def claims(minutes: int = 5) -> MintClaims:
    return MintClaims("svc", NOW + timedelta(minutes=minutes)).with_audience("api")


def header(token: str) -> dict[str, Any]:
    return json.loads(b64url_decode(token.split(".")[0]))


def payload(token: str) -> dict[str, Any]:
    return json.loads(b64url_decode(token.split(".")[1]))


def test_default_fixture_is_rsa_2048() -> None:
    fx = LocalIdpFixture(ISS)
    key = fx.idp.loaded_keys().current
    assert key.algorithm == "RS256"
    assert key.public_key().key_size == 2048  # type: ignore[union-attr]
    assert fx.verifier_algorithms() == ["RS256"]
    token = fx.mint(MintClaims("svc", datetime.now(UTC) + timedelta(minutes=1)).with_audience("api"))
    assert fx.verifier().verify(token, "api", issuer=ISS).sub == "svc"


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "ES256"])
def test_with_algorithm(alg: str, clock: MockClock) -> None:
    fx = LocalIdpFixture.with_algorithm(ISS, alg, clock=clock)
    token = fx.mint(claims())
    assert header(token)["alg"] == alg
    assert fx.verifier_algorithms() == [alg]
    assert fx.verifier().verify(token, "api").alg == alg


@pytest.mark.parametrize("alg", ["HS256", "none", "ES512", "rs256"])
def test_with_bad_algorithm(alg: str) -> None:
    with pytest.raises(ConfigurationError):
        LocalIdpFixture.with_algorithm(ISS, alg)


def test_with_signing_key_is_stable(rsa_key: LocalIdpSigningKey, clock: MockClock) -> None:
    a = LocalIdpFixture.with_signing_key(ISS, rsa_key, clock=clock)
    b = LocalIdpFixture.with_signing_key(ISS, rsa_key, clock=clock)
    c = claims().with_jwt_id("fixed")
    assert a.mint(c) == b.mint(c)  # RSA PKCS#1 v1.5 is deterministic
    assert a.current_kid == rsa_key.kid


def test_jwks_handle_is_shared_and_updated_in_place(fixture: LocalIdpFixture, clock: MockClock) -> None:
    handle = fixture.jwks_handle()
    verifier = JwtVerifier(handle, clock=clock).with_algorithms(["RS256", "ES256"])
    old = fixture.mint(claims())
    new_key = LocalIdpSigningKey.generate_es256()
    fixture.rotate_signing_key(new_key)
    assert fixture.jwks_handle() is handle
    new = fixture.mint(claims())
    assert header(new)["kid"] == new_key.kid
    assert verifier.verify(old, "api").alg == "RS256"  # old key stays in the JWKS
    assert verifier.verify(new, "api").alg == "ES256"
    assert fixture.verifier_algorithms() == ["ES256", "RS256"]


def test_with_historical_signing_key(fixture: LocalIdpFixture, clock: MockClock) -> None:
    old = LocalIdpSigningKey.generate_es256()
    original = fixture
    handle = fixture.jwks_handle()
    fixture = fixture.with_historical_signing_key(old)
    # A builder returns a new fixture with its own handle; the original is unchanged.
    assert fixture is not original and fixture.jwks_handle() is not handle
    assert [k.kid for k in handle.snapshot().keys] == [original.current_kid]
    assert [k["kid"] for k in original.jwks()["keys"]] == [original.current_kid]
    kids = [k["kid"] for k in fixture.jwks()["keys"]]
    assert kids == [fixture.current_kid, old.kid]
    # Tokens signed by the historical key still verify; new tokens use the current key.
    other = LocalIdpFixture.with_signing_key(ISS, old, clock=clock)
    assert fixture.verifier().verify(other.mint(claims()), "api").kid == old.kid
    assert header(fixture.mint(claims()))["kid"] == fixture.current_kid


def test_with_extra_public_jwk(fixture: LocalIdpFixture, clock: MockClock) -> None:
    outsider = LocalIdpSigningKey.generate_es256().with_key_id("outsider")
    fixture = fixture.with_extra_public_jwk(outsider.public_jwk())
    assert "outsider" in [k["kid"] for k in fixture.jwks()["keys"]]
    assert "ES256" in fixture.verifier_algorithms()
    other = LocalIdpFixture.with_signing_key(ISS, outsider, clock=clock)
    assert fixture.verifier().verify(other.mint(claims()), "api").kid == "outsider"
    # It survives builders that rebuild the issuer.
    fixture = fixture.with_key_id("renamed")
    assert "outsider" in [k["kid"] for k in fixture.jwks()["keys"]]


def test_with_key_id(fixture: LocalIdpFixture, rsa_key: LocalIdpSigningKey) -> None:
    original = fixture
    original_kid = fixture.current_kid
    fixture = fixture.with_key_id("test-key-1")
    assert fixture.current_kid == "test-key-1"
    assert header(fixture.mint(claims()))["kid"] == "test-key-1"
    assert [k.kid for k in fixture.jwks_handle().snapshot().keys] == ["test-key-1"]
    assert original.current_kid == original_kid  # the original is unchanged
    assert header(original.mint(claims()))["kid"] == original_kid
    with pytest.raises(Exception, match="invalid key id"):
        fixture.with_key_id("../x")


def test_with_max_ttl(fixture: LocalIdpFixture) -> None:
    fixture.mint(claims(60 * 24))  # no cap by default
    fixture = fixture.with_max_ttl(timedelta(minutes=10))
    fixture.mint(claims(10))
    with pytest.raises(IssuanceError, match="lifetime"):
        fixture.mint(claims(11))
    with pytest.raises(IssuanceError, match="lifetime"):
        fixture.mint_jwt_svid("example.org", "svc", "t", "api", timedelta(minutes=11))
    # The cap survives a rebuild.
    fixture = fixture.with_key_id("again")
    with pytest.raises(IssuanceError):
        fixture.mint(claims(11))


def test_mint_jwt_svid(fixture: LocalIdpFixture) -> None:
    token = fixture.mint_jwt_svid(
        "example.org", "billing", "acme", "spiffe://example.org/api", timedelta(minutes=5)
    )
    body = payload(token)
    assert body["sub"] == "spiffe://example.org/billing/acme"
    assert body["aud"] == "spiffe://example.org/api"
    assert body["exp"] == int(NOW.timestamp()) + 300
    result = fixture.verifier().verify(token, "spiffe://example.org/api", issuer=ISS)
    assert result.sub == "spiffe://example.org/billing/acme"
    several = fixture.mint_jwt_svid("example.org", "billing", "acme", ["a", "b"], timedelta(minutes=5))
    assert payload(several)["aud"] == ["a", "b"]


@pytest.mark.parametrize(
    ("trust_domain", "service", "tenant", "audience", "ttl"),
    [
        ("", "svc", "t", "api", timedelta(minutes=1)),
        ("Example.org", "svc", "t", "api", timedelta(minutes=1)),
        ("example.org/x", "svc", "t", "api", timedelta(minutes=1)),
        ("example.org", "", "t", "api", timedelta(minutes=1)),
        ("example.org", "a/b", "t", "api", timedelta(minutes=1)),
        ("example.org", "..", "t", "api", timedelta(minutes=1)),
        ("example.org", "svc", ".", "api", timedelta(minutes=1)),
        ("example.org", "svc", "t?x", "api", timedelta(minutes=1)),
        ("example.org", "svc", "t", "", timedelta(minutes=1)),
        ("example.org", "svc", "t", [], timedelta(minutes=1)),
        ("example.org", "svc", "t", None, timedelta(minutes=1)),
        ("example.org", "svc", "t", "api", timedelta(0)),
        ("example.org", "svc", "t", "api", -5),
    ],
)
def test_mint_jwt_svid_validation(
    fixture: LocalIdpFixture, trust_domain: str, service: str, tenant: str, audience: Any, ttl: Any
) -> None:
    with pytest.raises(IssuanceError):
        fixture.mint_jwt_svid(trust_domain, service, tenant, audience, ttl)


def test_issuance_listener(fixture: LocalIdpFixture) -> None:
    listener = MockIssuanceListener()
    assert isinstance(listener, IssuanceListener)
    fixture = fixture.with_issuance_listener(listener)
    fixture.mint(claims())
    fixture.mint_jwt_svid("example.org", "svc", "t", "api", timedelta(minutes=1))
    events = listener.events
    assert len(events) == 2 == len(listener)
    first = events[0]
    assert isinstance(first, IssuanceEvent)
    assert first.issuer == ISS
    assert first.key_id == fixture.current_kid
    assert first.algorithm == "RS256"
    assert first.claims["sub"] == "svc" and first.claims["iss"] == ISS and "jti" in first.claims
    assert events[1].claims["sub"] == "spiffe://example.org/svc/t"
    with pytest.raises(AttributeError):
        first.key_id = "x"  # type: ignore[misc]
    listener.clear()
    assert listener.events == []


def test_failed_mint_emits_no_event(fixture: LocalIdpFixture) -> None:
    listener = MockIssuanceListener()
    fixture = fixture.with_issuance_listener(listener)
    with pytest.raises(IssuanceError):
        fixture.mint(MintClaims("svc", NOW - timedelta(seconds=1)))
    assert listener.events == []


def test_listener_must_have_on_issuance(fixture: LocalIdpFixture) -> None:
    with pytest.raises(ConfigurationError):
        fixture.with_issuance_listener(object())  # type: ignore[arg-type]


def test_mock_listener_is_thread_safe(fixture: LocalIdpFixture) -> None:
    listener = MockIssuanceListener()
    fixture = fixture.with_issuance_listener(listener)
    threads = [threading.Thread(target=lambda: [fixture.mint(claims()) for _ in range(20)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(listener.events) == 80
    assert len({e.claims["jti"] for e in listener.events}) == 80


def test_tampered_and_foreign_tokens_fail(fixture: LocalIdpFixture, clock: MockClock) -> None:
    token = fixture.mint(claims())
    head, body, sig = token.split(".")
    forged_body = body[:-2] + ("AA" if body[-2:] != "AA" else "BA")
    with pytest.raises(TokenVerificationError):
        fixture.verifier().verify(f"{head}.{forged_body}.{sig}", "api")
    stranger = LocalIdpFixture.with_algorithm(ISS, "RS256", clock=clock)
    with pytest.raises(UnknownKeyId):
        fixture.verifier().verify(stranger.mint(claims()), "api")
    es_stranger = LocalIdpFixture.with_algorithm(ISS, "ES256", clock=clock)
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        fixture.verifier().verify(es_stranger.mint(claims()), "api")


def test_mock_clock_drives_times(fixture: LocalIdpFixture, clock: MockClock) -> None:
    token = fixture.mint(claims(1))
    assert payload(token)["iat"] == int(NOW.timestamp())
    clock.advance(timedelta(minutes=3))
    with pytest.raises(TokenVerificationError, match="expired"):
        fixture.verifier().verify(token, "api")
    later = MockClock(NOW + timedelta(hours=1))
    fixture = fixture.with_clock(later)
    assert payload(fixture.mint(claims(61)))["iat"] == int(later.now().timestamp())


def test_repr(fixture: LocalIdpFixture) -> None:
    assert ISS in repr(fixture) and "PRIVATE" not in repr(fixture)


def test_builders_leave_the_original_fixture_unchanged(fixture: LocalIdpFixture, clock: MockClock) -> None:
    listener = MockIssuanceListener()
    capped = fixture.with_max_ttl(timedelta(minutes=1)).with_issuance_listener(listener)
    later = MockClock(clock.now() + timedelta(minutes=2))
    moved = fixture.with_clock(later)
    assert capped is not fixture and moved is not fixture
    fixture.mint(claims(30))  # no cap on the original
    assert len(listener) == 0  # and no listener
    with pytest.raises(IssuanceError):
        capped.mint(claims(30))
    capped.mint(claims(1))
    assert len(listener) == 1
    assert payload(moved.mint(claims()))["iat"] == int(later.now().timestamp())
    assert payload(fixture.mint(claims()))["iat"] == int(clock.now().timestamp())


def test_a_handle_taken_after_the_last_builder_follows_rotation(
    fixture: LocalIdpFixture, clock: MockClock
) -> None:
    early = fixture.jwks_handle()
    built = fixture.with_key_id("first").with_max_ttl(timedelta(hours=1)).with_clock(clock)
    handle = built.jwks_handle()
    assert handle is not early  # each builder made a new fixture with a handle of its own
    verifier = JwtVerifier(handle, clock=clock).with_algorithms(["RS256", "ES256"])
    old = built.mint(claims())
    new_key = LocalIdpSigningKey.generate_es256().with_key_id("second")
    assert built.rotate_signing_key(new_key) is built  # not a builder: this fixture rotates
    assert [k.kid for k in handle.snapshot().keys] == ["second", "first"]
    assert verifier.verify(built.mint(claims()), "api").kid == "second"
    assert verifier.verify(old, "api").kid == "first"
    # The handle of the fixture the builders started from belongs to that fixture alone.
    assert [k.kid for k in early.snapshot().keys] == [fixture.current_kid]
    with pytest.raises(UnknownKeyId):
        JwtVerifier(early, clock=clock).with_algorithms(["ES256"]).verify(built.mint(claims()), "api")


BUILDERS = [
    "with_algorithm",
    "with_signing_key",
    "with_historical_signing_key",
    "with_extra_public_jwk",
    "with_max_ttl",
    "with_issuance_listener",
    "with_key_id",
    "with_clock",
]


def test_every_docstring_says_builders_return_a_new_fixture() -> None:
    import flask_authflow.testing._fixture as module

    assert sorted(BUILDERS) == sorted(n for n in vars(LocalIdpFixture) if n.startswith("with_"))
    for name in BUILDERS:
        doc = " ".join((getattr(LocalIdpFixture, name).__doc__ or "").split())
        assert doc.startswith("A new fixture"), name
    texts = {
        "module": module.__doc__ or "",
        "class": LocalIdpFixture.__doc__ or "",
        "jwks_handle": LocalIdpFixture.jwks_handle.__doc__ or "",
        "rotate_signing_key": LocalIdpFixture.rotate_signing_key.__doc__ or "",
    }
    for where, text in texts.items():
        flat = " ".join(text.split()).lower()
        assert "builders update" not in flat and "in place and return" not in flat, where
        assert "shared" not in flat, where  # a builder's fixture never shares the handle
    assert "new fixture" in " ".join(texts["module"].split()).lower()
    assert "new fixture" in " ".join(texts["class"].split()).lower()
