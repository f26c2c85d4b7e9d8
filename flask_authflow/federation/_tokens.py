"""The claim checks of ID tokens and back-channel logout tokens, after the signature.

The signature, ``exp``, ``iss`` (exact) and ``aud`` (contains the client id) are checked
by the one verification path, :class:`~flask_authflow.jose.JwtVerifier`; the functions
here add what OpenID Connect asks beyond that and are pure: claims and times in, an
error or the accepted values out. :class:`~flask_authflow.federation._provider.OAuthProvider`
runs both steps.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import TokenCheck
from flask_authflow.federation._errors import IdTokenValidation, LogoutTokenInvalid
from flask_authflow.jose import VerifiedClaims

__all__ = [
    "BACKCHANNEL_LOGOUT_EVENT",
    "ID_TOKEN_ALGORITHMS",
    "LOGOUT_TOKEN_MAX_BYTES",
    "LogoutClaims",
    "check_at_hash",
    "check_id_token",
    "check_logout_token",
    "check_logout_token_size",
]

#: Algorithms an ID token may use; a provider's advertised list is intersected with it.
ID_TOKEN_ALGORITHMS: Final = frozenset(
    {
        "RS256",
        "RS384",
        "RS512",
        "PS256",
        "PS384",
        "PS512",
        "ES256",
        "ES384",
        "ES512",
        "EdDSA",
        "Ed25519",
    }
)
#: The hash of ``at_hash`` per algorithm (the one of the signature; SHA-512 for Ed25519).
_AT_HASH: Final = {"256": "sha256", "384": "sha384", "512": "sha512", "EdDSA": "sha512", "Ed25519": "sha512"}
#: The event a back-channel logout token must carry in ``events``.
BACKCHANNEL_LOGOUT_EVENT: Final = "http://schemas.openid.net/event/backchannel-logout"
#: Largest logout token accepted (8 KiB), checked before anything is parsed.
LOGOUT_TOKEN_MAX_BYTES: Final = 8 * 1024
_LOGOUT_TYPES: Final = frozenset({"logout+jwt", "application/logout+jwt", "jwt"})


def _azp(claims: VerifiedClaims, client_id: str, error: type[IdTokenValidation | LogoutTokenInvalid]) -> None:
    """An ``aud`` array needs ``azp`` equal to the client id; a present ``azp`` must always equal it."""
    azp = claims.claims.get("azp")
    if len(claims.aud) > 1 and azp is None:
        raise error(TokenCheck.AZP, "aud has several values and azp is missing")
    if azp is not None and azp != client_id:
        raise error(TokenCheck.AZP, "azp is not this client")


def _iat(
    claims: VerifiedClaims,
    now: float,
    bound: timedelta,
    skew: timedelta,
    error: type[IdTokenValidation | LogoutTokenInvalid],
) -> None:
    if claims.iat is None:
        raise error(TokenCheck.ISSUED_AT, "iat is missing")
    if now - claims.iat > (bound + skew).total_seconds():
        raise error(TokenCheck.ISSUED_AT, "iat is older than the allowed bound")


def check_id_token(
    claims: VerifiedClaims,
    *,
    client_id: str,
    nonce: str,
    now: float,
    iat_bound: timedelta,
    clock_skew: timedelta,
) -> None:
    """Checks 3 (``azp``), 4 (nonce), 6 (``iat`` bound) and ``sub`` of a verified ID token.

    :raises IdTokenValidation: naming the failed check.
    """
    _azp(claims, client_id, IdTokenValidation)
    token_nonce = claims.claims.get("nonce")
    if not isinstance(token_nonce, str) or not token_nonce:
        raise IdTokenValidation(TokenCheck.NONCE, "nonce is missing")
    if not hmac.compare_digest(token_nonce.encode(), nonce.encode()):
        raise IdTokenValidation(TokenCheck.NONCE, "nonce does not match this login")
    _iat(claims, now, iat_bound, clock_skew, IdTokenValidation)
    if not isinstance(claims.sub, str) or not claims.sub:
        raise IdTokenValidation(TokenCheck.SUBJECT, "sub is missing")


def check_at_hash(claims: VerifiedClaims, access_token: str) -> None:
    """When the ID token carries ``at_hash``, it must be the left half of the access token's
    hash (the hash of the token's algorithm), base64url-encoded.

    :raises IdTokenValidation: ``at_hash`` is not a string or does not match.
    """
    at_hash = claims.claims.get("at_hash")
    if at_hash is None:
        return
    name = _AT_HASH.get(claims.alg) or _AT_HASH.get(claims.alg[-3:])
    if not isinstance(at_hash, str) or name is None:
        raise IdTokenValidation(TokenCheck.CLAIM, "at_hash is malformed")
    digest = hashlib.new(name, access_token.encode("ascii", "replace")).digest()
    expected = b64url_encode(digest[: len(digest) // 2])
    if not hmac.compare_digest(expected.encode(), at_hash.encode("utf-8", "replace")):
        raise IdTokenValidation(TokenCheck.CLAIM, "at_hash does not match the access token")


@dataclass(frozen=True, slots=True)
class LogoutClaims:
    """What a valid back-channel logout token says: who (``sub``) or which provider session
    (``sid``) to log out, and the ``jti`` to remember until ``exp``."""

    issuer: str
    sub: str | None
    sid: str | None
    jti: str
    exp: int


def check_logout_token_size(token: Any) -> str:
    """The token as text, if it is a string of at most :data:`LOGOUT_TOKEN_MAX_BYTES` bytes."""
    if not isinstance(token, str) or not token:
        raise LogoutTokenInvalid(TokenCheck.MALFORMED, "logout_token is missing")
    if len(token.encode("utf-8", "surrogatepass")) > LOGOUT_TOKEN_MAX_BYTES:
        raise LogoutTokenInvalid(TokenCheck.MALFORMED, "logout token over 8 KiB")
    return token


def check_logout_token(
    claims: VerifiedClaims,
    *,
    client_id: str,
    now: float,
    iat_bound: timedelta,
    clock_skew: timedelta,
) -> LogoutClaims:
    """The checks of OpenID Connect Back-Channel Logout beyond signature, ``iss``, ``aud``, ``exp``.

    ``azp`` for a multi-valued ``aud``; ``iat`` bound; ``typ`` (when present) is a logout
    token type; ``events`` holds the back-channel logout event (an object); ``sub`` or
    ``sid``; no ``nonce`` (so an ID token can never pass as a logout token); ``jti``.

    :raises LogoutTokenInvalid: naming the failed check.
    """
    typ = claims.header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in _LOGOUT_TYPES):
        raise LogoutTokenInvalid(TokenCheck.HEADER, "typ is not a logout token type")
    _azp(claims, client_id, LogoutTokenInvalid)
    _iat(claims, now, iat_bound, clock_skew, LogoutTokenInvalid)
    events = claims.claims.get("events")
    if not isinstance(events, Mapping) or not isinstance(events.get(BACKCHANNEL_LOGOUT_EVENT), Mapping):
        raise LogoutTokenInvalid(TokenCheck.CLAIM, "events lacks the back-channel logout event")
    if "nonce" in claims.claims:
        raise LogoutTokenInvalid(TokenCheck.NONCE, "a logout token must not carry a nonce")
    sid = claims.claims.get("sid")
    if sid is not None and (not isinstance(sid, str) or not sid):
        raise LogoutTokenInvalid(TokenCheck.CLAIM, "sid is not a string")
    if not claims.sub and not sid:
        raise LogoutTokenInvalid(TokenCheck.SUBJECT, "neither sub nor sid is present")
    if not claims.jti:
        raise LogoutTokenInvalid(TokenCheck.JWT_ID, "jti is missing")
    if claims.iss is None:  # pragma: no cover - the verifier compared iss with the issuer
        raise LogoutTokenInvalid(TokenCheck.ISSUER, "iss is missing")
    return LogoutClaims(issuer=claims.iss, sub=claims.sub or None, sid=sid, jti=claims.jti, exp=claims.exp)
