"""The login settings: the login itself, lockout, password hashing, password policy, factors.

Each is a frozen :class:`~flask_authflow._settings.Settings` read from ``app.config``; the
login service and the factors take the values they need from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._settings import Settings, flask_flag, setting
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._legacy_hashes import LEGACY_SCHEMES

__all__ = [
    "HashingSettings",
    "LockoutSettings",
    "LoginSettings",
    "PasswordPolicySettings",
]

#: OWASP's minimum memory cost for Argon2id, in KiB.
OWASP_MIN_MEMORY_COST = 19 * 1024


@dataclass(frozen=True, slots=True)
class LoginSettings(Settings):
    """``AUTHFLOW_DEFAULT_TENANT``, ``AUTHFLOW_FRESHNESS``, ``AUTHFLOW_SITE_NAME``,
    ``AUTHFLOW_WORKFLOW_EXPIRY``."""

    default_tenant: str = field(metadata=setting("AUTHFLOW_DEFAULT_TENANT"))
    #: How recent the last authentication must be for sensitive changes.
    freshness: timedelta = field(metadata=setting("AUTHFLOW_FRESHNESS"))
    site_name: str | None = field(metadata=setting("AUTHFLOW_SITE_NAME"))
    #: Workflow kind (or ``"custom"``) to how long its workflows stay completable.
    workflow_expiry: Mapping[str, timedelta] = field(metadata=setting("AUTHFLOW_WORKFLOW_EXPIRY"))


@dataclass(frozen=True, slots=True)
class LockoutSettings(Settings):
    """``AUTHFLOW_LOCKOUT_*``: failures within a window lock the account for a while."""

    #: Failures from one address that lock the (account, address) pair.
    max_failures: int = field(metadata=setting("AUTHFLOW_LOCKOUT_MAX_FAILURES"))
    window: timedelta = field(metadata=setting("AUTHFLOW_LOCKOUT_WINDOW"))
    duration: timedelta = field(metadata=setting("AUTHFLOW_LOCKOUT_DURATION"))
    #: Failures from any address that lock the account (``None``: twenty times ``max_failures``).
    account_max_failures: int | None = field(metadata=setting("AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES"))
    #: The longest an escalated lock lasts.
    max_duration: timedelta = field(metadata=setting("AUTHFLOW_LOCKOUT_MAX_DURATION"))
    #: Failures of one factor since its last success past which every lock is the longest.
    failure_cap: int = field(metadata=setting("AUTHFLOW_LOCKOUT_FAILURE_CAP"))

    def __post_init__(self) -> None:
        account = self.account_max_failures or 20 * self.max_failures
        if account < self.max_failures:
            raise ConfigurationError(
                "AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES is below AUTHFLOW_LOCKOUT_MAX_FAILURES: one address "
                "could then lock the owner out; leave it unset (four times as many) or raise it"
            )
        if self.max_duration < self.duration:
            raise ConfigurationError(
                "AUTHFLOW_LOCKOUT_MAX_DURATION is shorter than AUTHFLOW_LOCKOUT_DURATION"
            )


@dataclass(frozen=True, slots=True)
class HashingSettings(Settings):
    """``AUTHFLOW_ARGON2_*``, ``AUTHFLOW_MAX_CONCURRENT_HASHES`` and ``AUTHFLOW_LEGACY_PASSWORD_*``."""

    time_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_TIME_COST"))
    memory_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MEMORY_COST"))
    parallelism: int = field(metadata=setting("AUTHFLOW_ARGON2_PARALLELISM"))
    max_time_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_TIME_COST"))
    max_memory_cost: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_MEMORY_COST"))
    max_parallelism: int = field(metadata=setting("AUTHFLOW_ARGON2_MAX_PARALLELISM"))
    max_concurrent: int = field(metadata=setting("AUTHFLOW_MAX_CONCURRENT_HASHES"))
    #: Hashes of other software verified at login and replaced by Argon2id (off when empty).
    legacy_schemes: tuple[str, ...] = field(metadata=setting("AUTHFLOW_LEGACY_PASSWORD_SCHEMES"))
    #: Flask-Security-Too's ``SECURITY_PASSWORD_SALT`` (its HMAC before hashing).
    legacy_salt: str | bytes | None = field(metadata=setting("AUTHFLOW_LEGACY_PASSWORD_SALT"))
    testing: bool = field(metadata=flask_flag("TESTING"))

    def __post_init__(self) -> None:
        unknown = [scheme for scheme in self.legacy_schemes if scheme not in LEGACY_SCHEMES]
        if unknown:
            raise ConfigurationError(
                f"AUTHFLOW_LEGACY_PASSWORD_SCHEMES: unknown scheme(s) {', '.join(map(repr, unknown))}; "
                f"choose from {', '.join(LEGACY_SCHEMES)}"
            )
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
    #: Check new passwords against the Pwned Passwords range API (opt-in).
    breach_check: bool = field(metadata=setting("AUTHFLOW_PASSWORD_BREACH_CHECK"))
    #: The range API's base URL (``{url}/{five hex characters}``).
    breach_check_url: str = field(metadata=setting("AUTHFLOW_PASSWORD_BREACH_CHECK_URL"))
    #: Refuse the password when the service cannot be asked (default: accept it).
    breach_check_fail_closed: bool = field(metadata=setting("AUTHFLOW_PASSWORD_BREACH_CHECK_FAIL_CLOSED"))
