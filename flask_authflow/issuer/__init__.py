"""The local token issuer: keys, key stores, claims and :class:`LocalIdp`.

The SQL key store lives in :mod:`flask_authflow.stores.sqlalchemy.keystore` (it
needs SQLAlchemy tables); it is re-exported here lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .claims import REGISTERED_CLAIMS, MintClaims
from .idp import DEFAULT_MAX_LIFETIME, DEFAULT_RELOAD_INTERVAL, LocalIdp, MintedToken
from .keys import SIGNING_ALGORITHMS, LoadedKeys, LocalIdpSigningKey
from .keystores import FileLocalIdpKeyStore, LocalIdpKeyStore, MemoryLocalIdpKeyStore

if TYPE_CHECKING:
    from ..stores.sqlalchemy.keystore import SqlAlchemyLocalIdpKeyStore

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
    "SqlAlchemyLocalIdpKeyStore",
]


def __getattr__(name: str) -> Any:
    if name == "SqlAlchemyLocalIdpKeyStore":
        from ..stores.sqlalchemy.keystore import SqlAlchemyLocalIdpKeyStore

        return SqlAlchemyLocalIdpKeyStore
    raise AttributeError(name)
