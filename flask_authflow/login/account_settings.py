"""The settings of the account flows (sign-up, password reset, change of e-mail)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow.settings import Settings, setting

__all__ = ["AccountSettings"]


@dataclass(frozen=True, slots=True)
class AccountSettings(Settings):
    """``AUTHFLOW_REGISTRATION``, ``AUTHFLOW_PASSWORD_RESET`` and their mails."""

    #: Sign-up is offered (the ready views' "Create account").
    registration: bool = field(metadata=setting("AUTHFLOW_REGISTRATION"))
    #: Password reset is offered (the ready views' "Forgot password?").
    password_reset: bool = field(metadata=setting("AUTHFLOW_PASSWORD_RESET"))
    #: How long a mailed reset link (and its code) works.
    reset_ttl: timedelta = field(metadata=setting("AUTHFLOW_PASSWORD_RESET_TTL"))
    #: How long a mailed verification link (sign-up, new address) works.
    verification_ttl: timedelta = field(metadata=setting("AUTHFLOW_EMAIL_VERIFICATION_TTL"))
    #: A folder the mails are written into instead of being sent (``None``: send them).
    mail_outbox: str | None = field(metadata=setting("AUTHFLOW_MAIL_OUTBOX"))
