"""The local token issuer: keys, key stores, claims and :class:`LocalIdp`.

The claims load with the package; the issuer, its keys and the key stores (which import
``joserfc`` through the JOSE layer) load on first use of their names, so an app that
reads its settings without an issuer never imports them. The SQL key store lives in
:mod:`flask_authflow.storage._sql.keystore` (it needs SQLAlchemy tables, a layer above
this package).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask_authflow._core.lazy import lazy_names

if TYPE_CHECKING:
    from flask_authflow.issuer._claims import MintClaims
    from flask_authflow.issuer._idp import LocalIdp
    from flask_authflow.issuer._keys import LocalIdpSigningKey
    from flask_authflow.issuer._keystores import FileLocalIdpKeyStore, MemoryLocalIdpKeyStore

#: Each name, and the private module it is loaded from on first use.
_LAZY = {
    "FileLocalIdpKeyStore": "flask_authflow.issuer._keystores",
    "LocalIdp": "flask_authflow.issuer._idp",
    "LocalIdpSigningKey": "flask_authflow.issuer._keys",
    "MemoryLocalIdpKeyStore": "flask_authflow.issuer._keystores",
    "MintClaims": "flask_authflow.issuer._claims",
}

__all__ = [
    "FileLocalIdpKeyStore",
    "LocalIdp",
    "LocalIdpSigningKey",
    "MemoryLocalIdpKeyStore",
    "MintClaims",
]


__getattr__ = lazy_names(__name__, _LAZY)
