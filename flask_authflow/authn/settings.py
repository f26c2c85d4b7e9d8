"""The login settings: the login itself, lockout, password hashing, password policy, factors.

Each is a frozen :class:`~flask_authflow.settings.Settings` read from ``app.config``; the
login service and the factors take the values they need from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from ..settings import Settings, flask_flag, setting

__all__ = [
    "FactorSettings",
    "HashingSettings",
    "LockoutSettings",
    "LoginSettings",
    "PasswordPolicySettings",
]

#: OWASP's minimum memory cost for Argon2id, in KiB.
OWASP_MIN_MEMORY_COST = 19 * 1024


@dataclass(frozen=True, slots=True)
class LoginSettings(Settings):
    """``AUTHFLOW_DEFAULT_TENANT``, ``AUTHFLOW_FRESHNESS``, ``AUTHFLOW_SITE_NAME``."""

    default_tenant: str = field(metadata=setting("AUTHFLOW_DEFAULT_TENANT"))
    #: How recent the last authentication must be for sensitive changes.
    freshness: timedelta = field(metadata=setting("AUTHFLOW_FRESHNESS"))
    site_name: str | None = field(metadata=setting("AUTHFLOW_SITE_NAME"))


@dataclass(frozen=True, slots=True)
class LockoutSettings(Settings):
    """``AUTHFLOW_LOCKOUT_*``: failures within a window lock the account for a while."""

    max_failures: int = field(metadata=setting("AUTHFLOW_LOCKOUT_MAX_FAILURES"))
    window: timedelta = field(metadata=setting("AUTHFLOW_LOCKOUT_WINDOW"))
    duration: timedelta = field(metadata=setting("AUTHFLOW_LOCKOUT_DURATION"))


@dataclass(frozen=True, slots=True)
class HashingSettings(Settings):
    """``AUTHFLOW_ARGON2_*`` and ``AUTHFLOW_MAX_CONCURRENT_HASHES``."""

    time_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_TIME_COST"))
    memory_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MEMORY_COST"))
    parallelism: int = field(metadata=setting("AUTHFLOW_ARGON2_PARALLELISM"))
    max_time_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_TIME_COST"))
    max_memory_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_MEMORY_COST"))
    max_parallelism: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_PARALLELISM"))
    max_concurrent: int = field(metadata=setting("AUTHFLOW_MAX_CONCURRENT_HASHES"))
    testing: bool = field(metadata=flask_flag("TESTING"))

    def __post_init__(self) -> None:
        if self.memory_cost < OWASP_MIN_MEMORY_COST and not self.testing:
            raise ConfigurationError(
                f"AUTHFLOW_ARGON2_MEMORY_COST below {OWASP_MIN_MEMORY_COST} KiB is weaker than OWASP's "
                "minimum for Argon2id: raise it (default 65536), or only lower it with TESTING=True"
            )
        for param, value, ceiling in (
            ("TIME_COST", self.time_cost, self.max_time_cost),
            ("MEMORY_COST", self.memory_cost, self.max_memory_cost),
            ("PARALLELISM", self.parallelism, self.max_parallelism),
        ):
            if value > ceiling:
                raise ConfigurationError(
                    f"AUTHFLOW_ARGON2_{param} is above AUTHFLOW_ARGON2_MAX_{param}: every new hash would be "
                    f"refused at login; raise AUTHFLOW_ARGON2_MAX_{param} or lower AUTHFLOW_ARGON2_{param}"
                )


@dataclass(frozen=True, slots=True)
class PasswordPolicySettings(Settings):
    """``AUTHFLOW_PASSWORD_*`` and ``AUTHFLOW_SITE_NAME`` (a context word of the blocklist)."""

    min_length: int = field(metadata=setting("AUTHFLOW_PASSWORD_MIN_LENGTH"))
    min_length_with_second_factor: int = field(
        metadata=setting("AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR")
    )
    blocklist: tuple[str, ...] = field(metadata=setting("AUTHFLOW_PASSWORD_BLOCKLIST"))
    zxcvbn_min_score: int | None = field(metadata=setting("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE"))
    site_name: str | None = field(metadata=setting("AUTHFLOW_SITE_NAME"))


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
