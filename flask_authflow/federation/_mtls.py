"""Mutual TLS with the provider (RFC 8705): the client certificate the application supplies.

A provider configured with ``client_certificate=(cert_path, key_path)`` presents that
certificate on every call that authenticates the client or uses its tokens: the pushed
authorization request, the token request (code and refresh), revocation and userinfo.
These calls go to the provider's ``mtls_endpoint_aliases`` when discovery advertises them
(RFC 8705 §5), else to the plain endpoints, which must then be https. ``requests`` does the
TLS: the certificate and key go in its ``cert=``, the provider's CA bundle (``mtls_ca_bundle``,
when set) in its ``verify=``.

The files are read once, when the provider is configured (``init_app``): a file that is
missing or unreadable, a certificate that is not PEM, a key that is encrypted, another key
than the certificate's, a certificate expired or not yet valid are refused there, naming
what to set. The certificate's SHA-256 thumbprint (``x5t#S256``, the ``cnf`` member of a
certificate-bound token) is what stored provider tokens record as their binding.

Two token endpoint authentication methods use the certificate alone (no client secret, no
assertion is sent; only ``client_id``): ``tls_client_auth`` (the provider checks the
certificate's subject against the registration, RFC 8705 §2.1) and
``self_signed_tls_client_auth`` (it checks the certificate against the client's registered
JWKS, §2.2). With any other method the certificate still binds the tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import Discovery, OAuthError
from flask_authflow.federation._http import check_provider_url

__all__ = [
    "MTLS_AUTH_METHODS",
    "MTLS_ENDPOINTS",
    "CertificateChanged",
    "ClientCertificate",
    "mtls_aliases",
]

#: The token endpoint authentication methods of RFC 8705 §2.
MTLS_AUTH_METHODS: Final = ("tls_client_auth", "self_signed_tls_client_auth")
#: The endpoints whose ``mtls_endpoint_aliases`` entry is used (the others are not called over mTLS).
MTLS_ENDPOINTS: Final = (
    "token_endpoint",
    "pushed_authorization_request_endpoint",
    "revocation_endpoint",
    "userinfo_endpoint",
)
_MAX_PEM: Final = 1_048_576
_HOW: Final = "set client_certificate=(cert_path, key_path): a PEM certificate and its unencrypted PEM key"


class CertificateChanged(OAuthError):
    """The provider's tokens are bound to a client certificate since replaced: sign in again.

    The stored access token was obtained with the certificate configured before; it is not
    sent with the new one (a refresh that is due presents the new certificate)."""

    code = "client_certificate_changed"
    status = 401


def _read(path: Any, what: str) -> bytes:
    if not isinstance(path, str | Path) or not str(path):
        raise ConfigurationError(f"{what} must be a file path; {_HOW}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_PEM + 1)
    except OSError as exc:
        shown = str(path)[:200]
        raise ConfigurationError(f"{what}: cannot read {shown!r} ({exc.strerror}); {_HOW}") from None
    if len(data) > _MAX_PEM:
        raise ConfigurationError(f"{what}: {str(path)[:200]!r} is larger than a PEM file can be")
    return data


def _certificate(data: bytes, path: str) -> Any:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        shown = path[:200]
        raise ConfigurationError(f"client_certificate: {shown!r} is not a PEM certificate; {_HOW}") from None


def _check_key(data: bytes, path: str, certificate: Any) -> None:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_private_key,
    )

    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigurationError(
            f"client_certificate: the key {path[:200]!r} is encrypted; requests needs an unencrypted key "
            "(protect the file with its permissions instead)"
        ) from None
    except ValueError:
        shown = path[:200]
        raise ConfigurationError(f"client_certificate: {shown!r} is not a PEM private key; {_HOW}") from None
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
        raise ConfigurationError(
            f"client_certificate: the key {path[:200]!r} is not the certificate's key; {_HOW}"
        )


def _check_validity(certificate: Any, now: datetime) -> None:
    if now > certificate.not_valid_after_utc:
        raise ConfigurationError(
            f"client_certificate expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: "
            "renew it and set client_certificate to the new files"
        )
    if now < certificate.not_valid_before_utc:
        raise ConfigurationError(
            f"client_certificate is not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )


def _check_ca_bundle(path: Any) -> str:
    from cryptography import x509

    data = _read(path, "mtls_ca_bundle")
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigurationError(
            f"mtls_ca_bundle: {str(path)[:200]!r} holds no PEM certificate (the CA that signed the "
            "provider's mTLS server certificate)"
        ) from None
    return str(path)


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate, checked (see the module docstring); build it with :meth:`load`.

    ``cert`` and ``verify`` are what ``requests`` takes (``requests.get(url, cert=c.cert,
    verify=c.verify)``).
    """

    cert_path: str
    key_path: str
    #: The CA bundle that verifies the provider's mTLS server certificate (``None``: the system's).
    ca_bundle: str | None
    #: ``x5t#S256``: base64url of the SHA-256 of the certificate's DER (RFC 8705 §3.1).
    thumbprint: str
    not_after: datetime = field(compare=False)

    @classmethod
    def load(cls, value: Any, ca_bundle: Any = None, *, now: datetime | None = None) -> ClientCertificate:
        """Read and check ``value`` (``(cert_path, key_path)``) and ``ca_bundle``.

        :raises ConfigurationError: naming the file and what to set.
        """
        from cryptography.hazmat.primitives.hashes import SHA256

        if isinstance(value, str | bytes) or not isinstance(value, tuple | list) or len(value) != 2:
            raise ConfigurationError(f"client_certificate must be a pair (cert_path, key_path); {_HOW}")
        cert_path, key_path = (str(part) if isinstance(part, Path) else part for part in value)
        certificate = _certificate(_read(cert_path, "client_certificate"), cert_path)
        _check_key(_read(key_path, "client_certificate key"), key_path, certificate)
        _check_validity(certificate, now if now is not None else datetime.now(UTC))
        return cls(
            cert_path=cert_path,
            key_path=key_path,
            ca_bundle=None if ca_bundle is None else _check_ca_bundle(ca_bundle),
            thumbprint=b64url_encode(certificate.fingerprint(SHA256())),
            not_after=certificate.not_valid_after_utc,
        )

    @property
    def cert(self) -> tuple[str, str]:
        """``requests``' ``cert=``: the certificate and key files."""
        return (self.cert_path, self.key_path)

    @property
    def verify(self) -> str | bool:
        """``requests``' ``verify=``: the CA bundle, or ``True`` (the system's CAs)."""
        return self.ca_bundle if self.ca_bundle is not None else True


def mtls_aliases(document: Mapping[str, Any]) -> dict[str, str]:
    """The ``mtls_endpoint_aliases`` of a discovery document that we use, each an https URL.

    :raises Discovery: not an object, or an alias that is not an https URL.
    """
    aliases = document.get("mtls_endpoint_aliases")
    if aliases is None:
        return {}
    if not isinstance(aliases, Mapping):
        raise Discovery("mtls_endpoint_aliases is not an object")
    found: dict[str, str] = {}
    for name in MTLS_ENDPOINTS:
        url = aliases.get(name)
        if url is None:
            continue
        what = f"mtls_endpoint_aliases.{name}"
        if not isinstance(url, str) or not url.startswith("https://"):
            raise Discovery(f"{what} must be an https URL (mutual TLS needs TLS)")
        found[name] = check_provider_url(url, what)
    return found
