"""How one ``AUTHFLOW_*`` value is read: the types a key's value is coerced to (strings
from the environment included) and the checks of one coerced value, each raising a
:class:`~flask_authflow.errors.ConfigurationError` that names the key. The table of keys
(:data:`flask_authflow._settings.KEYS`) names one of each per key."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from flask_authflow._origins import normal_origin, origin_problem
from flask_authflow.errors import ConfigurationError, MissingExtraError

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
#: :mod:`flask_authflow._web.security_notices`.
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
