"""Security Event Token verification (RFC 8417, with the Shared Signals profile's rules).

A SET goes through the package's one verification path,
:class:`~flask_authflow.jose.JwtVerifier`, with the transmitter's configuration:

* the compact JWS is parsed once, strictly (duplicate JSON members, ``NaN``, non-ASCII,
  over 16 KiB: refused); ``typ`` must be ``secevent+jwt``; ``crit``, ``zip``, ``enc`` and
  ``b64`` are refused; ``alg`` must be one of the transmitter's algorithms (so ``none``
  and ``HS*`` never are);
* the key comes from the transmitter's JWKS only (the federation's
  :class:`~flask_authflow.federation._jwks_cache.ProviderKeyCache`: an unknown ``kid``
  causes at most one rate-limited refresh), chosen by ``kid`` and suited to ``alg``;
  joserfc checks the signature;
* ``iss`` equals the transmitter's issuer; ``aud`` names the configured audience; ``iat``
  is present, not in the future beyond the leeway and not older than ``max_age`` (SETs
  usually carry no ``exp``: the verifier's ``max_age`` window bounds how long a SET is
  accepted, and its ``jti`` is remembered for that long); an ``exp`` that is present has
  not passed.

Then what is the profile's own: ``jti`` is present; ``events`` holds exactly one event, an
object; there is no top-level ``sub`` (the profile names subjects with ``sub_id``).

Each refusal is a :class:`SetRefused` carrying the RFC 8935 error code the push endpoint
answers with (``invalid_request``, ``invalid_key``, ``invalid_issuer``,
``invalid_audience``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from flask_authflow._clock import Clock
from flask_authflow.errors import AuthFlowError, TokenCheck, TokenVerificationError, UnknownKeyId
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.federation._ssf.settings import Transmitter
from flask_authflow.jose import VerifiedClaims

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


#: What each failed check of the verifier answers (RFC 8935 §2.3); the rest is
#: ``invalid_request``.
_ERRORS: Final[Mapping[TokenCheck, str]] = MappingProxyType(
    {
        TokenCheck.ALGORITHM: "invalid_key",
        TokenCheck.UNKNOWN_KID: "invalid_key",
        TokenCheck.SIGNATURE: "invalid_key",
        TokenCheck.ISSUER: "invalid_issuer",
        TokenCheck.AUDIENCE: "invalid_audience",
    }
)


def _request(message: str) -> SetRefused:
    return SetRefused("invalid_request", message)


def _verified(token: Any, transmitter: Transmitter, keys: ProviderKeyCache, clock: Clock) -> VerifiedClaims:
    """The verifier's checks; an unknown ``kid`` refreshes the keys once (rate-limited).

    :raises ProviderUnreachable: no key of the transmitter was ever fetched."""
    keys.ensure_fresh()
    for attempt in (1, 2):
        try:
            return keys.verifier(transmitter.algorithms).verify(
                token,
                transmitter.audience,
                issuer=transmitter.issuer,
                leeway=transmitter.leeway,
                clock=clock,
                typ=SET_TYPES,
                max_age=transmitter.max_age,
            )
        except UnknownKeyId as exc:
            if attempt == 2 or not keys.refresh_for_unknown_kid(exc.kid):
                raise SetRefused("invalid_key", "no key of the transmitter has this SET's kid") from None
        except TokenVerificationError as exc:
            raise SetRefused(_ERRORS.get(exc.reason, "invalid_request"), f"the SET: {exc.message}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _event(verified: VerifiedClaims, transmitter: Transmitter) -> SecurityEvent:
    claims = verified.claims
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
    if verified.iat is None:  # the verifier requires it of a windowed token: never here
        raise _request("iat is missing")
    iat = verified.iat
    return SecurityEvent(transmitter.name, transmitter.issuer, jti, iat, event_type, payload, sub_id)


def verify_set(token: Any, transmitter: Transmitter, keys: ProviderKeyCache, clock: Clock) -> SecurityEvent:
    """Every check of the module's text on ``token``, a SET from ``transmitter`` whose JWKS
    ``keys`` holds, at ``clock``'s time.

    :raises SetRefused: naming the RFC 8935 error code of the failed check.
    :raises ProviderUnreachable: the transmitter's keys cannot be fetched (nothing is
        known of the SET: it must be sent again)."""
    return _event(_verified(token, transmitter, keys, clock), transmitter)
