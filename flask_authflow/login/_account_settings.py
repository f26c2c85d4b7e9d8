"""The settings of the account flows (sign-up, password reset, change of e-mail)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._settings import Settings, setting
from flask_authflow.errors import ConfigurationError

__all__ = ["AccountSettings"]


@dataclass(frozen=True, slots=True)
class AccountSettings(Settings):
    """``AUTHFLOW_REGISTRATION``, ``AUTHFLOW_PASSWORD_RESET`` and their mails."""

    #: Sign-up is offered (the ready views' "Create account").
    registration: bool = field(metadata=setting("AUTHFLOW_REGISTRATION"))
    #: Sign-up with a passkey and an address, no password, is offered beside the password
    #: sign-up (needs ``AUTHFLOW_REGISTRATION``, WebAuthn and passkey sign-in).
    registration_passkey: bool = field(metadata=setting("AUTHFLOW_REGISTRATION_PASSKEY"))
    #: The relying party's domain (read here for the check of ``registration_passkey``).
    webauthn_rp_id: str | None = field(metadata=setting("AUTHFLOW_WEBAUTHN_RP_ID"))
    #: The tenants that may sign in with a passkey alone (idem).
    passkey_login: bool | frozenset[str] = field(metadata=setting("AUTHFLOW_PASSKEY_LOGIN"))
    #: The tenant of the ready views (idem: its accounts must be able to sign in).
    default_tenant: str = field(metadata=setting("AUTHFLOW_DEFAULT_TENANT"))
    #: Password reset is offered (the ready views' "Forgot password?").
    password_reset: bool = field(metadata=setting("AUTHFLOW_PASSWORD_RESET"))
    #: How long a mailed reset link (and its code) works.
    reset_ttl: timedelta = field(metadata=setting("AUTHFLOW_PASSWORD_RESET_TTL"))
    #: How long a mailed verification link (sign-up, new address) works.
    verification_ttl: timedelta = field(metadata=setting("AUTHFLOW_EMAIL_VERIFICATION_TTL"))
    #: A folder the mails are written into instead of being sent (``None``: send them).
    mail_outbox: str | None = field(metadata=setting("AUTHFLOW_MAIL_OUTBOX"))

    def __post_init__(self) -> None:
        if not self.registration_passkey:
            return
        if not self.registration:
            raise ConfigurationError(
                "AUTHFLOW_REGISTRATION_PASSKEY needs sign-up: set AUTHFLOW_REGISTRATION = True"
            )
        if self.webauthn_rp_id is None:
            raise ConfigurationError(
                "AUTHFLOW_REGISTRATION_PASSKEY needs WebAuthn: set AUTHFLOW_WEBAUTHN_RP_ID and "
                "AUTHFLOW_WEBAUTHN_ORIGINS"
            )
        allowed = self.passkey_login
        if not (allowed if isinstance(allowed, bool) else self.default_tenant in allowed):
            raise ConfigurationError(
                "AUTHFLOW_REGISTRATION_PASSKEY makes accounts whose only way in is a passkey: set "
                f"AUTHFLOW_PASSKEY_LOGIN = True (or a list with {self.default_tenant!r})"
            )
