"""The local token issuer: keys, key stores, claims and :class:`LocalIdp`.

The SQL key store lives in :mod:`flask_authflow.stores.sqlalchemy.keystore` (it needs
SQLAlchemy tables, a layer above this package) and is exported from ``flask_authflow``.
"""

from __future__ import annotations

from .claims import REGISTERED_CLAIMS, MintClaims
from .idp import DEFAULT_MAX_LIFETIME, DEFAULT_RELOAD_INTERVAL, LocalIdp, MintedToken
from .keys import SIGNING_ALGORITHMS, LoadedKeys, LocalIdpSigningKey
from .keystores import FileLocalIdpKeyStore, LocalIdpKeyStore, MemoryLocalIdpKeyStore

__all__ = [
    "DEFAULT_MAX_LIFETIME",
    "DEFAULT_RELOAD_INTERVAL",
    "REGISTERED_CLAIMS",
    "SIGNING_ALGORITHMS",
    "FileLocalIdpKeyStore",
    "LoadedKeys",
    "LocalIdp",
    "LocalIdpKeyStore",
    "LocalIdpSigningKey",
    "MemoryLocalIdpKeyStore",
    "MintClaims",
    "MintedToken",
]
