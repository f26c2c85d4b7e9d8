"""The one verification path: JwtVerifier over a JwksHandle."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_decode, b64url_encode
from flask_authflow.errors import (
    ConfigurationError,
    SigningKeyError,
    TokenCheck,
    TokenVerificationError,
    UnknownKeyId,
)
from flask_authflow.issuer import LocalIdpSigningKey
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.jose._keys import load_private_key_pem, parse_public_jwk, public_jwk
from flask_authflow.jose._verify import MAX_TOKEN_LENGTH

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())
AUD = "api://orders"
ISS = "https://issuer.test"


@pytest.fixture(scope="module")
def rsa_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_rsa("RS256", 2048).with_key_id("rsa-1")


@pytest.fixture(scope="module")
def ec_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es256().with_key_id("ec-1")


@pytest.fixture(scope="module")
def p384_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_es384().with_key_id("ec384-1")


@pytest.fixture(scope="module")
def ed_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_ed25519().with_key_id("ed-1")


@pytest.fixture
def clock() -> MockClock:
    return MockClock(NOW)


@pytest.fixture
def handle(
    rsa_key: LocalIdpSigningKey,
    ec_key: LocalIdpSigningKey,
    p384_key: LocalIdpSigningKey,
    ed_key: LocalIdpSigningKey,
) -> JwksHandle:
    return JwksHandle({"keys": [k.public_jwk() for k in (rsa_key, ec_key, p384_key, ed_key)]})


@pytest.fixture
def verifier(handle: JwksHandle, clock: MockClock) -> JwtVerifier:
    return JwtVerifier(handle, clock=clock).with_algorithms(["RS256", "ES256", "ES384", "EdDSA", "PS256"])


def claims(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"iss": ISS, "sub": "svc", "aud": AUD, "exp": T + 300, "iat": T, "jti": "j1"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def enc(obj: Any) -> str:
    return b64url_encode(json.dumps(obj, separators=(",", ":")).encode())


def make(
    key: LocalIdpSigningKey,
    payload: dict[str, Any] | None = None,
    *,
    header: dict[str, Any] | None = None,
    raw_payload: str | None = None,
) -> str:
    head = {"alg": key.algorithm, "kid": key.kid, "typ": "JWT"} if header is None else header
    signing_input = f"{enc(head)}.{raw_payload if raw_payload is not None else enc(payload or claims())}"
    return f"{signing_input}.{b64url_encode(key.sign(signing_input.encode()))}"


# -- happy paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rsa_key", "ec_key", "p384_key", "ed_key"])
def test_verifies_each_key_type(name: str, request: pytest.FixtureRequest, verifier: JwtVerifier) -> None:
    key: LocalIdpSigningKey = request.getfixturevalue(name)
    result = verifier.verify(make(key), AUD, issuer=ISS)
    assert result.sub == "svc"
    assert result.iss == ISS
    assert result.aud == (AUD,)
    assert result.exp == T + 300
    assert result.iat == T
    assert result.nbf is None
    assert result.jti == "j1"
    assert result.kid == key.kid
    assert result.alg == key.algorithm
    assert result.claims["sub"] == "svc"
    assert result.expires_at == NOW + timedelta(seconds=300)


def test_audience_array_and_collection(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    token = make(ec_key, claims(aud=["a", AUD]))
    assert verifier.verify(token, AUD).aud == ("a", AUD)
    assert verifier.verify(token, ["x", "a"]).aud == ("a", AUD)


def test_claims_are_read_only(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    result = verifier.verify(make(ec_key), AUD)
    with pytest.raises(TypeError):
        result.claims["sub"] = "admin"  # type: ignore[index]


def test_bytes_token_accepted(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    assert verifier.verify(make(ec_key).encode(), AUD).sub == "svc"


def test_token_without_kid_uses_the_only_matching_key(clock: MockClock, ec_key: LocalIdpSigningKey) -> None:
    handle = JwksHandle({"keys": [ec_key.public_jwk()]})
    v = JwtVerifier(handle, ["ES256"], clock=clock)
    assert v.verify(make(ec_key, header={"alg": "ES256"}), AUD).kid is None


# -- construction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algs", [[], ["none"], ["HS256"], ["HS512"], ["RS256", "none"], ["ES256K"], ["rs256"], "RS256"]
)
def test_unsafe_or_empty_allowlist_rejected_at_construction(handle: JwksHandle, algs: Any) -> None:
    with pytest.raises(ConfigurationError):
        JwtVerifier(handle).with_algorithms(algs)
    with pytest.raises(ConfigurationError):
        JwtVerifier(handle, algs)


def test_verify_without_allowlist_is_refused(handle: JwksHandle, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(ConfigurationError):
        JwtVerifier(handle).verify(make(ec_key), AUD)


def test_audience_is_required(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    for bad in ("", [], [""]):
        with pytest.raises(ConfigurationError):
            verifier.verify(make(ec_key), bad)


def test_negative_leeway_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(ConfigurationError):
        verifier.verify(make(ec_key), AUD, leeway=-1)


def test_needs_a_handle() -> None:
    with pytest.raises(ConfigurationError):
        JwtVerifier({"keys": []})  # type: ignore[arg-type]


# -- algorithm attacks ------------------------------------------------------------------------------


def test_alg_none_rejected(verifier: JwtVerifier, rsa_key: LocalIdpSigningKey) -> None:
    token = f"{enc({'alg': 'none', 'kid': rsa_key.kid})}.{enc(claims())}."
    with pytest.raises(TokenVerificationError):
        verifier.verify(token, AUD)
    token = f"{enc({'alg': 'none', 'kid': rsa_key.kid})}.{enc(claims())}.AAAA"
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        verifier.verify(token, AUD)


def test_hs256_key_confusion_rejected(verifier: JwtVerifier, rsa_key: LocalIdpSigningKey) -> None:
    # Classic attack: HMAC over the token with the RSA public key as the secret.
    secret = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input = f"{enc({'alg': 'HS256', 'kid': rsa_key.kid})}.{enc(claims())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        verifier.verify(f"{signing_input}.{b64url_encode(mac)}", AUD)


def test_alg_not_in_allowlist_rejected(
    handle: JwksHandle, clock: MockClock, rsa_key: LocalIdpSigningKey
) -> None:
    v = JwtVerifier(handle, ["ES256"], clock=clock)
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        v.verify(make(rsa_key), AUD)


def test_key_type_must_match_alg(
    verifier: JwtVerifier, rsa_key: LocalIdpSigningKey, ec_key: LocalIdpSigningKey
) -> None:
    # An ES256 header pointing at the RSA key id.
    token = make(ec_key, header={"alg": "ES256", "kid": rsa_key.kid})
    with pytest.raises(TokenVerificationError, match="key does not match algorithm"):
        verifier.verify(token, AUD)


def test_curve_must_match_alg(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, p384_key: LocalIdpSigningKey
) -> None:
    token = make(p384_key, header={"alg": "ES256", "kid": p384_key.kid})
    with pytest.raises(TokenVerificationError, match="key does not match algorithm"):
        verifier.verify(token, AUD)


def test_jwk_alg_pins_the_algorithm(verifier: JwtVerifier, rsa_key: LocalIdpSigningKey) -> None:
    # The RSA key is published with alg=RS256; a PS256 token under it is refused.
    ps = rsa_key.with_algorithm("PS256")
    token = make(ps, header={"alg": "PS256", "kid": rsa_key.kid})
    with pytest.raises(TokenVerificationError, match="key does not match algorithm"):
        verifier.verify(token, AUD)


def test_enc_keys_are_not_used(clock: MockClock, ec_key: LocalIdpSigningKey) -> None:
    jwk = {**ec_key.public_jwk(), "use": "enc"}
    handle = JwksHandle({"keys": [jwk]})
    assert handle.snapshot().skipped == 1
    with pytest.raises(UnknownKeyId):
        JwtVerifier(handle, ["ES256"], clock=clock).verify(make(ec_key), AUD)


def test_unknown_kid_is_typed(verifier: JwtVerifier) -> None:
    other = LocalIdpSigningKey.generate_es256().with_key_id("nobody")
    with pytest.raises(UnknownKeyId) as info:
        verifier.verify(make(other), AUD)
    assert info.value.kid == "nobody"
    assert isinstance(info.value, TokenVerificationError)


def test_unpublished_key_with_known_kid_fails_signature(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    impostor = LocalIdpSigningKey.generate_es256().with_key_id(ec_key.kid)
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(make(impostor), AUD)


def test_missing_kid_with_several_keys_rejected(verifier: JwtVerifier, rsa_key: LocalIdpSigningKey) -> None:
    other = LocalIdpSigningKey.generate_rsa("RS256", 2048)
    handle = JwksHandle({"keys": [rsa_key.public_jwk(), other.public_jwk()]})
    v = JwtVerifier(handle, ["RS256"])
    with pytest.raises(TokenVerificationError, match="missing kid"):
        v.verify(make(rsa_key, header={"alg": "RS256"}), AUD)


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "ES256", "kid": "ec-1", "crit": ["exp"]},
        {"alg": "ES256", "kid": "ec-1", "b64": False, "crit": ["b64"]},
        {"kid": "ec-1"},
        {"alg": 5, "kid": "ec-1"},
        {"alg": "ES256", "kid": 7},
    ],
)
def test_bad_headers_rejected(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, header: dict[str, Any]
) -> None:
    with pytest.raises(TokenVerificationError):
        verifier.verify(make(ec_key, header=header), AUD)


def test_duplicate_header_members_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    head = b64url_encode(b'{"alg":"ES256","kid":"ec-1","alg":"none"}')
    signing_input = f"{head}.{enc(claims())}"
    token = f"{signing_input}.{b64url_encode(ec_key.sign(signing_input.encode()))}"
    with pytest.raises(TokenVerificationError, match="header is not JSON"):
        verifier.verify(token, AUD)


def test_embedded_jwk_header_is_ignored(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    # The attacker embeds their own key; verification still uses the handle's key.
    attacker = LocalIdpSigningKey.generate_es256().with_key_id(ec_key.kid)
    token = make(attacker, header={"alg": "ES256", "kid": ec_key.kid, "jwk": attacker.public_jwk()})
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(token, AUD)


# -- tampering ------------------------------------------------------------------------------------


def test_tampered_payload_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    head, _, sig = make(ec_key).split(".")
    forged = f"{head}.{enc(claims(sub='admin'))}.{sig}"
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(forged, AUD)


def test_tampered_signature_rejected(verifier: JwtVerifier, rsa_key: LocalIdpSigningKey) -> None:
    head, body, sig = make(rsa_key).split(".")
    raw = bytearray(b64url_decode(sig))
    raw[10] ^= 1
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(f"{head}.{body}.{b64url_encode(bytes(raw))}", AUD)


def test_ecdsa_der_signature_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    # JWS wants raw r||s; a DER signature (what naive code produces) must not verify.
    from cryptography.hazmat.primitives import hashes

    signing_input = f"{enc({'alg': 'ES256', 'kid': ec_key.kid})}.{enc(claims())}"
    pem = load_private_key_pem(_ec_pem(ec_key))
    assert isinstance(pem, ec.EllipticCurvePrivateKey)
    der = pem.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(f"{signing_input}.{b64url_encode(der)}", AUD)


def _ec_pem(key: LocalIdpSigningKey) -> bytes:
    return key.private_pem()


def test_non_canonical_signature_encoding_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    token = make(ec_key)
    head, body, sig = token.split(".")
    # 64 bytes -> 86 chars with 2 unused bits in the last char; flip one of them.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(sig[-1])
    mutated = sig[:-1] + alphabet[last | 1]
    assert mutated != sig
    with pytest.raises(TokenVerificationError):
        verifier.verify(f"{head}.{body}.{mutated}", AUD)


# -- claims -----------------------------------------------------------------------------------------


def test_expired_rejected_after_leeway(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    token = make(ec_key, claims(exp=T - 30))
    assert verifier.verify(token, AUD).exp == T - 30  # within the 60 s skew
    with pytest.raises(TokenVerificationError, match="expired"):
        verifier.verify(token, AUD, leeway=0)
    clock.advance(31)
    with pytest.raises(TokenVerificationError, match="expired"):
        verifier.verify(token, AUD)


def test_exp_is_required(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(TokenVerificationError, match="missing exp"):
        verifier.verify(make(ec_key, claims(exp=...)), AUD)


@pytest.mark.parametrize("bad", ["123", True, None, [1], {"a": 1}])
def test_exp_must_be_numeric(verifier: JwtVerifier, ec_key: LocalIdpSigningKey, bad: Any) -> None:
    with pytest.raises(TokenVerificationError):
        verifier.verify(make(ec_key, claims(exp=bad)), AUD)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_rejected(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, constant: str
) -> None:
    raw = b64url_encode(f'{{"aud":"{AUD}","exp":{constant}}}'.encode())
    with pytest.raises(TokenVerificationError):
        verifier.verify(make(ec_key, raw_payload=raw), AUD)


def test_nbf_in_future_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    assert verifier.verify(make(ec_key, claims(nbf=T + 30)), AUD).nbf == T + 30
    with pytest.raises(TokenVerificationError, match="not yet valid"):
        verifier.verify(make(ec_key, claims(nbf=T + 61)), AUD)
    with pytest.raises(TokenVerificationError, match="invalid nbf"):
        verifier.verify(make(ec_key, claims(nbf="soon")), AUD)


def test_iat_in_future_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(TokenVerificationError, match="iat in the future"):
        verifier.verify(make(ec_key, claims(iat=T + 3600)), AUD)


def test_audience_mismatch_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(TokenVerificationError, match="audience mismatch"):
        verifier.verify(make(ec_key, claims(aud="api://other")), AUD)
    with pytest.raises(TokenVerificationError, match="audience mismatch"):
        verifier.verify(make(ec_key, claims(aud=["x", "y"])), AUD)


@pytest.mark.parametrize("bad", [..., 5, [], [AUD, 5], {"aud": AUD}])
def test_bad_aud_claim_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey, bad: Any) -> None:
    with pytest.raises(TokenVerificationError):
        verifier.verify(make(ec_key, claims(aud=bad)), AUD)


def test_issuer_mismatch_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    with pytest.raises(TokenVerificationError, match="issuer mismatch"):
        verifier.verify(make(ec_key, claims(iss="https://evil.test")), AUD, issuer=ISS)
    with pytest.raises(TokenVerificationError, match="issuer mismatch"):
        verifier.verify(make(ec_key, claims(iss=...)), AUD, issuer=ISS)
    with pytest.raises(TokenVerificationError, match="invalid iss"):
        verifier.verify(make(ec_key, claims(iss=["x"])), AUD)


@pytest.mark.parametrize("name", ["sub", "jti"])
def test_string_claims_must_be_strings(verifier: JwtVerifier, ec_key: LocalIdpSigningKey, name: str) -> None:
    with pytest.raises(TokenVerificationError, match=f"invalid {name}"):
        verifier.verify(make(ec_key, claims(**{name: 42})), AUD)


def test_duplicate_payload_members_rejected(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    raw = b64url_encode(f'{{"aud":"{AUD}","exp":{T + 60},"sub":"a","sub":"admin"}}'.encode())
    with pytest.raises(TokenVerificationError, match="payload is not JSON"):
        verifier.verify(make(ec_key, raw_payload=raw), AUD)


# -- malformed input never escapes as another exception type ---------------------------------------


def _garbage(ec_key: LocalIdpSigningKey) -> list[Any]:
    good = make(ec_key)
    head, body, sig = good.split(".")
    huge_int_header = b64url_encode(b'{"alg":"ES256","n":' + b"9" * 5000 + b"}")
    return [
        "",
        ".",
        "..",
        "...",
        "a.b",
        "a.b.c.d",
        good + ".",
        f"{head}.{body}",
        f"{head}..{sig}",
        f".{body}.{sig}",
        f"{head}.{body}.",
        "not a token at all",
        "\x00\x01\x02",
        "é.é.é",
        f"{head}.{body}.{sig}é",
        f"{head}!.{body}.{sig}",
        f"{head}=.{body}.{sig}",
        f"{head}.{body}.{sig}==",
        f"{b64url_encode(b'not json')}.{body}.{sig}",
        f"{b64url_encode(b'[1,2,3]')}.{body}.{sig}",
        f"{b64url_encode(b'null')}.{body}.{sig}",
        f"{b64url_encode(bytes([0xFF, 0xFE]))}.{body}.{sig}",
        f"{head}.{b64url_encode(b'not json')}.{sig}",
        f"{enc({'alg': 'ES256', 'kid': 'ec-1'})}.{b64url_encode(b'[1]')}.{sig}",
        f"{head}.{body}.{sig[:-3]}",
        f"{b64url_encode(b'[' * 5000)}.{body}.{sig}",
        f"{huge_int_header}.{body}.{sig}",
        b"\xff\xfe.x.y",
        12345,
        None,
        ["a", "b", "c"],
        "A" * (MAX_TOKEN_LENGTH + 1),
        f"{head}.{'A' * MAX_TOKEN_LENGTH}.{sig}",
        b"A" * (MAX_TOKEN_LENGTH + 1),
    ]


def test_garbage_raises_only_token_verification_error(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    for bad in _garbage(ec_key):
        with pytest.raises(TokenVerificationError) as info:
            verifier.verify(bad, AUD)
        assert type(info.value) in (TokenVerificationError, UnknownKeyId), repr(bad)[:60]


def test_huge_token_refused_before_parsing(verifier: JwtVerifier) -> None:
    with pytest.raises(TokenVerificationError, match="too large"):
        verifier.verify("A" * (16 * 1024 + 1), AUD)


def test_signature_checked_before_claims_are_trusted(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    # An unsigned token with perfect claims fails on the signature, not on claims.
    head, _, _ = make(ec_key).split(".")
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(f"{head}.{enc(claims())}.{b64url_encode(b'x' * 64)}", AUD)


# -- JwksHandle ---------------------------------------------------------------------------------------


def test_handle_replace_bumps_version_and_is_seen_by_verifiers(
    clock: MockClock, ec_key: LocalIdpSigningKey, rsa_key: LocalIdpSigningKey
) -> None:
    handle = JwksHandle({"keys": [ec_key.public_jwk()]})
    v = JwtVerifier(handle, ["ES256", "RS256"], clock=clock)
    assert handle.version == 0
    with pytest.raises(UnknownKeyId):
        v.verify(make(rsa_key), AUD)
    snap = handle.replace({"keys": [ec_key.public_jwk(), rsa_key.public_jwk()]})
    assert snap.version == 1 == handle.version
    assert v.verify(make(rsa_key), AUD).kid == rsa_key.kid
    handle.replace({"keys": [rsa_key.public_jwk()]})
    with pytest.raises(UnknownKeyId):
        v.verify(make(ec_key), AUD)


def test_handle_strips_private_members(rsa_key: LocalIdpSigningKey) -> None:
    from joserfc.jwk import RSAKey

    private = RSAKey.import_key(rsa_key.private_pem()).as_dict(private=True)
    handle = JwksHandle({"keys": [{**private, "kid": "k"}]})
    (published,) = handle.as_dict()["keys"]
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(published)
    assert published["n"] == rsa_key.public_jwk()["n"]


def test_handle_skips_unusable_keys_unless_strict(ec_key: LocalIdpSigningKey) -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    entries = [
        {"kty": "oct", "k": "c2VjcmV0"},
        {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
        {"kty": "RSA", "n": 5, "e": "AQAB"},
        {"kty": "EC", "crv": "P-256", "x": "garbage", "y": "garbage"},
        public_jwk(weak.public_key(), kid="weak"),
        {**ec_key.public_jwk(), "key_ops": ["encrypt"]},
        "not an object",
        ec_key.public_jwk(),
    ]
    handle = JwksHandle({"keys": entries})
    snap = handle.snapshot()
    assert [k.kid for k in snap.keys] == [ec_key.kid]
    assert snap.skipped == len(entries) - 1
    with pytest.raises(ValueError):
        JwksHandle({"keys": entries}, strict=True)
    with pytest.raises(ValueError):
        handle.replace({"nokeys": []})
    assert handle.version == 0


def test_handle_concurrent_replace_and_verify(clock: MockClock, ec_key: LocalIdpSigningKey) -> None:
    other = LocalIdpSigningKey.generate_es256()
    handle = JwksHandle({"keys": [ec_key.public_jwk()]})
    v = JwtVerifier(handle, ["ES256"], clock=clock)
    token = make(ec_key)
    errors: list[Exception] = []

    def swap() -> None:
        for i in range(200):
            keys = [ec_key.public_jwk()] + ([other.public_jwk()] if i % 2 else [])
            handle.replace({"keys": keys})

    def check() -> None:
        try:
            for _ in range(200):
                v.verify(token, AUD)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=swap), *(threading.Thread(target=check) for _ in range(3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert handle.version == 200


def test_repr_hides_keys(handle: JwksHandle, verifier: JwtVerifier) -> None:
    assert "ec-1" in repr(handle)
    assert '"x"' not in repr(handle)
    assert "RS256" in repr(verifier)


# -- helpers ------------------------------------------------------------------------------------------


def test_b64url_strict() -> None:
    assert b64url_decode(b64url_encode(b"\x00\xff\x10")) == b"\x00\xff\x10"
    for bad in ["A", "AA=", "A+B/", "AB", "AAB", "A B=", "é"]:
        with pytest.raises((ValueError, UnicodeError)):
            b64url_decode(bad)
    assert base64.urlsafe_b64encode(b"\xfb").rstrip(b"=") == b"-w"
    assert b64url_decode("-w") == b"\xfb"


def test_load_private_key_pem_errors() -> None:
    with pytest.raises(SigningKeyError):
        load_private_key_pem(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(SigningKeyError):
        load_private_key_pem("garbage")
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = weak.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(SigningKeyError, match="2048"):
        load_private_key_pem(pem)
    p521 = ec.generate_private_key(ec.SECP521R1())
    assert isinstance(
        load_private_key_pem(
            p521.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        ),
        ec.EllipticCurvePrivateKey,
    )


def test_parse_public_jwk_rejects_non_mappings() -> None:
    with pytest.raises(ValueError):
        parse_public_jwk([])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        parse_public_jwk({"kty": "RSA", "n": "AQAB", "e": "AQAB", "alg": "HS256"})


@pytest.mark.parametrize("alg", ["PS256", "RS384", "RS512"])
def test_other_rsa_algorithms(rsa_key: LocalIdpSigningKey, clock: MockClock, alg: str) -> None:
    key = rsa_key.with_algorithm(alg).with_key_id(f"k-{alg}")
    handle = JwksHandle({"keys": [key.public_jwk()]})
    v = JwtVerifier(handle, [alg], clock=clock)
    assert v.verify(make(key), AUD).alg == alg
    # The same key under a sibling algorithm is refused (the JWK pins alg).
    other = "RS256" if alg != "RS256" else "RS384"
    with pytest.raises(TokenVerificationError):
        JwtVerifier(handle, [alg, other], clock=clock).verify(
            make(rsa_key.with_algorithm(other), header={"alg": other, "kid": key.kid}), AUD
        )


def test_key_without_alg_accepts_any_matching_algorithm(
    rsa_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    jwk = {k: v for k, v in rsa_key.public_jwk().items() if k != "alg"}
    handle = JwksHandle({"keys": [jwk]})
    v = JwtVerifier(handle, ["RS256", "PS256"], clock=clock)
    assert v.verify(make(rsa_key), AUD).alg == "RS256"
    ps = rsa_key.with_algorithm("PS256")
    assert v.verify(make(ps), AUD).alg == "PS256"
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        v.verify(make(rsa_key.with_algorithm("RS512")), AUD)


# -- typed rejection reasons and zip/enc --------------------------------


def _reason_cases(ec_key: LocalIdpSigningKey, rsa_key: LocalIdpSigningKey) -> list[tuple[str, TokenCheck]]:
    signed = make(ec_key)
    head, body, _ = signed.split(".")
    other = LocalIdpSigningKey.generate_es256().with_key_id("ec-1")
    return [
        ("not-a-jwt", TokenCheck.MALFORMED),
        (f"{head}.{body}.%%%", TokenCheck.MALFORMED),
        (make(ec_key, header={"alg": "ES256", "kid": "ec-1", "zip": "DEF"}), TokenCheck.HEADER),
        (make(ec_key, header={"alg": "ES256", "kid": "ec-1", "enc": "A256GCM"}), TokenCheck.HEADER),
        (make(ec_key, header={"alg": "ES256", "kid": "ec-1", "crit": ["exp"]}), TokenCheck.HEADER),
        (make(ec_key, header={"alg": "ES256", "kid": 7}), TokenCheck.HEADER),
        (make(ec_key, header={"kid": "ec-1"}), TokenCheck.ALGORITHM),
        (make(ec_key, header={"alg": "HS256", "kid": "ec-1"}), TokenCheck.ALGORITHM),
        (make(ec_key, header={"alg": "ES256", "kid": "nobody"}), TokenCheck.UNKNOWN_KID),
        (make(ec_key, header={"alg": "RS256", "kid": "ec-1"}), TokenCheck.ALGORITHM),
        (make(other), TokenCheck.SIGNATURE),
        (make(ec_key, claims(exp=T - 3600)), TokenCheck.EXPIRED),
        (make(ec_key, claims(nbf=T + 3600)), TokenCheck.NOT_YET_VALID),
        (make(ec_key, claims(iat=T + 3600, exp=T + 7200)), TokenCheck.ISSUED_AT),
        (make(ec_key, claims(aud="api://other")), TokenCheck.AUDIENCE),
        (make(ec_key, claims(aud=...)), TokenCheck.AUDIENCE),
        (make(ec_key, claims(iss="https://evil.test")), TokenCheck.ISSUER),
        (make(ec_key, claims(sub=5)), TokenCheck.SUBJECT),
        (make(ec_key, claims(jti=5)), TokenCheck.JWT_ID),
        (make(ec_key, claims(exp=...)), TokenCheck.CLAIM),
        (make(ec_key, claims(exp="soon")), TokenCheck.CLAIM),
    ]


def test_each_rejection_names_its_check(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, rsa_key: LocalIdpSigningKey
) -> None:
    for token, reason in _reason_cases(ec_key, rsa_key):
        with pytest.raises(TokenVerificationError) as info:
            verifier.verify(token, AUD, issuer=ISS)
        assert info.value.reason is reason, (token, info.value.message)
        assert info.value.message  # the human text is kept next to the typed reason


@pytest.mark.parametrize("member", [{"zip": "DEF"}, {"enc": "A256GCM"}, {"zip": "DEF", "enc": "A128GCM"}])
def test_zip_and_enc_headers_are_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, member: dict[str, str]
) -> None:
    token = make(ec_key, header={"alg": "ES256", "kid": "ec-1", **member})
    with pytest.raises(TokenVerificationError, match="zip or enc") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.HEADER


# -- what joserfc alone lets through, and the pre-check refuses -----------------------------------


def _joserfc_accepts(token: str, key: LocalIdpSigningKey) -> bool:
    """Whether joserfc's own compact JWS check, given the right key and alg, passes the token."""
    from joserfc import jws
    from joserfc.errors import JoseError
    from joserfc.jwk import ECKey

    try:
        jws.deserialize_compact(token, ECKey.import_key(key.public_jwk()), algorithms=[key.algorithm])
    except JoseError:
        return False
    return True


def _signed_raw(key: LocalIdpSigningKey, header: dict[str, Any], payload_segment: str) -> str:
    signing_input = f"{enc(header)}.{payload_segment}"
    return f"{signing_input}.{b64url_encode(key.sign(signing_input.encode()))}"


@pytest.mark.parametrize("crit", [["kid"], ["typ"], ["b64"]])
def test_crit_naming_a_member_joserfc_knows_is_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, crit: list[str]
) -> None:
    header = {"alg": "ES256", "kid": "ec-1", "typ": "JWT", "b64": True, "crit": crit}
    token = make(ec_key, header=header)
    assert _joserfc_accepts(token, ec_key)
    with pytest.raises(TokenVerificationError, match="critical") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.HEADER


def test_unencoded_payload_is_refused(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    # RFC 7797: the signature covers the raw payload; joserfc verifies it, we never do.
    header = {"alg": "ES256", "kid": "ec-1", "b64": False, "crit": ["b64"]}
    token = _signed_raw(ec_key, header, "admin")
    assert _joserfc_accepts(token, ec_key)
    with pytest.raises(TokenVerificationError) as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.HEADER


@pytest.mark.parametrize("b64", [False, "false", 0, None])
def test_b64_other_than_true_is_refused_without_crit(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, b64: Any
) -> None:
    token = make(ec_key, header={"alg": "ES256", "kid": "ec-1", "b64": b64})
    with pytest.raises(TokenVerificationError, match="b64") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.HEADER


def test_b64_true_is_the_ordinary_encoding(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    assert (
        verifier.verify(make(ec_key, header={"alg": "ES256", "kid": "ec-1", "b64": True}), AUD).sub == "svc"
    )


def test_duplicate_header_members_joserfc_would_read_as_the_last(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    # joserfc's JSON reading keeps the last "kid"; ours refuses the ambiguity.
    head = b64url_encode(b'{"alg":"ES256","kid":"other","kid":"ec-1"}')
    token = f"{head}.{enc(claims())}"
    token = f"{token}.{b64url_encode(ec_key.sign(token.encode()))}"
    assert _joserfc_accepts(token, ec_key)
    with pytest.raises(TokenVerificationError, match="header is not JSON") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.MALFORMED


@pytest.mark.parametrize(
    "alg", ["none", "None", "NONE", "nOnE", "", "HS256", "HS384", "HS512", "ES256 ", "es256"]
)
def test_alg_spellings_outside_the_allowlist_are_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, alg: str
) -> None:
    for signature in ("", b64url_encode(b"x" * 64)):
        token = f"{enc({'alg': alg, 'kid': 'ec-1'})}.{enc(claims())}.{signature}"
        with pytest.raises(TokenVerificationError) as info:
            verifier.verify(token, AUD)
        assert info.value.reason is TokenCheck.ALGORITHM


def test_hmac_over_the_published_jwk_is_refused(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    secret = json.dumps(ec_key.public_jwk()).encode()
    signing_input = f"{enc({'alg': 'HS256', 'kid': ec_key.kid})}.{enc(claims())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    with pytest.raises(TokenVerificationError, match="algorithm not allowed"):
        verifier.verify(f"{signing_input}.{b64url_encode(mac)}", AUD)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("jku", "https://attacker.test/jwks.json"),
        ("x5u", "https://attacker.test/cert.pem"),
        ("x5c", ["MIIBattacker"]),
        ("jwk", "attacker"),
    ],
)
def test_key_location_headers_never_find_a_key(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, member: str, value: Any
) -> None:
    attacker = LocalIdpSigningKey.generate_es256().with_key_id("attacker-1")
    pointed = attacker.public_jwk() if value == "attacker" else value
    # Under the victim's kid the handle's key checks the signature and refuses it ...
    token = make(attacker, header={"alg": "ES256", "kid": ec_key.kid, member: pointed})
    with pytest.raises(TokenVerificationError, match="bad signature"):
        verifier.verify(token, AUD)
    # ... and under the attacker's own kid nothing is fetched or trusted.
    with pytest.raises(UnknownKeyId):
        verifier.verify(make(attacker, header={"alg": "ES256", "kid": attacker.kid, member: pointed}), AUD)


def test_two_keys_under_one_kid_for_one_alg_are_ambiguous(
    clock: MockClock, ec_key: LocalIdpSigningKey
) -> None:
    twin = LocalIdpSigningKey.generate_es256().with_key_id(ec_key.kid)
    handle = JwksHandle({"keys": [ec_key.public_jwk(), twin.public_jwk()]})
    v = JwtVerifier(handle, ["ES256"], clock=clock)
    for key in (ec_key, twin):
        with pytest.raises(TokenVerificationError, match="ambiguous kid") as info:
            v.verify(make(key), AUD)
        assert info.value.reason is TokenCheck.UNKNOWN_KID


def test_one_kid_over_keys_of_different_types_picks_by_alg(
    clock: MockClock, ec_key: LocalIdpSigningKey, rsa_key: LocalIdpSigningKey
) -> None:
    shared = rsa_key.with_key_id(ec_key.kid)
    handle = JwksHandle({"keys": [ec_key.public_jwk(), shared.public_jwk()]})
    v = JwtVerifier(handle, ["ES256", "RS256"], clock=clock)
    assert v.verify(make(ec_key), AUD).alg == "ES256"
    assert v.verify(make(shared), AUD).alg == "RS256"


def test_compact_jwe_is_refused(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    from joserfc import jwe
    from joserfc.jwk import OctKey

    token = jwe.encrypt_compact(
        {"alg": "dir", "enc": "A256GCM", "kid": "ec-1"}, json.dumps(claims()), OctKey.generate_key(256)
    )
    assert token.count(".") == 4
    with pytest.raises(TokenVerificationError, match="three segments") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.MALFORMED


def test_nested_token_is_not_unwrapped(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    # A signed token whose payload is another signed token (cty: JWT) is not a claims set.
    inner = make(ec_key)
    token = _signed_raw(ec_key, {"alg": "ES256", "kid": "ec-1", "cty": "JWT"}, b64url_encode(inner.encode()))
    with pytest.raises(TokenVerificationError, match="payload is not JSON") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.MALFORMED


def test_a_large_header_within_the_token_bound_verifies(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    # Only the whole token is bounded (joserfc's own parser would refuse a header over 512 bytes).
    chain = [base64.b64encode(bytes(1200)).decode()] * 3
    token = make(ec_key, header={"alg": "ES256", "kid": "ec-1", "x5c": chain})
    assert len(token.split(".")[0]) > 4000
    assert verifier.verify(token, AUD).header["x5c"] == chain


def test_eddsa_verifies_without_a_warning(verifier: JwtVerifier, ed_key: LocalIdpSigningKey) -> None:
    # joserfc warns that RFC 9864 deprecates "EdDSA"; a caller that allow-lists it chose it.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verifier.verify(make(ed_key), AUD).alg == "EdDSA"


@pytest.mark.parametrize(("name", "reason"), [("sub", TokenCheck.SUBJECT), ("jti", TokenCheck.JWT_ID)])
def test_null_string_claims_are_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, name: str, reason: TokenCheck
) -> None:
    with pytest.raises(TokenVerificationError, match=f"invalid {name}") as info:
        verifier.verify(make(ec_key, claims(**{name: None})), AUD)
    assert info.value.reason is reason


def test_leeway_counts_whole_seconds(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    token = make(ec_key, claims(exp=T - 1))
    # 1.9 s counts as 1 s: a token expired 1 s ago is refused (rounding down is the strict side).
    with pytest.raises(TokenVerificationError, match="expired"):
        verifier.verify(token, AUD, leeway=timedelta(seconds=1.9))
    assert verifier.verify(token, AUD, leeway=2).exp == T - 1


def test_huge_numeric_dates_never_escape(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    for name in ("nbf", "iat"):
        with pytest.raises(TokenVerificationError) as info:
            verifier.verify(make(ec_key, claims(**{name: 10**400})), AUD)
        assert info.value.reason in (TokenCheck.NOT_YET_VALID, TokenCheck.ISSUED_AT)
    assert verifier.verify(make(ec_key, claims(exp=10**30)), AUD).exp == 10**30


@pytest.mark.parametrize(
    "member", [{"jku": 5}, {"jku": "ftp://x.test/k"}, {"x5c": "not-a-list"}, {"typ": 5}, {"cty": ["JWT"]}]
)
def test_badly_typed_registered_header_members_are_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, member: dict[str, Any]
) -> None:
    # joserfc's header registry checks these; its refusal comes back as a HEADER reason.
    token = make(ec_key, header={"alg": "ES256", "kid": "ec-1", **member})
    with pytest.raises(TokenVerificationError, match="unsupported header") as info:
        verifier.verify(token, AUD)
    assert info.value.reason is TokenCheck.HEADER


def test_unregistered_header_members_are_ignored(verifier: JwtVerifier, ec_key: LocalIdpSigningKey) -> None:
    token = make(ec_key, header={"alg": "ES256", "kid": "ec-1", "x-tenant": "acme", "nonce": "n"})
    assert verifier.verify(token, AUD).header["x-tenant"] == "acme"


def test_signer_refuses_a_key_that_does_not_suit_the_algorithm() -> None:
    from cryptography.hazmat.primitives.asymmetric import ed448

    from flask_authflow.jose._algorithms import signer

    rsa_private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    p256 = ec.generate_private_key(ec.SECP256R1())
    for alg, key in [
        ("ES256", rsa_private),
        ("ES384", p256),
        ("RS256", p256),
        ("EdDSA", ed448.Ed448PrivateKey.generate()),
        ("EdDSA", p256),
        ("HS256", rsa_private),
        ("none", p256),
    ]:
        with pytest.raises(SigningKeyError):
            signer(alg, key)
    assert len(signer("ES256", p256)(b"input")) == 64  # raw r || s, not DER


# -- tokens without exp by design (SETs): typ required, an iat window -------------------------------

WINDOW = timedelta(minutes=10)


def _set(key: LocalIdpSigningKey, typ: str | None = "secevent+jwt", **over: Any) -> str:
    head = {"alg": key.algorithm, "kid": key.kid} | ({} if typ is None else {"typ": typ})
    return make(key, claims(**({"exp": ...} | over)), header=head)


def test_a_windowed_token_without_exp_is_accepted_until_its_iat_window_ends(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, clock: MockClock
) -> None:
    token = _set(ec_key, typ="SecEvent+JWT")  # typ is compared without case
    result = verifier.verify(token, AUD, issuer=ISS, typ={"secevent+jwt"}, max_age=WINDOW, leeway=0)
    assert result.iat == T and result.exp == T + 600  # the window's end stands for exp
    clock.advance(WINDOW)
    assert verifier.verify(token, AUD, typ={"secevent+jwt"}, max_age=WINDOW, leeway=0).jti == "j1"
    clock.advance(timedelta(seconds=1))
    with pytest.raises(TokenVerificationError) as refused:
        verifier.verify(token, AUD, typ={"secevent+jwt"}, max_age=WINDOW, leeway=0)
    assert refused.value.reason == TokenCheck.ISSUED_AT


def test_without_max_age_a_token_without_exp_is_still_refused(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey
) -> None:
    with pytest.raises(TokenVerificationError) as refused:
        verifier.verify(_set(ec_key), AUD, typ={"secevent+jwt"})
    assert refused.value.message == "missing exp claim"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (lambda key: _set(key, iat=...), TokenCheck.ISSUED_AT),  # no iat: no window
        (lambda key: _set(key, iat=T + 3600), TokenCheck.ISSUED_AT),  # issued in the future
        (lambda key: _set(key, exp=T - 120), TokenCheck.EXPIRED),  # an exp it carries still counts
        (lambda key: _set(key, typ="JWT"), TokenCheck.HEADER),  # another type
        (lambda key: _set(key, typ=None), TokenCheck.HEADER),  # no type
    ],
    ids=["no_iat", "future_iat", "expired_exp", "wrong_typ", "no_typ"],
)
def test_a_windowed_token_is_refused_for_each_bad_member(
    verifier: JwtVerifier, ec_key: LocalIdpSigningKey, token: Any, reason: TokenCheck
) -> None:
    with pytest.raises(TokenVerificationError) as refused:
        verifier.verify(token(ec_key), AUD, typ={"secevent+jwt"}, max_age=WINDOW, leeway=0)
    assert refused.value.reason == reason
