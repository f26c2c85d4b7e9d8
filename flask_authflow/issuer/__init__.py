"""The local token issuer: keys, key stores, claims and :class:`LocalIdp`.

The claims load with the package; the issuer, its keys and the key stores (which import
``joserfc`` through the JOSE layer) load on first use of their names, so an app that
reads its settings without an issuer never imports them. The SQL key store lives in
:mod:`flask_authflow.storage._sql.keystore` (it needs SQLAlchemy tables, a layer above
this package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flask_authflow.issuer._claims import REGISTERED_CLAIMS, MintClaims

if TYPE_CHECKING:
    from flask_authflow.issuer._idp import (
        DEFAULT_MAX_LIFETIME,
        DEFAULT_RELOAD_INTERVAL,
        LocalIdp,
        MintedToken,
    )
    from flask_authflow.issuer._keys import SIGNING_ALGORITHMS, LoadedKeys, LocalIdpSigningKey
    from flask_authflow.issuer._keystores import (
        FileLocalIdpKeyStore,
        LocalIdpKeyStore,
        MemoryLocalIdpKeyStore,
    )

_LAZY = {
    "DEFAULT_MAX_LIFETIME": "flask_authflow.issuer._idp",
    "DEFAULT_RELOAD_INTERVAL": "flask_authflow.issuer._idp",
    "LocalIdp": "flask_authflow.issuer._idp",
    "MintedToken": "flask_authflow.issuer._idp",
    "SIGNING_ALGORITHMS": "flask_authflow.issuer._keys",
    "LoadedKeys": "flask_authflow.issuer._keys",
    "LocalIdpSigningKey": "flask_authflow.issuer._keys",
    "FileLocalIdpKeyStore": "flask_authflow.issuer._keystores",
    "LocalIdpKeyStore": "flask_authflow.issuer._keystores",
    "MemoryLocalIdpKeyStore": "flask_authflow.issuer._keystores",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
