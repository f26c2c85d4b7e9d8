"""Where flask-authflow sends e-mail: the :class:`MailSender` protocol and an SMTP sender.

One-time codes by e-mail need a way out of the app. :class:`SmtpSender` delivers through
an SMTP server with the standard library's :mod:`smtplib`, over STARTTLS or implicit TLS
with the certificate and host name verified (``AUTHFLOW_SMTP_*``, read by
:meth:`SmtpSettings.from_config`); an application may plug in its own sender instead (a
provider's API). Any object with this ``send`` method will do, for example one that keeps the
messages in a list for a test to read.
"""

from __future__ import annotations

import ipaddress
import math
import os
import secrets
import smtplib
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email import errors as email_errors
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Final, Literal, Protocol, runtime_checkable

from flask_authflow.errors import ConfigurationError, InvalidInput, MailDeliveryError

__all__ = [
    "FolderSender",
    "HtmlMailSender",
    "MailDeliveryError",
    "MailSender",
    "SmtpSecurity",
    "SmtpSender",
    "SmtpSettings",
    "build_message",
]

#: How the connection to the SMTP server is protected: ``"starttls"`` (upgrade a plain
#: connection, port 587), ``"tls"`` (implicit TLS, SMTPS, port 465) or ``"none"`` (a relay
#: on this machine only).
SmtpSecurity = Literal["starttls", "tls", "none"]

_SECURITIES: Final = ("starttls", "tls", "none")
_DEFAULT_PORTS: Final[dict[str, int]] = {"starttls": 587, "tls": 465, "none": 25}
_DEFAULT_TIMEOUT: Final = 10.0
_MESSAGE_POLICY: Final = policy.SMTP.clone(cte_type="7bit")
#: Characters that end or split a header line (header injection) or that no address may hold.
_LINE_BREAKS: Final = frozenset("\r\n\x00\x0b\x0c\x85\u2028\u2029")


@runtime_checkable
class MailSender(Protocol):
    """Sends one plain-text message. Raise an exception when it could not be sent."""

    def send(self, to: str, subject: str, body: str) -> None: ...


def _has_line_break(value: str) -> bool:
    return any(char in _LINE_BREAKS for char in value)


def _single_address(value: str) -> str | None:
    """The addr-spec of ``value`` when it is exactly one well-formed address
    (``a@example.com`` or ``Name <a@example.com>``), else ``None``."""
    if _has_line_break(value) or not value.strip():
        return None
    try:
        header = policy.default.header_factory("To", value)
    except (IndexError, ValueError, TypeError, email_errors.HeaderParseError):
        return None
    addresses: tuple[Any, ...] = tuple(getattr(header, "addresses", ()))
    if header.defects or len(addresses) != 1:
        return None
    address = addresses[0]
    if not address.username or not address.domain:
        return None
    return str(address.addr_spec)


def _is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


@dataclass(frozen=True)
class SmtpSettings:
    """Where and how :class:`SmtpSender` delivers; every field is checked on construction
    (:class:`~flask_authflow.errors.ConfigurationError` names the ``AUTHFLOW_SMTP_*`` key to fix).

    :param host: the SMTP server (``AUTHFLOW_SMTP_HOST``).
    :param port: its port (``AUTHFLOW_SMTP_PORT``).
    :param security: ``"starttls"``, ``"tls"`` (implicit TLS) or ``"none"``, which is
        allowed for a server on this machine only (``localhost``, ``127.0.0.1``, ``::1``)
        and never with credentials (``AUTHFLOW_SMTP_SECURITY``).
    :param sender: the ``From`` address, ``no-reply@example.com`` or
        ``Example <no-reply@example.com>`` (``AUTHFLOW_SMTP_FROM``).
    :param username, password: the login, sent only over TLS (``AUTHFLOW_SMTP_USERNAME``,
        ``AUTHFLOW_SMTP_PASSWORD``); the password is left out of ``repr()``.
    :param timeout: seconds for the connection and each reply (``AUTHFLOW_SMTP_TIMEOUT``).
    :param cafile: a PEM file of the certificate authorities to trust instead of the
        system's (``AUTHFLOW_SMTP_CAFILE``); the server's certificate and host name are
        always verified.
    """

    host: str
    port: int
    sender: str
    security: SmtpSecurity = "starttls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = _DEFAULT_TIMEOUT
    cafile: str | None = None

    def __post_init__(self) -> None:
        self._check_server()
        self._check_sender()
        self._check_credentials()
        self._check_clear_text()
        self._check_connection()

    def _check_server(self) -> None:
        """Host, port and security name a server the settings can reach."""
        if not isinstance(self.host, str) or not self.host.strip() or _has_line_break(self.host):
            raise ConfigurationError(
                f"AUTHFLOW_SMTP_HOST must be the SMTP server's host name, got {self.host!r}"
            )
        if self.host != self.host.strip() or any(char.isspace() for char in self.host):
            raise ConfigurationError(f"AUTHFLOW_SMTP_HOST must not contain spaces, got {self.host!r}")
        if self.security not in _SECURITIES:
            raise ConfigurationError(
                "AUTHFLOW_SMTP_SECURITY must be 'starttls' (default, port 587), 'tls' (implicit TLS, "
                f"port 465) or 'none' (a server on this machine only), got {self.security!r}"
            )
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ConfigurationError(f"AUTHFLOW_SMTP_PORT must be between 1 and 65535, got {self.port!r}")

    def _check_sender(self) -> None:
        """One ``From`` address on one line."""
        if not isinstance(self.sender, str) or _has_line_break(self.sender):
            raise ConfigurationError(
                "AUTHFLOW_SMTP_FROM must be one address on one line (no CR or LF), "
                f"such as 'no-reply@example.com', got {self.sender!r}"
            )
        if _single_address(self.sender) is None:
            raise ConfigurationError(
                "AUTHFLOW_SMTP_FROM must be one address such as 'no-reply@example.com' or "
                f"'Example <no-reply@example.com>', got {self.sender!r}"
            )

    def _check_credentials(self) -> None:
        """Username and password together, each on one line."""
        if (self.username is None) != (self.password is None):
            missing = "AUTHFLOW_SMTP_PASSWORD" if self.password is None else "AUTHFLOW_SMTP_USERNAME"
            raise ConfigurationError(
                f"set {missing} too: AUTHFLOW_SMTP_USERNAME and AUTHFLOW_SMTP_PASSWORD go together"
            )
        for name, value in (("USERNAME", self.username), ("PASSWORD", self.password)):
            if value is not None and (not isinstance(value, str) or not value or _has_line_break(value)):
                raise ConfigurationError(
                    f"AUTHFLOW_SMTP_{name} must be a non-empty string on one line (no CR or LF)"
                )

    def _check_clear_text(self) -> None:
        """``security='none'``: a relay on this machine only, and never with a password."""
        if self.security == "none":
            if not _is_loopback(self.host):
                raise ConfigurationError(
                    f"AUTHFLOW_SMTP_SECURITY='none' is refused for {self.host!r}: mail and its one-time "
                    "codes would cross the network in clear text. Set AUTHFLOW_SMTP_SECURITY to "
                    "'starttls' or 'tls' ('none' is allowed for a relay on localhost only)"
                )
            if self.username is not None:
                raise ConfigurationError(
                    "AUTHFLOW_SMTP_USERNAME and AUTHFLOW_SMTP_PASSWORD are refused with "
                    "AUTHFLOW_SMTP_SECURITY='none': the password would be sent in clear text. "
                    "Set AUTHFLOW_SMTP_SECURITY to 'starttls' or 'tls'"
                )

    def _check_connection(self) -> None:
        """The timeout is bounded and the CA file, if any, holds certificates."""
        if (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not math.isfinite(self.timeout)
            or not 0 < self.timeout <= 300
        ):
            raise ConfigurationError(
                "AUTHFLOW_SMTP_TIMEOUT must be a number of seconds above 0 and at most 300, "
                f"got {self.timeout!r}"
            )
        if self.cafile is not None:
            if not isinstance(self.cafile, str) or not os.path.isfile(self.cafile):
                raise ConfigurationError(
                    f"AUTHFLOW_SMTP_CAFILE must name a PEM file of CA certificates, got {self.cafile!r}"
                )
            try:
                self.ssl_context()
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"AUTHFLOW_SMTP_CAFILE {self.cafile!r} holds no usable PEM certificate: {exc}"
                ) from None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SmtpSettings:
        """The settings of an app's ``AUTHFLOW_SMTP_*`` keys (``app.config``, or any mapping).

        Strings from the environment are accepted for the port and the timeout. Empty
        values count as unset. Raises :class:`~flask_authflow.errors.ConfigurationError`
        naming the key to set when a value is missing, malformed or unsafe.
        """
        host: Any = config.get("AUTHFLOW_SMTP_HOST")
        if _unset(host):
            raise ConfigurationError("AUTHFLOW_SMTP_HOST is not set: set it to your SMTP server's host name")
        sender: Any = config.get("AUTHFLOW_SMTP_FROM")
        if _unset(sender):
            raise ConfigurationError(
                "AUTHFLOW_SMTP_FROM is not set: set it to the address your mail comes from, "
                "such as 'no-reply@example.com'"
            )
        security: Any = config.get("AUTHFLOW_SMTP_SECURITY")
        security = "starttls" if _unset(security) else security
        if isinstance(security, str):
            security = security.strip().lower()
        port: Any = config.get("AUTHFLOW_SMTP_PORT")
        if _unset(port):
            port = _DEFAULT_PORTS.get(security, 0) if isinstance(security, str) else 0
        elif isinstance(port, str):
            if not port.strip().isdigit():
                raise ConfigurationError(f"AUTHFLOW_SMTP_PORT must be a port number, got {port!r}")
            port = int(port)
        timeout: Any = config.get("AUTHFLOW_SMTP_TIMEOUT")
        if _unset(timeout):
            timeout = _DEFAULT_TIMEOUT
        elif isinstance(timeout, str):
            try:
                timeout = float(timeout)
            except ValueError:
                raise ConfigurationError(
                    f"AUTHFLOW_SMTP_TIMEOUT must be a number of seconds, got {timeout!r}"
                ) from None

        def optional(key: str) -> Any:
            value = config.get(key)
            return None if _unset(value) else value

        return cls(
            host=host,
            port=port,
            sender=sender,
            security=security,
            username=optional("AUTHFLOW_SMTP_USERNAME"),
            password=optional("AUTHFLOW_SMTP_PASSWORD"),
            timeout=timeout,
            cafile=optional("AUTHFLOW_SMTP_CAFILE"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that verifies the server's certificate and host name against
        ``cafile`` (or the system's trust store), TLS 1.2 at least."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


@runtime_checkable
class HtmlMailSender(MailSender, Protocol):
    """A :class:`MailSender` that can also send a message with an HTML alternative (the
    account mails use it when the app's sender has it, else they go as text only)."""

    def send_html(self, to: str, subject: str, body: str, html: str) -> None: ...


def build_message(sender: str, to: str, subject: str, body: str, html: str | None = None) -> EmailMessage:
    """A message from ``sender`` to ``to``: ``text/plain`` in UTF-8, with ``html`` as a
    ``text/html`` alternative when given. Raises
    :class:`~flask_authflow.errors.InvalidInput` for a recipient that is not exactly one
    address, or a recipient or subject with a line break (header injection)."""
    if not isinstance(to, str) or _single_address(to) is None:
        raise InvalidInput("the recipient must be exactly one e-mail address, on one line")
    if not isinstance(subject, str) or _has_line_break(subject):
        raise InvalidInput("the subject of an e-mail must be one line (no CR or LF)")
    domain = (_single_address(sender) or "").rpartition("@")[2].strip("[]") or None
    # 7-bit on the wire (a UTF-8 body goes quoted-printable or base64): no server needs 8BITMIME
    message = EmailMessage(policy=_MESSAGE_POLICY)
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=domain)
    message.set_content(body, subtype="plain", charset="utf-8")
    if html is not None:
        message.add_alternative(html, subtype="html", charset="utf-8")
    return message


class FolderSender:
    """A :class:`HtmlMailSender` that writes each message into a folder as an ``.eml``
    file instead of sending it (``AUTHFLOW_MAIL_OUTBOX``: try the account flows without
    an SMTP server; never in production, the files hold live links)."""

    def __init__(self, folder: str | os.PathLike[str], sender: str = "no-reply@localhost") -> None:
        self.folder = os.fspath(folder)
        self.sender = sender

    def __repr__(self) -> str:
        return f"FolderSender({self.folder!r})"

    def send(self, to: str, subject: str, body: str) -> None:
        self._write(build_message(self.sender, to, subject, body))

    def send_html(self, to: str, subject: str, body: str, html: str) -> None:
        self._write(build_message(self.sender, to, subject, body, html))

    def _write(self, message: EmailMessage) -> None:
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            name = f"{time.time_ns()}-{secrets.token_hex(4)}.eml"
            descriptor = os.open(os.path.join(self.folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(message.as_bytes())
        except OSError as exc:
            raise MailDeliveryError(f"could not write the e-mail into {self.folder}: {exc.strerror}") from exc


class SmtpSender:
    """A :class:`MailSender` that delivers through an SMTP server, one connection per message.

    With ``security="starttls"`` it refuses to go on (nothing is sent, no password either)
    when the server does not offer STARTTLS; it logs in when a username is set. Every
    failure raises :class:`MailDeliveryError`, whose message never holds the password.
    """

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings

    def __repr__(self) -> str:
        return f"SmtpSender({self.settings!r})"

    def build_message(self, to: str, subject: str, body: str, html: str | None = None) -> EmailMessage:
        """The message :meth:`send` would send: ``text/plain`` in UTF-8 (with ``html`` as a
        ``text/html`` alternative) with ``From``, ``To``, ``Subject``, ``Date`` and
        ``Message-ID``. Raises :class:`~flask_authflow.errors.InvalidInput` for a recipient
        that is not exactly one address, or a recipient or subject with a line break."""
        return build_message(self.settings.sender, to, subject, body, html)

    def send(self, to: str, subject: str, body: str) -> None:
        """Send one message, or raise :class:`MailDeliveryError` (or
        :class:`~flask_authflow.errors.InvalidInput` for a malformed recipient or subject)."""
        self._deliver(to, self.build_message(to, subject, body))

    def send_html(self, to: str, subject: str, body: str, html: str) -> None:
        """:meth:`send` with an HTML alternative of ``body`` (see :class:`HtmlMailSender`)."""
        self._deliver(to, self.build_message(to, subject, body, html))

    def _deliver(self, to: str, message: EmailMessage) -> None:
        settings = self.settings
        envelope_from = _single_address(settings.sender)
        envelope_to = _single_address(to)
        assert envelope_from is not None and envelope_to is not None  # checked above
        where = f"{settings.host}:{settings.port}"
        smtp: smtplib.SMTP | None = None
        try:
            smtp = self._connect()
            if settings.username is not None and settings.password is not None:
                smtp.login(settings.username, settings.password)
            smtp.send_message(message, from_addr=envelope_from, to_addrs=[envelope_to])
        except MailDeliveryError:
            raise
        except smtplib.SMTPAuthenticationError as exc:
            # ``from None``: the server's reply to AUTH stays out of tracebacks and logs
            raise MailDeliveryError(
                self._scrub(
                    f"could not send e-mail through {where}: the server refused the login of "
                    f"AUTHFLOW_SMTP_USERNAME {settings.username!r} ({exc.smtp_code} "
                    f"{self._reply(exc.smtp_error)})"
                )
            ) from None
        except smtplib.SMTPResponseException as exc:
            raise MailDeliveryError(
                self._scrub(
                    f"could not send e-mail through {where}: the server answered "
                    f"{exc.smtp_code} {self._reply(exc.smtp_error)}"
                )
            ) from exc
        except smtplib.SMTPRecipientsRefused as exc:
            raise MailDeliveryError(
                f"could not send e-mail through {where}: the server refused the recipient"
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise MailDeliveryError(
                f"could not send e-mail through {where}: the server's TLS certificate was not "
                f"accepted ({exc.verify_message or exc.reason}); set AUTHFLOW_SMTP_CAFILE to the "
                "CA that issued it if it is a private one"
            ) from exc
        except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
            detail = str(exc) or type(exc).__name__
            raise MailDeliveryError(
                self._scrub(f"could not send e-mail through {where}: {type(exc).__name__}: {detail}")
            ) from exc
        finally:
            if smtp is not None:
                self._close(smtp)

    def _connect(self) -> smtplib.SMTP:
        """An open connection, protected as ``security`` says, greeted with EHLO."""
        settings = self.settings
        if settings.security == "tls":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                settings.host, settings.port, timeout=settings.timeout, context=settings.ssl_context()
            )
        else:
            smtp = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout)
        try:
            smtp.ehlo()
            if settings.security == "starttls":
                if not smtp.has_extn("starttls"):
                    raise MailDeliveryError(
                        f"could not send e-mail through {settings.host}:{settings.port}: the server "
                        "does not offer STARTTLS, so the message (and any password) would travel in "
                        "clear text; nothing was sent. Use a server that offers STARTTLS, or set "
                        "AUTHFLOW_SMTP_SECURITY='tls' for implicit TLS"
                    )
                smtp.starttls(context=settings.ssl_context())
                smtp.ehlo()
        except BaseException:
            self._close(smtp)
            raise
        return smtp

    @staticmethod
    def _close(smtp: smtplib.SMTP) -> None:
        """Say QUIT if the connection still works, and close it; never raises."""
        try:
            if smtp.sock is not None and smtp.sock.fileno() != -1:
                smtp.quit()
        except (smtplib.SMTPException, OSError):
            pass
        finally:
            smtp.close()

    @staticmethod
    def _reply(reply: bytes | str) -> str:
        text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
        text = " ".join(text.split())
        return text[:200]

    def _scrub(self, message: str) -> str:
        password = self.settings.password
        return message.replace(password, "***") if password else message
