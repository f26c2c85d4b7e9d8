"""The ``AUTHFLOW_*`` keys: one declarative table, read into frozen settings per feature.

Each row of :data:`KEYS` names a key, the type its value is coerced to (strings from the
environment included), its default and an optional check of the coerced value. A
feature declares its settings as a frozen dataclass whose fields name their key with
:func:`setting`; :meth:`Settings.from_config` reads those keys from ``app.config`` through
the table, and the dataclass's ``__post_init__`` checks what involves several keys. Every
refusal is a :class:`~flask_authflow.errors.ConfigurationError` that names the key and
says what to set. :func:`apply_defaults` writes the defaults into ``app.config`` (with
``setdefault``, as Flask extensions do) and refuses an unknown ``AUTHFLOW_`` key, which
is most often a typo.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

from flask_authflow.errors import ConfigurationError, MissingExtraError

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

MIN_SIGNING_KEY_BYTES = 32
#: The shortest minimum password length a configuration may set (NIST SP 800-63B-4).
MIN_PASSWORD_LENGTH = 8
#: The longest minimum password length a configuration may set (NIST: accept at least 64).
MAX_PASSWORD_MIN_LENGTH = 64

#: ``coerce(key, raw value) -> value``; raises ConfigurationError naming the key.
Coerce = Callable[[str, Any], Any]
#: ``check(key, coerced value)``; raises ConfigurationError naming the key.
Check = Callable[[str, Any], None]


# --- types -----------------------------------------------------------------------------------


def coerce_key(name: str, value: str | bytes) -> bytes:
    """A secret key from config: bytes as they are, text as UTF-8 (its length is what counts)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ConfigurationError(f"{name} must be a string or bytes, not {type(value).__name__}")


def raw(_name: str, value: Any) -> Any:
    """The value as configured (its feature checks it)."""
    return value


def duration(name: str, value: Any) -> timedelta:
    """A positive ``timedelta``; a number (or a string of digits) counts seconds."""
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


def workflow_expiries(name: str, value: Any) -> Mapping[str, timedelta]:
    """Workflow kind (or ``"custom"`` for every ``custom:*`` kind) to a positive duration of
    at most 30 days, the longest a workflow may be given."""
    if not isinstance(value, Mapping) or not all(isinstance(kind, str) for kind in value):
        raise ConfigurationError(f"{name} must map workflow kinds to seconds, got {value!r}")
    expiries = {kind: duration(f"{name}[{kind!r}]", seconds) for kind, seconds in value.items()}
    for kind, expiry in expiries.items():
        if expiry > timedelta(days=30):
            raise ConfigurationError(f"{name}[{kind!r}] may not exceed 30 days, got {expiry}")
    return MappingProxyType(expiries)


def optional_duration(name: str, value: Any) -> timedelta | None:
    """A duration, or ``None`` ("forever"; from the environment: "forever" or "none")."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("forever", "none")):
        return None
    return duration(name, value)


def integer(name: str, value: Any) -> int:
    """A positive integer (a string of digits from the environment too)."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}")
    try:
        result = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}") from None
    if result <= 0:
        raise ConfigurationError(f"{name} must be positive, got {result}")
    return result


def optional_integer(name: str, value: Any) -> int | None:
    """A positive integer, or ``None`` (the feature's derived default)."""
    return None if value is None else integer(name, value)


def boolean(name: str, value: Any) -> bool:
    """``True``/``False``, or "1/true/yes/on", "0/false/no/off" from the environment."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def optional_boolean(name: str, value: Any) -> bool | None:
    """:func:`boolean`, or ``None`` (the feature's derived default)."""
    return None if value is None else boolean(name, value)


def string_list(name: str, value: Any) -> tuple[Any, ...]:
    """A tuple from a list, or from a comma-separated string (the environment)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    if isinstance(value, bytes):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(value)
    raise ConfigurationError(f"{name} must be a list (or a comma-separated string), got {value!r}")


def text(name: str, value: Any) -> str:
    """A string."""
    if not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string, got {value!r}")
    return value


def optional_text(name: str, value: Any) -> str | None:
    """A string or ``None``."""
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string or None, got {value!r}")
    return value


def signing_key(name: str, value: Any) -> bytes:
    """The required signing key: at least :data:`MIN_SIGNING_KEY_BYTES` bytes."""
    if value is None or value in ("", b""):
        raise ConfigurationError(
            f"{name} is not set: set it to a random secret of at least "
            f"{MIN_SIGNING_KEY_BYTES} bytes, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(48))', "
            "loaded from your secrets store and the same on every process and restart"
        )
    key = coerce_key(name, value)
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise ConfigurationError(
            f"{name} is {len(key)} bytes: set it to at least {MIN_SIGNING_KEY_BYTES} random bytes "
            "(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    return key


def previous_signing_keys(name: str, value: Any) -> tuple[bytes, ...]:
    """Keys that signed before the current one: each as long as a signing key must be."""
    keys = tuple(coerce_key(name, k) for k in string_list(name, value))
    if any(len(k) < MIN_SIGNING_KEY_BYTES for k in keys):
        raise ConfigurationError(
            f"an entry of {name} is shorter than {MIN_SIGNING_KEY_BYTES} bytes: "
            "remove it (it could never have been a valid signing key)"
        )
    return keys


def aes_key(name: str, value: Any) -> bytes | None:
    """An optional AES-256 key of exactly 32 bytes (unset: derived from the signing key)."""
    if value is None:
        return None
    key = coerce_key(name, value)
    if len(key) != 32:
        raise ConfigurationError(
            f"{name} must be exactly 32 bytes (AES-256): set it to secrets.token_bytes(32), "
            "or leave it unset to derive it from the signing key"
        )
    return key


def aes_keys(name: str, value: Any) -> tuple[bytes, ...]:
    """Previous AES-256 keys, still accepted for reading: 32 bytes each."""
    keys = tuple(coerce_key(name, k) for k in string_list(name, value))
    if any(len(k) != 32 for k in keys):
        raise ConfigurationError(f"every {name} entry must be 32 bytes")
    return keys


def oauth_providers(name: str, value: Any) -> Mapping[str, Mapping[str, Any]]:
    """A dict of dicts (a JSON object from the environment); each entry is checked when its
    provider is built."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigurationError(f"{name} is not valid JSON") from None
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(entry, Mapping) for key, entry in value.items()
    ):
        raise ConfigurationError(f'{name} must be a dict of dicts: {{"name": {{"discovery_url": ..., ...}}}}')
    return MappingProxyType({key: MappingProxyType(dict(entry)) for key, entry in value.items()})


def zxcvbn_score(name: str, value: Any) -> int | None:
    """``None`` or a zxcvbn score from 0 to 4 (needs the ``zxcvbn`` package)."""
    if value is None:
        return None
    score = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 4:
        raise ConfigurationError(f"{name} must be None or a zxcvbn score from 0 to 4, got {score!r}")
    if importlib.util.find_spec("zxcvbn") is None:
        raise MissingExtraError("zxcvbn", "zxcvbn")  # the key needs it
    return score


def passkey_tenants(name: str, value: Any) -> bool | frozenset[str]:
    """``True``, ``False`` or the tenants that may log in with a passkey alone."""
    if isinstance(value, str):
        value = {"true": True, "false": False, "1": True, "0": False}.get(
            value.strip().lower(), [t.strip() for t in value.split(",") if t.strip()]
        )
    if isinstance(value, bool):
        return value
    if not isinstance(value, list | tuple | set | frozenset) or not all(isinstance(t, str) for t in value):
        raise ConfigurationError(f"{name} must be True, False or a list of tenant names")
    return frozenset(value)


#: The security notices an app may switch (``AUTHFLOW_SECURITY_NOTICES``), see
#: :mod:`flask_authflow.web.security_notices`.
SECURITY_NOTICE_EVENTS = (
    "password_changed",
    "email_changed",
    "factor_added",
    "factor_removed",
    "provider_linked",
    "provider_unlinked",
    "username_changed",
)


def security_notices(name: str, value: Any) -> frozenset[str]:
    """``True`` (every notice), ``False`` (none) or the events to mail notices of."""
    if isinstance(value, bool):
        return frozenset(SECURITY_NOTICE_EVENTS) if value else frozenset()
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{name} must be True, False or a list of events")
    unknown = sorted(set(value) - set(SECURITY_NOTICE_EVENTS))
    if unknown:
        raise ConfigurationError(
            f"{name}: unknown event(s) {', '.join(unknown)} (known: {', '.join(SECURITY_NOTICE_EVENTS)})"
        )
    return frozenset(value)


def webauthn_origins(name: str, value: Any) -> tuple[str, ...]:
    """https origins (http only for localhost), without a trailing slash."""
    origins = string_list(name, value)
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
                f"every {name} entry must be an https origin such as "
                f"'https://example.com' (http only for localhost), got {origin!r}"
            )
    return tuple(o.rstrip("/") for o in origins)


def is_loopback_host(host: str | None) -> bool:
    """``host`` (a name or an address, without a port) is this machine: ``localhost``, a
    name under ``.localhost``, ``127.0.0.0/8`` or ``::1``."""
    if not host:
        return False
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def origin_problem(value: str) -> str | None:
    """Why ``value`` cannot be the address mailed links start with, or ``None``: it must be
    an absolute ``https`` URL (``http`` for a loopback host only), with a host, no user,
    query or fragment, and at most a path (``https://example.com/app``)."""
    if any(char.isspace() or ord(char) < 0x20 or char in "\x7f\\" for char in value):
        return "it holds spaces, control characters or a backslash"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "it is not a URL (a malformed host or port)"
    if parts.scheme.lower() not in ("https", "http") or not parts.netloc:
        return "it must be an absolute http(s) URL with a host, such as 'https://app.example.com'"
    if not parts.hostname or "@" in parts.netloc:
        return "it must name a host, and no user or password"
    if not parts.netloc.isascii():
        # IDNA 2003 (the codec in the standard library) and IDNA 2008 (browsers) encode some
        # names to different hosts: the operator says which one, in its ASCII form.
        return "its host must be written in ASCII: give an internationalised name in its 'xn--' form"
    if parts.query or parts.fragment or "?" in value or "#" in value:
        return "it may hold a path but no query (?...) or fragment (#...)"
    if port == 0 or any(segment in (".", "..") for segment in parts.path.split("/")):
        return "it has port 0 or a '.' or '..' path segment"
    if parts.scheme.lower() == "http" and not is_loopback_host(parts.hostname):
        return "http is allowed for a loopback host only (localhost, 127.0.0.1, ::1): links carry tokens"
    return None


def normal_origin(value: str) -> str:
    """``value`` (which :func:`origin_problem` accepted) with its scheme and host in lower
    case and no trailing slash: ``https://app.example.com/prefix``."""
    parts = urlsplit(value)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def external_url(name: str, value: Any) -> str | None:
    """``None`` or the address users reach the app at, where mailed links start
    (:func:`origin_problem` says what is refused), without a trailing slash."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{name} must be the address users reach this app at, such as 'https://app.example.com', "
            f"or unset, got {value!r}"
        )
    problem = origin_problem(value)
    if problem is not None:
        raise ConfigurationError(
            f"{name} {value!r} is refused: {problem}. Set it to the address users reach this app at, "
            "such as 'https://app.example.com' (or 'https://example.com/app' under a path prefix)"
        )
    return normal_origin(value)


def policy_entries(name: str, value: Any) -> tuple[Any, ...]:
    """Cedar policy sources: one string or path, or a list of them (each a ``.cedar`` file, a
    directory of them, or policy text)."""
    if value is None:
        return ()
    if isinstance(value, str | os.PathLike):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str | os.PathLike) for v in value):
        return tuple(value)
    raise ConfigurationError(
        f"{name} must be a list of .cedar file paths, directories or policy texts, got {value!r}"
    )


def schema_source(name: str, value: Any) -> Any:
    """``None``, a Cedar schema file (``.cedarschema`` or ``.json``), schema text or a JSON object."""
    if value is None or isinstance(value, str | os.PathLike | Mapping):
        return value
    raise ConfigurationError(
        f"{name} must be a schema file path, Cedar schema text or a JSON schema object, got {value!r}"
    )


# --- checks of one value ---------------------------------------------------------------------------


def one_of(*choices: str, message: str) -> Check:
    """The value is one of ``choices``; else ``message`` (``{value!r}`` is filled in)."""

    def check(_name: str, value: Any) -> None:
        if value not in choices:
            raise ConfigurationError(message.format(value=value))

    return check


def at_most(limit: Any, message: str) -> Check:
    """The value is at most ``limit``; else ``message``."""

    def check(_name: str, value: Any) -> None:
        if value > limit:
            raise ConfigurationError(message)

    return check


def between(low: int, high: int, message: str) -> Check:
    """``low <= value <= high``; else ``message`` (``{value}`` is filled in)."""

    def check(_name: str, value: Any) -> None:
        if not low <= value <= high:
            raise ConfigurationError(message.format(value=value))

    return check


def password_length(name: str, value: int) -> None:
    """A minimum password length NIST SP 800-63B accepts."""
    if not MIN_PASSWORD_LENGTH <= value <= MAX_PASSWORD_MIN_LENGTH:
        raise ConfigurationError(
            f"{name}={value} is refused: set it between {MIN_PASSWORD_LENGTH} (NIST SP 800-63B's minimum) "
            f"and {MAX_PASSWORD_MIN_LENGTH}; the defaults are 15 for a password that is the only "
            "factor and 8 with a second factor"
        )


def all_strings(name: str, value: tuple[Any, ...]) -> None:
    """Every entry is a string."""
    if not all(isinstance(word, str) for word in value):
        raise ConfigurationError(f"{name} must be a list of strings")


def legacy_salt(name: str, value: Any) -> None:
    """``None`` or a non-empty string or bytes (Flask-Security-Too's ``SECURITY_PASSWORD_SALT``)."""
    if value is not None and (not isinstance(value, str | bytes) or not value):
        raise ConfigurationError(f"{name} must be the old app's SECURITY_PASSWORD_SALT (non-empty) or None")


def redis_url(name: str, value: Any) -> None:
    """``None`` or a non-blank string."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigurationError(f"{name} must be a redis:// URL or None, got {value!r}")


def url_path(name: str, value: str) -> None:
    """A path such as ``/auth`` (no trailing slash), or ``''``."""
    if value and (not value.startswith("/") or value.endswith("/")):
        raise ConfigurationError(f"{name} must be a path such as '/auth' (or '')")


def optional_url_path(name: str, value: str | None) -> None:
    """A path such as ``/auth`` (no trailing slash), ``''``, or ``None`` (the route is off)."""
    if value is not None and value and (not value.startswith("/") or value.endswith("/")):
        raise ConfigurationError(f"{name} must be a path such as '/auth', '' or None")


def rp_id(name: str, value: Any) -> None:
    """A bare domain (no scheme, port or path)."""
    if value is not None and (not isinstance(value, str) or not value or "/" in value or ":" in value):
        raise ConfigurationError(f"{name} must be a bare domain such as 'example.com', got {value!r}")


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
    # the headless JSON API (flask_authflow.web.headless; None: on when AUTHFLOW_VIEWS is)
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
    # abuse protection: rate limits (see flask_authflow.throttle)
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
    # Shared Signals receiver (flask_authflow.federation.ssf): transmitter name -> its settings
    Key("AUTHFLOW_SSF_TRANSMITTERS", oauth_providers, {}),
    # the logout route every app gets (None: no route)
    Key("AUTHFLOW_LOGOUT_URL_PREFIX", optional_text, "/auth", optional_url_path),
    # mail (checked by flask_authflow.mail.SmtpSettings when AUTHFLOW_SMTP_HOST is set)
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
        raise KeyError(f"{name} is not in flask_authflow.settings.KEYS")
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
