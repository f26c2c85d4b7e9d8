"""Issuer signing keys: generation, PEM round trips, kids, JWKs, repr hygiene."""

from __future__ import annotations

import pickle

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from joserfc.jwk import ECKey

from flask_authflow.errors import KeyStoreError, SigningKeyError
from flask_authflow.issuer import LocalIdpSigningKey
from flask_authflow.issuer._keys import LoadedKeys

PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi"}


@pytest.fixture(scope="module")
def rsa_key() -> LocalIdpSigningKey:
    return LocalIdpSigningKey.generate_rs256(bits=2048)


def test_generate_es256() -> None:
    key = LocalIdpSigningKey.generate_es256()
    jwk = key.public_jwk()
    assert key.algorithm == "ES256"
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256"
    assert jwk["kid"] == key.kid and jwk["alg"] == "ES256" and jwk["use"] == "sig"
    assert not PRIVATE_MEMBERS & set(jwk)


def test_default_kid_is_rfc7638_thumbprint() -> None:
    key = LocalIdpSigningKey.generate_es256()
    assert key.kid == ECKey.import_key(key.public_jwk()).thumbprint()
    # Stable across a PEM round trip (so restarts keep the same kid).
    assert LocalIdpSigningKey.from_pem(key.private_pem()).kid == key.kid


def test_generate_rs256(rsa_key: LocalIdpSigningKey) -> None:
    assert rsa_key.algorithm == "RS256"
    jwk = rsa_key.public_jwk()
    assert jwk["kty"] == "RSA" and {"n", "e"} <= set(jwk)
    assert not PRIVATE_MEMBERS & set(jwk)


def test_default_rsa_size_is_3072() -> None:
    import inspect

    assert inspect.signature(LocalIdpSigningKey.generate_rs256).parameters["bits"].default == 3072


@pytest.mark.parametrize("bits", [512, 1024, 2047, 0, -1])
def test_rsa_under_2048_refused(bits: int) -> None:
    with pytest.raises(SigningKeyError, match="2048"):
        LocalIdpSigningKey.generate_rs256(bits=bits)


def test_weak_rsa_pem_refused() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = weak.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey.from_pem(pem)
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey(weak)


def test_unsupported_curve_refused() -> None:
    key = ec.generate_private_key(ec.SECP521R1())
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey(key)
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey(ec.generate_private_key(ec.SECP256R1()), algorithm="ES384")


def test_algorithm_must_fit_key(rsa_key: LocalIdpSigningKey) -> None:
    with pytest.raises(SigningKeyError):
        rsa_key.with_algorithm("ES256")
    with pytest.raises(SigningKeyError):
        rsa_key.with_algorithm("HS256")
    with pytest.raises(SigningKeyError):
        rsa_key.with_algorithm("none")
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey.generate_es256().with_algorithm("RS256")
    assert rsa_key.with_algorithm("RS384").algorithm == "RS384"


def test_pem_round_trip(rsa_key: LocalIdpSigningKey) -> None:
    again = LocalIdpSigningKey.from_pem(rsa_key.private_pem().decode(), kid=rsa_key.kid)
    assert again == rsa_key
    assert again.public_jwk() == rsa_key.public_jwk()
    es = LocalIdpSigningKey.generate_es256()
    assert LocalIdpSigningKey.from_pem(es.private_pem()).algorithm == "ES256"
    assert LocalIdpSigningKey.from_pem(LocalIdpSigningKey.generate_es384().private_pem()).algorithm == "ES384"


def test_from_pem_garbage() -> None:
    for bad in (b"", b"garbage", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"):
        with pytest.raises(SigningKeyError) as info:
            LocalIdpSigningKey.from_pem(bad)
        assert "AAAA" not in str(info.value)


def test_encrypted_pem_needs_password() -> None:
    raw = ec.generate_private_key(ec.SECP256R1())
    pem = raw.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey.from_pem(pem)
    assert LocalIdpSigningKey.from_pem(pem, password=b"pw").algorithm == "ES256"


def test_with_key_id_returns_new_value() -> None:
    key = LocalIdpSigningKey.generate_es256()
    renamed = key.with_key_id("key-2026_01")
    assert renamed.kid == "key-2026_01"
    assert key.kid != "key-2026_01"
    assert renamed.public_jwk()["kid"] == "key-2026_01"
    assert renamed.public_jwk()["x"] == key.public_jwk()["x"]


@pytest.mark.parametrize(
    "kid",
    [
        "",
        "../current",
        "/dev/null",
        "a/b",
        "a.b",
        "a\x00b",
        "k" * 65,
        "x" * 1024,
        "kid\n",
        " kid",
        "é",
        "a b",
    ],
)
def test_invalid_kid_refused(kid: str) -> None:
    with pytest.raises(SigningKeyError, match="invalid key id"):
        LocalIdpSigningKey.generate_es256().with_key_id(kid)


def test_non_string_kid_refused() -> None:
    with pytest.raises(SigningKeyError):
        LocalIdpSigningKey.generate_es256().with_key_id(5)  # type: ignore[arg-type]


def test_kid_limits() -> None:
    key = LocalIdpSigningKey.generate_es256()
    assert key.with_key_id("k" * 64).kid == "k" * 64
    assert key.with_key_id("A-z_0").kid == "A-z_0"


def test_repr_never_shows_key_material(rsa_key: LocalIdpSigningKey) -> None:
    text = repr(rsa_key) + str(rsa_key)
    assert rsa_key.kid in text
    pem = rsa_key.private_pem().decode()
    body = "".join(pem.splitlines()[1:-1])
    assert body[:40] not in text
    assert rsa_key.public_jwk()["n"][:20] not in text
    assert "PRIVATE" not in text


def test_keys_cannot_be_pickled(rsa_key: LocalIdpSigningKey) -> None:
    with pytest.raises(TypeError):
        pickle.dumps(rsa_key)


def test_private_pem_is_pkcs8(rsa_key: LocalIdpSigningKey) -> None:
    assert rsa_key.private_pem().startswith(b"-----BEGIN PRIVATE KEY-----")


def test_es256_signature_is_raw_64_bytes() -> None:
    key = LocalIdpSigningKey.generate_es256()
    assert len(key.sign(b"hello")) == 64
    assert len(LocalIdpSigningKey.generate_es384().sign(b"hello")) == 96


def test_loaded_keys() -> None:
    a, b = LocalIdpSigningKey.generate_es256(), LocalIdpSigningKey.generate_es256()
    loaded = LoadedKeys(a, [b])
    assert loaded.historical == (b,)
    assert loaded.all_keys == (a, b)
    assert loaded.kids() == (a.kid, b.kid)
    with pytest.raises(KeyStoreError, match="duplicate"):
        LoadedKeys(a, [a.with_key_id(a.kid)])
    with pytest.raises(KeyStoreError):
        LoadedKeys("nope")  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        loaded.current = b  # type: ignore[misc]
