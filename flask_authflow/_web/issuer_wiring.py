"""Build the app's :class:`LocalIdp` from its issuer settings (called by ``init_app``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from flask_authflow._clock import Clock
from flask_authflow._core.crypto import SessionCrypto, derive_key
from flask_authflow.errors import ConfigurationError, KeyStoreError
from flask_authflow.issuer._idp import LocalIdp
from flask_authflow.issuer._keys import LocalIdpSigningKey
from flask_authflow.issuer._keystores import FileLocalIdpKeyStore, MemoryLocalIdpKeyStore
from flask_authflow.issuer._settings import IssuerSettings

__all__ = ["ISSUER_KEY_PURPOSE", "build_issuer", "issuer_key_crypto"]


#: HKDF purpose of the issuer-key encryption key derived from the signing key.
ISSUER_KEY_PURPOSE = b"authflow.issuer-keys-at-rest"


def issuer_key_crypto(settings: IssuerSettings) -> SessionCrypto:
    """AES-256-GCM for issuer private keys in the SQL store.

    ``AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY`` when set, else a key derived from the signing
    key (HKDF, its own purpose). Previous keys stay accepted for reading:
    ``AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS``, plus, when the key is derived,
    keys derived from ``AUTHFLOW_PREVIOUS_SIGNING_KEYS``.
    """
    previous = list(settings.previous_key_encryption_keys)
    if settings.key_encryption_key is not None:
        key = settings.key_encryption_key
    else:
        key = derive_key(settings.signing_key, ISSUER_KEY_PURPOSE)
        previous += [derive_key(old, ISSUER_KEY_PURPOSE) for old in settings.previous_signing_keys]
    return SessionCrypto(key, previous)


def build_issuer(settings: IssuerSettings, sql_source: Callable[[], Any], clock: Clock) -> LocalIdp:
    """The app's :class:`LocalIdp` named ``AUTHFLOW_ISSUER`` on the key store named by
    ``AUTHFLOW_ISSUER_KEY_STORE`` (``sql_source()``: the engine or URL of the ``sql`` store).

    An empty store gets one new key of ``AUTHFLOW_ISSUER_ALGORITHM``; a file store that
    exists but is damaged raises :class:`KeyStoreError` at start-up rather than
    silently starting over with a new key.
    """
    issuer = settings.issuer
    if not issuer:
        raise ConfigurationError("AUTHFLOW_ISSUER is not set: set it to the issuer URL of the local issuer")
    idp = (
        LocalIdp.from_key_store(issuer, _key_store(settings, sql_source, clock))
        .with_clock(clock)
        .with_max_lifetime(settings.max_lifetime)
        .with_jwks_max_age(settings.jwks_max_age)
    )
    if settings.base_url:
        idp = idp.with_base_url(settings.base_url)
    elif settings.url_prefix:
        # The blueprint answers under the prefix at the app's root: advertise that route
        # on the issuer's origin (AUTHFLOW_ISSUER_BASE_URL covers other mount points).
        origin = urlsplit(issuer)
        idp = idp.with_base_url(f"{origin.scheme}://{origin.netloc}/{settings.url_prefix.strip('/')}")
    return idp


def _key_store(settings: IssuerSettings, sql_source: Callable[[], Any], clock: Clock) -> Any:
    """The key store ``AUTHFLOW_ISSUER_KEY_STORE`` names, holding a current key."""

    def new_key() -> LocalIdpSigningKey:
        return LocalIdpSigningKey.generate(settings.algorithm)

    spec = settings.key_store
    if spec == "memory":
        return MemoryLocalIdpKeyStore.with_current(new_key())
    if isinstance(spec, str) and spec.startswith("file:") and len(spec) > len("file:"):
        directory = spec[len("file:") :]
        store = FileLocalIdpKeyStore(directory)
        if store.is_initialized():
            return store
        historical = store.directory / "historical"
        if historical.is_dir() and any(historical.glob("*.pem")):
            # Keys without a current.kid: damaged, not new. Starting over would
            # orphan every token signed so far.
            raise KeyStoreError(
                f"{store.directory / 'current.kid'} is missing but {historical} holds keys: "
                "restore current.kid (the kid of the key to sign with) instead of starting over"
            )
        return FileLocalIdpKeyStore.initialize(directory, new_key())
    if spec == "sql":
        from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore

        sql = SqlAlchemyLocalIdpKeyStore(sql_source(), clock=clock, crypto=issuer_key_crypto(settings))
        sql.ensure_current(new_key)
        return sql
    raise ConfigurationError(f"AUTHFLOW_ISSUER_KEY_STORE={spec!r}: use 'memory', 'file:<directory>' or 'sql'")
