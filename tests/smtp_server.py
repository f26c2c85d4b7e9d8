"""A real SMTP server on 127.0.0.1 for the e-mail tests (aiosmtpd in a thread).

Import the fixtures into a test module, as ``tests/test_browser.py`` does with
``live_server``::

    from tests.smtp_server import smtp_server  # noqa: F401 - the real SMTP server fixture

(import only the fixtures the module uses; each is self-contained) and mark the parameters
that use them ``# noqa: F811``. Without aiosmtpd (the ``dev`` extra) the tests that need a
server are skipped, or fail under ``CI=true``, as with the other real parts
(``tests/parts.py``).

``smtp_server`` offers STARTTLS and requires AUTH (over TLS only) with
:data:`USERNAME` / :data:`PASSWORD`; ``smtp_server_factory(tls=..., auth=...)`` starts
others: ``tls="starttls"`` (plain, upgraded with STARTTLS), ``"implicit"`` (SMTPS) or
``"none"`` (no TLS offered at all). Every server is stopped when the test ends. Their
certificate, for ``127.0.0.1`` and ``localhost``, is issued at test time by a throwaway CA
written to ``tmp_path`` (``server.cafile``); messages the server accepted are in
``server.messages``, parsed with :mod:`email`, and login attempts in ``server.logins``.
"""

from __future__ import annotations

import email
import ipaddress
import logging
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Literal

import pytest

from flask_authflow._mail import SmtpSettings
from tests.parts import free_port, missing_part

USERNAME = "mailer"
PASSWORD = "s3cret-smtp-pass-7f2c"  # the test server's own login
SENDER = "Example <no-reply@example.com>"

Tls = Literal["starttls", "implicit", "none"]


@dataclass(frozen=True)
class ReceivedMessage:
    """One message the server accepted: the envelope, the parsed message, how it came."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage
    raw: bytes
    over_tls: bool
    login: str | None

    @property
    def body(self) -> str:
        """The decoded text, with the wire's CRLF line ends read as ``\\n``."""
        return str(self.message.get_content()).replace("\r\n", "\n")


@dataclass(frozen=True)
class Certificates:
    """A CA (``cafile``, the file a client trusts) and the server's key and certificate."""

    cafile: Path
    certfile: Path
    keyfile: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certfile, self.keyfile)
        return context


def make_certificates(folder: Path) -> Certificates:
    """A throwaway CA and a server certificate it signed for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flask-authflow test SMTP CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cafile, certfile, keyfile = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    cafile.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificates(cafile=cafile, certfile=certfile, keyfile=keyfile)


class RecordingHandler:
    """aiosmtpd handler and authenticator: keeps accepted messages and login attempts."""

    def __init__(self, username: str | None, password: str | None, *, require_login: bool = False) -> None:
        self.username = username
        self.password = password
        self.require_login = require_login
        self.messages: list[ReceivedMessage] = []
        self.logins: list[tuple[str, bool]] = []  # (login, accepted)

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = auth_data.login.decode("utf-8", "replace")
        accepted = (
            self.username is not None
            and self.password is not None
            and auth_data.login == self.username.encode()
            and auth_data.password == self.password.encode()
        )
        self.logins.append((login, accepted))
        return AuthResult(success=accepted, handled=False, auth_data=login if accepted else None)

    async def handle_MAIL(
        self, server: Any, session: Any, envelope: Any, address: str, mail_options: list[str]
    ) -> str:
        # aiosmtpd's own auth_required is only honoured with STARTTLS: it does not know an
        # implicit-TLS connection is encrypted (and warns when told auth_require_tls=False)
        if self.require_login and not session.authenticated:
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = bytes(envelope.original_content or envelope.content)
        parsed = email.message_from_bytes(raw, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(
            ReceivedMessage(
                mail_from=str(envelope.mail_from),
                rcpt_tos=tuple(envelope.rcpt_tos),
                message=parsed,
                raw=raw,
                # session.ssl is set after STARTTLS only; the transport knows implicit TLS too
                over_tls=server.transport.get_extra_info("ssl_object") is not None,
                login=session.auth_data if session.authenticated else None,
            )
        )
        return "250 Message accepted for delivery"


@dataclass
class SmtpTestServer:
    """A running aiosmtpd server on 127.0.0.1 (see the module's docstring)."""

    port: int
    tls: Tls
    certificates: Certificates
    handler: RecordingHandler
    controller: Any = field(repr=False)
    host: str = "127.0.0.1"

    @property
    def messages(self) -> list[ReceivedMessage]:
        return self.handler.messages

    @property
    def logins(self) -> list[tuple[str, bool]]:
        return self.handler.logins

    @property
    def cafile(self) -> str:
        return str(self.certificates.cafile)

    @property
    def username(self) -> str | None:
        return self.handler.username

    @property
    def password(self) -> str | None:
        return self.handler.password

    def config(self, **overrides: Any) -> dict[str, Any]:
        """``AUTHFLOW_SMTP_*`` keys that reach this server (trusting its CA, with its login)."""
        values: dict[str, Any] = {
            "AUTHFLOW_SMTP_HOST": self.host,
            "AUTHFLOW_SMTP_PORT": self.port,
            "AUTHFLOW_SMTP_SECURITY": "tls" if self.tls == "implicit" else self.tls,
            "AUTHFLOW_SMTP_FROM": SENDER,
            "AUTHFLOW_SMTP_CAFILE": self.cafile,
            "AUTHFLOW_SMTP_TIMEOUT": 5,
        }
        if self.username is not None:
            values["AUTHFLOW_SMTP_USERNAME"] = self.username
            values["AUTHFLOW_SMTP_PASSWORD"] = self.password
        values.update(overrides)
        return {key: value for key, value in values.items() if value is not None}

    def settings(self, **overrides: Any) -> SmtpSettings:
        """:class:`SmtpSettings` for this server; ``overrides`` are ``AUTHFLOW_SMTP_*`` keys
        (``None`` removes one)."""
        return SmtpSettings.from_config(self.config(**overrides))

    def stop(self) -> None:
        self.controller.stop()


def start_smtp_server(
    certificates: Certificates,
    *,
    tls: Tls = "starttls",
    auth: bool = True,
    auth_require_tls: bool = True,
    bind: str = "127.0.0.1",
) -> SmtpTestServer:
    """Start a server on ``bind``; ``auth``: require a login (:data:`USERNAME` /
    :data:`PASSWORD`), offered over TLS only unless ``auth_require_tls=False`` (a
    deliberately unsafe server, to show a client does not send its password there)."""
    try:
        from aiosmtpd.controller import Controller
    except ImportError as exc:
        missing_part(f"aiosmtpd is not installed (pip install -e '.[dev]'): {exc}")
        raise

    handler = RecordingHandler(
        USERNAME if auth else None, PASSWORD if auth else None, require_login=auth and tls == "implicit"
    )
    kwargs: dict[str, Any] = {
        "hostname": bind,
        "port": free_port(),
        # a fixed name: aiosmtpd would otherwise look up this machine's FQDN on every connection
        "server_hostname": "localhost",
        "ready_timeout": 10.0,
    }
    if tls == "implicit":
        kwargs["ssl_context"] = certificates.server_context()
    elif tls == "starttls":
        kwargs["tls_context"] = certificates.server_context()
    if auth and tls == "implicit":
        # the whole connection is TLS; the handler refuses MAIL before a login
        kwargs.update(authenticator=handler.authenticate, auth_require_tls=False)
    elif auth:
        # auth_required with auth_require_tls=False would make aiosmtpd warn (UserWarning):
        # that unsafe server (AUTH offered in clear text) accepts mail without a login
        kwargs.update(
            authenticator=handler.authenticate,
            auth_required=auth_require_tls,
            auth_require_tls=auth_require_tls,
        )
    controller = Controller(handler, **kwargs)
    controller.start()
    return SmtpTestServer(
        port=int(kwargs["port"]),
        tls=tls,
        certificates=certificates,
        handler=handler,
        controller=controller,
        host=bind,
    )


class _LegacyLoginDataNotice(logging.Filter):
    """aiosmtpd 1.4 logs "Session.login_data is deprecated" (a log record, not a warning)
    on every successful AUTH, from its own code: drop that record only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Session.login_data is deprecated")


class SmtpServers:
    """Starts test servers that share one certificate and stops them all (``stop_all``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.servers: list[SmtpTestServer] = []
        self._certificates: Certificates | None = None
        self._log_filter = _LegacyLoginDataNotice()
        logging.getLogger("mail.log").addFilter(self._log_filter)

    @property
    def certificates(self) -> Certificates:
        if self._certificates is None:
            self._certificates = make_certificates(self.folder)
        return self._certificates

    def __call__(
        self,
        *,
        tls: Tls = "starttls",
        auth: bool = True,
        auth_require_tls: bool = True,
        bind: str = "127.0.0.1",
    ) -> SmtpTestServer:
        server = start_smtp_server(
            self.certificates, tls=tls, auth=auth, auth_require_tls=auth_require_tls, bind=bind
        )
        self.servers.append(server)
        return server

    def stop_all(self) -> None:
        try:
            while self.servers:
                self.servers.pop().stop()
        finally:
            logging.getLogger("mail.log").removeFilter(self._log_filter)


# Each fixture depends on built-in fixtures only, so a module imports just the ones it uses.


@pytest.fixture
def smtp_server_factory(tmp_path: Path) -> Iterator[SmtpServers]:
    """``smtp_server_factory(tls="starttls"|"implicit"|"none", auth=True, auth_require_tls=True,
    bind="127.0.0.1")`` starts a server (certificate in ``tmp_path/smtp-tls``); all of them
    stop when the test ends."""
    servers = SmtpServers(tmp_path / "smtp-tls")
    yield servers
    servers.stop_all()


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[SmtpTestServer]:
    """A server on 127.0.0.1 that offers STARTTLS and requires AUTH over TLS."""
    servers = SmtpServers(tmp_path / "smtp-tls")
    yield servers()
    servers.stop_all()


__all__ = [
    "PASSWORD",
    "SENDER",
    "USERNAME",
    "Certificates",
    "ReceivedMessage",
    "RecordingHandler",
    "SmtpServers",
    "SmtpTestServer",
    "make_certificates",
    "smtp_server",
    "smtp_server_factory",
    "start_smtp_server",
]
