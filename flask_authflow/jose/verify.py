"""The one JWT verification path: :class:`JwtVerifier` and :class:`VerifiedClaims`."""

from __future__ import annotations

import binascii
import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final

from ..clock import Clock, SystemClock
from ..errors import (
    ConfigurationError,
    TokenCheck,
    TokenVerificationError,
    UnknownKeyId,
)
from .algorithms import SUPPORTED_ALGORITHMS, _Selected, _signature_checker, b64url_decode
from .jwks import JwksHandle

#: Longest compact token accepted, in characters; larger input is refused before parsing.
MAX_TOKEN_LENGTH: Final = 16 * 1024


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
        if not header_b64 or not payload_b64:
            raise TokenVerificationError("malformed token: empty segment")

        header, alg, kid = _parse_header(header_b64)
        if alg not in allowed:  # before the signature: "alg": "none" is named as such
            raise TokenVerificationError("algorithm not allowed", TokenCheck.ALGORITHM)
        if not signature_b64:
            raise TokenVerificationError("malformed token: empty signature")
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
