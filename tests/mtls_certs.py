"""Test certificates for mutual TLS, made with ``cryptography``: a CA, a server certificate for
127.0.0.1 and a client certificate it signed, as PEM files in a directory (P-256 keys: quick)."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from flask_authflow._core.encoding import b64url_encode

#: The subject of the test client certificate (what ``tls_client_auth_subject_dn`` registers).
CLIENT_SUBJECT = "CN=reference-app-mtls"


@dataclass(frozen=True)
class Certs:
    """PEM files: the CA, the provider's server certificate, the client's certificate and key."""

    ca: Path
    server_cert: Path
    server_key: Path
    cert: Path
    key: Path

    @property
    def pair(self) -> tuple[str, str]:
        return (str(self.cert), str(self.key))

    @property
    def thumbprint(self) -> str:
        return thumbprint_of(self.cert)


def thumbprint_of(cert_path: str | Path) -> str:
    """``x5t#S256`` of the certificate in ``cert_path``."""
    der = x509.load_pem_x509_certificate(Path(cert_path).read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    return b64url_encode(hashlib.sha256(der).digest())


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: Any, password: bytes | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def _issue(
    subject: str,
    key: Any,
    issuer: tuple[x509.Name, Any] | None,
    *,
    not_before: datetime,
    not_after: datetime,
    ca: bool = False,
    host: str | None = None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if host is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_certs(
    directory: Path,
    *,
    valid_from: timedelta = timedelta(days=-1),
    valid_for: timedelta = timedelta(days=30),
    key_password: bytes | None = None,
    name: str = "client",
) -> Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (``CLIENT_SUBJECT``)
    valid from ``now + valid_from`` for ``valid_for``."""
    now = datetime.now(UTC)
    ca_key, server_key, client_key = _key(), _key(), _key()
    ca = _issue(
        "flask-authflow test CA",
        ca_key,
        None,
        not_before=now - timedelta(days=1),
        not_after=now + timedelta(days=30),
        ca=True,
    )
    server = _issue(
        "127.0.0.1",
        server_key,
        (ca.subject, ca_key),
        not_before=now - timedelta(days=1),
        not_after=now + timedelta(days=30),
        host="127.0.0.1",
    )
    start = now + valid_from
    client = _issue(
        CLIENT_SUBJECT.removeprefix("CN="),
        client_key,
        (ca.subject, ca_key),
        not_before=start,
        not_after=start + valid_for,
    )
    return Certs(
        ca=_write_cert(directory / f"{name}-ca.pem", ca),
        server_cert=_write_cert(directory / f"{name}-server.pem", server),
        server_key=_write_key(directory / f"{name}-server-key.pem", server_key),
        cert=_write_cert(directory / f"{name}.pem", client),
        key=_write_key(directory / f"{name}-key.pem", client_key, key_password),
    )


def make_self_signed(directory: Path, subject: str = "reference-app-mtls-self") -> tuple[str, str]:
    """A self-signed client certificate and its key (``self_signed_tls_client_auth``): files."""
    now = datetime.now(UTC)
    key = _key()
    cert = _issue(subject, key, None, not_before=now - timedelta(days=1), not_after=now + timedelta(days=30))
    return (str(_write_cert(directory / "self.pem", cert)), str(_write_key(directory / "self-key.pem", key)))
