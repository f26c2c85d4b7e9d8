"""The address every mailed link starts with: one configured origin, never the request's ``Host``.

A reset, sign-up or e-mail-change link carries a single-use token. Built from the request's
``Host`` (or from ``X-Forwarded-Host`` through ``ProxyFix``), one forged header would mail a
user a genuine message whose link hands the token to another site. :func:`mailed_url`
builds every mailed link on ``AUTHFLOW_EXTERNAL_URL`` or, without it, on Flask's
``SERVER_NAME`` + ``PREFERRED_URL_SCHEME`` + ``APPLICATION_ROOT``.

:func:`check_mail_settings` refuses at ``init_app`` a mail feature without a mail sender, and
one whose mails carry links without that origin. Without an origin a link is refused at
request time too (503, and the log says what to set; the change of e-mail has no key to
check at ``init_app``), except in development (``app.debug``, ``app.testing``, or the
loopback-only mode of ``AUTHFLOW_ALLOW_INSECURE_LOOPBACK``): there a request to a loopback
host (``localhost``, ``127.0.0.1``) gets links on its own address, and the log says so once.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, current_app, has_request_context, request

from flask_authflow._settings import is_loopback_host, normal_origin, origin_problem, read
from flask_authflow._web.config import AuthFlowConfig
from flask_authflow.errors import ConfigurationError, MailDeliveryError

__all__ = [
    "LINK_FEATURES",
    "MAIL_FEATURES",
    "check_mail_settings",
    "configured_origin",
    "mail_origin",
    "mailed_url",
]

log = logging.getLogger("flask_authflow.mail")

#: The keys that turn on a feature whose mails carry a link (with a single-use token).
LINK_FEATURES = ("AUTHFLOW_REGISTRATION", "AUTHFLOW_PASSWORD_RESET", "AUTHFLOW_LOGIN_BY_CODE")
#: The keys that turn on a feature that sends mail.
MAIL_FEATURES = (*LINK_FEATURES, "AUTHFLOW_DEVICE_NEW_DEVICE_MAIL")

_SET_ORIGIN = (
    "set AUTHFLOW_EXTERNAL_URL to the address users reach this app at, such as "
    "'https://app.example.com' (with its path when the app is mounted under one), or Flask's "
    "SERVER_NAME with PREFERRED_URL_SCHEME='https'; mailed links are never built from the "
    "request's Host or X-Forwarded-Host"
)

#: The apps that already logged their development fallback.
_warned: weakref.WeakSet[Flask] = weakref.WeakSet()


def configured_origin(config: Mapping[str, Any]) -> str | None:
    """The origin of mailed links in ``config`` (``app.config``): ``AUTHFLOW_EXTERNAL_URL``,
    else ``PREFERRED_URL_SCHEME://SERVER_NAME`` + ``APPLICATION_ROOT``, else ``None``.

    :raises ConfigurationError: the value is not an acceptable origin (the message says why
        and what to set)."""
    external: str | None = read(config, "AUTHFLOW_EXTERNAL_URL")
    if external is not None:
        return external
    server = config.get("SERVER_NAME")
    if not server:
        return None
    scheme = config.get("PREFERRED_URL_SCHEME") or "http"
    root = str(config.get("APPLICATION_ROOT") or "/").rstrip("/")
    derived = f"{scheme}://{server}{root}"
    problem = origin_problem(derived)
    if problem is not None:
        raise ConfigurationError(
            f"mailed links would start with {derived!r} (SERVER_NAME, PREFERRED_URL_SCHEME and "
            f"APPLICATION_ROOT), which is refused: {problem}. Set PREFERRED_URL_SCHEME='https', or "
            "AUTHFLOW_EXTERNAL_URL to the address users reach this app at"
        )
    return normal_origin(derived)


def _development(app: Flask) -> bool:
    """``app`` runs in development: debug, testing, or the loopback-only mode in which
    every client that is not on this machine is refused (see :doc:`/config`)."""
    config = app.config
    loopback_only = not read(config, "AUTHFLOW_COOKIE_SECURE") and read(
        config, "AUTHFLOW_ALLOW_INSECURE_LOOPBACK"
    )
    return bool(app.debug or app.testing or loopback_only)


def _development_origin(app: Flask) -> str | None:
    """The request's own address when the app is in development and that address is a
    loopback host (``http://localhost`` outside a request: the command line); else ``None``."""
    if not _development(app):
        return None
    if not has_request_context():
        return "http://localhost" + str(app.config.get("APPLICATION_ROOT") or "/").rstrip("/")
    if not is_loopback_host(urlsplit(f"//{request.host}").hostname):
        return None
    return request.url_root.rstrip("/")


def mail_origin(app: Flask) -> str:
    """Where ``app``'s mailed links start (see :func:`configured_origin`; in development the
    request's loopback address, logged once).

    :raises MailDeliveryError: no origin is configured outside loopback development, or the
        configured one is refused (the log says what to set; the client sees a 503)."""
    try:
        origin = configured_origin(app.config)
    except ConfigurationError as exc:
        log.error("no mail sent: %s", exc.message)
        raise MailDeliveryError(exc.message) from None
    if origin is not None:
        return origin
    fallback = _development_origin(app)
    if fallback is None:
        message = f"no mail with a link can be sent: {_SET_ORIGIN}"
        log.error("%s (development on a loopback host is the only exception)", message)
        raise MailDeliveryError(message)
    if app not in _warned:
        _warned.add(app)
        log.warning(
            "mailed links use the request's address %s because neither AUTHFLOW_EXTERNAL_URL nor "
            "SERVER_NAME is set; this is allowed in development on a loopback host only: before "
            "anyone else uses this app, %s",
            fallback,
            _SET_ORIGIN,
        )
    return fallback


def mailed_url(endpoint: str, **values: Any) -> str:
    """The absolute URL of ``endpoint`` (``url_for``'s arguments) on :func:`mail_origin`, for
    a mail: never on the request's ``Host``.

    :raises MailDeliveryError: as :func:`mail_origin`."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    parts = urlsplit(mail_origin(app))
    adapter = app.url_map.bind(parts.netloc, script_name=parts.path or "/", url_scheme=parts.scheme)
    app.inject_url_defaults(endpoint, values)
    return adapter.build(endpoint, values, force_external=True)


def check_mail_settings(app: Flask, config: AuthFlowConfig, *, sender_given: bool) -> None:
    """Refuse (at ``init_app``) a mail feature that has no way to send, and a feature whose
    mails carry links without an origin for them (outside development, see :func:`mail_origin`).

    ``sender_given``: the application passed its own mail sender. In testing a sender may
    still be installed after ``init_app`` (the pytest plugin's ``mail_outbox``).

    :raises ConfigurationError: the message names the feature and what to set."""
    enabled = [key for key in MAIL_FEATURES if read(app.config, key)]
    if not enabled:
        return
    has_sender = sender_given or config.mail is not None or read(app.config, "AUTHFLOW_MAIL_OUTBOX")
    if not has_sender and not app.testing:
        raise ConfigurationError(
            f"{' and '.join(enabled)} send mail, but no mail sender is configured: set "
            "AUTHFLOW_SMTP_HOST and AUTHFLOW_SMTP_FROM (see the manual's 'Sending e-mail'), pass "
            "your own sender as AuthFlow(mail_sender=...) or init_app(app, mail_sender=...), or, "
            "while developing, set AUTHFLOW_MAIL_OUTBOX to a folder"
        )
    linked = [key for key in enabled if key in LINK_FEATURES]
    if linked and configured_origin(app.config) is None and not _development(app):
        raise ConfigurationError(
            f"the mails of {' and '.join(linked)} carry links with single-use tokens: {_SET_ORIGIN}"
        )
