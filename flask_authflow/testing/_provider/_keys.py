"""The provider's signing keys: the current one, the published set (JWKS), and signing with
them, spoiled on purpose when a test asks (the signing tamper options)."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from flask_authflow._clock import Clock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError, SigningKeyError
from flask_authflow.issuer._keys import LocalIdpSigningKey
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.jose._keys import jwk_thumbprint, parse_public_jwk, public_jwk

_RSA_BITS: Final = 2048  # fast to generate; a test provider only


class _P521Key:
    """An ES512 signing key (P-521); the library signs no ES512 itself, the test provider does."""

    algorithm = "ES512"

    def __init__(self) -> None:
        self._private = ec.generate_private_key(ec.SECP521R1())
        self.kid = jwk_thumbprint(self._private)

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._private.public_key()

    def public_jwk(self) -> dict[str, Any]:
        return public_jwk(self._private.public_key(), kid=self.kid, alg=self.algorithm)

    def sign(self, signing_input: bytes) -> bytes:
        r, s = decode_dss_signature(self._private.sign(signing_input, ec.ECDSA(hashes.SHA512())))
        return r.to_bytes(66, "big") + s.to_bytes(66, "big")


class _Ed25519Named:
    """An EdDSA key that signs and publishes under the fully specified name ``Ed25519``."""

    algorithm = "Ed25519"

    def __init__(self) -> None:
        self._inner = LocalIdpSigningKey.generate_ed25519()
        self.kid = self._inner.kid

    def public_key(self) -> Any:
        return self._inner.public_key()

    def public_jwk(self) -> dict[str, Any]:
        return {**self._inner.public_jwk(), "alg": self.algorithm}

    def sign(self, signing_input: bytes) -> bytes:
        return self._inner.sign(signing_input)


SigningKey = LocalIdpSigningKey | _P521Key | _Ed25519Named


def new_key(algorithm: str) -> SigningKey:
    """A fresh key for ``algorithm`` (a :class:`ConfigurationError` for one it cannot sign with)."""
    if algorithm == "ES512":
        return _P521Key()
    if algorithm == "Ed25519":
        return _Ed25519Named()
    try:
        return LocalIdpSigningKey.generate(algorithm, rsa_bits=_RSA_BITS)
    except SigningKeyError as exc:
        raise ConfigurationError(f"the test provider cannot sign with {algorithm!r}") from exc


def _compact(head: Mapping[str, Any], claims: Mapping[str, Any]) -> bytes:
    """The JWS signing input: the two base64url JSON segments joined by a dot."""
    return (
        b64url_encode(json.dumps(dict(head), separators=(",", ":")).encode())
        + "."
        + b64url_encode(json.dumps(dict(claims), separators=(",", ":")).encode())
    ).encode("ascii")


class KeyRing:
    """The current signing key and the keys published next to it; guarded by the provider's lock."""

    def __init__(self, algorithm: str, lock: threading.Lock) -> None:
        self._lock = lock
        self.current: SigningKey = new_key(algorithm)
        self._published: list[SigningKey] = [self.current]

    def rotate(self, algorithm: str | None, *, keep_old: bool) -> str:
        """Sign with a fresh key from now on (the old ones stay published with ``keep_old``)."""
        new = new_key(algorithm if algorithm is not None else self.current.algorithm)
        with self._lock:
            self._published = [*self._published, new] if keep_old else [new]
            self.current = new
        return new.kid

    def jwks(self, *, publish_alg: bool) -> dict[str, Any]:
        with self._lock:
            keys = [key.public_jwk() for key in self._published]
        if not publish_alg:
            keys = [{k: v for k, v in key.items() if k != "alg"} for key in keys]
        return {"keys": keys}

    def verifier(self, jwks: Mapping[str, Any], clock: Clock) -> JwtVerifier:
        """A :class:`JwtVerifier` over ``jwks``; allows RS256, ES256 and the keys' algorithms."""
        handle = JwksHandle()
        handle.replace_keys(parse_public_jwk(jwk) for jwk in jwks["keys"])
        with self._lock:
            algs = sorted({"RS256", "ES256"} | {key.algorithm for key in self._published})
        return JwtVerifier(handle, clock=clock).with_algorithms(algs)

    def at_hash(self, access_token: str) -> str:
        """The ``at_hash`` of ``access_token`` for the current algorithm (left half of its hash)."""
        alg = self.current.algorithm
        name = "sha512" if alg in ("EdDSA", "Ed25519") else f"sha{alg[-3:]}"
        digest = hashlib.new(name, access_token.encode("ascii")).digest()
        return b64url_encode(digest[: len(digest) // 2])

    def sign(
        self,
        claims: Mapping[str, Any],
        *,
        typ: str,
        tamper: Iterable[str],
        header: Mapping[str, Any] | None,
    ) -> str:
        """``claims`` as a compact JWS signed with the current key, spoiled as ``tamper`` says."""
        bad = frozenset(tamper)
        key = self._other_algorithm_key() if "wrong_alg" in bad else self.current
        head: dict[str, Any] = {"alg": key.algorithm, "kid": key.kid, "typ": typ}
        if "missing_kid" in bad:
            del head["kid"]
        if "unknown_kid" in bad:
            head["kid"] = "unknown-" + secrets.token_hex(6)
        if "alg_none" in bad:
            head = {"alg": "none", "typ": typ}
        elif "hs256_public_key" in bad:
            head["alg"] = "HS256"
        if header:
            head.update(header)
        signing_input = _compact(head, claims)
        if "alg_none" in bad:
            return signing_input.decode("ascii") + "."
        return signing_input.decode("ascii") + "." + b64url_encode(_signature(key, signing_input, bad))

    def _other_algorithm_key(self) -> SigningKey:
        """A published key of another algorithm family than the current one (made when missing)."""
        wanted = "RS256" if self.current.algorithm.startswith("ES") else "ES256"
        with self._lock:
            for key in self._published:
                if key.algorithm == wanted:
                    return key
        other = new_key(wanted)
        with self._lock:
            self._published.append(other)
        return other


def _signature(key: SigningKey, signing_input: bytes, bad: frozenset[str]) -> bytes:
    """The signature of ``signing_input``, or the spoiled one ``bad`` asks for."""
    if "hs256_public_key" in bad:
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        mac = hmac.HMAC(pem, hashes.SHA256())
        mac.update(signing_input)
        return mac.finalize()
    if "bad_signature" in bad:
        return key.sign(signing_input + b"x")
    return key.sign(signing_input)
