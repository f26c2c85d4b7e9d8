"""The ways the provider spoils a token on purpose, for a relying party's negative tests."""

from __future__ import annotations

from typing import Final, Literal, get_args

#: Ways to spoil the next token on purpose (negative tests of a relying party).
Tamper = Literal[
    "wrong_iss",  # iss of another issuer
    "iss_trailing_slash",  # iss + "/"
    "iss_case",  # iss with the host upper-cased
    "wrong_aud",  # aud without the client id
    "aud_array_no_azp",  # aud = [client, other], no azp
    "wrong_azp",  # aud = [client, other], azp = other
    "wrong_nonce",  # nonce that the RP did not send
    "no_nonce",  # nonce left out
    "expired",  # exp one hour in the past
    "old_iat",  # iat (and auth_time) one day in the past
    "alg_none",  # unsigned, alg "none"
    "hs256_public_key",  # HS256 keyed with the provider's public key PEM (key confusion)
    "missing_kid",  # no kid in the header
    "unknown_kid",  # a kid the JWKS does not have
    "bad_signature",  # signature of other bytes
    "no_sub",  # sub left out
    "logout_nonce",  # logout token carrying a nonce (forbidden)
    "logout_no_events",  # logout token without events
    "logout_wrong_event",  # logout token with another event
    "logout_no_sub_sid",  # logout token with neither sub nor sid
    "logout_oversize",  # logout token larger than 8 KiB
    "logout_typ_jwt",  # logout token with typ "JWT" instead of "logout+jwt"
    "userinfo_wrong_sub",  # userinfo answering another sub
    "no_iat",  # iat left out
    "wrong_at_hash",  # at_hash of another access token
    "wrong_alg",  # signed with a published key of another algorithm (ES256, or RS256 for an EC key)
    "no_iss_in_response",  # the authorization response without iss (RFC 9207)
    "no_exp",  # exp left out
    "no_aud",  # aud left out
    "no_iss",  # iss left out
    "aud_as_array",  # aud = [client] (valid: a one-element array)
    "wrong_iss_in_response",  # the authorization response naming another issuer
]
TAMPERS: Final = frozenset(get_args(Tamper))

#: The options that spoil the signature or its header rather than the claims.
SIGNING_TAMPERS: Final = frozenset(
    {"alg_none", "hs256_public_key", "missing_kid", "unknown_kid", "bad_signature", "wrong_alg"}
)
#: The options that spoil the ``iss`` claim (they win over a scripted ``token_issuer``).
ISSUER_TAMPERS: Final = frozenset({"wrong_iss", "iss_trailing_slash", "iss_case"})
