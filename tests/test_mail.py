"""E-mail delivery of one-time codes: :class:`SmtpSettings` refuses unsafe settings, and
:class:`SmtpSender` delivers to a real SMTP server on 127.0.0.1 (``tests/smtp_server.py``)
over STARTTLS or implicit TLS, verifying the certificate, and fails closed otherwise."""

from __future__ import annotations

import dataclasses
import ssl
import traceback
from pathlib import Path
from typing import Any

import pytest

from flask_authflow._mail import MailDeliveryError, MailSender, SmtpSender, SmtpSettings
from flask_authflow.errors import AuthFlowError, ConfigurationError, InvalidInput
from tests.parts import free_port
from tests.smtp_server import (
    PASSWORD,
    USERNAME,
    SmtpServers,
    SmtpTestServer,
    Tls,
    smtp_server,  # noqa: F401 - the real server fixture
    smtp_server_factory,  # noqa: F401 - the real server fixture
)

BASE = {"AUTHFLOW_SMTP_HOST": "smtp.example.com", "AUTHFLOW_SMTP_FROM": "no-reply@example.com"}


def _delivery_error(sender: SmtpSender, to: str = "bob@example.com") -> MailDeliveryError:
    with pytest.raises(MailDeliveryError) as caught:
        sender.send(to, "Your code", "123456")
    return caught.value


def _shown(error: BaseException) -> str:
    """Everything a log of this error would show: the message and the whole traceback."""
    return str(error) + repr(error) + "".join(traceback.format_exception(error))


# -- delivery to a real server --------------------------------------------------------------------


def test_starttls_with_login_delivers_the_message(smtp_server: SmtpTestServer) -> None:  # noqa: F811
    sender = SmtpSender(smtp_server.settings())
    sender.send("Bob <bob@example.com>", "Your sign-in code", "Your code is 123456.")

    [received] = smtp_server.messages
    assert received.over_tls
    assert received.login == USERNAME
    assert received.mail_from == "no-reply@example.com"
    assert received.rcpt_tos == ("bob@example.com",)
    message = received.message
    assert message["Subject"] == "Your sign-in code"
    assert message["From"] == "Example <no-reply@example.com>"
    assert message["To"] == "Bob <bob@example.com>"
    assert message["Date"].datetime is not None
    assert message["Message-ID"].endswith("@example.com>")
    assert message.get_content_type() == "text/plain"
    assert message.get_content_charset() == "utf-8"
    assert received.body == "Your code is 123456.\n"


def test_implicit_tls_delivers(smtp_server_factory: SmtpServers) -> None:  # noqa: F811
    server = smtp_server_factory(tls="implicit")
    settings = server.settings()
    assert (settings.security, settings.port) == ("tls", server.port)

    SmtpSender(settings).send("carol@example.com", "Code", "654321")

    [received] = server.messages
    assert received.over_tls
    assert received.login == USERNAME
    assert received.rcpt_tos == ("carol@example.com",)
    assert received.body == "654321\n"


def test_security_none_delivers_to_a_local_relay(smtp_server_factory: SmtpServers) -> None:  # noqa: F811
    server = smtp_server_factory(tls="none", auth=False)
    SmtpSender(server.settings(AUTHFLOW_SMTP_CAFILE=None)).send("dave@example.com", "Code", "111222")
    [received] = server.messages
    assert not received.over_tls
    assert received.login is None
    assert received.body == "111222\n"


def test_a_unicode_message_arrives_intact(smtp_server: SmtpTestServer) -> None:  # noqa: F811
    body = "Grüße, Zoë — ваш код: 424242\n你好 🙂\n\n終わり."
    subject = "Ihr Anmeldecode für Übersicht ✓"
    sender = SmtpSender(smtp_server.settings(AUTHFLOW_SMTP_FROM="Exämple Sérvice <no-reply@example.com>"))
    sender.send("Zoë Müller <zoe@example.com>", subject, body)

    [received] = smtp_server.messages
    assert received.raw.isascii()  # 7-bit on the wire: no server needs 8BITMIME
    assert received.message["Subject"] == subject
    assert received.message["From"] == "Exämple Sérvice <no-reply@example.com>"
    assert received.message["To"] == "Zoë Müller <zoe@example.com>"
    assert received.body == body + "\n"


def test_the_server_refuses_mail_without_a_login(smtp_server: SmtpTestServer) -> None:  # noqa: F811
    settings = smtp_server.settings(AUTHFLOW_SMTP_USERNAME=None, AUTHFLOW_SMTP_PASSWORD=None)
    error = _delivery_error(SmtpSender(settings))
    assert "530" in str(error)
    assert smtp_server.messages == []


# -- failing closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("auth", [True, False], ids=["offers-auth-in-clear", "no-auth"])
def test_no_starttls_offered_means_nothing_is_sent(
    smtp_server_factory: SmtpServers,  # noqa: F811
    auth: bool,
) -> None:
    """A server (or a man in the middle) that does not offer STARTTLS gets neither the message
    nor the password, even when it offers AUTH in clear text."""
    server = smtp_server_factory(tls="none", auth=auth, auth_require_tls=False)
    overrides: dict[str, Any] = {"AUTHFLOW_SMTP_SECURITY": "starttls"}
    if not auth:
        overrides |= {"AUTHFLOW_SMTP_USERNAME": USERNAME, "AUTHFLOW_SMTP_PASSWORD": PASSWORD}
    error = _delivery_error(SmtpSender(server.settings(**overrides)))

    assert "does not offer STARTTLS" in str(error)
    assert "nothing was sent" in str(error)
    assert server.messages == []
    assert server.logins == []
    assert PASSWORD not in _shown(error)


@pytest.mark.parametrize("tls", ["starttls", "implicit"])
def test_an_untrusted_certificate_is_refused(smtp_server_factory: SmtpServers, tls: Tls) -> None:  # noqa: F811
    """Without AUTHFLOW_SMTP_CAFILE the system trust store is used: the test CA is not in it."""
    server = smtp_server_factory(tls=tls)
    error = _delivery_error(SmtpSender(server.settings(AUTHFLOW_SMTP_CAFILE=None)))

    assert "certificate" in str(error)
    assert "AUTHFLOW_SMTP_CAFILE" in str(error)
    assert isinstance(error.__cause__, ssl.SSLCertVerificationError)
    assert server.messages == []
    assert server.logins == []


def test_a_certificate_for_another_host_name_is_refused(smtp_server_factory: SmtpServers) -> None:  # noqa: F811
    """The certificate is trusted (its CA is the cafile) but names 127.0.0.1 and localhost,
    not 127.0.0.2: host name verification refuses it."""
    server = smtp_server_factory(bind="127.0.0.2")
    assert server.settings().host == "127.0.0.2"
    error = _delivery_error(SmtpSender(server.settings()))
    assert isinstance(error.__cause__, ssl.SSLCertVerificationError)
    assert "127.0.0.2" in str(error)
    assert server.messages == []
    assert server.logins == []


def test_a_wrong_password_is_refused_without_showing_it(smtp_server: SmtpTestServer) -> None:  # noqa: F811
    wrong = "Wr0ng-Pa55word-Q9z"
    error = _delivery_error(SmtpSender(smtp_server.settings(AUTHFLOW_SMTP_PASSWORD=wrong)))

    assert smtp_server.logins  # tried (smtplib tries PLAIN, then LOGIN) and refused each time
    assert set(smtp_server.logins) == {(USERNAME, False)}
    assert smtp_server.messages == []
    assert "refused the login" in str(error)
    assert repr(USERNAME) in str(error)
    assert wrong not in _shown(error)
    assert isinstance(error, AuthFlowError)
    assert (error.code, error.status) == ("mail_delivery_failed", 503)
    assert error.to_dict() == {"error": "mail_delivery_failed", "message": str(error)}


def test_an_unreachable_server_is_a_delivery_error() -> None:
    port = free_port()  # nothing listens there
    settings = SmtpSettings.from_config(
        {
            "AUTHFLOW_SMTP_HOST": "127.0.0.1",
            "AUTHFLOW_SMTP_PORT": port,
            "AUTHFLOW_SMTP_FROM": "no-reply@example.com",
            "AUTHFLOW_SMTP_USERNAME": USERNAME,
            "AUTHFLOW_SMTP_PASSWORD": PASSWORD,
            "AUTHFLOW_SMTP_TIMEOUT": 2,
        }
    )
    error = _delivery_error(SmtpSender(settings))
    assert f"127.0.0.1:{port}" in str(error)
    assert "ConnectionRefusedError" in str(error)
    assert PASSWORD not in _shown(error)


@pytest.mark.parametrize(
    ("to", "subject"),
    [
        ("bob@example.com\r\nBcc: eve@example.net", "Your code"),
        ("bob@example.com\nBcc: eve@example.net", "Your code"),
        ("bob@example.com", "Your code\r\nBcc: eve@example.net"),
        ("bob@example.com", "Your code\nX-Injected: 1"),
        ("bob@example.com", "Your code\rX-Injected: 1"),
        ("bob@example.com, eve@example.net", "Your code"),
        ("not-an-address", "Your code"),
        ("bob@", "Your code"),
        ("", "Your code"),
    ],
)
def test_header_injection_and_malformed_recipients_are_refused_before_connecting(
    smtp_server: SmtpTestServer,  # noqa: F811
    to: str,
    subject: str,
) -> None:
    sender = SmtpSender(smtp_server.settings())
    with pytest.raises(InvalidInput):
        sender.send(to, subject, "123456")
    # refused before any connection: an unreachable server would have failed differently
    unreachable = SmtpSender(dataclasses.replace(smtp_server.settings(), port=free_port()))
    with pytest.raises(InvalidInput):
        unreachable.send(to, subject, "123456")
    assert smtp_server.messages == []
    assert smtp_server.logins == []


# -- settings ---------------------------------------------------------------------------------------


def test_from_config_defaults_and_coercion(tmp_path: Path) -> None:
    settings = SmtpSettings.from_config(BASE)
    assert settings == SmtpSettings(
        host="smtp.example.com", port=587, sender="no-reply@example.com", security="starttls", timeout=10.0
    )
    assert SmtpSettings.from_config(BASE | {"AUTHFLOW_SMTP_SECURITY": "tls"}).port == 465
    assert SmtpSettings.from_config(BASE | {"AUTHFLOW_SMTP_SECURITY": " TLS "}).security == "tls"
    for host in ("localhost", "127.0.0.1", "127.0.0.53", "::1", "[::1]", "LOCALHOST"):
        local = SmtpSettings.from_config(
            BASE | {"AUTHFLOW_SMTP_HOST": host, "AUTHFLOW_SMTP_SECURITY": "none"}
        )
        assert (local.security, local.port) == ("none", 25)
    from_env = SmtpSettings.from_config(
        BASE
        | {
            "AUTHFLOW_SMTP_PORT": "2525",
            "AUTHFLOW_SMTP_TIMEOUT": "2.5",
            "AUTHFLOW_SMTP_USERNAME": "",
            "AUTHFLOW_SMTP_PASSWORD": "",
            "AUTHFLOW_SMTP_CAFILE": "",
        }
    )
    assert (from_env.port, from_env.timeout, from_env.username, from_env.cafile) == (2525, 2.5, None, None)
    # app.config after load_config: every key present, the unset ones None
    defaults = dict.fromkeys(
        ["AUTHFLOW_SMTP_PORT", "AUTHFLOW_SMTP_USERNAME", "AUTHFLOW_SMTP_PASSWORD", "AUTHFLOW_SMTP_CAFILE"]
    )
    loaded = SmtpSettings.from_config(
        BASE | defaults | {"AUTHFLOW_SMTP_SECURITY": "starttls", "AUTHFLOW_SMTP_TIMEOUT": 10.0}
    )
    assert loaded == settings


def test_the_password_is_not_in_repr_and_settings_are_frozen() -> None:
    settings = SmtpSettings.from_config(
        BASE | {"AUTHFLOW_SMTP_USERNAME": USERNAME, "AUTHFLOW_SMTP_PASSWORD": PASSWORD}
    )
    assert settings.password == PASSWORD
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in repr(SmtpSender(settings))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.security = "none"  # type: ignore[misc]


def test_the_tls_context_always_verifies(smtp_server: SmtpTestServer) -> None:  # noqa: F811
    for settings in (SmtpSettings.from_config(BASE), smtp_server.settings()):
        context = settings.ssl_context()
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
        assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    # with a cafile only that CA is trusted, not the system's
    assert len(smtp_server.settings().ssl_context().get_ca_certs()) == 1


def test_smtp_sender_is_a_mail_sender() -> None:
    assert isinstance(SmtpSender(SmtpSettings.from_config(BASE)), MailSender)


def _garbage_pem(tmp_path: Path) -> str:
    path = tmp_path / "not-a-cert.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    return str(path)


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("no host", {"AUTHFLOW_SMTP_HOST": None}, "AUTHFLOW_SMTP_HOST is not set"),
    ("blank host", {"AUTHFLOW_SMTP_HOST": "  "}, "AUTHFLOW_SMTP_HOST is not set"),
    ("host with a space", {"AUTHFLOW_SMTP_HOST": "smtp example.com"}, "AUTHFLOW_SMTP_HOST must not contain"),
    ("host with CRLF", {"AUTHFLOW_SMTP_HOST": "smtp.example.com\r\n"}, "AUTHFLOW_SMTP_HOST must be"),
    ("no from", {"AUTHFLOW_SMTP_FROM": None}, "AUTHFLOW_SMTP_FROM is not set"),
    ("empty from", {"AUTHFLOW_SMTP_FROM": ""}, "AUTHFLOW_SMTP_FROM is not set"),
    (
        "from with CRLF",
        {"AUTHFLOW_SMTP_FROM": "no-reply@example.com\r\nBcc: eve@example.net"},
        "AUTHFLOW_SMTP_FROM must be one address on one line (no CR or LF)",
    ),
    (
        "from with LF",
        {"AUTHFLOW_SMTP_FROM": "Example\n<no-reply@example.com>"},
        "AUTHFLOW_SMTP_FROM must be one address on one line (no CR or LF)",
    ),
    ("from not an address", {"AUTHFLOW_SMTP_FROM": "no-reply"}, "AUTHFLOW_SMTP_FROM must be one address"),
    (
        "from two addresses",
        {"AUTHFLOW_SMTP_FROM": "a@example.com, b@example.com"},
        "AUTHFLOW_SMTP_FROM must be one address",
    ),
    ("unknown security", {"AUTHFLOW_SMTP_SECURITY": "ssl"}, "AUTHFLOW_SMTP_SECURITY must be 'starttls'"),
    (
        "security none on a remote host",
        {"AUTHFLOW_SMTP_SECURITY": "none"},
        "AUTHFLOW_SMTP_SECURITY='none' is refused for 'smtp.example.com'",
    ),
    (
        "security none on a private address",
        {"AUTHFLOW_SMTP_SECURITY": "none", "AUTHFLOW_SMTP_HOST": "10.0.0.5"},
        "AUTHFLOW_SMTP_SECURITY='none' is refused",
    ),
    (
        "security none on a localhost look-alike",
        {"AUTHFLOW_SMTP_SECURITY": "none", "AUTHFLOW_SMTP_HOST": "localhost.example.com"},
        "AUTHFLOW_SMTP_SECURITY='none' is refused",
    ),
    (
        "credentials with security none",
        {
            "AUTHFLOW_SMTP_SECURITY": "none",
            "AUTHFLOW_SMTP_HOST": "localhost",
            "AUTHFLOW_SMTP_USERNAME": USERNAME,
            "AUTHFLOW_SMTP_PASSWORD": PASSWORD,
        },
        "AUTHFLOW_SMTP_USERNAME and AUTHFLOW_SMTP_PASSWORD are refused with AUTHFLOW_SMTP_SECURITY='none'",
    ),
    ("port 0", {"AUTHFLOW_SMTP_PORT": 0}, "AUTHFLOW_SMTP_PORT must be between 1 and 65535"),
    ("port 65536", {"AUTHFLOW_SMTP_PORT": 65536}, "AUTHFLOW_SMTP_PORT must be between 1 and 65535"),
    ("negative port", {"AUTHFLOW_SMTP_PORT": -25}, "AUTHFLOW_SMTP_PORT must be between 1 and 65535"),
    ("port as a bool", {"AUTHFLOW_SMTP_PORT": True}, "AUTHFLOW_SMTP_PORT must be between 1 and 65535"),
    ("port not a number", {"AUTHFLOW_SMTP_PORT": "smtp"}, "AUTHFLOW_SMTP_PORT must be a port number"),
    ("port too large as text", {"AUTHFLOW_SMTP_PORT": "70000"}, "AUTHFLOW_SMTP_PORT must be between"),
    (
        "username without password",
        {"AUTHFLOW_SMTP_USERNAME": USERNAME},
        "set AUTHFLOW_SMTP_PASSWORD too",
    ),
    (
        "password without username",
        {"AUTHFLOW_SMTP_PASSWORD": PASSWORD},
        "set AUTHFLOW_SMTP_USERNAME too",
    ),
    ("zero timeout", {"AUTHFLOW_SMTP_TIMEOUT": 0}, "AUTHFLOW_SMTP_TIMEOUT must be a number of seconds"),
    (
        "endless timeout",
        {"AUTHFLOW_SMTP_TIMEOUT": "inf"},
        "AUTHFLOW_SMTP_TIMEOUT must be a number of seconds",
    ),
    ("timeout not a number", {"AUTHFLOW_SMTP_TIMEOUT": "soon"}, "AUTHFLOW_SMTP_TIMEOUT must be a number"),
    ("missing cafile", {"AUTHFLOW_SMTP_CAFILE": "/nonexistent/ca.pem"}, "AUTHFLOW_SMTP_CAFILE must name"),
    ("unreadable cafile", {"AUTHFLOW_SMTP_CAFILE": _garbage_pem}, "AUTHFLOW_SMTP_CAFILE"),
]


@pytest.mark.parametrize(("overrides", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_from_config_refuses_unsafe_or_malformed_settings(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    config = BASE | {key: value(tmp_path) if callable(value) else value for key, value in overrides.items()}
    with pytest.raises(ConfigurationError) as caught:
        SmtpSettings.from_config(config)
    assert message in str(caught.value)
    assert PASSWORD not in _shown(caught.value)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SMTP_SECURITY='none' is refused"):
        SmtpSettings(host="smtp.example.com", port=25, sender="no-reply@example.com", security="none")
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SMTP_FROM must be one address on one line"):
        SmtpSettings(host="smtp.example.com", port=587, sender="a@example.com\nBcc: b@example.com")
