"""What federation stores: identity links and the back-channel logout replay cache.

An identity link says that the provider's user (``issuer``, ``subject``) is the local user
(``tenant``, ``user_id``); back-channel logout uses it to find the local user of a
logout token's ``sub`` (never treating ``sub`` as a local id). The replay cache
remembers each logout token's ``jti`` until its ``exp``, in the shared store, so a
token replayed to another process is refused too.

:class:`~flask_authflow.storage._memory.InMemoryBackend` and
:class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` implement
:class:`FederationStore`.
"""

from __future__ import annotations

from flask_authflow._core.ports import FederationStore, IdentityLink

__all__ = ["FederationStore", "IdentityLink"]
