"""JOSE plumbing: key loading, shared JWK sets and the one JWT verification path.

Every signature check in flask-authflow goes through :class:`JwtVerifier` so that
there is exactly one place to audit. It is a strict, generic wrapper over joserfc:

* the caller names the accepted algorithms (no default, never ``none`` or HMAC),
* the key is picked by ``kid`` from a :class:`JwksHandle` and must match the
  algorithm's key type (and curve),
* ``exp`` is required; ``nbf``, ``iat``, ``aud`` and (optionally) ``iss`` are
  checked with a clock-skew allowance taken from an injected :class:`Clock`,
* anything malformed raises :class:`TokenVerificationError` (its ``reason`` is a
  :class:`TokenCheck`) and nothing else.

Protocol-specific rules (an OIDC ``nonce``, ``azp``, logout ``events``) belong to
the callers, which layer them on top of :class:`VerifiedClaims`.

The package: :mod:`.algorithms` (the allow-list per key type, base64url, the signer of
local keys), :mod:`.keys` (PEM and JWK keys), :mod:`.jwks` (snapshots and the shared
handle) and :mod:`.verify` (the pre-check and the verifier over joserfc).
"""

from __future__ import annotations

from flask_authflow.jose._verify import JwtVerifier, VerifiedClaims

__all__ = [
    "JwtVerifier",
    "VerifiedClaims",
]
