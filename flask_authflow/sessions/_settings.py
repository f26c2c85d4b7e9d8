"""The session settings: signing and at-rest keys, lifetimes, the cookie and the store."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._core.crypto import SessionCrypto, derive_key
from flask_authflow._settings import Settings, flask_flag, setting
from flask_authflow.errors import ConfigurationError, MissingExtraError

__all__ = ["AT_REST_PURPOSE", "SessionSettings"]

#: HKDF purpose of the at-rest key derived from the signing key.
AT_REST_PURPOSE = b"authflow.at-rest"


@dataclass(frozen=True, slots=True)
class SessionSettings(Settings):
    """``AUTHFLOW_SIGNING_KEY``, ``AUTHFLOW_SESSION_*``, ``AUTHFLOW_COOKIE_*``, the store."""

    signing_key: bytes = field(repr=False, metadata=setting("AUTHFLOW_SIGNING_KEY"))
    previous_signing_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_SIGNING_KEYS")
    )
    encryption_key: bytes | None = field(repr=False, metadata=setting("AUTHFLOW_SESSION_ENCRYPTION_KEY"))
    previous_encryption_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_SESSION_ENCRYPTION_KEYS")
    )
    ttl: timedelta = field(metadata=setting("AUTHFLOW_SESSION_TTL"))
    idle_timeout: timedelta = field(metadata=setting("AUTHFLOW_SESSION_IDLE_TIMEOUT"))
    remember_ttl: timedelta = field(metadata=setting("AUTHFLOW_REMEMBER_ME_TTL"))
    remember_idle_timeout: bool = field(metadata=setting("AUTHFLOW_REMEMBER_ME_IDLE_TIMEOUT"))
    store: str = field(metadata=setting("AUTHFLOW_SESSION_STORE"))
    redis_url: str | None = field(metadata=setting("AUTHFLOW_REDIS_URL"))
    custom_data_limit: int = field(metadata=setting("AUTHFLOW_CUSTOM_DATA_LIMIT"))
    cookie_name: str = field(metadata=setting("AUTHFLOW_COOKIE_NAME"))
    cookie_secure: bool = field(metadata=setting("AUTHFLOW_COOKIE_SECURE"))
    cookie_samesite: str = field(metadata=setting("AUTHFLOW_COOKIE_SAMESITE"))
    cookie_domain: str | None = field(metadata=setting("AUTHFLOW_COOKIE_DOMAIN"))
    cookie_path: str = field(metadata=setting("AUTHFLOW_COOKIE_PATH"))
    allow_insecure_loopback: bool = field(metadata=setting("AUTHFLOW_ALLOW_INSECURE_LOOPBACK"))
    debug: bool = field(metadata=flask_flag("DEBUG"))
    testing: bool = field(metadata=flask_flag("TESTING"))

    def __post_init__(self) -> None:
        self._check_cookie()
        self._check_cookie_prefix()
        if self.idle_timeout > self.ttl:
            raise ConfigurationError(
                "AUTHFLOW_SESSION_IDLE_TIMEOUT is longer than AUTHFLOW_SESSION_TTL: set it to at most the TTL"
            )
        if self.remember_ttl < self.ttl:
            raise ConfigurationError(
                "AUTHFLOW_REMEMBER_ME_TTL is shorter than AUTHFLOW_SESSION_TTL: set it to at least the TTL"
            )
        if self.store == "redis":
            if self.redis_url is None:
                raise ConfigurationError(
                    "AUTHFLOW_SESSION_STORE='redis' needs AUTHFLOW_REDIS_URL, e.g. "
                    "'redis://127.0.0.1:6379/0' (rediss:// for TLS)"
                )
            if importlib.util.find_spec("redis") is None:
                raise MissingExtraError("redis", "redis")  # AUTHFLOW_SESSION_STORE='redis' needs it

    def _check_cookie(self) -> None:
        """Session cookies travel over HTTPS only, outside debug, testing and the loopback opt-out."""
        if not self.cookie_secure and not (self.debug or self.testing or self.allow_insecure_loopback):
            raise ConfigurationError(
                "AUTHFLOW_COOKIE_SECURE=False is refused outside debug/testing: session cookies must only "
                "travel over HTTPS. Set AUTHFLOW_COOKIE_SECURE=True (the default) in production, or for a "
                "plain-HTTP development server on 127.0.0.1 set AUTHFLOW_ALLOW_INSECURE_LOOPBACK=True "
                "(requests from other addresses are then refused)"
            )
        if self.cookie_samesite == "None" and not self.cookie_secure:
            raise ConfigurationError("AUTHFLOW_COOKIE_SAMESITE='None' requires AUTHFLOW_COOKIE_SECURE=True")

    def _check_cookie_prefix(self) -> None:
        """``__Host-`` and ``__Secure-`` cookie names carry rules browsers enforce: refuse breaking them."""
        name = self.cookie_name
        if name.startswith(("__Host-", "__Secure-")) and not self.cookie_secure:
            raise ConfigurationError(
                f"AUTHFLOW_COOKIE_NAME={name!r} needs AUTHFLOW_COOKIE_SECURE=True: browsers drop such a "
                "cookie without Secure"
            )
        if name.startswith("__Host-") and (self.cookie_path != "/" or self.cookie_domain):
            raise ConfigurationError(
                f"AUTHFLOW_COOKIE_NAME={name!r} needs AUTHFLOW_COOKIE_PATH='/' and no "
                "AUTHFLOW_COOKIE_DOMAIN: a __Host- cookie is bound to one host and the whole site "
                "(browsers drop it otherwise)"
            )

    def at_rest_crypto(self) -> SessionCrypto:
        """AES-256-GCM for session records in a shared store: ``AUTHFLOW_SESSION_ENCRYPTION_KEY``,
        else a key derived from the signing key (previous signing keys stay readable)."""
        previous = list(self.previous_encryption_keys)
        if self.encryption_key is not None:
            return SessionCrypto(self.encryption_key, previous_keys=previous)
        previous += [derive_key(old, AT_REST_PURPOSE) for old in self.previous_signing_keys]
        return SessionCrypto(derive_key(self.signing_key, AT_REST_PURPOSE), previous_keys=previous)
