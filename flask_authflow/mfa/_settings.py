"""Settings of the second factors: the key that seals their secrets, e-mailed codes,
WebAuthn and passkeys."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from flask_authflow._settings import Settings, setting
from flask_authflow.errors import ConfigurationError

__all__ = ["FactorSettings"]


@dataclass(frozen=True, slots=True)
class FactorSettings(Settings):
    """Second factors: the key that seals their secrets, e-mailed codes, WebAuthn, passkeys."""

    signing_key: bytes = field(repr=False, metadata=setting("AUTHFLOW_SIGNING_KEY"))
    previous_signing_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_SIGNING_KEYS")
    )
    encryption_key: bytes | None = field(repr=False, metadata=setting("AUTHFLOW_FACTOR_ENCRYPTION_KEY"))
    previous_encryption_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS")
    )
    email_otp_ttl: timedelta = field(metadata=setting("AUTHFLOW_EMAIL_OTP_TTL"))
    email_otp_max_tries: int = field(metadata=setting("AUTHFLOW_EMAIL_OTP_MAX_TRIES"))
    webauthn_rp_id: str | None = field(metadata=setting("AUTHFLOW_WEBAUTHN_RP_ID"))
    webauthn_rp_name: str | None = field(metadata=setting("AUTHFLOW_WEBAUTHN_RP_NAME"))
    webauthn_origins: tuple[str, ...] = field(metadata=setting("AUTHFLOW_WEBAUTHN_ORIGINS"))
    webauthn_user_verification: str = field(metadata=setting("AUTHFLOW_WEBAUTHN_USER_VERIFICATION"))
    passkey_login: bool | frozenset[str] = field(metadata=setting("AUTHFLOW_PASSKEY_LOGIN"))
    #: Sign-in by e-mailed code is offered (``AUTHFLOW_LOGIN_BY_CODE``).
    login_by_code: bool = field(metadata=setting("AUTHFLOW_LOGIN_BY_CODE"))
    login_code_ttl: timedelta = field(metadata=setting("AUTHFLOW_LOGIN_CODE_TTL"))
    login_code_max_tries: int = field(metadata=setting("AUTHFLOW_LOGIN_CODE_MAX_TRIES"))
    site_name: str | None = field(metadata=setting("AUTHFLOW_SITE_NAME"))

    def __post_init__(self) -> None:
        rp_id = self.webauthn_rp_id
        for origin in self.webauthn_origins:
            host = urlsplit(origin).hostname or ""
            if rp_id is not None and not (host == rp_id or host.endswith("." + rp_id)):
                raise ConfigurationError(
                    f"AUTHFLOW_WEBAUTHN_ORIGINS entry {origin!r} is not on AUTHFLOW_WEBAUTHN_RP_ID "
                    f"{rp_id!r}: browsers refuse an RP id that is not the origin's domain or a parent of it"
                )
        if (rp_id is None) != (not self.webauthn_origins):
            raise ConfigurationError(
                "set AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS together (WebAuthn needs both)"
            )
        if self.passkey_login and rp_id is None:
            raise ConfigurationError(
                "AUTHFLOW_PASSKEY_LOGIN needs WebAuthn: set AUTHFLOW_WEBAUTHN_RP_ID and "
                "AUTHFLOW_WEBAUTHN_ORIGINS"
            )

    def passkey_login_allowed(self, tenant: str) -> bool:
        """Whether ``tenant`` may log in with a passkey alone (``AUTHFLOW_PASSKEY_LOGIN``)."""
        allowed = self.passkey_login
        return allowed if isinstance(allowed, bool) else tenant in allowed
