"""What federation stores: identity links and the back-channel logout replay cache.

An identity link says that the provider's user (``issuer``, ``subject``) is the local user
(``tenant``, ``user_id``); back-channel logout uses it to find the local user of a
logout token's ``sub`` (never treating ``sub`` as a local id). The replay cache
remembers each logout token's ``jti`` until its ``exp``, in the shared store, so a
token replayed to another process is refused too.

:class:`~flask_authflow.storage.memory.InMemoryBackend` and
:class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend` implement
:class:`FederationStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["FederationStore", "IdentityLink"]


@dataclass(frozen=True, slots=True)
class IdentityLink:
    """The provider identity (``issuer``, ``subject``) belongs to the local user (``tenant``, ``user_id``)."""

    issuer: str
    subject: str
    tenant: str
    user_id: str
    created_at: datetime


@runtime_checkable
class FederationStore(Protocol):
    """Identity links and the logout-token replay cache."""

    def link_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        """Link (``issuer``, ``subject``) to the user, replacing an earlier link of that identity."""
        ...

    def find_link(self, issuer: str, subject: str) -> IdentityLink | None:
        """The link of the provider identity, or ``None``."""
        ...

    def links_of_user(self, tenant: str, user_id: str) -> list[IdentityLink]:
        """Every provider identity linked to the user."""
        ...

    def unlink_identity(self, issuer: str, subject: str) -> bool:
        """Remove the link; ``False`` if there was none."""
        ...

    def remember_jti(self, issuer: str, jti: str, expires_at: datetime) -> bool:
        """Record a logout token's ``jti`` until ``expires_at``: ``True`` the first time,
        ``False`` if it was already recorded and has not expired (a replay). Atomic across
        threads and, for the SQL store, across processes."""
        ...
