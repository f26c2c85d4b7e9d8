"""Keys: loading PEM private keys, public JWKs, thumbprints and the verification keys of a JWK set."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey

from flask_authflow.errors import (
    SigningKeyError,
)
from flask_authflow.jose._algorithms import _ALG_KEY_TYPES

#: Regular expression a key id must match when flask-authflow creates one.
KID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}$"

#: Smallest RSA modulus accepted for signing or verification.
MIN_RSA_BITS: Final = 2048

# Public members per key type; anything else in a JWK (notably the private
# members d, p, q, dp, dq, qi) is dropped before the key is imported or published.
_PUBLIC_MEMBERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {"RSA": ("n", "e"), "EC": ("crv", "x", "y"), "OKP": ("crv", "x")}
)
_META_MEMBERS: Final = ("kid", "alg", "use", "key_ops")
_KEY_CLASSES: Final[Mapping[str, type[RSAKey] | type[ECKey] | type[OKPKey]]] = MappingProxyType(
    {"RSA": RSAKey, "EC": ECKey, "OKP": OKPKey}
)


# -- keys --------------------------------------------------------------------------------------------

PrivateKey = (
    rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
)
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey


def load_private_key_pem(pem: bytes | str, password: bytes | None = None) -> PrivateKey:
    """Load an RSA, EC or Ed25519/Ed448 private key from PEM.

    Raises :class:`SigningKeyError` (never echoing the input) for anything else, or
    for RSA keys under 2048 bits.
    """
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except (ValueError, TypeError, UnicodeError) as exc:
        raise SigningKeyError("could not load the private key PEM (malformed or wrong password)") from exc
    except Exception as exc:
        raise SigningKeyError("could not load the private key PEM") from exc
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise SigningKeyError(f"RSA keys must have at least {MIN_RSA_BITS} bits, got {key.key_size}")
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        return key
    raise SigningKeyError(f"unsupported private key type {type(key).__name__}")


def _joserfc_key(native: PrivateKey | PublicKey) -> Key:
    if isinstance(native, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return RSAKey(native, native)
    if isinstance(native, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return ECKey(native, native)
    return OKPKey(native, native)


def public_jwk(
    native: PrivateKey | PublicKey, *, kid: str | None = None, alg: str | None = None
) -> dict[str, Any]:
    """The public JWK of a key, with ``use=sig`` and optional ``kid``/``alg``.

    Built from joserfc's key model, then filtered to the public members so a
    private key can never leak into a published set.
    """
    data = dict(_joserfc_key(native).as_dict(private=False))
    kty = str(data["kty"])
    out: dict[str, Any] = {"kty": kty}
    for name in _PUBLIC_MEMBERS[kty]:
        out[name] = data[name]
    if kid is not None:
        out["kid"] = kid
    if alg is not None:
        out["alg"] = alg
    out["use"] = "sig"
    return out


def jwk_thumbprint(native: PrivateKey | PublicKey) -> str:
    """The RFC 7638 SHA-256 thumbprint of a key: a stable default ``kid``."""
    return _joserfc_key(native).thumbprint()


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """One public key of a JWK set, parsed once and ready to verify with."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    use: str | None
    jwk: Mapping[str, Any] = field(repr=False)
    key: Key = field(repr=False, compare=False)

    def accepts(self, alg: str) -> bool:
        """Whether this key may verify a signature made with ``alg``."""
        spec = _ALG_KEY_TYPES.get(alg)
        if spec is None or spec[0] != self.kty:
            return False
        if spec[1] is not None and self.crv not in spec[1]:
            return False
        if self.alg is not None and self.alg != alg:
            return False
        return self.use is None or self.use == "sig"


_CURVES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {"EC": frozenset({"P-256", "P-384", "P-521"}), "OKP": frozenset({"Ed25519", "Ed448"})}
)


def _public_members(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``kty``, public key members and metadata of a JWK; never a private member."""
    kty = data.get("kty")
    if not isinstance(kty, str) or kty not in _PUBLIC_MEMBERS:
        raise ValueError(f"unsupported kty {kty!r}")
    clean: dict[str, Any] = {"kty": kty}
    for name in _PUBLIC_MEMBERS[kty]:
        value = data.get(name)
        if not isinstance(value, str):
            raise ValueError(f"JWK member {name!r} missing or not a string")
        clean[name] = value
    for name in _META_MEMBERS:
        if name in data:
            clean[name] = data[name]
    return clean


def _check_signature_use(clean: Mapping[str, Any]) -> None:
    """Refuse a JWK whose metadata or curve rules out verifying our algorithms with it."""
    use = clean.get("use")
    if use is not None and use != "sig":
        raise ValueError("not a signature key")
    kid = clean.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ValueError("kid must be a string")
    alg = clean.get("alg")
    if alg is not None and alg not in _ALG_KEY_TYPES:
        raise ValueError(f"unsupported alg {alg!r}")
    key_ops = clean.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise ValueError("key_ops does not allow verify")
    curves = _CURVES.get(clean["kty"])
    if curves is not None and clean.get("crv") not in curves:
        raise ValueError(f"unsupported curve {clean.get('crv')!r}")


def parse_public_jwk(data: Mapping[str, Any]) -> VerificationKey:
    """Parse one JWK into a :class:`VerificationKey`, keeping only public members.

    Raises :class:`ValueError` for keys that cannot be used for signatures
    (``use=enc``, unknown ``kty``/curve, RSA under 2048 bits, malformed values).
    """
    if not isinstance(data, Mapping):
        raise ValueError("a JWK must be a JSON object")
    clean = _public_members(data)
    _check_signature_use(clean)
    kty = clean["kty"]
    try:
        key = _KEY_CLASSES[kty].import_key(clean)
        public = key.public_key
    except Exception as exc:
        raise ValueError("malformed JWK") from exc
    if isinstance(public, rsa.RSAPublicKey) and public.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA key under {MIN_RSA_BITS} bits")
    crv = clean.get("crv")
    return VerificationKey(
        kid=clean.get("kid"),
        kty=kty,
        crv=crv if isinstance(crv, str) else None,
        alg=clean.get("alg"),
        use=clean.get("use"),
        jwk=MappingProxyType(dict(clean)),
        key=key,
    )
