"""Identity links: provider identities of local users, and the logout-token replay cache."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["FederationStore", "IdentityLink"]


@dataclass(frozen=True, slots=True)
class IdentityLink:
    """The provider identity (``issuer``, ``subject``) belongs to the local user (``tenant``, ``user_id``)."""

    issuer: str
    subject: str
    tenant: str
    user_id: str
    created_at: datetime


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
