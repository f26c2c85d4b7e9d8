from __future__ import annotations

from typing import TYPE_CHECKING

from flask_authflow._core.lazy import lazy_names

if TYPE_CHECKING:
    from flask_authflow._core.crypto import SessionCrypto
    from flask_authflow._core.ports.backend import StorePorts
    from flask_authflow.storage._memory.backend import InMemoryBackend
    from flask_authflow.storage._redis_sessions import RedisSessionStore
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend
    from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
    from flask_authflow.storage._sql.schema import add_tables_to
    from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore

#: Each name, and the private module it is loaded from on first use.
_LAZY = {
    "InMemoryBackend": "flask_authflow.storage._memory.backend",
    "RedisSessionStore": "flask_authflow.storage._redis_sessions",
    "SessionCrypto": "flask_authflow._core.crypto",
    "SqlAlchemyBackend": "flask_authflow.storage._sql.backend",
    "SqlAlchemyLocalIdpKeyStore": "flask_authflow.storage._sql.keystore",
    "SqlAlchemySessionStore": "flask_authflow.storage._sql.session_store",
    "StorePorts": "flask_authflow._core.ports.backend",
    "add_tables_to": "flask_authflow.storage._sql.schema",
}

__all__ = [
    "InMemoryBackend",
    "RedisSessionStore",
    "SessionCrypto",
    "SqlAlchemyBackend",
    "SqlAlchemyLocalIdpKeyStore",
    "SqlAlchemySessionStore",
    "StorePorts",
    "add_tables_to",
]


__getattr__ = lazy_names(__name__, _LAZY)
