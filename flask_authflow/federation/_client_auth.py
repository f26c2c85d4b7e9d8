"""Client authentication at the token endpoint (RFC 6749 §2.3.1, RFC 7523, OIDC Core §9).

:func:`client_credentials` gives the headers and form fields of each
``token_endpoint_auth_method``:

* ``client_secret_basic``: HTTP Basic with the client id and secret each
  form-urlencoded first, as RFC 6749 §2.3.1 requires (a secret with ``+``, ``%``, ``&``
  or ``=`` reaches the provider intact);
* ``client_secret_post``: ``client_id`` and ``client_secret`` in the form;
* ``private_key_jwt``: a short JWT signed by the client's own private key (by joserfc; the
  key from a PEM or from a key store);
* ``client_secret_jwt``: a short JWT signed HS256 with the client secret, by joserfc;
* ``none``: only ``client_id`` (a public client; PKCE protects the code);
* ``tls_client_auth`` and ``self_signed_tls_client_auth`` (RFC 8705 §2): only
  ``client_id`` in the form; the client certificate presented in the TLS handshake
  authenticates the client (see :mod:`~flask_authflow.federation._mtls`).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote_plus, urlencode

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from flask_authflow._clock import Clock
from flask_authflow.errors import ConfigurationError

__all__ = [
    "ASSERTION_TYPE",
    "TOKEN_AUTH_METHODS",
    "ClientSecretJwt",
    "PrivateKeyJwt",
    "basic_authorization",
    "client_credentials",
    "load_client_key",
]

#: The ``client_assertion_type`` of a JWT assertion.
ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
#: How long an assertion is valid: one token request.
ASSERTION_LIFETIME: Final = 60
#: The ``token_endpoint_auth_method`` values a client may be configured with.
TOKEN_AUTH_METHODS: Final = (
    "client_secret_basic",
    "client_secret_post",
    "private_key_jwt",
    "client_secret_jwt",
    "none",
    "tls_client_auth",
    "self_signed_tls_client_auth",
)


def basic_authorization(client_id: str, client_secret: str) -> str:
    """The ``Authorization`` value of ``client_secret_basic``: both parts form-urlencoded
    (RFC 6749 §2.3.1), joined by ``:``, base64-encoded."""
    raw = f"{quote_plus(client_id)}:{quote_plus(client_secret)}"
    return "Basic " + base64.b64encode(raw.encode("utf-8")).decode("ascii")


def _assertion_claims(client_id: str, audience: str, clock: Clock) -> dict[str, Any]:
    now = int(clock.now().timestamp())
    return {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "jti": secrets.token_urlsafe(24),
        "iat": now,
        "exp": now + ASSERTION_LIFETIME,
    }


def client_credentials(
    method: str, client_id: str, client_secret: str, *, assertion: Callable[[], str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and form fields that authenticate the client with ``method``.

    ``assertion`` makes the JWT of ``private_key_jwt`` and ``client_secret_jwt``.
    """
    if method == "client_secret_basic":
        return {"Authorization": basic_authorization(client_id, client_secret)}, {}
    if method == "client_secret_post":
        return {}, {"client_id": client_id, "client_secret": client_secret}
    if method in ("private_key_jwt", "client_secret_jwt"):
        if assertion is None:
            raise ConfigurationError(f"{method} needs a client assertion")
        return {}, {
            "client_id": client_id,
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": assertion(),
        }
    if method in ("none", "tls_client_auth", "self_signed_tls_client_auth"):
        return {}, {"client_id": client_id}  # mTLS: the certificate in the handshake authenticates
    raise ConfigurationError(f"token_endpoint_auth_method {method!r} is not one of {TOKEN_AUTH_METHODS!r}")


class ClientSecretJwt:
    """``client_secret_jwt``: an assertion signed HS256 with the client secret (by joserfc)."""

    name = "client_secret_jwt"

    def __init__(self, client_id: str, audience: str, client_secret: str, *, clock: Clock) -> None:
        from joserfc.jwk import OctKey

        self.client_id = client_id
        self.audience = audience
        self.clock = clock
        self._key = OctKey.import_key(client_secret.encode("utf-8"))

    def assertion(self) -> str:
        """A fresh assertion: ``iss`` = ``sub`` = client id, ``aud`` = token endpoint."""
        from joserfc import jwt

        claims = _assertion_claims(self.client_id, self.audience, self.clock)
        return jwt.encode({"alg": "HS256", "typ": "JWT"}, claims, self._key, algorithms=["HS256"])


def _joserfc_key(key: Any, algorithm: str) -> Any:
    """The joserfc key of a ``cryptography`` private key (through its PKCS#8 PEM)."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from joserfc.jwk import ECKey, OKPKey, RSAKey

    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return OKPKey.import_key(pem)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return ECKey.import_key(pem)
    return RSAKey.import_key(pem)


def load_client_key(pem: str | bytes) -> tuple[Any, str]:
    """The private key in ``pem`` and its default algorithm (RS256, ES256, ES384 or Ed25519,
    RFC 9864's name for EdDSA over Ed25519)."""
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
        return key, "Ed25519"
    raise ConfigurationError("client_private_key must be an RSA, P-256, P-384 or Ed25519 key")


class PrivateKeyJwt:
    """``private_key_jwt``: an assertion signed by the client's own key, by joserfc.

    ``iss`` = ``sub`` = the client id, ``aud`` = ``audience`` (the token endpoint, or the
    issuer identifier under FAPI 2.0), ``exp`` 60 s after ``iat``, a fresh random ``jti``.
    Build it from one PEM key (``PrivateKeyJwt(client_id, audience, key, alg, ...)``) or
    from a key store (:meth:`from_store`: each assertion is signed by the store's current
    key, so a rotation with the issuer's tooling takes effect at the next request).
    """

    name = "private_key_jwt"

    def __init__(
        self, client_id: str, audience: str, key: Any, algorithm: str, *, kid: str | None, clock: Clock
    ) -> None:
        self.client_id = client_id
        self.audience = audience
        self.algorithm = algorithm
        self.kid = kid
        self.clock = clock
        signing = _joserfc_key(key, algorithm)
        self._current: Callable[[], tuple[Any, str, str | None]] = lambda: (signing, algorithm, kid)

    @classmethod
    def from_store(cls, client_id: str, audience: str, store: Any, *, clock: Clock) -> PrivateKeyJwt:
        """Assertions signed by the current key of ``store`` (a ``LocalIdpKeyStore``), its ``kid`` sent."""
        from flask_authflow.federation._dpop import client_signing_key

        def current() -> tuple[Any, str, str | None]:
            key = store.load_all().current
            signing, algorithm = client_signing_key(key)
            return signing, algorithm, key.kid

        made = cls.__new__(cls)
        made.client_id, made.audience, made.clock = client_id, audience, clock
        _key, made.algorithm, made.kid = current()  # checks the key now (init_app), not at login
        made._current = current
        return made

    def assertion(self) -> str:
        """A fresh signed assertion (see the class docstring)."""
        from joserfc import jwt

        key, algorithm, kid = self._current()
        header: dict[str, str] = {"alg": algorithm, "typ": "JWT"}
        if kid:
            header["kid"] = kid
        claims = _assertion_claims(self.client_id, self.audience, self.clock)
        return str(jwt.encode(header, claims, key, algorithms=[algorithm]))

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
