"""The ``AUTHFLOW_*`` keys: one declarative table, read into frozen settings per feature.

Each row of :data:`KEYS` names a key, the type its value is coerced to (strings from the
environment included), its default and an optional check of the coerced value. A
feature declares its settings as a frozen dataclass whose fields name their key with
:func:`setting`; :meth:`Settings.from_config` reads those keys from ``app.config`` through
the table, and the dataclass's ``__post_init__`` checks what involves several keys. Every
refusal is a :class:`~flask_authflow.errors.ConfigurationError` that names the key and
says what to set (the types and one-value checks the rows name live in ``_config_values``,
the origin checks in ``_origins``). :func:`apply_defaults` writes the defaults into ``app.config`` (with
``setdefault``, as Flask extensions do) and refuses an unknown ``AUTHFLOW_`` key, which
is most often a typo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, fields
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ClassVar, Self

# The ``name as name`` imports are read from here, outside ``__all__``: the password bounds
# by login.password_policy, the origin checks by web.external_url.
from flask_authflow._config_values import MAX_PASSWORD_MIN_LENGTH as MAX_PASSWORD_MIN_LENGTH
from flask_authflow._config_values import MIN_PASSWORD_LENGTH as MIN_PASSWORD_LENGTH
from flask_authflow._config_values import (
    MIN_SIGNING_KEY_BYTES,
    Check,
    Coerce,
    aes_key,
    aes_keys,
    all_strings,
    at_most,
    between,
    boolean,
    coerce_key,
    duration,
    external_url,
    integer,
    legacy_salt,
    oauth_providers,
    one_of,
    optional_boolean,
    optional_duration,
    optional_integer,
    optional_text,
    optional_url_path,
    passkey_tenants,
    password_length,
    policy_entries,
    previous_signing_keys,
    raw,
    redis_url,
    rp_id,
    schema_source,
    security_notices,
    signing_key,
    string_list,
    text,
    url_path,
    webauthn_origins,
    workflow_expiries,
    zxcvbn_score,
)
from flask_authflow._origins import is_loopback_host as is_loopback_host
from flask_authflow._origins import normal_origin as normal_origin
from flask_authflow._origins import origin_problem as origin_problem
from flask_authflow.errors import ConfigurationError

__all__ = [
    "DEFAULTS",
    "KEYS",
    "MIN_SIGNING_KEY_BYTES",
    "Key",
    "Settings",
    "apply_defaults",
    "coerce_key",
    "flask_flag",
    "read",
    "setting",
]


# --- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Key:
    """One row of the table: the key, the type its value is coerced to, its default, and a
    check of the coerced value."""

    name: str
    type: Coerce
    default: Any = None
    check: Check | None = None

    def read(self, config: Mapping[str, Any]) -> Any:
        """The key's value in ``config`` (its default when absent), coerced and checked."""
        value = self.type(self.name, config.get(self.name, self.default))
        if self.check is not None:
            self.check(self.name, value)
        return value


_ALG = "AUTHFLOW_ISSUER_ALGORITHM must be 'ES256' (default) or 'RS256'"
_UV = "AUTHFLOW_WEBAUTHN_USER_VERIFICATION must be 'required', 'preferred' (default) or 'discouraged'"

#: Every key flask-authflow reads (documented one by one in the manual's "Configuration" page).
KEYS: tuple[Key, ...] = (
    # sessions
    Key("AUTHFLOW_SIGNING_KEY", signing_key),
    Key("AUTHFLOW_PREVIOUS_SIGNING_KEYS", previous_signing_keys, []),
    Key("AUTHFLOW_SESSION_ENCRYPTION_KEY", aes_key),
    Key("AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS", aes_keys, []),
    Key("AUTHFLOW_SESSION_TTL", duration, timedelta(hours=12)),
    Key("AUTHFLOW_SESSION_IDLE_TIMEOUT", duration, timedelta(hours=1)),
    # "remember me": the absolute lifetime of a session whose login asked for it
    Key(
        "AUTHFLOW_REMEMBER_ME_TTL",
        duration,
        timedelta(days=30),
        at_most(timedelta(days=90), "AUTHFLOW_REMEMBER_ME_TTL over 90 days is refused"),
    ),
    Key("AUTHFLOW_REMEMBER_ME_IDLE_TIMEOUT", boolean, True),
    Key(
        "AUTHFLOW_SESSION_STORE",
        raw,
        "sql",
        one_of(
            "sql",
            "memory",
            "redis",
            message="AUTHFLOW_SESSION_STORE must be 'sql' (default), 'memory' or 'redis'",
        ),
    ),
    Key(
        "AUTHFLOW_CUSTOM_DATA_LIMIT",
        integer,
        64 * 1024,
        at_most(64 * 1024, "AUTHFLOW_CUSTOM_DATA_LIMIT may not exceed 65536 bytes"),
    ),
    Key("AUTHFLOW_COOKIE_NAME", text, "authflow_session"),
    Key("AUTHFLOW_COOKIE_SECURE", boolean, True),
    Key(
        "AUTHFLOW_COOKIE_SAMESITE",
        raw,
        "Lax",
        one_of(
            "Lax",
            "Strict",
            "None",
            message="AUTHFLOW_COOKIE_SAMESITE must be 'Lax' (default), 'Strict' or 'None', got {value!r}",
        ),
    ),
    Key("AUTHFLOW_COOKIE_DOMAIN", raw),
    Key("AUTHFLOW_COOKIE_PATH", raw, "/"),
    Key("AUTHFLOW_ALLOW_INSECURE_LOOPBACK", boolean, False),
    Key("AUTHFLOW_REDIS_URL", raw, None, redis_url),
    # the application and its stores
    Key("AUTHFLOW_DATABASE_URL", raw),
    Key("AUTHFLOW_EXTERNAL_URL", external_url),
    Key("AUTHFLOW_DEFAULT_TENANT", raw, "default"),
    Key("AUTHFLOW_LOGIN_VIEW", raw),
    Key("AUTHFLOW_STEP_UP_VIEW", raw),
    Key("AUTHFLOW_VIEWS", boolean, False),
    Key("AUTHFLOW_VIEWS_LAYOUT", text, "authflow/base.html"),
    # the headless JSON API (flask_authflow._web.headless; None: on when AUTHFLOW_VIEWS is)
    Key("AUTHFLOW_HEADLESS", optional_boolean),
    Key("AUTHFLOW_HEADLESS_URL_PREFIX", text, "/auth/api", url_path),
    Key("AUTHFLOW_POST_LOGIN_VIEW", optional_text),
    Key("AUTHFLOW_POST_LOGOUT_VIEW", optional_text),
    # audit and client addresses
    Key("AUTHFLOW_TRUSTED_PROXIES", string_list, ["127.0.0.0/8", "::1/128"]),
    Key("AUTHFLOW_AUDIT_SPOOL_PATH", raw),
    Key("AUTHFLOW_AUDIT_RETENTION", optional_duration, timedelta(days=365)),
    Key("AUTHFLOW_AUDIT_CHAIN", boolean, False),
    Key("AUTHFLOW_AUDIT_CHAIN_KEY", raw),
    Key("AUTHFLOW_PREVIOUS_AUDIT_CHAIN_KEYS", previous_signing_keys, []),
    # login: freshness, lockout, hashing, password policy
    Key("AUTHFLOW_FRESHNESS", duration, timedelta(minutes=10)),
    Key("AUTHFLOW_WORKFLOW_EXPIRY", workflow_expiries, {}),
    Key("AUTHFLOW_LOCKOUT_MAX_FAILURES", integer, 5),
    Key("AUTHFLOW_LOCKOUT_WINDOW", duration, timedelta(hours=1)),
    Key("AUTHFLOW_LOCKOUT_DURATION", duration, timedelta(minutes=15)),
    Key("AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES", optional_integer),
    Key("AUTHFLOW_LOCKOUT_MAX_DURATION", duration, timedelta(hours=24)),
    Key("AUTHFLOW_LOCKOUT_FAILURE_CAP", integer, 100),
    # abuse protection: rate limits (see flask_authflow._throttle)
    Key("AUTHFLOW_THROTTLE", boolean, True),
    Key("AUTHFLOW_THROTTLE_STORAGE_URL", raw),
    Key("AUTHFLOW_THROTTLE_LIMITS", raw),
    Key("AUTHFLOW_ARGON2_TIME_COST", integer, 3),
    Key("AUTHFLOW_ARGON2_MEMORY_COST", integer, 64 * 1024),
    Key("AUTHFLOW_ARGON2_PARALLELISM", integer, 4),
    Key("AUTHFLOW_ARGON2_MAX_TIME_COST", integer, 10),
    Key("AUTHFLOW_ARGON2_MAX_MEMORY_COST", integer, 256 * 1024),
    Key("AUTHFLOW_ARGON2_MAX_PARALLELISM", integer, 16),
    Key("AUTHFLOW_MAX_CONCURRENT_HASHES", integer, 2 * (os.cpu_count() or 1)),
    Key("AUTHFLOW_LEGACY_PASSWORD_SCHEMES", string_list, [], all_strings),
    Key("AUTHFLOW_LEGACY_PASSWORD_SALT", raw, None, legacy_salt),
    Key("AUTHFLOW_PASSWORD_MIN_LENGTH", integer, 15, password_length),
    Key("AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR", integer, 8, password_length),
    Key("AUTHFLOW_PASSWORD_BLOCKLIST", string_list, [], all_strings),
    Key("AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE", zxcvbn_score),
    Key("AUTHFLOW_SITE_NAME", optional_text),
    # accounts: sign-up, password reset, change of e-mail (mailed single-use tokens)
    Key("AUTHFLOW_REGISTRATION", boolean, False),
    Key("AUTHFLOW_REGISTRATION_PASSKEY", boolean, False),
    Key("AUTHFLOW_PASSWORD_RESET", boolean, False),
    Key("AUTHFLOW_PASSWORD_RESET_TTL", duration, timedelta(minutes=30)),
    Key("AUTHFLOW_EMAIL_VERIFICATION_TTL", duration, timedelta(hours=24)),
    Key("AUTHFLOW_MAIL_OUTBOX", optional_text),
    Key("AUTHFLOW_SECURITY_NOTICES", security_notices, True),
    Key("AUTHFLOW_PASSWORD_BREACH_CHECK", boolean, False),
    Key("AUTHFLOW_PASSWORD_BREACH_CHECK_URL", text, "https://api.pwnedpasswords.com/range"),
    Key("AUTHFLOW_PASSWORD_BREACH_CHECK_FAIL_CLOSED", boolean, False),
    # second factors
    Key("AUTHFLOW_FACTOR_ENCRYPTION_KEY", aes_key),
    Key("AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS", aes_keys, []),
    Key(
        "AUTHFLOW_EMAIL_OTP_TTL",
        duration,
        timedelta(minutes=5),
        at_most(
            timedelta(minutes=30), "AUTHFLOW_EMAIL_OTP_TTL over 30 minutes is refused: keep codes short-lived"
        ),
    ),
    Key(
        "AUTHFLOW_EMAIL_OTP_MAX_TRIES",
        integer,
        5,
        between(1, 10, "AUTHFLOW_EMAIL_OTP_MAX_TRIES must be between 1 and 10 (default 5)"),
    ),
    Key("AUTHFLOW_WEBAUTHN_RP_ID", raw, None, rp_id),
    Key("AUTHFLOW_WEBAUTHN_RP_NAME", raw),
    Key("AUTHFLOW_WEBAUTHN_ORIGINS", webauthn_origins, []),
    Key(
        "AUTHFLOW_WEBAUTHN_USER_VERIFICATION",
        raw,
        "preferred",
        one_of("required", "preferred", "discouraged", message=_UV),
    ),
    Key("AUTHFLOW_PASSKEY_LOGIN", passkey_tenants, False),
    # second factors required by policy (checked by login/mfa_policy.py)
    Key("AUTHFLOW_MFA_REQUIRED", raw, False),
    Key("AUTHFLOW_MFA_REQUIRED_KINDS", raw, None),
    # sign-in by e-mailed code (the code is the first factor)
    Key("AUTHFLOW_LOGIN_BY_CODE", boolean, False),
    Key(
        "AUTHFLOW_LOGIN_CODE_TTL",
        duration,
        timedelta(minutes=10),
        at_most(
            timedelta(minutes=30),
            "AUTHFLOW_LOGIN_CODE_TTL over 30 minutes is refused: keep codes short",
        ),
    ),
    Key(
        "AUTHFLOW_LOGIN_CODE_MAX_TRIES",
        integer,
        5,
        between(1, 10, "AUTHFLOW_LOGIN_CODE_MAX_TRIES must be between 1 and 10 (default 5)"),
    ),
    # the local issuer
    Key("AUTHFLOW_ISSUER", raw),
    Key("AUTHFLOW_ISSUER_KEY_STORE", raw, "sql"),
    Key("AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY", aes_key),
    Key("AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS", aes_keys, []),
    Key("AUTHFLOW_ISSUER_BASE_URL", raw),
    Key(
        "AUTHFLOW_ISSUER_MAX_LIFETIME",
        duration,
        timedelta(hours=1),
        at_most(
            timedelta(days=1),
            "AUTHFLOW_ISSUER_MAX_LIFETIME over 1 day is refused: keep workload tokens short",
        ),
    ),
    Key("AUTHFLOW_ISSUER_JWKS_MAX_AGE", duration, timedelta(minutes=5)),
    Key("AUTHFLOW_ISSUER_ALGORITHM", raw, "ES256", one_of("ES256", "RS256", message=_ALG)),
    Key("AUTHFLOW_ISSUER_URL_PREFIX", raw, ""),
    # federation
    Key("AUTHFLOW_OAUTH_PROVIDERS", oauth_providers, {}),
    Key("AUTHFLOW_OAUTH_URL_PREFIX", text, "/auth", url_path),
    # Shared Signals receiver (flask_authflow.federation._ssf): transmitter name -> its settings
    Key("AUTHFLOW_SSF_TRANSMITTERS", oauth_providers, {}),
    # the logout route every app gets (None: no route)
    Key("AUTHFLOW_LOGOUT_URL_PREFIX", optional_text, "/auth", optional_url_path),
    # mail (checked by flask_authflow._mail.SmtpSettings when AUTHFLOW_SMTP_HOST is set)
    Key("AUTHFLOW_SMTP_HOST", raw),
    Key("AUTHFLOW_SMTP_PORT", raw),
    Key("AUTHFLOW_SMTP_SECURITY", raw, "starttls"),
    Key("AUTHFLOW_SMTP_USERNAME", raw),
    Key("AUTHFLOW_SMTP_PASSWORD", raw),
    Key("AUTHFLOW_SMTP_FROM", raw),
    Key("AUTHFLOW_SMTP_TIMEOUT", raw, 10),
    Key("AUTHFLOW_SMTP_CAFILE", raw),
    # personal API tokens (flask_authflow.api_auth)
    Key("AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY", optional_duration, timedelta(days=90)),
    Key("AUTHFLOW_API_TOKEN_MAX_EXPIRY", optional_duration, timedelta(days=366)),
    Key("AUTHFLOW_API_TOKEN_LAST_USED_INTERVAL", duration, timedelta(minutes=1)),
    Key("AUTHFLOW_API_TOKEN_MAX_PER_USER", integer, 50),
    Key("AUTHFLOW_API_TOKEN_SCOPES", string_list, [], all_strings),
    # devices (flask_authflow.devices): the device cookie, trusted devices, new-device mail
    Key("AUTHFLOW_DEVICE_COOKIE_NAME", text, "authflow_device"),
    Key(
        "AUTHFLOW_DEVICE_COOKIE_LIFETIME",
        duration,
        timedelta(days=365),
        at_most(
            timedelta(days=400), "AUTHFLOW_DEVICE_COOKIE_LIFETIME over 400 days is refused: browsers cap it"
        ),
    ),
    Key(
        "AUTHFLOW_DEVICE_TRUST_DURATION",
        duration,
        timedelta(days=30),
        at_most(timedelta(days=365), "AUTHFLOW_DEVICE_TRUST_DURATION over 365 days is refused"),
    ),
    Key("AUTHFLOW_DEVICE_NEW_DEVICE_MAIL", boolean, False),
    # authorization policies (flask_authflow.authz; the [cedar] extra)
    Key("AUTHFLOW_AUTHZ_POLICIES", policy_entries, []),
    Key("AUTHFLOW_AUTHZ_SCHEMA", schema_source),
)

_TABLE: Mapping[str, Key] = MappingProxyType({key.name: key for key in KEYS})

#: Every key with its default (``None`` means "not set").
DEFAULTS: Mapping[str, Any] = MappingProxyType({key.name: key.default for key in KEYS})


def read(config: Mapping[str, Any], name: str) -> Any:
    """The value of key ``name`` in ``config``, coerced and checked by the table."""
    return _TABLE[name].read(config)


def apply_defaults(config: MutableMapping[str, Any]) -> None:
    """Write every key's default into ``config`` with ``setdefault`` (a fresh copy of a list
    or dict) and refuse an ``AUTHFLOW_`` key the table does not know."""
    for key in KEYS:
        default = key.default
        config.setdefault(key.name, default.copy() if isinstance(default, list | dict) else default)
    unknown = sorted(k for k in config if k.startswith("AUTHFLOW_") and k not in _TABLE)
    if unknown:
        raise ConfigurationError(
            f"unknown configuration key(s) {', '.join(unknown)}: check the spelling against the "
            '"Configuration" section of the flask-authflow manual (the list of every AUTHFLOW_ key)'
        )


# --- settings classes ------------------------------------------------------------------------------


def setting(name: str) -> Mapping[str, str]:
    """The metadata of a settings field read from key ``name`` of the table:
    ``ttl: timedelta = field(metadata=setting("AUTHFLOW_SESSION_TTL"))`` (secrets add
    ``repr=False``)."""
    if name not in _TABLE:
        raise KeyError(f"{name} is not in flask_authflow._settings.KEYS")
    return {"key": name}


def flask_flag(name: str) -> Mapping[str, str]:
    """The metadata of a settings field read from one of Flask's own boolean keys
    (``DEBUG``, ``TESTING``)."""
    return {"flag": name}


class Settings:
    """Base of the frozen settings classes: :meth:`from_config` fills every field declared
    with :func:`setting` or :func:`flask_flag`; ``__post_init__`` checks what involves
    several keys."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """The settings in ``config`` (``app.config``, or any mapping; absent keys take their
        default).

        :raises ConfigurationError: a value is malformed or unsafe; the message names the key.
        """
        values: dict[str, Any] = {}
        for item in fields(cls):
            if "key" in item.metadata:
                values[item.name] = read(config, item.metadata["key"])
            elif "flag" in item.metadata:
                values[item.name] = bool(config.get(item.metadata["flag"], False))
        return cls(**values)
