"""``private_key_jwt`` client authentication at the token endpoint (RFC 7523, OIDC Core §9).

The client proves itself with a short JWT signed by its own private key instead of a
shared secret. The assertion is assembled here over the JOSE layer's one signing call
(:func:`~flask_authflow.jose.algorithms.signer`) and handed to Authlib's OAuth 2 client as
a client-authentication method.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Final
from urllib.parse import urlencode

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from flask_authflow.clock import Clock
from flask_authflow.core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError
from flask_authflow.jose.algorithms import signer

__all__ = ["ASSERTION_TYPE", "PrivateKeyJwt", "load_client_key"]

#: The ``client_assertion_type`` of a JWT assertion.
ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
#: How long an assertion is valid: one token request.
ASSERTION_LIFETIME: Final = 60


def load_client_key(pem: str | bytes) -> tuple[Any, str]:
    """The private key in ``pem`` and its default algorithm (RS256, ES256, ES384 or EdDSA)."""
    try:
        key = load_pem_private_key(pem.encode() if isinstance(pem, str) else pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"client_private_key is not an unencrypted PEM private key ({exc})"
        ) from None
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise ConfigurationError("client_private_key: RSA keys need at least 2048 bits")
        return key, "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in ("secp256r1", "secp384r1"):
        return key, "ES256" if key.curve.name == "secp256r1" else "ES384"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key, "EdDSA"
    raise ConfigurationError("client_private_key must be an RSA, P-256, P-384 or Ed25519 key")


class PrivateKeyJwt:
    """An Authlib client-authentication method adding ``client_assertion`` to the token request."""

    name = "private_key_jwt"

    def __init__(
        self, client_id: str, audience: str, key: Any, algorithm: str, *, kid: str | None, clock: Clock
    ) -> None:
        self.client_id = client_id
        self.audience = audience
        self.algorithm = algorithm
        self.kid = kid
        self.clock = clock
        self._sign = signer(algorithm, key)

    def assertion(self) -> str:
        """A fresh signed assertion: ``iss`` = ``sub`` = client id, ``aud`` = token endpoint."""
        now = int(self.clock.now().timestamp())
        header: dict[str, str] = {"alg": self.algorithm, "typ": "JWT"}
        if self.kid:
            header["kid"] = self.kid
        claims = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": self.audience,
            "jti": secrets.token_urlsafe(24),
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
        }
        signing_input = ".".join(
            b64url_encode(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        return f"{signing_input}.{b64url_encode(self._sign(signing_input.encode('ascii')))}"

    def __call__(
        self, auth: Any, method: str, uri: str, headers: dict[str, str], body: str
    ) -> tuple[Any, ...]:
        extra = urlencode(
            {
                "client_id": self.client_id,
                "client_assertion_type": ASSERTION_TYPE,
                "client_assertion": self.assertion(),
            }
        )
        return uri, headers, f"{body}&{extra}" if body else extra
