"""Build the app's :class:`LocalIdp` from the typed configuration (called by ``init_app``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..clock import Clock
from ..config import AuthFlowConfig
from ..errors import ConfigurationError, KeyStoreError
from ..session.crypto import SessionCrypto, derive_key
from .idp import LocalIdp
from .keys import LocalIdpSigningKey
from .keystores import FileLocalIdpKeyStore, MemoryLocalIdpKeyStore

__all__ = ["ISSUER_KEY_PURPOSE", "build_issuer", "issuer_key_crypto"]


#: HKDF purpose of the issuer-key encryption key derived from the signing key.
ISSUER_KEY_PURPOSE = b"authflow.issuer-keys-at-rest"


def issuer_key_crypto(config: AuthFlowConfig) -> SessionCrypto:
    """AES-256-GCM for issuer private keys in the SQL store.

    ``AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY`` when set, else a key derived from the signing
    key (HKDF, its own purpose). Previous keys stay accepted for reading:
    ``AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS``, plus, when the key is derived,
    keys derived from ``AUTHFLOW_PREVIOUS_SIGNING_KEYS``.
    """
    previous = list(config.previous_issuer_key_encryption_keys)
    if config.issuer_key_encryption_key is not None:
        key = config.issuer_key_encryption_key
    else:
        key = derive_key(config.signing_key, ISSUER_KEY_PURPOSE)
        previous += [derive_key(old, ISSUER_KEY_PURPOSE) for old in config.previous_signing_keys]
    return SessionCrypto(key, previous)


def build_issuer(
    issuer: str, config: AuthFlowConfig, database_url: str, backend: Any, clock: Clock
) -> LocalIdp:
    """The app's :class:`LocalIdp` on the key store named by ``AUTHFLOW_ISSUER_KEY_STORE``.

    An empty store gets one new key of ``AUTHFLOW_ISSUER_ALGORITHM``; a file store that
    exists but is damaged raises :class:`KeyStoreError` at start-up rather than
    silently starting over with a new key.
    """

    def new_key() -> LocalIdpSigningKey:
        return LocalIdpSigningKey.generate(config.issuer_algorithm)

    spec = config.issuer_key_store
    store: Any
    if spec == "memory":
        store = MemoryLocalIdpKeyStore.with_current(new_key())
    elif spec.startswith("file:") and len(spec) > len("file:"):
        directory = spec[len("file:") :]
        store = FileLocalIdpKeyStore(directory)
        if not store.is_initialized():
            historical = store.directory / "historical"
            if historical.is_dir() and any(historical.glob("*.pem")):
                # Keys without a current.kid: damaged, not new. Starting over would
                # orphan every token signed so far.
                raise KeyStoreError(
                    f"{store.directory / 'current.kid'} is missing but {historical} holds keys: "
                    "restore current.kid (the kid of the key to sign with) instead of starting over"
                )
            store = FileLocalIdpKeyStore.initialize(directory, new_key())
    elif spec == "sql":
        from ..stores.sqlalchemy.keystore import SqlAlchemyLocalIdpKeyStore

        store = SqlAlchemyLocalIdpKeyStore(
            getattr(backend, "engine", None) or database_url, clock=clock, crypto=issuer_key_crypto(config)
        )
        store.ensure_current(new_key)
    else:
        raise ConfigurationError(
            f"AUTHFLOW_ISSUER_KEY_STORE={spec!r}: use 'memory', 'file:<directory>' or 'sql'"
        )
    idp = (
        LocalIdp.from_key_store(issuer, store)
        .with_clock(clock)
        .with_max_lifetime(config.issuer_max_lifetime)
        .with_jwks_max_age(config.issuer_jwks_max_age)
    )
    if config.issuer_base_url:
        idp = idp.with_base_url(config.issuer_base_url)
    elif config.issuer_url_prefix:
        # The blueprint answers under the prefix at the app's root: advertise that route
        # on the issuer's origin (AUTHFLOW_ISSUER_BASE_URL covers other mount points).
        origin = urlsplit(issuer)
        idp = idp.with_base_url(f"{origin.scheme}://{origin.netloc}/{config.issuer_url_prefix.strip('/')}")
    return idp
