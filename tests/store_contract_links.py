"""The store contract of identity links (``FederationStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from typing import Any

from flask_authflow.federation._links import FederationStore, IdentityLink
from tests.protocols import missing_members
from tests.store_contract import RACERS, race

ISSUER = "https://idp.example"
OTHER_ISSUER = "https://other.example"


def owner(link: IdentityLink) -> tuple[str, str, str, str]:
    """Who a link says is who (its creation time aside)."""
    return (link.issuer, link.subject, link.tenant, link.user_id)


class IdentityLinksContract:
    """Which local user a provider's (issuer, subject) is."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, FederationStore) == []

    def test_links_are_found_listed_moved_and_removed(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("acme", "bob")
        link = backend.link_identity(ISSUER, "sub-1", "acme", alice.user_id)
        assert owner(link) == (ISSUER, "sub-1", "acme", alice.user_id)
        assert owner(backend.find_link(ISSUER, "sub-1")) == owner(link)
        assert backend.find_link(ISSUER, "sub-2") is None
        assert backend.find_link(OTHER_ISSUER, "sub-1") is None  # a subject is per issuer
        backend.link_identity(OTHER_ISSUER, "sub-1", "acme", alice.user_id)
        backend.link_identity(ISSUER, "sub-0", "acme", alice.user_id)
        assert [owner(found) for found in backend.links_of_user("acme", alice.user_id)] == [
            (ISSUER, "sub-0", "acme", alice.user_id),
            (ISSUER, "sub-1", "acme", alice.user_id),
            (OTHER_ISSUER, "sub-1", "acme", alice.user_id),
        ]
        assert backend.links_of_user("globex", alice.user_id) == []
        # Linking an identity again moves it to the new user.
        backend.link_identity(ISSUER, "sub-1", "acme", bob.user_id)
        assert backend.find_link(ISSUER, "sub-1").user_id == bob.user_id
        assert [found.subject for found in backend.links_of_user("acme", bob.user_id)] == ["sub-1"]
        assert len(backend.links_of_user("acme", alice.user_id)) == 2
        assert backend.unlink_identity(ISSUER, "sub-1")
        assert not backend.unlink_identity(ISSUER, "sub-1")
        assert backend.find_link(ISSUER, "sub-1") is None
        assert backend.links_of_user("acme", bob.user_id) == []

    def test_a_claim_never_replaces_the_link_in_force(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("acme", "bob")
        assert backend.claim_identity(ISSUER, "sub", "acme", alice.user_id).user_id == alice.user_id
        assert backend.claim_identity(ISSUER, "sub", "acme", bob.user_id).user_id == alice.user_id
        assert backend.find_link(ISSUER, "sub").user_id == alice.user_id
        assert backend.links_of_user("acme", bob.user_id) == []

    def test_parallel_claims_of_one_identity_have_one_winner(self, backend: Any) -> None:
        ids = [backend.create_user("acme", f"user{i}").user_id for i in range(RACERS)]
        won = race(RACERS, lambda i: backend.claim_identity(ISSUER, "sub", "acme", ids[i]).user_id == ids[i])
        assert won.count(True) == 1
        assert backend.find_link(ISSUER, "sub").user_id == ids[won.index(True)]

    def test_deleting_a_user_removes_its_links(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("acme", "bob")
        backend.link_identity(ISSUER, "sub-a", "acme", alice.user_id)
        backend.link_identity(ISSUER, "sub-b", "acme", bob.user_id)
        backend.delete_user("acme", "alice")
        assert backend.find_link(ISSUER, "sub-a") is None
        assert backend.links_of_user("acme", alice.user_id) == []
        assert backend.find_link(ISSUER, "sub-b").user_id == bob.user_id

    def test_a_rolled_back_unit_leaves_no_link(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.link_identity(ISSUER, "kept", "acme", alice.user_id)
        unit = backend.begin_unit()
        backend.link_identity(ISSUER, "sub", "acme", alice.user_id)
        assert backend.unlink_identity(ISSUER, "kept")
        unit.rollback()
        assert backend.find_link(ISSUER, "sub") is None
        assert backend.find_link(ISSUER, "kept").user_id == alice.user_id
