"""Signing keys of the local issuer.

A :class:`LocalIdpSigningKey` pairs a private key with its ``kid`` and JWS
algorithm. It signs JWS signing input with :mod:`cryptography` and never shows
key material in ``repr`` (tracebacks and logs end up in places keys must not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import KeyStoreError, SigningKeyError
from flask_authflow.jose._algorithms import SIGNING_ALGORITHMS as JOSE_SIGNING_ALGORITHMS
from flask_authflow.jose._algorithms import signer
from flask_authflow.jose._keys import MIN_RSA_BITS, jwk_thumbprint, load_private_key_pem, public_jwk

__all__ = ["SIGNING_ALGORITHMS", "LoadedKeys", "LocalIdpSigningKey", "validate_kid"]

_KID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: Algorithms a local issuer key can sign with (the JOSE layer's signing table).
SIGNING_ALGORITHMS: Final = JOSE_SIGNING_ALGORITHMS


def validate_kid(kid: object) -> str:
    """Return ``kid`` if it matches ``^[A-Za-z0-9_-]{1,64}$``, else raise :class:`SigningKeyError`.

    Key ids become file names and URL-visible values, so the alphabet is small on
    purpose: no dots, slashes, NUL bytes or unbounded lengths.
    """
    if not isinstance(kid, str) or _KID_RE.fullmatch(kid) is None:
        shown = repr(kid)[:80] if isinstance(kid, str) else type(kid).__name__
        raise SigningKeyError(f"invalid key id {shown}: must match ^[A-Za-z0-9_-]{{1,64}}$")
    return kid


SigningPrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _default_algorithm(key: SigningPrivateKey) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if isinstance(key.curve, ec.SECP256R1):
            return "ES256"
        if isinstance(key.curve, ec.SECP384R1):
            return "ES384"
        raise SigningKeyError(f"unsupported EC curve {key.curve.name}; use P-256 or P-384")
    return "EdDSA"


class LocalIdpSigningKey:
    """A private signing key with its ``kid`` and algorithm; immutable.

    Create one with :meth:`generate_es256` (the default choice: small, fast
    signatures), :meth:`generate_rs256` or :meth:`from_pem`. The default ``kid`` is
    the RFC 7638 thumbprint of the public key, so it is stable across restarts.
    """

    __slots__ = ("_algorithm", "_header_segment", "_kid", "_private", "_sign")

    def __init__(
        self, private_key: SigningPrivateKey, *, algorithm: str | None = None, kid: str | None = None
    ) -> None:
        if isinstance(private_key, rsa.RSAPrivateKey):
            if private_key.key_size < MIN_RSA_BITS:
                raise SigningKeyError(f"RSA keys must have at least {MIN_RSA_BITS} bits")
        elif not isinstance(private_key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise SigningKeyError(f"unsupported private key type {type(private_key).__name__}")
        alg = algorithm if algorithm is not None else _default_algorithm(private_key)
        if alg not in SIGNING_ALGORITHMS:
            raise SigningKeyError(f"unsupported signing algorithm {alg!r}")
        self._private = private_key
        self._algorithm = alg
        self._sign = self._make_signer(private_key, alg)
        self._kid = validate_kid(kid) if kid is not None else jwk_thumbprint(private_key)
        self._header_segment = b64url_encode(
            ('{"alg":"%s","kid":"%s","typ":"JWT"}' % (self._algorithm, self._kid)).encode("ascii")  # noqa: UP031
        )

    @staticmethod
    def _make_signer(key: SigningPrivateKey, alg: str) -> Any:
        """Bind the signing call once (the JOSE layer's entry for ``alg``); minting is hot."""
        return signer(alg, key)

    # -- constructors ------------------------------------------------------------------------------

    @classmethod
    def generate(cls, algorithm: str, *, rsa_bits: int = 3072) -> LocalIdpSigningKey:
        """A fresh key for ``algorithm``: the one place that maps an algorithm to a key type.

        ES256 → P-256, ES384 → P-384, EdDSA → Ed25519, RS*/PS* → RSA of ``rsa_bits``.
        """
        if algorithm == "ES256":
            return cls.generate_es256()
        if algorithm == "ES384":
            return cls.generate_es384()
        if algorithm == "EdDSA":
            return cls.generate_ed25519()
        if algorithm[:2] in ("RS", "PS") and algorithm in SIGNING_ALGORITHMS:
            return cls.generate_rsa(algorithm, rsa_bits)
        raise SigningKeyError(f"cannot generate a key for {algorithm!r}")

    @classmethod
    def generate_es256(cls) -> LocalIdpSigningKey:
        """A fresh P-256 key for ES256 (the issuer's default algorithm)."""
        return cls(ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")

    @classmethod
    def generate_es384(cls) -> LocalIdpSigningKey:
        """A fresh P-384 key for ES384."""
        return cls(ec.generate_private_key(ec.SECP384R1()), algorithm="ES384")

    @classmethod
    def generate_rs256(cls, bits: int = 3072) -> LocalIdpSigningKey:
        """A fresh RSA key for RS256; 3072 bits by default (NIST's 128-bit level)."""
        return cls.generate_rsa("RS256", bits)

    @classmethod
    def generate_rsa(cls, algorithm: str = "RS256", bits: int = 3072) -> LocalIdpSigningKey:
        """A fresh RSA key for ``algorithm`` (RS256/384/512, PS256/384/512); refuses < 2048 bits."""
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < MIN_RSA_BITS:
            raise SigningKeyError(f"RSA keys must have at least {MIN_RSA_BITS} bits")
        if not (algorithm[:2] in ("RS", "PS") and algorithm in SIGNING_ALGORITHMS):
            raise SigningKeyError(f"{algorithm!r} is not an RSA algorithm")
        return cls(rsa.generate_private_key(public_exponent=65537, key_size=bits), algorithm=algorithm)

    @classmethod
    def generate_ed25519(cls) -> LocalIdpSigningKey:
        """A fresh Ed25519 key for EdDSA."""
        return cls(ed25519.Ed25519PrivateKey.generate(), algorithm="EdDSA")

    @classmethod
    def from_pem(
        cls,
        pem: bytes | str,
        *,
        algorithm: str | None = None,
        kid: str | None = None,
        password: bytes | None = None,
    ) -> LocalIdpSigningKey:
        """Load a PEM private key (PKCS#8 or traditional).

        Without ``algorithm`` it is inferred: RSA → RS256, P-256 → ES256,
        P-384 → ES384, Ed25519 → EdDSA.
        """
        key = load_private_key_pem(pem, password)
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise SigningKeyError(f"unsupported private key type {type(key).__name__}")
        return cls(key, algorithm=algorithm, kid=kid)

    def with_key_id(self, kid: str) -> LocalIdpSigningKey:
        """The same key under another ``kid`` (a new value; this one is unchanged)."""
        return LocalIdpSigningKey(self._private, algorithm=self._algorithm, kid=kid)

    def with_algorithm(self, algorithm: str) -> LocalIdpSigningKey:
        """The same key used with another compatible algorithm (e.g. RS384)."""
        return LocalIdpSigningKey(self._private, algorithm=algorithm, kid=self._kid)

    # -- accessors ---------------------------------------------------------------------------------

    @property
    def kid(self) -> str:
        return self._kid

    @property
    def algorithm(self) -> str:
        return self._algorithm

    @property
    def header_segment(self) -> str:
        """The encoded default JWS header ``{"alg","kid","typ":"JWT"}`` (cached)."""
        return self._header_segment

    def public_key(self) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey:
        return self._private.public_key()

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK with ``kid``, ``alg`` and ``use=sig``; never private members."""
        return public_jwk(self._private.public_key(), kid=self._kid, alg=self._algorithm)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM, for key stores; handle with care."""
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def sign(self, signing_input: bytes) -> bytes:
        """The JWS signature (raw ``r || s`` for ECDSA) over ``signing_input``."""
        result: bytes = self._sign(signing_input)
        return result

    def __repr__(self) -> str:
        return f"LocalIdpSigningKey(kid={self._kid!r}, algorithm={self._algorithm!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LocalIdpSigningKey):
            return NotImplemented
        return (
            self._kid == other._kid
            and self._algorithm == other._algorithm
            and self.public_jwk() == other.public_jwk()
        )

    def __hash__(self) -> int:
        return hash((self._kid, self._algorithm))

    def __reduce__(self) -> Any:
        # Pickling would silently copy private key material into caches and queues.
        raise TypeError("LocalIdpSigningKey cannot be pickled; store private_pem() in a key store")


@dataclass(frozen=True, slots=True)
class LoadedKeys:
    """What a key store holds: the ``current`` signing key and older ``historical`` keys.

    Historical keys no longer sign but stay in the JWKS so that tokens they signed
    keep verifying until they expire.
    """

    current: LocalIdpSigningKey
    historical: tuple[LocalIdpSigningKey, ...] = ()

    def __init__(self, current: LocalIdpSigningKey, historical: Iterable[LocalIdpSigningKey] = ()) -> None:
        hist = tuple(historical)
        if not isinstance(current, LocalIdpSigningKey) or not all(
            isinstance(k, LocalIdpSigningKey) for k in hist
        ):
            raise KeyStoreError("LoadedKeys holds LocalIdpSigningKey values only")
        kids = [current.kid, *(k.kid for k in hist)]
        if len(set(kids)) != len(kids):
            raise KeyStoreError("duplicate kid among loaded keys")
        object.__setattr__(self, "current", current)
        object.__setattr__(self, "historical", hist)

    @property
    def all_keys(self) -> tuple[LocalIdpSigningKey, ...]:
        """The current key first, then the historical ones."""
        return (self.current, *self.historical)

    def kids(self) -> tuple[str, ...]:
        return tuple(k.kid for k in self.all_keys)
