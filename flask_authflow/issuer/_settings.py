"""The local issuer's settings: its name, key store, key encryption, lifetimes, algorithm."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from flask_authflow._settings import Settings, setting

__all__ = ["IssuerSettings"]


@dataclass(frozen=True, slots=True)
class IssuerSettings(Settings):
    """``AUTHFLOW_ISSUER`` and ``AUTHFLOW_ISSUER_*`` (the signing keys derive the key that
    encrypts issuer keys at rest when ``AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY`` is unset)."""

    #: The issuer string (``iss``); ``None``: no local issuer.
    issuer: str | None = field(metadata=setting("AUTHFLOW_ISSUER"))
    key_store: str = field(metadata=setting("AUTHFLOW_ISSUER_KEY_STORE"))
    key_encryption_key: bytes | None = field(
        repr=False, metadata=setting("AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY")
    )
    previous_key_encryption_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS")
    )
    signing_key: bytes = field(repr=False, metadata=setting("AUTHFLOW_SIGNING_KEY"))
    previous_signing_keys: tuple[bytes, ...] = field(
        repr=False, metadata=setting("AUTHFLOW_PREVIOUS_SIGNING_KEYS")
    )
    base_url: str | None = field(metadata=setting("AUTHFLOW_ISSUER_BASE_URL"))
    max_lifetime: timedelta = field(metadata=setting("AUTHFLOW_ISSUER_MAX_LIFETIME"))
    jwks_max_age: timedelta = field(metadata=setting("AUTHFLOW_ISSUER_JWKS_MAX_AGE"))
    algorithm: str = field(metadata=setting("AUTHFLOW_ISSUER_ALGORITHM"))
    url_prefix: str = field(metadata=setting("AUTHFLOW_ISSUER_URL_PREFIX"))
