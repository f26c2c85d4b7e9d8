"""JOSE plumbing: key loading, shared JWK sets and the one JWT verification path.

Every signature check in flask-authflow goes through :class:`JwtVerifier` so that
there is exactly one place to audit. It is deliberately strict and generic:

* the caller names the accepted algorithms (no default, never ``none`` or HMAC),
* the key is picked by ``kid`` from a :class:`JwksHandle` and must match the
  algorithm's key type (and curve),
* ``exp`` is required; ``nbf``, ``iat``, ``aud`` and (optionally) ``iss`` are
  checked with a clock-skew allowance taken from an injected :class:`Clock`,
* anything malformed raises :class:`TokenVerificationError` and nothing else.

Protocol-specific rules (an OIDC ``nonce``, ``azp``, logout ``events``) belong to
the callers, which layer them on top of :class:`VerifiedClaims`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey
from joserfc.jws import JWSRegistry

from .clock import Clock, SystemClock
from .errors import (
    ConfigurationError,
    SigningKeyError,
    TokenCheck,
    TokenVerificationError,
    UnknownKeyId,
)

__all__ = [
    "KID_PATTERN",
    "MAX_TOKEN_LENGTH",
    "SUPPORTED_ALGORITHMS",
    "JwksHandle",
    "JwksSnapshot",
    "JwtVerifier",
    "TokenCheck",
    "VerificationKey",
    "VerifiedClaims",
    "b64url_decode",
    "b64url_encode",
    "jwk_thumbprint",
    "load_private_key_pem",
    "parse_public_jwk",
    "public_jwk",
]

#: Longest compact token accepted, in characters; larger input is refused before parsing.
MAX_TOKEN_LENGTH: Final = 16 * 1024

#: Regular expression a key id must match when flask-authflow creates one.
KID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}$"

#: Smallest RSA modulus accepted for signing or verification.
MIN_RSA_BITS: Final = 2048

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
        "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
        "Ed25519": ("OKP", frozenset({"Ed25519"})),
    }
)

#: Every algorithm :class:`JwtVerifier` can be told to accept.
SUPPORTED_ALGORITHMS: Final = frozenset(_ALG_KEY_TYPES)

# Public members per key type; anything else in a JWK (notably the private
# members d, p, q, dp, dq, qi) is dropped before the key is imported or published.
_PUBLIC_MEMBERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {"RSA": ("n", "e"), "EC": ("crv", "x", "y"), "OKP": ("crv", "x")}
)
_META_MEMBERS: Final = ("kid", "alg", "use", "key_ops")
_KEY_CLASSES: Final[Mapping[str, type[RSAKey] | type[ECKey] | type[OKPKey]]] = MappingProxyType(
    {"RSA": RSAKey, "EC": ECKey, "OKP": OKPKey}
)


# -- base64url ---------------------------------------------------------------------------------------


def b64url_encode(data: bytes) -> str:
    """Base64url without padding, as JWS compact serialisation wants."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_TO_STANDARD_ALPHABET: Final = bytes.maketrans(b"-_", b"+/")
# Last characters whose unused low bits are zero, for 2 and 3 leftover characters.
_CANONICAL_LAST: Final = {2: frozenset(b"AQgw"), 1: frozenset(b"AEIMQUYcgkosw048")}


def b64url_decode(data: str) -> bytes:
    """Strict base64url decoding: no padding, no ``+``/``/``, no stray bits.

    Strictness matters: a lenient decoder accepts many spellings of one signature,
    which makes tokens malleable.
    """
    raw = data.encode("ascii")  # UnicodeEncodeError for non-ASCII input: callers map it
    pad = -len(raw) % 4
    if pad == 3 or b"=" in raw or b"+" in raw or b"/" in raw:
        raise ValueError("invalid base64url")
    if pad and raw[-1] not in _CANONICAL_LAST[pad]:
        raise ValueError("non-canonical base64url")
    return binascii.a2b_base64(raw.translate(_TO_STANDARD_ALPHABET) + b"=" * pad, strict_mode=True)


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


def parse_public_jwk(data: Mapping[str, Any]) -> VerificationKey:
    """Parse one JWK into a :class:`VerificationKey`, keeping only public members.

    Raises :class:`ValueError` for keys that cannot be used for signatures
    (``use=enc``, unknown ``kty``/curve, RSA under 2048 bits, malformed values).
    """
    if not isinstance(data, Mapping):
        raise ValueError("a JWK must be a JSON object")
    kty = data.get("kty")
    if not isinstance(kty, str) or kty not in _PUBLIC_MEMBERS:
        raise ValueError(f"unsupported kty {kty!r}")
    use = data.get("use")
    if use is not None and use != "sig":
        raise ValueError("not a signature key")
    clean: dict[str, Any] = {"kty": kty}
    for name in _PUBLIC_MEMBERS[kty]:
        value = data.get(name)
        if not isinstance(value, str):
            raise ValueError(f"JWK member {name!r} missing or not a string")
        clean[name] = value
    for name in _META_MEMBERS:
        if name in data:
            clean[name] = data[name]
    kid = clean.get("kid")
    alg = clean.get("alg")
    if kid is not None and not isinstance(kid, str):
        raise ValueError("kid must be a string")
    if alg is not None and alg not in _ALG_KEY_TYPES:
        raise ValueError(f"unsupported alg {alg!r}")
    key_ops = clean.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise ValueError("key_ops does not allow verify")
    crv = clean.get("crv")
    if kty == "EC" and crv not in ("P-256", "P-384"):
        raise ValueError(f"unsupported curve {crv!r}")
    if kty == "OKP" and crv not in ("Ed25519", "Ed448"):
        raise ValueError(f"unsupported curve {crv!r}")
    try:
        key = _KEY_CLASSES[kty].import_key(clean)
        public = key.public_key
    except Exception as exc:
        raise ValueError("malformed JWK") from exc
    if isinstance(public, rsa.RSAPublicKey) and public.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA key under {MIN_RSA_BITS} bits")
    return VerificationKey(
        kid=kid,
        kty=kty,
        crv=crv if isinstance(crv, str) else None,
        alg=alg,
        use=use,
        jwk=MappingProxyType(dict(clean)),
        key=key,
    )


class _Selected(NamedTuple):
    key: VerificationKey
    check: Callable[[bytes, bytes], bool]


_HASHES: Final[Mapping[str, type[hashes.HashAlgorithm]]] = MappingProxyType(
    {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
)


def _signature_checker(alg: str, key: VerificationKey) -> Callable[[bytes, bytes], bool]:
    """A ``check(signing_input, signature) -> bool`` for ``alg`` over ``key``, built once per key.

    joserfc parsed the key and validates here, once, that it suits the algorithm
    (type, curve, ``use``, ``alg``); the per-token work is then one
    :mod:`cryptography` call with pre-built padding and hash objects (what
    joserfc's own algorithm classes do, without their per-call lookups).
    """
    JWSRegistry.algorithms[alg].check_key(key.key)  # raises on a mismatch; accepts() ran first
    public: Any = key.key.public_key
    if alg[:2] in ("RS", "PS"):
        hash_cls = _HASHES[alg[2:]]
        digest = hash_cls()
        pad: padding.AsymmetricPadding = (
            padding.PKCS1v15()
            if alg[0] == "R"
            else padding.PSS(mgf=padding.MGF1(hash_cls()), salt_length=digest.digest_size)
        )

        def check_rsa(message: bytes, signature: bytes) -> bool:
            try:
                public.verify(signature, message, pad, digest)
            except InvalidSignature:
                return False
            return True

        return check_rsa
    if alg in ("ES256", "ES384"):
        size = 32 if alg == "ES256" else 48
        ecdsa = ec.ECDSA(_HASHES[alg[2:]]())

        def check_ec(message: bytes, signature: bytes) -> bool:
            # JWS carries raw r || s of fixed width (RFC 7518 §3.4); anything else is invalid.
            if len(signature) != 2 * size:
                return False
            der = encode_dss_signature(
                int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            )
            try:
                public.verify(der, message, ecdsa)
            except InvalidSignature:
                return False
            return True

        return check_ec

    def check_eddsa(message: bytes, signature: bytes) -> bool:
        try:
            public.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    return check_eddsa


# -- shared JWK sets ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JwksSnapshot:
    """An immutable view of a JWK set at one version; verifiers work on one snapshot."""

    version: int
    keys: tuple[VerificationKey, ...]
    skipped: int = 0
    by_kid: Mapping[str | None, tuple[VerificationKey, ...]] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )
    # (kid, alg) -> key, filled lazily by verifiers; a snapshot never changes, so
    # neither do the answers.
    _selected: dict[tuple[str | None, str], _Selected] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def build(cls, keys: Iterable[VerificationKey], version: int, skipped: int = 0) -> JwksSnapshot:
        ordered = tuple(keys)
        index: dict[str | None, list[VerificationKey]] = {}
        for key in ordered:
            index.setdefault(key.kid, []).append(key)
        return cls(
            version=version,
            keys=ordered,
            skipped=skipped,
            by_kid=MappingProxyType({kid: tuple(items) for kid, items in index.items()}),
        )

    def as_dict(self) -> dict[str, Any]:
        """The public JWK set document ``{"keys": [...]}``."""
        return {"keys": [dict(key.jwk) for key in self.keys]}

    def algorithms(self) -> list[str]:
        """The ``alg`` values named by the keys, in order, without duplicates."""
        seen: dict[str, None] = {}
        for key in self.keys:
            if key.alg is not None:
                seen.setdefault(key.alg, None)
        return list(seen)


def _parse_jwk_set(
    jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]], strict: bool
) -> tuple[list[VerificationKey], int]:
    entries: Any = jwks.get("keys") if isinstance(jwks, Mapping) else jwks
    if not isinstance(entries, list | tuple):
        raise ValueError('a JWK set must be {"keys": [...]}')
    keys: list[VerificationKey] = []
    skipped = 0
    for entry in entries:
        try:
            keys.append(parse_public_jwk(entry))
        except ValueError:
            if strict:
                raise
            skipped += 1  # RFC 7517 §5: ignore keys we do not understand
    return keys, skipped


class JwksHandle:
    """A lock-guarded, replaceable JWK set shared by issuers and verifiers.

    The issuer replaces the set in place on rotation; every verifier holding the
    handle sees the new keys at its next call. ``version`` grows by one on each
    replacement so caches can tell snapshots apart.
    """

    def __init__(
        self, jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None, *, strict: bool = False
    ) -> None:
        self._lock = threading.Lock()
        keys, skipped = _parse_jwk_set(jwks, strict) if jwks is not None else ([], 0)
        self._snapshot = JwksSnapshot.build(keys, version=0, skipped=skipped)

    def snapshot(self) -> JwksSnapshot:
        """The current immutable snapshot."""
        with self._lock:
            return self._snapshot

    @property
    def version(self) -> int:
        return self.snapshot().version

    def replace(
        self, jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, strict: bool = False
    ) -> JwksSnapshot:
        """Swap in a new key set atomically and return the new snapshot.

        Keys that cannot verify signatures are skipped (counted in ``skipped``)
        unless ``strict`` is true, in which case a :class:`ValueError` is raised and
        the old set stays in place.
        """
        keys, skipped = _parse_jwk_set(jwks, strict)  # parse outside the lock
        return self.replace_keys(keys, skipped=skipped)

    def replace_keys(self, keys: Iterable[VerificationKey], *, skipped: int = 0) -> JwksSnapshot:
        """Like :meth:`replace` with already parsed keys."""
        ordered = tuple(keys)
        with self._lock:
            snapshot = JwksSnapshot.build(ordered, version=self._snapshot.version + 1, skipped=skipped)
            self._snapshot = snapshot
            return snapshot

    def as_dict(self) -> dict[str, Any]:
        """The public JWK set document of the current snapshot."""
        return self.snapshot().as_dict()

    def __repr__(self) -> str:
        snap = self.snapshot()
        kids = [key.kid for key in snap.keys]
        return f"<JwksHandle version={snap.version} kids={kids!r}>"


# -- verification ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifiedClaims:
    """The claims of a token that passed every check of :meth:`JwtVerifier.verify`."""

    sub: str | None
    iss: str | None
    aud: tuple[str, ...]
    exp: int
    iat: int | None
    nbf: int | None
    jti: str | None
    claims: Mapping[str, Any] = field(repr=False)
    header: Mapping[str, Any] = field(repr=False)
    kid: str | None = None
    alg: str = ""

    @property
    def expires_at(self) -> datetime:
        return datetime.fromtimestamp(self.exp, tz=UTC)

    @property
    def issued_at(self) -> datetime | None:
        return None if self.iat is None else datetime.fromtimestamp(self.iat, tz=UTC)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate members are ambiguous (parsers disagree on which wins); refuse them.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate member in JSON object")
    return result


_DECODER: Final = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant)


def _json_object(segment: str, what: str) -> dict[str, Any]:
    try:
        raw = b64url_decode(segment)
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise TokenVerificationError(f"malformed token: {what} is not base64url") from exc
    try:
        value = _DECODER.decode(raw.decode("utf-8"))
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise TokenVerificationError(f"malformed token: {what} is not JSON") from exc
    if not isinstance(value, dict):
        raise TokenVerificationError(f"malformed token: {what} is not a JSON object")
    return value


_MEMO_SIZE: Final = 256
_HEADER_CACHE: dict[str, tuple[Mapping[str, Any], str, str | None]] = {}


def _parse_header(segment: str) -> tuple[Mapping[str, Any], str, str | None]:
    """Parse and check a header segment: ``(header, alg, kid)``.

    Tokens of one issuer share their header byte for byte, so results are kept
    in a small bounded cache (parsing is a pure function of the segment; only
    well-formed headers are cached).
    """
    cached = _HEADER_CACHE.get(segment)
    if cached is not None:
        return cached
    header = _json_object(segment, "header")
    alg = header.get("alg")
    if not isinstance(alg, str):
        raise TokenVerificationError("missing alg", TokenCheck.ALGORITHM)
    if "crit" in header:
        # We implement no critical extensions (RFC 7515 §4.1.11), so any is fatal;
        # this also refuses unencoded payloads (b64=false, RFC 7797).
        raise TokenVerificationError("unsupported critical header", TokenCheck.HEADER)
    if "zip" in header or "enc" in header:
        # Compressed payloads (a decompression bomb) and JWEs are never accepted.
        raise TokenVerificationError("unsupported zip or enc header", TokenCheck.HEADER)
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenVerificationError("invalid kid", TokenCheck.HEADER)
    result = (MappingProxyType(header), alg, kid)
    if len(_HEADER_CACHE) >= _MEMO_SIZE:
        _HEADER_CACHE.clear()
    _HEADER_CACHE[segment] = result
    return result


def _numeric_date(claims: Mapping[str, Any], name: str) -> int | None:
    value = claims.get(name)
    if value is None:
        if name in claims:
            raise TokenVerificationError(f"invalid {name} claim", TokenCheck.CLAIM)
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenVerificationError(f"invalid {name} claim", TokenCheck.CLAIM)
    return math.floor(value)


def _leeway_seconds(leeway: float | timedelta) -> float:
    seconds = leeway.total_seconds() if isinstance(leeway, timedelta) else float(leeway)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError("leeway must be a non-negative number of seconds")
    return seconds


class JwtVerifier:
    """Verifies compact JWS tokens against a :class:`JwksHandle`.

    Usage::

        verifier = JwtVerifier(handle).with_algorithms(["ES256"])
        claims = verifier.verify(token, "my-api", issuer="https://idp.example")

    The algorithm list is mandatory: a verifier that "accepts whatever the token
    says" is how ``alg=none`` and HMAC key-confusion attacks work. Keys are parsed
    and matched to the algorithm by joserfc (once per key); each signature is then
    one :mod:`cryptography` verify call, which keeps verification close to the raw
    cost of the signature check.
    """

    __slots__ = ("_algorithms", "_clock", "_handle")

    def __init__(
        self,
        jwks_handle: JwksHandle,
        algorithms: Collection[str] | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(jwks_handle, JwksHandle):
            raise ConfigurationError("JwtVerifier needs a JwksHandle")
        self._handle = jwks_handle
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._algorithms: frozenset[str] | None = None
        if algorithms is not None:
            self._algorithms = self._check_algorithms(algorithms)

    @staticmethod
    def _check_algorithms(algorithms: Collection[str]) -> frozenset[str]:
        if isinstance(algorithms, str):
            raise ConfigurationError("algorithms must be a list of names, not a string")
        allowed = frozenset(algorithms)
        if not allowed:
            raise ConfigurationError("JwtVerifier needs a non-empty algorithm allowlist")
        bad = sorted(a for a in allowed if a not in SUPPORTED_ALGORITHMS)
        if bad:
            raise ConfigurationError(
                f"unsupported or unsafe algorithms {bad!r}; choose from {sorted(SUPPORTED_ALGORITHMS)!r}"
            )
        return allowed

    def with_algorithms(self, algorithms: Collection[str]) -> JwtVerifier:
        """A verifier accepting exactly ``algorithms`` (asymmetric ones only)."""
        clone = JwtVerifier(self._handle, clock=self._clock)
        clone._algorithms = self._check_algorithms(algorithms)
        return clone

    def with_clock(self, clock: Clock) -> JwtVerifier:
        """A verifier reading time from ``clock`` (a MockClock in tests)."""
        clone = JwtVerifier(self._handle, clock=clock)
        clone._algorithms = self._algorithms
        return clone

    @property
    def algorithms(self) -> frozenset[str]:
        if self._algorithms is None:
            raise ConfigurationError("JwtVerifier has no algorithm allowlist; call with_algorithms()")
        return self._algorithms

    @property
    def jwks_handle(self) -> JwksHandle:
        return self._handle

    def verify(
        self,
        token: str | bytes,
        audience: str | Collection[str],
        *,
        issuer: str | None = None,
        leeway: float | timedelta = 60,
        clock: Clock | None = None,
    ) -> VerifiedClaims:
        """Verify ``token`` and return its claims, or raise :class:`TokenVerificationError`.

        ``audience`` is required: the ``aud`` claim (string or array) must contain
        it (or one of them). ``issuer``, when given, must equal ``iss`` exactly.
        ``leeway`` (seconds) absorbs clock skew for ``exp``, ``nbf`` and ``iat``.
        """
        allowed = self._algorithms
        if allowed is None:
            raise ConfigurationError("JwtVerifier has no algorithm allowlist; call with_algorithms()")
        if isinstance(audience, str) and audience:
            audiences: str | frozenset[str] = audience  # the common case, kept cheap
        else:
            audiences = frozenset(() if isinstance(audience, str) else audience)
            if not audiences or not all(isinstance(a, str) and a for a in audiences):
                raise ConfigurationError("verify() needs a non-empty audience")
        skew = leeway if type(leeway) is int and leeway >= 0 else _leeway_seconds(leeway)
        now = (clock if clock is not None else self._clock).now().timestamp()
        try:
            return self._verify(token, allowed, audiences, issuer, skew, now)
        except TokenVerificationError:
            raise
        except Exception as exc:
            raise TokenVerificationError("malformed token") from exc

    def _verify(
        self,
        token: str | bytes,
        allowed: frozenset[str],
        audiences: str | frozenset[str],
        issuer: str | None,
        skew: float,
        now: float,
    ) -> VerifiedClaims:
        if isinstance(token, bytes | bytearray):
            if len(token) > MAX_TOKEN_LENGTH:
                raise TokenVerificationError("token too large")
            try:
                token = bytes(token).decode("ascii")
            except UnicodeDecodeError as exc:
                raise TokenVerificationError("malformed token: not ASCII") from exc
        if not isinstance(token, str):
            raise TokenVerificationError("malformed token: not a string")
        if len(token) > MAX_TOKEN_LENGTH:
            raise TokenVerificationError("token too large")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenVerificationError("malformed token: expected three segments")
        header_b64, payload_b64, signature_b64 = parts
        if not header_b64 or not payload_b64 or not signature_b64:
            raise TokenVerificationError("malformed token: empty segment")

        header, alg, kid = _parse_header(header_b64)
        if alg not in allowed:
            raise TokenVerificationError("algorithm not allowed", TokenCheck.ALGORITHM)
        selected = self._select_key(kid, alg)
        try:
            signature = b64url_decode(signature_b64)
        except (ValueError, binascii.Error, UnicodeError) as exc:
            raise TokenVerificationError("malformed token: signature is not base64url") from exc
        if not selected.check(f"{header_b64}.{payload_b64}".encode("ascii"), signature):
            raise TokenVerificationError("bad signature", TokenCheck.SIGNATURE)

        claims = _json_object(payload_b64, "payload")
        return _check_claims(header, claims, kid, alg, audiences, issuer, skew, now)

    def _select_key(self, kid: str | None, alg: str) -> _Selected:
        snapshot = self._handle.snapshot()
        selected = snapshot._selected.get((kid, alg))
        if selected is not None:
            return selected
        if kid is None:
            # Without a kid only an unambiguous set is acceptable.
            usable = [k for k in snapshot.keys if k.accepts(alg)]
            if len(usable) != 1:
                raise TokenVerificationError("missing kid", TokenCheck.UNKNOWN_KID)
            key = usable[0]
        else:
            candidates = snapshot.by_kid.get(kid)
            if not candidates:
                raise UnknownKeyId(kid)
            for key in candidates:
                if key.accepts(alg):
                    break
            else:
                raise TokenVerificationError("key does not match algorithm", TokenCheck.ALGORITHM)
        selected = _Selected(key, _signature_checker(alg, key))
        if len(snapshot._selected) < _MEMO_SIZE:
            snapshot._selected[(kid, alg)] = selected
        return selected

    def __repr__(self) -> str:
        algs = sorted(self._algorithms) if self._algorithms is not None else None
        return f"<JwtVerifier algorithms={algs!r} {self._handle!r}>"


def _check_claims(
    header: Mapping[str, Any],
    claims: dict[str, Any],
    kid: str | None,
    alg: str,
    audiences: str | frozenset[str],
    issuer: str | None,
    skew: float,
    now: float,
) -> VerifiedClaims:
    raw_exp = claims.get("exp")
    if raw_exp is None:
        raise TokenVerificationError("missing exp claim", TokenCheck.CLAIM)
    exp = _numeric_date(claims, "exp")
    if exp is None or now >= raw_exp + skew:
        raise TokenVerificationError("token expired", TokenCheck.EXPIRED)
    nbf = _numeric_date(claims, "nbf") if "nbf" in claims else None
    if nbf is not None and now + skew < claims["nbf"]:
        raise TokenVerificationError("token not yet valid", TokenCheck.NOT_YET_VALID)
    iat = _numeric_date(claims, "iat") if "iat" in claims else None
    if iat is not None and claims["iat"] > now + skew:
        raise TokenVerificationError("iat in the future", TokenCheck.ISSUED_AT)

    raw_aud = claims.get("aud")
    if isinstance(raw_aud, str):
        aud: tuple[str, ...] = (raw_aud,)
    elif isinstance(raw_aud, list) and raw_aud and all(isinstance(a, str) for a in raw_aud):
        aud = tuple(raw_aud)
    elif raw_aud is None:
        raise TokenVerificationError("missing aud claim", TokenCheck.AUDIENCE)
    else:
        raise TokenVerificationError("invalid aud claim", TokenCheck.AUDIENCE)
    if (audiences not in aud) if isinstance(audiences, str) else audiences.isdisjoint(aud):
        raise TokenVerificationError("audience mismatch", TokenCheck.AUDIENCE)

    iss = claims.get("iss")
    if iss is not None and not isinstance(iss, str):
        raise TokenVerificationError("invalid iss claim", TokenCheck.ISSUER)
    if issuer is not None and iss != issuer:
        raise TokenVerificationError("issuer mismatch", TokenCheck.ISSUER)
    sub = claims.get("sub")
    if sub is not None and not isinstance(sub, str):
        raise TokenVerificationError("invalid sub claim", TokenCheck.SUBJECT)
    jti = claims.get("jti")
    if jti is not None and not isinstance(jti, str):
        raise TokenVerificationError("invalid jti claim", TokenCheck.JWT_ID)

    return VerifiedClaims(
        sub=sub,
        iss=iss,
        aud=aud,
        exp=exp,
        iat=iat,
        nbf=nbf,
        jti=jti,
        claims=MappingProxyType(claims),
        header=header,
        kid=kid,
        alg=alg,
    )
