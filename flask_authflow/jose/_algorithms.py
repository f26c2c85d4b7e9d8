"""JWS algorithms: the allow-list per key type, strict base64url, and the signer of local keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from flask_authflow.errors import SigningKeyError

# alg -> (kty, allowed curves or None).  Only asymmetric algorithms: HMAC with a
# public key is the classic key-confusion attack, and ``none`` is no signature.
_ALG_KEY_TYPES: Final[Mapping[str, tuple[str, frozenset[str] | None]]] = MappingProxyType(
    {
        "RS256": ("RSA", None),
        "RS384": ("RSA", None),
        "RS512": ("RSA", None),
        "PS256": ("RSA", None),
        "PS384": ("RSA", None),
        "PS512": ("RSA", None),
        "ES256": ("EC", frozenset({"P-256"})),
        "ES384": ("EC", frozenset({"P-384"})),
        "ES512": ("EC", frozenset({"P-521"})),
        "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
        "Ed25519": ("OKP", frozenset({"Ed25519"})),
    }
)

#: Every algorithm :class:`JwtVerifier` can be told to accept.
SUPPORTED_ALGORITHMS: Final = frozenset(_ALG_KEY_TYPES)


_HASHES: Final[Mapping[str, type[hashes.HashAlgorithm]]] = MappingProxyType(
    {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
)


#: Algorithms a local key can sign with (the verify side accepts these, ``ES512`` and ``Ed25519``).
SIGNING_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}
)
# EC algorithm -> (curve, width of r and of s in bytes).
_EC_SHAPES: Final[Mapping[str, tuple[type[ec.EllipticCurve], int]]] = MappingProxyType(
    {"ES256": (ec.SECP256R1, 32), "ES384": (ec.SECP384R1, 48)}
)


def _rsa_padding(alg: str) -> tuple[padding.AsymmetricPadding, hashes.HashAlgorithm]:
    """The padding and hash of an RS*/PS* algorithm, shared by signing and verification."""
    hash_cls = _HASHES[alg[2:]]
    digest = hash_cls()
    pad: padding.AsymmetricPadding = (
        padding.PKCS1v15()
        if alg[0] == "R"
        else padding.PSS(mgf=padding.MGF1(hash_cls()), salt_length=digest.digest_size)
    )
    return pad, digest


def signer(alg: str, key: Any) -> Callable[[bytes], bytes]:
    """A ``sign(signing_input) -> signature`` for ``alg`` with the private ``key``, bound once.

    The JWS form of the signature: raw ``r || s`` of fixed width for ECDSA (RFC 7518
    §3.4). Raises :class:`~flask_authflow.errors.SigningKeyError` when the key does
    not suit the algorithm.
    """
    if alg not in SIGNING_ALGORITHMS:
        raise SigningKeyError(f"unsupported signing algorithm {alg!r}")
    if alg[:2] in ("RS", "PS"):
        if not isinstance(key, rsa.RSAPrivateKey):
            raise SigningKeyError(f"{alg} needs an RSA key")
        pad, digest = _rsa_padding(alg)
        rsa_key = key

        def sign_rsa(data: bytes) -> bytes:
            return rsa_key.sign(data, pad, digest)

        return sign_rsa
    if alg in _EC_SHAPES:
        curve, size = _EC_SHAPES[alg]
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, curve):
            raise SigningKeyError(f"{alg} needs an EC key on {curve.name}")
        ecdsa = ec.ECDSA(_HASHES[alg[2:]]())
        ec_key = key

        def sign_ec(data: bytes) -> bytes:
            r, s = decode_dss_signature(ec_key.sign(data, ecdsa))
            return r.to_bytes(size, "big") + s.to_bytes(size, "big")

        return sign_ec
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningKeyError("EdDSA needs an Ed25519 key")
    sign_eddsa: Callable[[bytes], bytes] = key.sign
    return sign_eddsa
