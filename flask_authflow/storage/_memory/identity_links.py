"""Identity links in memory: which local user a provider's (issuer, subject) signs in as."""

from __future__ import annotations

from flask_authflow.federation._links import IdentityLink
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryIdentityLinks"]


class MemoryIdentityLinks(MemoryState):
    """The identity links of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def link_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        link = IdentityLink(issuer, subject, tenant, user_id, self.clock.now())
        with self._lock:
            self._put(self._links, (issuer, subject), link)
        return link

    def claim_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        """Link the identity unless it is linked already; the link in force (never replaced)."""
        with self._lock:
            found = self._links.get((issuer, subject))
            if found is None:
                found = IdentityLink(issuer, subject, tenant, user_id, self.clock.now())
                self._put(self._links, (issuer, subject), found)
            return found

    def find_link(self, issuer: str, subject: str) -> IdentityLink | None:
        with self._lock:
            return self._links.get((issuer, subject))

    def links_of_user(self, tenant: str, user_id: str) -> list[IdentityLink]:
        with self._lock:
            found = [
                link for link in self._links.values() if (link.tenant, link.user_id) == (tenant, user_id)
            ]
        return sorted(found, key=lambda link: (link.issuer, link.subject))

    def unlink_identity(self, issuer: str, subject: str) -> bool:
        with self._lock:
            return self._remove(self._links, (issuer, subject)) is not None
