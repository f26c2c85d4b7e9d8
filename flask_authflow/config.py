"""The ``AUTHFLOW_*`` configuration keys: defaults, coercion, and refusal of unsafe values.

Every key is documented in ``docs/config.rst``. :func:`load_config` reads them from a
Flask config (after ``setdefault``), turns strings from the environment into the
right types (``timedelta``, lists, bytes), and raises :class:`ConfigurationError`
with a message that names the key and says what to set whenever a value is unsafe:
a short signing key, a non-Secure cookie outside debug/testing, SameSite=None without
Secure, or an unknown ``AUTHFLOW_`` key (typo protection).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigurationError, MissingExtraError

__all__ = ["DEFAULTS", "MIN_SIGNING_KEY_BYTES", "AuthFlowConfig", "coerce_key", "load_config"]

MIN_SIGNING_KEY_BYTES = 32
#: The shortest minimum password length a configuration may set (NIST SP 800-63B-4).
MIN_PASSWORD_LENGTH = 8
#: The longest minimum password length a configuration may set (NIST: accept at least 64).
MAX_PASSWORD_MIN_LENGTH = 64

#: Every key flask-authflow reads, with its default. ``None`` means "not set".
DEFAULTS: dict[str, Any] = {
    "AUTHFLOW_SIGNING_KEY": None,
    "AUTHFLOW_PREVIOUS_SIGNING_KEYS": [],
    "AUTHFLOW_SESSION_ENCRYPTION_KEY": None,
    "AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS": [],
    "AUTHFLOW_SESSION_TTL": timedelta(hours=12),
    "AUTHFLOW_SESSION_IDLE_TIMEOUT": timedelta(hours=1),
    "AUTHFLOW_SESSION_STORE": "sql",
    "AUTHFLOW_CUSTOM_DATA_LIMIT": 64 * 1024,
    "AUTHFLOW_COOKIE_NAME": "authflow_session",
    "AUTHFLOW_COOKIE_SECURE": True,
    "AUTHFLOW_COOKIE_SAMESITE": "Lax",
    "AUTHFLOW_COOKIE_DOMAIN": None,
    "AUTHFLOW_COOKIE_PATH": "/",
    "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": False,
    "AUTHFLOW_DATABASE_URL": None,
    "AUTHFLOW_REDIS_URL": None,
    "AUTHFLOW_TRUSTED_PROXIES": ["127.0.0.0/8", "::1/128"],
    "AUTHFLOW_DEFAULT_TENANT": "default",
    "AUTHFLOW_LOGIN_VIEW": None,
    "AUTHFLOW_STEP_UP_VIEW": None,
    "AUTHFLOW_VIEWS": False,
    "AUTHFLOW_FRESHNESS": timedelta(minutes=10),
    "AUTHFLOW_LOCKOUT_MAX_FAILURES": 5,
    "AUTHFLOW_LOCKOUT_WINDOW": timedelta(hours=1),
    "AUTHFLOW_LOCKOUT_DURATION": timedelta(minutes=15),
    "AUTHFLOW_ARGON2_TIME_COST": 3,
    "AUTHFLOW_ARGON2_MEMORY_COST": 64 * 1024,
    "AUTHFLOW_ARGON2_PARALLELISM": 4,
    "AUTHFLOW_ARGON2_MAX_TIME_COST": 10,
    "AUTHFLOW_ARGON2_MAX_MEMORY_COST": 256 * 1024,
    "AUTHFLOW_ARGON2_MAX_PARALLELISM": 16,
    "AUTHFLOW_MAX_CONCURRENT_HASHES": 2 * (os.cpu_count() or 1),
    "AUTHFLOW_PASSWORD_MIN_LENGTH": 15,
    "AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR": 8,
    "AUTHFLOW_PASSWORD_BLOCKLIST": [],
    "AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE": None,
    "AUTHFLOW_SITE_NAME": None,
    "AUTHFLOW_AUDIT_SPOOL_PATH": None,
    "AUTHFLOW_AUDIT_RETENTION": timedelta(days=365),
    "AUTHFLOW_ISSUER": None,
    "AUTHFLOW_ISSUER_KEY_STORE": "sql",
    "AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY": None,
    "AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS": [],
    "AUTHFLOW_ISSUER_BASE_URL": None,
    "AUTHFLOW_ISSUER_MAX_LIFETIME": timedelta(hours=1),
    "AUTHFLOW_ISSUER_JWKS_MAX_AGE": timedelta(minutes=5),
    "AUTHFLOW_ISSUER_ALGORITHM": "ES256",
    "AUTHFLOW_ISSUER_URL_PREFIX": "",
    "AUTHFLOW_OAUTH_PROVIDERS": {},
    "AUTHFLOW_OAUTH_URL_PREFIX": "/auth",
    "AUTHFLOW_LOGOUT_URL_PREFIX": "/auth",
    "AUTHFLOW_FACTOR_ENCRYPTION_KEY": None,
    "AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS": [],
    "AUTHFLOW_EMAIL_OTP_TTL": timedelta(minutes=5),
    "AUTHFLOW_EMAIL_OTP_MAX_TRIES": 5,
    "AUTHFLOW_WEBAUTHN_RP_ID": None,
    "AUTHFLOW_WEBAUTHN_RP_NAME": None,
    "AUTHFLOW_WEBAUTHN_ORIGINS": [],
    "AUTHFLOW_WEBAUTHN_USER_VERIFICATION": "preferred",
    "AUTHFLOW_PASSKEY_LOGIN": False,
    "AUTHFLOW_SMTP_HOST": None,
    "AUTHFLOW_SMTP_PORT": None,
    "AUTHFLOW_SMTP_SECURITY": "starttls",
    "AUTHFLOW_SMTP_USERNAME": None,
    "AUTHFLOW_SMTP_PASSWORD": None,
    "AUTHFLOW_SMTP_FROM": None,
    "AUTHFLOW_SMTP_TIMEOUT": 10,
    "AUTHFLOW_SMTP_CAFILE": None,
}

_DURATIONS = {key for key, value in DEFAULTS.items() if isinstance(value, timedelta)}
#: Durations that may also be ``None`` ("forever"; from the environment: "forever" or "none").
_OPTIONAL_DURATIONS = {"AUTHFLOW_AUDIT_RETENTION"}
_INTEGERS = {
    "AUTHFLOW_CUSTOM_DATA_LIMIT",
    "AUTHFLOW_LOCKOUT_MAX_FAILURES",
    "AUTHFLOW_ARGON2_TIME_COST",
    "AUTHFLOW_ARGON2_MEMORY_COST",
    "AUTHFLOW_ARGON2_PARALLELISM",
    "AUTHFLOW_MAX_CONCURRENT_HASHES",
    "AUTHFLOW_ARGON2_MAX_TIME_COST",
    "AUTHFLOW_ARGON2_MAX_MEMORY_COST",
    "AUTHFLOW_ARGON2_MAX_PARALLELISM",
    "AUTHFLOW_PASSWORD_MIN_LENGTH",
    "AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR",
    "AUTHFLOW_EMAIL_OTP_MAX_TRIES",
}
_BOOLEANS = {"AUTHFLOW_COOKIE_SECURE", "AUTHFLOW_ALLOW_INSECURE_LOOPBACK", "AUTHFLOW_VIEWS"}
_LISTS = {
    "AUTHFLOW_PREVIOUS_SIGNING_KEYS",
    "AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS",
    "AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS",
    "AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS",
    "AUTHFLOW_WEBAUTHN_ORIGINS",
    "AUTHFLOW_TRUSTED_PROXIES",
    "AUTHFLOW_PASSWORD_BLOCKLIST",
}


def coerce_key(name: str, value: str | bytes) -> bytes:
    """A secret key from config: bytes as they are, text as UTF-8 (its length is what counts)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ConfigurationError(f"{name} must be a string or bytes, not {type(value).__name__}")


def _duration(name: str, value: Any) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = timedelta(seconds=value)
    elif isinstance(value, str) and value.strip().isdigit():
        result = timedelta(seconds=int(value))
    else:
        raise ConfigurationError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    if result <= timedelta(0):
        raise ConfigurationError(f"{name} must be positive, got {result}")
    return result


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}")
    try:
        result = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}") from None
    if result <= 0:
        raise ConfigurationError(f"{name} must be positive, got {result}")
    return result


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def _string_list(name: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, Sequence):
        return list(value)
    raise ConfigurationError(f"{name} must be a list (or a comma-separated string), got {value!r}")


@dataclass(frozen=True, slots=True)
class AuthFlowConfig:
    """The validated configuration of one app (``get_state(app).config``).

    One typed attribute per ``AUTHFLOW_*`` key: the key's name without the prefix, in
    lower case (``AUTHFLOW_SESSION_TTL`` → ``config.session_ttl``). Secrets are kept out
    of ``repr``.
    """

    signing_key: bytes = field(repr=False)
    previous_signing_keys: tuple[bytes, ...] = field(repr=False)
    session_encryption_key: bytes | None = field(repr=False)
    previous_session_encryption_keys: tuple[bytes, ...] = field(repr=False)
    session_ttl: timedelta
    session_idle_timeout: timedelta
    session_store: str
    custom_data_limit: int
    cookie_name: str
    cookie_secure: bool
    cookie_samesite: str
    cookie_domain: str | None
    cookie_path: str
    allow_insecure_loopback: bool
    database_url: str | None
    redis_url: str | None
    trusted_proxies: tuple[str, ...]
    default_tenant: str
    login_view: str | None
    step_up_view: str | None
    views: bool
    freshness: timedelta
    lockout_max_failures: int
    lockout_window: timedelta
    lockout_duration: timedelta
    argon2_time_cost: int
    argon2_memory_cost: int
    argon2_parallelism: int
    argon2_max_time_cost: int
    argon2_max_memory_cost: int
    argon2_max_parallelism: int
    max_concurrent_hashes: int
    password_min_length: int
    password_min_length_with_second_factor: int
    password_blocklist: tuple[str, ...]
    password_zxcvbn_min_score: int | None
    site_name: str | None
    audit_spool_path: str | None
    audit_retention: timedelta | None
    issuer: str | None
    issuer_key_store: str
    issuer_key_encryption_key: bytes | None = field(repr=False)
    previous_issuer_key_encryption_keys: tuple[bytes, ...] = field(repr=False)
    issuer_base_url: str | None
    issuer_max_lifetime: timedelta
    issuer_jwks_max_age: timedelta
    issuer_algorithm: str
    issuer_url_prefix: str
    oauth_providers: Mapping[str, Mapping[str, Any]]
    oauth_url_prefix: str
    logout_url_prefix: str | None
    factor_encryption_key: bytes | None = field(repr=False)
    previous_factor_encryption_keys: tuple[bytes, ...] = field(repr=False)
    email_otp_ttl: timedelta
    email_otp_max_tries: int
    webauthn_rp_id: str | None
    webauthn_rp_name: str | None
    webauthn_origins: tuple[str, ...]
    webauthn_user_verification: str
    passkey_login: bool | frozenset[str]
    smtp_host: str | None
    smtp_port: int | None
    smtp_security: str
    smtp_username: str | None
    smtp_password: str | None = field(repr=False)
    smtp_from: str | None
    smtp_timeout: float
    smtp_cafile: str | None

    def passkey_login_allowed(self, tenant: str) -> bool:
        """Whether ``tenant`` may log in with a passkey alone (``AUTHFLOW_PASSKEY_LOGIN``)."""
        allowed = self.passkey_login
        return allowed if isinstance(allowed, bool) else tenant in allowed


def attribute_name(key: str) -> str:
    """The :class:`AuthFlowConfig` attribute of an ``AUTHFLOW_*`` key."""
    return key.removeprefix("AUTHFLOW_").lower()


def _aes_keys(values: dict[str, Any], what: str) -> None:
    """Check ``AUTHFLOW_<what>_ENCRYPTION_KEY`` and its previous keys: AES-256 keys of 32 bytes."""
    name = f"AUTHFLOW_{what}_ENCRYPTION_KEY"
    previous_name = f"AUTHFLOW_PREVIOUS_{what}_ENCRYPTION_KEYS"
    if values[name] is not None:
        key = coerce_key(name, values[name])
        if len(key) != 32:
            raise ConfigurationError(
                f"{name} must be exactly 32 bytes (AES-256): set it to secrets.token_bytes(32), "
                "or leave it unset to derive it from the signing key"
            )
        values[name] = key
    previous = tuple(coerce_key(previous_name, k) for k in values[previous_name])
    if any(len(k) != 32 for k in previous):
        raise ConfigurationError(f"every {previous_name} entry must be 32 bytes")
    values[previous_name] = previous


def _factor_settings(values: dict[str, Any]) -> None:
    """Check the second-factor keys: e-mail codes, WebAuthn relying party, passkeys, SMTP."""
    if values["AUTHFLOW_EMAIL_OTP_TTL"] > timedelta(minutes=30):
        raise ConfigurationError("AUTHFLOW_EMAIL_OTP_TTL over 30 minutes is refused: keep codes short-lived")
    tries = values["AUTHFLOW_EMAIL_OTP_MAX_TRIES"]
    if not 1 <= tries <= 10:
        raise ConfigurationError("AUTHFLOW_EMAIL_OTP_MAX_TRIES must be between 1 and 10 (default 5)")
    rp_id = values["AUTHFLOW_WEBAUTHN_RP_ID"]
    origins = tuple(values["AUTHFLOW_WEBAUTHN_ORIGINS"])
    if rp_id is not None and (not isinstance(rp_id, str) or not rp_id or "/" in rp_id or ":" in rp_id):
        raise ConfigurationError(
            f"AUTHFLOW_WEBAUTHN_RP_ID must be a bare domain such as 'example.com', got {rp_id!r}"
        )
    for origin in origins:
        parts = urlsplit(origin) if isinstance(origin, str) else None
        loopback = parts is not None and parts.hostname in ("localhost", "127.0.0.1")
        if (
            parts is None
            or parts.scheme not in ("https", "http")
            or not parts.hostname
            or parts.path not in ("", "/")
            or (parts.scheme == "http" and not loopback)
        ):
            raise ConfigurationError(
                f"every AUTHFLOW_WEBAUTHN_ORIGINS entry must be an https origin such as "
                f"'https://example.com' (http only for localhost), got {origin!r}"
            )
        if rp_id is not None and not (parts.hostname == rp_id or parts.hostname.endswith("." + rp_id)):
            raise ConfigurationError(
                f"AUTHFLOW_WEBAUTHN_ORIGINS entry {origin!r} is not on AUTHFLOW_WEBAUTHN_RP_ID {rp_id!r}: "
                "browsers refuse an RP id that is not the origin's domain or a parent of it"
            )
    if (rp_id is None) != (not origins):
        raise ConfigurationError(
            "set AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS together (WebAuthn needs both)"
        )
    values["AUTHFLOW_WEBAUTHN_ORIGINS"] = tuple(o.rstrip("/") for o in origins)
    if values["AUTHFLOW_WEBAUTHN_USER_VERIFICATION"] not in ("required", "preferred", "discouraged"):
        raise ConfigurationError(
            "AUTHFLOW_WEBAUTHN_USER_VERIFICATION must be 'required', 'preferred' (default) or 'discouraged'"
        )
    passkeys = values["AUTHFLOW_PASSKEY_LOGIN"]
    if isinstance(passkeys, str):
        passkeys = {"true": True, "false": False, "1": True, "0": False}.get(
            passkeys.strip().lower(), [t.strip() for t in passkeys.split(",") if t.strip()]
        )
    if not isinstance(passkeys, bool):
        if not isinstance(passkeys, list | tuple | set | frozenset) or not all(
            isinstance(t, str) for t in passkeys
        ):
            raise ConfigurationError("AUTHFLOW_PASSKEY_LOGIN must be True, False or a list of tenant names")
        passkeys = frozenset(passkeys)
    if passkeys and rp_id is None:
        raise ConfigurationError(
            "AUTHFLOW_PASSKEY_LOGIN needs WebAuthn: set AUTHFLOW_WEBAUTHN_RP_ID and AUTHFLOW_WEBAUTHN_ORIGINS"
        )
    values["AUTHFLOW_PASSKEY_LOGIN"] = passkeys
    values["AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS"] = tuple(
        values["AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS"]
    )
    port = values["AUTHFLOW_SMTP_PORT"]
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ConfigurationError(f"AUTHFLOW_SMTP_PORT must be a port number, got {port!r}") from None
        values["AUTHFLOW_SMTP_PORT"] = port
    try:
        values["AUTHFLOW_SMTP_TIMEOUT"] = float(values["AUTHFLOW_SMTP_TIMEOUT"])
    except (TypeError, ValueError):
        raise ConfigurationError("AUTHFLOW_SMTP_TIMEOUT must be a number of seconds") from None
    if values["AUTHFLOW_SMTP_HOST"] is not None:
        from .mail import SmtpSettings  # refused here, with the other settings, when malformed

        SmtpSettings.from_config(values)


def _check_cookie_prefix(values: Mapping[str, Any]) -> None:
    """``__Host-`` and ``__Secure-`` cookie names carry rules browsers enforce: refuse breaking them."""
    name = values["AUTHFLOW_COOKIE_NAME"]
    if not isinstance(name, str):
        raise ConfigurationError(f"AUTHFLOW_COOKIE_NAME must be a string, got {name!r}")
    if name.startswith(("__Host-", "__Secure-")) and not values["AUTHFLOW_COOKIE_SECURE"]:
        raise ConfigurationError(
            f"AUTHFLOW_COOKIE_NAME={name!r} needs AUTHFLOW_COOKIE_SECURE=True: browsers drop such a cookie "
            "without Secure"
        )
    if name.startswith("__Host-") and (
        values["AUTHFLOW_COOKIE_PATH"] != "/" or values["AUTHFLOW_COOKIE_DOMAIN"]
    ):
        raise ConfigurationError(
            f"AUTHFLOW_COOKIE_NAME={name!r} needs AUTHFLOW_COOKIE_PATH='/' and no AUTHFLOW_COOKIE_DOMAIN: "
            "a __Host- cookie is bound to one host and the whole site (browsers drop it otherwise)"
        )


def _oauth_providers(value: Any) -> Mapping[str, Mapping[str, Any]]:
    """``AUTHFLOW_OAUTH_PROVIDERS``: a dict of dicts (a JSON object from the environment).

    Each entry's settings are checked when the extension builds the provider.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigurationError("AUTHFLOW_OAUTH_PROVIDERS is not valid JSON") from None
    if not isinstance(value, Mapping) or not all(
        isinstance(name, str) and isinstance(entry, Mapping) for name, entry in value.items()
    ):
        raise ConfigurationError(
            'AUTHFLOW_OAUTH_PROVIDERS must be a dict of dicts: {"name": {"discovery_url": ..., ...}}'
        )
    return MappingProxyType({name: MappingProxyType(dict(entry)) for name, entry in value.items()})


def _password_policy(values: dict[str, Any]) -> None:
    """The password policy keys (NIST SP 800-63B-4): refuse a minimum below NIST's 8 characters."""
    for name, floor in (
        ("AUTHFLOW_PASSWORD_MIN_LENGTH", MIN_PASSWORD_LENGTH),
        ("AUTHFLOW_PASSWORD_MIN_LENGTH_WITH_SECOND_FACTOR", MIN_PASSWORD_LENGTH),
    ):
        if not floor <= values[name] <= MAX_PASSWORD_MIN_LENGTH:
            raise ConfigurationError(
                f"{name}={values[name]} is refused: set it between {floor} (NIST SP 800-63B's minimum) "
                f"and {MAX_PASSWORD_MIN_LENGTH}; the defaults are 15 for a password that is the only "
                "factor and 8 with a second factor"
            )
    words = values["AUTHFLOW_PASSWORD_BLOCKLIST"]
    if not all(isinstance(word, str) for word in words):
        raise ConfigurationError("AUTHFLOW_PASSWORD_BLOCKLIST must be a list of strings")
    values["AUTHFLOW_PASSWORD_BLOCKLIST"] = tuple(words)
    score = values["AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE"]
    if score is not None:
        if isinstance(score, str) and score.strip().isdigit():
            score = int(score)
        if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 4:
            raise ConfigurationError(
                f"AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE must be None or a zxcvbn score from 0 to 4, "
                f"got {score!r}"
            )
        if importlib.util.find_spec("zxcvbn") is None:
            raise MissingExtraError("zxcvbn", "zxcvbn")  # AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE needs it
        values["AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE"] = score
    site_name = values["AUTHFLOW_SITE_NAME"]
    if site_name is not None and not isinstance(site_name, str):
        raise ConfigurationError(f"AUTHFLOW_SITE_NAME must be a string or None, got {site_name!r}")


def load_config(config: MutableMapping[str, Any], *, debug: bool, testing: bool) -> AuthFlowConfig:
    """Apply defaults with ``setdefault``, coerce types and refuse unsafe settings."""
    for key, default in DEFAULTS.items():
        config.setdefault(
            key,
            list(default)
            if isinstance(default, list)
            else dict(default)
            if isinstance(default, dict)
            else default,
        )

    unknown = sorted(k for k in config if k.startswith("AUTHFLOW_") and k not in DEFAULTS)
    if unknown:
        raise ConfigurationError(
            f"unknown configuration key(s) {', '.join(unknown)}: check the spelling against docs/config.rst"
        )

    values: dict[str, Any] = {key: config[key] for key in DEFAULTS}
    for key in _DURATIONS:
        value = values[key]
        if key in _OPTIONAL_DURATIONS and (
            value is None or (isinstance(value, str) and value.strip().lower() in ("forever", "none"))
        ):
            values[key] = None
            continue
        values[key] = _duration(key, value)
    for key in _INTEGERS:
        values[key] = _integer(key, values[key])
    for key in _BOOLEANS:
        values[key] = _boolean(key, values[key])
    for key in _LISTS:
        values[key] = _string_list(key, values[key])

    raw_key = values["AUTHFLOW_SIGNING_KEY"]
    if raw_key is None or raw_key in ("", b""):
        raise ConfigurationError(
            "AUTHFLOW_SIGNING_KEY is not set: set it to a random secret of at least "
            f"{MIN_SIGNING_KEY_BYTES} bytes, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(48))', "
            "loaded from your secrets store and the same on every process and restart"
        )
    signing_key = coerce_key("AUTHFLOW_SIGNING_KEY", raw_key)
    if len(signing_key) < MIN_SIGNING_KEY_BYTES:
        raise ConfigurationError(
            f"AUTHFLOW_SIGNING_KEY is {len(signing_key)} bytes: set it to at least "
            f"{MIN_SIGNING_KEY_BYTES} random bytes "
            "(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    values["AUTHFLOW_SIGNING_KEY"] = signing_key
    previous = [
        coerce_key("AUTHFLOW_PREVIOUS_SIGNING_KEYS", k) for k in values["AUTHFLOW_PREVIOUS_SIGNING_KEYS"]
    ]
    for old in previous:
        if len(old) < MIN_SIGNING_KEY_BYTES:
            raise ConfigurationError(
                f"an entry of AUTHFLOW_PREVIOUS_SIGNING_KEYS is shorter than {MIN_SIGNING_KEY_BYTES} bytes: "
                "remove it (it could never have been a valid signing key)"
            )
    values["AUTHFLOW_PREVIOUS_SIGNING_KEYS"] = previous

    _aes_keys(values, "SESSION")
    _aes_keys(values, "ISSUER_KEY")
    _aes_keys(values, "FACTOR")
    _factor_settings(values)

    secure = values["AUTHFLOW_COOKIE_SECURE"]
    if not secure and not (debug or testing or values["AUTHFLOW_ALLOW_INSECURE_LOOPBACK"]):
        raise ConfigurationError(
            "AUTHFLOW_COOKIE_SECURE=False is refused outside debug/testing: session cookies must only "
            "travel over HTTPS. Set AUTHFLOW_COOKIE_SECURE=True (the default) in production, or for a "
            "plain-HTTP development server on 127.0.0.1 set AUTHFLOW_ALLOW_INSECURE_LOOPBACK=True "
            "(requests from other addresses are then refused)"
        )

    samesite = values["AUTHFLOW_COOKIE_SAMESITE"]
    if samesite not in ("Lax", "Strict", "None"):
        raise ConfigurationError(
            f"AUTHFLOW_COOKIE_SAMESITE must be 'Lax' (default), 'Strict' or 'None', got {samesite!r}"
        )
    if samesite == "None" and not secure:
        raise ConfigurationError("AUTHFLOW_COOKIE_SAMESITE='None' requires AUTHFLOW_COOKIE_SECURE=True")

    _check_cookie_prefix(values)
    if values["AUTHFLOW_SESSION_IDLE_TIMEOUT"] > values["AUTHFLOW_SESSION_TTL"]:
        raise ConfigurationError(
            "AUTHFLOW_SESSION_IDLE_TIMEOUT is longer than AUTHFLOW_SESSION_TTL: set it to at most the TTL"
        )
    if values["AUTHFLOW_SESSION_STORE"] not in ("sql", "memory", "redis"):
        raise ConfigurationError("AUTHFLOW_SESSION_STORE must be 'sql' (default), 'memory' or 'redis'")
    redis_url = values["AUTHFLOW_REDIS_URL"]
    if redis_url is not None and (not isinstance(redis_url, str) or not redis_url.strip()):
        raise ConfigurationError(f"AUTHFLOW_REDIS_URL must be a redis:// URL or None, got {redis_url!r}")
    if values["AUTHFLOW_SESSION_STORE"] == "redis":
        if redis_url is None:
            raise ConfigurationError(
                "AUTHFLOW_SESSION_STORE='redis' needs AUTHFLOW_REDIS_URL, e.g. 'redis://127.0.0.1:6379/0' "
                "(rediss:// for TLS)"
            )
        if importlib.util.find_spec("redis") is None:
            raise MissingExtraError("redis", "redis")  # AUTHFLOW_SESSION_STORE='redis' needs it
    if values["AUTHFLOW_CUSTOM_DATA_LIMIT"] > 64 * 1024:
        raise ConfigurationError("AUTHFLOW_CUSTOM_DATA_LIMIT may not exceed 65536 bytes (the spec's limit)")
    if values["AUTHFLOW_ARGON2_MEMORY_COST"] < 19 * 1024 and not testing:
        raise ConfigurationError(
            "AUTHFLOW_ARGON2_MEMORY_COST below 19456 KiB is weaker than OWASP's minimum for Argon2id: "
            "raise it (default 65536), or only lower it with TESTING=True"
        )
    for param in ("TIME_COST", "MEMORY_COST", "PARALLELISM"):
        if values[f"AUTHFLOW_ARGON2_{param}"] > values[f"AUTHFLOW_ARGON2_MAX_{param}"]:
            raise ConfigurationError(
                f"AUTHFLOW_ARGON2_{param} is above AUTHFLOW_ARGON2_MAX_{param}: every new hash would be "
                f"refused at login; raise AUTHFLOW_ARGON2_MAX_{param} or lower AUTHFLOW_ARGON2_{param}"
            )
    _password_policy(values)
    if values["AUTHFLOW_ISSUER_ALGORITHM"] not in ("ES256", "RS256"):
        raise ConfigurationError("AUTHFLOW_ISSUER_ALGORITHM must be 'ES256' (default) or 'RS256'")
    if values["AUTHFLOW_ISSUER_MAX_LIFETIME"] > timedelta(days=1):
        raise ConfigurationError(
            "AUTHFLOW_ISSUER_MAX_LIFETIME over 1 day is refused: keep workload tokens short"
        )
    values["AUTHFLOW_PREVIOUS_SIGNING_KEYS"] = tuple(values["AUTHFLOW_PREVIOUS_SIGNING_KEYS"])
    values["AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS"] = tuple(
        values["AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS"]
    )
    values["AUTHFLOW_TRUSTED_PROXIES"] = tuple(values["AUTHFLOW_TRUSTED_PROXIES"])
    values["AUTHFLOW_OAUTH_PROVIDERS"] = _oauth_providers(values["AUTHFLOW_OAUTH_PROVIDERS"])
    prefix = values["AUTHFLOW_OAUTH_URL_PREFIX"]
    if not isinstance(prefix, str) or (prefix and (not prefix.startswith("/") or prefix.endswith("/"))):
        raise ConfigurationError("AUTHFLOW_OAUTH_URL_PREFIX must be a path such as '/auth' (or '')")
    logout = values["AUTHFLOW_LOGOUT_URL_PREFIX"]  # None: no logout route
    if logout is not None and (
        not isinstance(logout, str) or (logout and (not logout.startswith("/") or logout.endswith("/")))
    ):
        raise ConfigurationError("AUTHFLOW_LOGOUT_URL_PREFIX must be a path such as '/auth', '' or None")
    return AuthFlowConfig(**{attribute_name(key): value for key, value in values.items()})
