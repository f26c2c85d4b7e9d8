"""The one JWT verification path: :class:`JwtVerifier`, a strict wrapper over joserfc.

joserfc checks the header members it registers, the key against the algorithm and the
signature (its JWS registry and algorithm models), then the registered claims
(:class:`joserfc.jwt.JWTClaimsRegistry`: ``exp`` and ``aud`` required, ``iss`` when the
caller names one, ``nbf`` and ``iat`` with the leeway, string types of ``sub`` and ``jti``).
Before it, one function, :func:`_precheck`, refuses what joserfc would let through:

* anything over :data:`MAX_TOKEN_LENGTH`, before any parsing;
* a header or payload that is not one strict JSON object: duplicate members (parsers
  disagree on which one wins), ``NaN`` or ``Infinity``; the compact form is parsed once,
  here, and joserfc checks that parsed header, so two parsers never disagree;
* ``crit`` (joserfc honours it for the members it knows, among them ``b64``) and
  ``b64`` other than ``true``: RFC 7797 unencoded payloads are not supported;
* ``zip`` and ``enc``: compressed payloads and JWEs;
* an ``alg`` off the caller's allow-list, before any key is looked at.

The key is chosen by ``kid`` from the :class:`JwksHandle` only (``jwk``, ``jku``,
``x5u`` and ``x5c`` header members never find a key) and must suit the algorithm; a
``kid`` under which two keys could check the algorithm is refused. joserfc's errors
become :class:`TokenVerificationError` with a :class:`TokenCheck` reason.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from joserfc import jws
from joserfc.errors import (
    ClaimError,
    ExpiredTokenError,
    InvalidKeyCurveError,
    JoseError,
    KeyParameterError,
    MissingClaimError,
    UnsupportedAlgorithmError,
)
from joserfc.jwa import JWSAlgModel
from joserfc.jwt import ClaimsOption, JWTClaimsRegistry

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.encoding import STRICT_JSON, b64url_decode
from flask_authflow.errors import ConfigurationError, TokenCheck, TokenVerificationError, UnknownKeyId
from flask_authflow.jose._algorithms import SUPPORTED_ALGORITHMS
from flask_authflow.jose._jwks import JwksHandle, JwksSnapshot
from flask_authflow.jose._keys import VerificationKey

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


# -- strict JSON ----------------------------------------------------------------------------------


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = STRICT_JSON.decode(raw.decode("utf-8"))
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise TokenVerificationError(f"malformed token: {what} is not JSON") from exc
    if not isinstance(value, dict):
        raise TokenVerificationError(f"malformed token: {what} is not a JSON object")
    return value


# -- the pre-check --------------------------------------------------------------------------------


class _Checked(NamedTuple):
    """A token that passed :func:`_precheck`, its segments decoded once."""

    header: dict[str, Any]
    alg: str
    kid: str | None
    signing_input: bytes
    payload: bytes
    signature: bytes


def _ascii_text(token: object) -> str:
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
    if not token.isascii():
        raise TokenVerificationError("malformed token: not ASCII")
    return token


def _segment(segment: str, what: str) -> bytes:
    try:
        return b64url_decode(segment)
    except ValueError as exc:  # binascii.Error is a ValueError
        raise TokenVerificationError(f"malformed token: {what} is not base64url") from exc


def _precheck(token: object, allowed: frozenset[str]) -> _Checked:
    """What joserfc does not refuse on its own; every token passes here first.

    The compact form is parsed once, here, strictly; joserfc then checks that parsed
    header, key and signature, so no two parsers can read one header differently.
    """
    parts = _ascii_text(token).split(".")
    if len(parts) != 3:
        raise TokenVerificationError("malformed token: expected three segments")
    header_b64, payload_b64, signature_b64 = parts
    if not header_b64 or not payload_b64:
        raise TokenVerificationError("malformed token: empty segment")
    header = _json_object(_segment(header_b64, "header"), "header")
    alg = header.get("alg")
    if not isinstance(alg, str):
        raise TokenVerificationError("missing alg", TokenCheck.ALGORITHM)
    if "crit" in header:
        # We implement no critical extension (RFC 7515 §4.1.11), so any is fatal; this
        # also refuses unencoded payloads (b64=false, RFC 7797), which joserfc supports.
        raise TokenVerificationError("unsupported critical header", TokenCheck.HEADER)
    if "zip" in header or "enc" in header:
        # Compressed payloads (a decompression bomb) and JWEs are never accepted.
        raise TokenVerificationError("unsupported zip or enc header", TokenCheck.HEADER)
    if header.get("b64", True) is not True:
        # RFC 7797 unencoded payloads: not supported, whatever crit says.
        raise TokenVerificationError("unsupported b64 header", TokenCheck.HEADER)
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenVerificationError("invalid kid", TokenCheck.HEADER)
    if alg not in allowed:  # before any key: "alg": "none" and HS256 are named as such
        raise TokenVerificationError("algorithm not allowed", TokenCheck.ALGORITHM)
    if not signature_b64:
        raise TokenVerificationError("malformed token: empty signature")
    payload = _segment(payload_b64, "payload")
    signature = _segment(signature_b64, "signature")
    return _Checked(header, alg, kid, f"{header_b64}.{payload_b64}".encode(), payload, signature)


def _select_key(snapshot: JwksSnapshot, kid: str | None, alg: str) -> VerificationKey:
    """The one key of the set that may check ``alg`` under ``kid`` (type, curve, ``alg``, ``use``)."""
    if kid is None:
        # Without a kid only an unambiguous set is acceptable.
        usable = [key for key in snapshot.keys if key.accepts(alg)]
        if len(usable) != 1:
            raise TokenVerificationError("missing kid", TokenCheck.UNKNOWN_KID)
        return usable[0]
    candidates = snapshot.by_kid.get(kid)
    if not candidates:
        raise UnknownKeyId(kid)
    usable = [key for key in candidates if key.accepts(alg)]
    if not usable:
        raise TokenVerificationError("key does not match algorithm", TokenCheck.ALGORITHM)
    if len(usable) > 1:
        # Two keys of one kid could both check this alg: which one signed is a guess.
        raise TokenVerificationError("ambiguous kid", TokenCheck.UNKNOWN_KID)
    return usable[0]


class _AllowList(jws.JWSRegistry):
    """joserfc's JWS registry answering only the verifier's allow-list.

    :meth:`get_alg` never falls back to joserfc's recommended list and does not emit the
    ``SecurityWarning`` joserfc attaches to ``EdDSA``: listing the algorithm is the
    caller's explicit choice, and the warning would fire on every token. Unregistered
    header members are allowed (RFC 7515 says to ignore them); the registered ones must
    have their registered types.
    """

    def __init__(self, algorithms: frozenset[str]) -> None:
        super().__init__(algorithms=sorted(algorithms), strict_check_header=False)
        self.names = algorithms

    def get_alg(self, name: str) -> JWSAlgModel:
        if name not in self.names or name not in self.algorithms:
            raise UnsupportedAlgorithmError(f"Algorithm of '{name}' is not allowed")
        return self.algorithms[name]


# -- claims ---------------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


def _claims_registry(
    audiences: list[str], issuer: str | None, skew: int, now: int, *, windowed: bool = False
) -> JWTClaimsRegistry:
    """joserfc's registered-claim checks: ``exp`` (or, for a ``windowed`` token, ``iat``)
    and ``aud`` required, ``iss`` when named."""
    options: dict[str, ClaimsOption] = {
        "iat" if windowed else "exp": {"essential": True},
        "aud": {"essential": True, "values": audiences},
    }
    if issuer is not None:
        options["iss"] = {"essential": True, "value": issuer}
    return JWTClaimsRegistry(now=now, leeway=skew, **options)


def _claim_refusal(exc: ClaimError, claims: Mapping[str, Any]) -> TokenVerificationError:
    """Our reason and message for a claim joserfc's registry refused."""
    if isinstance(exc, ExpiredTokenError):
        return TokenVerificationError("token expired", TokenCheck.EXPIRED)
    if isinstance(exc, MissingClaimError):
        missing = exc.claim.split(",")
        if "exp" in missing:
            return TokenVerificationError("missing exp claim", TokenCheck.CLAIM)
        if "iat" in missing:
            return TokenVerificationError("missing iat claim", TokenCheck.ISSUED_AT)
        if "aud" in missing:
            return TokenVerificationError("missing aud claim", TokenCheck.AUDIENCE)
        return TokenVerificationError("issuer mismatch", TokenCheck.ISSUER)
    name, value = exc.claim, claims.get(exc.claim)
    if name in ("nbf", "iat") and _is_number(value):
        if name == "nbf":
            return TokenVerificationError("token not yet valid", TokenCheck.NOT_YET_VALID)
        return TokenVerificationError("iat in the future", TokenCheck.ISSUED_AT)
    if name == "aud":
        listed = isinstance(value, list) and bool(value) and all(isinstance(a, str) for a in value)
        message = "audience mismatch" if isinstance(value, str) or listed else "invalid aud claim"
        return TokenVerificationError(message, TokenCheck.AUDIENCE)
    if name == "iss" and isinstance(value, str):
        return TokenVerificationError("issuer mismatch", TokenCheck.ISSUER)
    reason = _CLAIM_REASONS.get(name, TokenCheck.CLAIM)
    return TokenVerificationError(f"invalid {name} claim", reason)


_CLAIM_REASONS: Final[Mapping[str, TokenCheck]] = MappingProxyType(
    {"iss": TokenCheck.ISSUER, "sub": TokenCheck.SUBJECT, "jti": TokenCheck.JWT_ID}
)


def _optional_date(claims: Mapping[str, Any], name: str) -> int | None:
    value = claims.get(name)
    return None if value is None else math.floor(value)


def _window_end(claims: Mapping[str, Any], max_age: timedelta | None, skew: int, now: int) -> int:
    """When the token stops being accepted: its ``exp``, or for a token verified with
    ``max_age`` and no ``exp``, ``iat + max_age`` (refused already if that has passed)."""
    if max_age is None or "exp" in claims:
        exp: float = claims["exp"]  # a NumericDate: joserfc's registry checked it
        return math.floor(exp)
    iat: float = claims["iat"]
    end = math.floor(iat + max_age.total_seconds())
    if end + skew < now:
        raise TokenVerificationError("token older than the accepted window", TokenCheck.ISSUED_AT)
    return end


def _check_type(checked: _Checked, typ: frozenset[str] | None) -> None:
    """The header's ``typ`` must be one of ``typ`` (compared without case, RFC 7515 §4.1.9)."""
    if typ is None:
        return
    given = checked.header.get("typ")
    if not isinstance(given, str) or given.lower() not in typ:
        raise TokenVerificationError("token type not accepted", TokenCheck.HEADER)


def _verified(checked: _Checked, claims: dict[str, Any], exp: int) -> VerifiedClaims:
    """The result record; joserfc's registry has checked every member read here."""
    raw_aud = claims["aud"]
    return VerifiedClaims(
        sub=claims.get("sub"),
        iss=claims.get("iss"),
        aud=(raw_aud,) if isinstance(raw_aud, str) else tuple(raw_aud),
        exp=exp,
        iat=_optional_date(claims, "iat"),
        nbf=_optional_date(claims, "nbf"),
        jti=claims.get("jti"),
        claims=MappingProxyType(claims),
        header=MappingProxyType(checked.header),
        kid=checked.kid,
        alg=checked.alg,
    )


def _check_signature(checked: _Checked, key: VerificationKey, allow: _AllowList) -> None:
    """joserfc's checks of the pre-checked token: what :func:`joserfc.jws.validate_compact`
    does, on the segments the pre-check decoded (the key is already chosen)."""
    try:
        allow.check_header(checked.header)  # registered members have their registered types
        algorithm = allow.get_alg(checked.alg)
        algorithm.check_key(key.key)  # key type, curve, use and alg suit the algorithm
        valid = algorithm.verify(checked.signing_input, checked.signature, key.key)
    except JoseError as exc:
        raise _jose_refusal(exc) from None
    if not valid:
        raise TokenVerificationError("bad signature", TokenCheck.SIGNATURE)


def _jose_refusal(exc: JoseError) -> TokenVerificationError:
    """Our reason for a refusal of joserfc's JWS layer (past the pre-check, rare)."""
    if isinstance(exc, KeyParameterError | InvalidKeyCurveError | UnsupportedAlgorithmError):
        return TokenVerificationError("key does not match algorithm", TokenCheck.ALGORITHM)
    return TokenVerificationError(f"unsupported header: {exc.description}", TokenCheck.HEADER)


def _leeway_seconds(leeway: float | timedelta) -> int:
    """The leeway in whole seconds, rounded down (joserfc compares whole seconds)."""
    if type(leeway) is int and leeway >= 0:
        return leeway
    seconds = leeway.total_seconds() if isinstance(leeway, timedelta) else float(leeway)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError("leeway must be a non-negative number of seconds")
    return math.floor(seconds)


def _audiences(audience: str | Collection[str]) -> list[str]:
    if isinstance(audience, str) and audience:
        return [audience]  # the common case, kept cheap
    audiences = list(dict.fromkeys(() if isinstance(audience, str) else audience))
    if not audiences or not all(isinstance(a, str) and a for a in audiences):
        raise ConfigurationError("verify() needs a non-empty audience")
    return audiences


class JwtVerifier:
    """Verifies compact JWS tokens against a :class:`JwksHandle`.

    Usage::

        verifier = JwtVerifier(handle).with_algorithms(["ES256"])
        claims = verifier.verify(token, "my-api", issuer="https://idp.example")

    The algorithm list is mandatory: a verifier that "accepts whatever the token
    says" is how ``alg=none`` and HMAC key-confusion attacks work. The token passes
    our pre-check, then joserfc checks the signature with the one key the handle
    holds for its ``kid`` and ``alg``, and the registered claims.
    """

    __slots__ = ("_allow", "_clock", "_handle")

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
        self._allow: _AllowList | None = None
        if algorithms is not None:
            self._allow = _AllowList(self._check_algorithms(algorithms))

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
        clone._allow = _AllowList(self._check_algorithms(algorithms))
        return clone

    def with_clock(self, clock: Clock) -> JwtVerifier:
        """A verifier reading time from ``clock`` (a MockClock in tests)."""
        clone = JwtVerifier(self._handle, clock=clock)
        clone._allow = self._allow
        return clone

    @property
    def algorithms(self) -> frozenset[str]:
        return self._allow_list().names

    def _allow_list(self) -> _AllowList:
        if self._allow is None:
            raise ConfigurationError("JwtVerifier has no algorithm allowlist; call with_algorithms()")
        return self._allow

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
        typ: Collection[str] | None = None,
        max_age: timedelta | None = None,
    ) -> VerifiedClaims:
        """Verify ``token`` and return its claims, or raise :class:`TokenVerificationError`.

        ``audience`` is required: the ``aud`` claim (string or array) must contain
        it (or one of them). ``issuer``, when given, must equal ``iss`` exactly.
        ``leeway`` (seconds, whole seconds count) absorbs clock skew for ``exp``,
        ``nbf`` and ``iat``. ``typ``, when given, lists the accepted header ``typ``
        values (lower case; a token without one is refused).

        ``max_age`` is for tokens that carry no ``exp`` by design (Security Event Tokens,
        RFC 8417): ``iat`` becomes required instead of ``exp``, and the token is refused
        once ``iat + max_age`` has passed (with the leeway); an ``exp`` it does carry is
        still checked. The result's ``exp`` is then the end of that window.
        """
        allow = self._allow_list()
        audiences = _audiences(audience)
        skew = _leeway_seconds(leeway)
        types = None if typ is None else frozenset(typ)
        # joserfc compares whole seconds: now rounds down, as joserfc's own default does.
        now = math.floor((clock if clock is not None else self._clock).now().timestamp())
        try:
            checked = _precheck(token, allow.names)
            _check_type(checked, types)
            key = _select_key(self._handle.snapshot(), checked.kid, checked.alg)
            _check_signature(checked, key, allow)
            claims = _json_object(checked.payload, "payload")
            try:
                _claims_registry(audiences, issuer, skew, now, windowed=max_age is not None).validate(claims)
            except ClaimError as exc:
                raise _claim_refusal(exc, claims) from None
            return _verified(checked, claims, _window_end(claims, max_age, skew, now))
        except TokenVerificationError:
            raise
        except Exception as exc:  # anything else a hostile token provokes is a malformed token
            raise TokenVerificationError("malformed token") from exc

    def __repr__(self) -> str:
        algs = sorted(self._allow.names) if self._allow is not None else None
        return f"<JwtVerifier algorithms={algs!r} {self._handle!r}>"
