"""Security Event Token verification (RFC 8417, with the Shared Signals profile's rules).

A SET is checked against its transmitter's configuration before anything it says is used:

* the compact JWS is parsed once, strictly (duplicate JSON members, ``NaN``, non-ASCII,
  over 16 KiB: refused); ``typ`` is ``secevent+jwt``; ``crit``, ``zip``, ``enc`` and
  ``b64`` are refused; ``alg`` must be one of the transmitter's algorithms (so ``none``
  and ``HS*`` never are);
* the key comes from the transmitter's JWKS only (the federation's
  :class:`~flask_authflow.federation.jwks_cache.ProviderKeyCache`: an unknown ``kid``
  causes at most one rate-limited refresh), chosen by ``kid`` and suited to ``alg``;
  joserfc checks the signature;
* ``iss`` equals the transmitter's issuer; ``aud`` names the configured audience; ``iat``
  is present, not in the future beyond the leeway and not older than ``max_age`` (SETs
  usually carry no ``exp``: the ``iat`` window bounds how long a SET is accepted, and its
  ``jti`` is remembered for that long); an ``exp`` that is present has not passed;
* ``jti`` is present; ``events`` holds exactly one event, an object; there is no top-level
  ``sub`` (the profile names subjects with ``sub_id``).

Each refusal is a :class:`SetRefused` carrying the RFC 8935 error code the push endpoint
answers with (``invalid_request``, ``invalid_key``, ``invalid_issuer``,
``invalid_audience``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from joserfc import jws
from joserfc.errors import JoseError, UnsupportedAlgorithmError
from joserfc.jwa import JWSAlgModel

from flask_authflow.core.encoding import STRICT_JSON, b64url_decode
from flask_authflow.errors import AuthFlowError
from flask_authflow.federation.jwks_cache import ProviderKeyCache
from flask_authflow.federation.ssf.settings import Transmitter
from flask_authflow.jose import MAX_TOKEN_LENGTH, VerificationKey

__all__ = ["SET_TYPES", "SecurityEvent", "SetRefused", "verify_set"]

#: The ``typ`` values of a SET (RFC 8417 §2.3; compared without case).
SET_TYPES: Final = frozenset({"secevent+jwt", "application/secevent+jwt"})
_MAX_JTI: Final = 255  # the one-time store's column


class SetRefused(AuthFlowError):
    """The Security Event Token was refused.

    ``error`` is the RFC 8935 error code (``invalid_request``, ``invalid_key``,
    ``invalid_issuer``, ``invalid_audience``, ``authentication_failed``, ``access_denied``).
    """

    code = "invalid_set"
    status = 400

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class SecurityEvent:
    """A SET that passed every check: its one event and who it is about."""

    transmitter: str
    issuer: str
    jti: str
    iat: int
    event_type: str
    payload: Mapping[str, Any] = field(repr=False)
    #: The RFC 9493 subject: the top-level ``sub_id``, else the event's ``subject``.
    subject: Mapping[str, Any] | None = field(default=None, repr=False)


class _OneAlgorithm(jws.JWSRegistry):
    """joserfc's registry answering exactly the one algorithm already allowed (no fallback
    to its recommended list, no warning: the configuration listed it on purpose)."""

    def __init__(self, alg: str) -> None:
        super().__init__(algorithms=[alg], strict_check_header=False)
        self.only = alg

    def get_alg(self, name: str) -> JWSAlgModel:
        if name != self.only or name not in self.algorithms:
            raise UnsupportedAlgorithmError(f"Algorithm of '{name}' is not allowed")
        return self.algorithms[name]


def _request(message: str) -> SetRefused:
    return SetRefused("invalid_request", message)


def _json(segment: str, what: str) -> dict[str, Any]:
    try:
        value = STRICT_JSON.decode(b64url_decode(segment).decode("utf-8"))
    except ValueError:  # base64, UTF-8 and JSON errors are all ValueErrors
        raise _request(f"the SET's {what} is not a JSON object") from None
    if not isinstance(value, dict):
        raise _request(f"the SET's {what} is not a JSON object")
    return value


def _header(token: Any, transmitter: Transmitter) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        raise _request("the body is not a SET of at most 16 KiB")
    parts = token.split(".")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise _request("the body is not a compact JWT")
    header = _json(parts[0], "header")
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.lower() not in SET_TYPES:
        raise _request("typ is not secevent+jwt")
    if header.keys() & {"crit", "zip", "enc"} or header.get("b64", True) is not True:
        raise _request("the SET's header uses an unsupported member")
    alg, kid = header.get("alg"), header.get("kid")
    if not isinstance(alg, str) or alg not in transmitter.algorithms:
        raise SetRefused("invalid_key", "the SET's algorithm is not accepted from this transmitter")
    if kid is not None and not isinstance(kid, str):
        raise SetRefused("invalid_key", "the SET's kid is not a string")
    if not parts[2]:
        raise SetRefused("invalid_key", "the SET is not signed")
    return header, parts


def _key(keys: ProviderKeyCache, kid: str | None, alg: str) -> VerificationKey:
    """The one key of the transmitter's set that may check ``alg`` under ``kid``.

    :raises ProviderUnreachable: no key of the transmitter was ever fetched."""
    keys.ensure_fresh()  # ProviderUnreachable before any key was fetched: try again later
    if kid is not None and not keys.knows(kid):
        keys.refresh_for_unknown_kid(kid)
    snapshot = keys.snapshot()
    candidates = snapshot.keys if kid is None else snapshot.by_kid.get(kid, ())
    usable = [key for key in candidates if key.accepts(alg)]
    if len(usable) != 1:
        raise SetRefused("invalid_key", "no single key of the transmitter checks this SET")
    return usable[0]


def _signed(token: str, key: VerificationKey, alg: str) -> None:
    try:
        jws.deserialize_compact(token, key.key, algorithms=[alg], registry=_OneAlgorithm(alg))
    except (JoseError, ValueError):
        raise SetRefused("invalid_key", "the SET's signature does not verify") from None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _times(claims: Mapping[str, Any], transmitter: Transmitter, now: float) -> int:
    iat, exp = _number(claims.get("iat")), _number(claims.get("exp"))
    leeway = transmitter.leeway.total_seconds()
    if iat is None:
        raise _request("iat is missing")
    if iat > now + leeway:
        raise _request("iat is in the future")
    if now - iat > transmitter.max_age.total_seconds() + leeway:
        raise _request("the SET is older than this receiver accepts")
    if "exp" in claims and (exp is None or exp < now - leeway):
        raise _request("the SET has expired")
    return math.floor(iat)


def _claims(claims: Mapping[str, Any], transmitter: Transmitter, now: float) -> SecurityEvent:
    if claims.get("iss") != transmitter.issuer:
        raise SetRefused("invalid_issuer", "iss is not this transmitter's issuer")
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if transmitter.audience not in audiences:
        raise SetRefused("invalid_audience", "aud does not name this receiver")
    iat = _times(claims, transmitter, now)
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > _MAX_JTI:
        raise _request("jti is missing")
    if "sub" in claims:
        raise _request("a SET names its subject with sub_id, not sub")
    events = claims.get("events")
    if not isinstance(events, Mapping) or len(events) != 1:
        raise _request("events must hold exactly one event")
    ((event_type, payload),) = events.items()
    if not isinstance(payload, Mapping):
        raise _request("the event's payload is not an object")
    sub_id = claims.get("sub_id", payload.get("subject"))
    if sub_id is not None and not isinstance(sub_id, Mapping):
        raise _request("sub_id is not an object")
    return SecurityEvent(transmitter.name, transmitter.issuer, jti, iat, event_type, payload, sub_id)


def verify_set(token: Any, transmitter: Transmitter, keys: ProviderKeyCache, now: float) -> SecurityEvent:
    """Every check of the module's text on ``token``, a SET from ``transmitter`` whose JWKS
    ``keys`` holds; ``now`` is the time in seconds since the epoch.

    :raises SetRefused: naming the RFC 8935 error code of the failed check.
    :raises ProviderUnreachable: the transmitter's keys cannot be fetched (nothing is
        known of the SET: it must be sent again)."""
    header, parts = _header(token, transmitter)
    alg, kid = header["alg"], header.get("kid")
    _signed(token, _key(keys, kid, alg), alg)
    return _claims(_json(parts[1], "payload"), transmitter, now)
