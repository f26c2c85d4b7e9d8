"""Where flask-authflow sends e-mail: the :class:`MailSender` protocol.

One-time codes by e-mail need a way out of the app; the application plugs in its own
sender (SMTP, a provider's API). Tests use :class:`flask_authflow.testing.pytest_plugin.Outbox`,
which the pytest plugin's ``mail_outbox`` fixture installs.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["MailSender"]


@runtime_checkable
class MailSender(Protocol):
    """Sends one plain-text message. Raise an exception when it could not be sent."""

    def send(self, to: str, subject: str, body: str) -> None: ...
