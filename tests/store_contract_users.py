"""The store contract of users (``IdentityStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow._core.ports import AttemptKey, IdentityStore
from flask_authflow.errors import InvalidInput, UserExists, UserNotFound
from flask_authflow.testing._users import add_user
from tests.authn_support import FAST_HASHER
from tests.protocols import missing_members
from tests.store_contract import RACERS, T0, WINDOW, AuditRecord, race


class UsersContract:
    """Users by (tenant, normalised identifier): created, found, renamed, disabled, deleted."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, IdentityStore) == []

    def test_set_identifier_renames_and_refuses_a_taken_name(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_user("acme", "bob")
        carol = backend.create_user("globex", "carol")
        renamed = backend.set_identifier("acme", alice.user_id, "alicia")
        assert (renamed.user_id, renamed.identifier, renamed.created_at) == (
            alice.user_id,
            "alicia",
            alice.created_at,
        )
        assert backend.find_user("acme", "alicia") == renamed == backend.get_user("acme", alice.user_id)
        assert backend.find_user("acme", "alice") is None
        assert backend.get_password_hash("acme", alice.user_id) is not None  # the account moved whole
        with pytest.raises(UserExists):
            backend.set_identifier("acme", alice.user_id, "bob")
        with pytest.raises(UserNotFound):  # alice is not a user of globex
            backend.set_identifier("globex", alice.user_id, "dave")
        with pytest.raises(UserNotFound):
            backend.set_identifier("acme", "no-such-user", "dave")
        assert backend.find_user("acme", "alicia") == renamed  # the refusals changed nothing
        assert backend.find_user("acme", "bob") is not None
        # Identifiers are unique per tenant: globex may have its own alicia.
        assert backend.set_identifier("globex", carol.user_id, "alicia").identifier == "alicia"
        assert backend.find_user("acme", "alicia") == renamed

    def test_parallel_renames_to_one_name_have_one_winner(self, backend: Any) -> None:
        ids = [backend.create_user("acme", f"user{i}").user_id for i in range(RACERS)]

        def rename(index: int) -> bool:
            try:
                backend.set_identifier("acme", ids[index], "wanted")
            except UserExists:
                return False
            return True

        won = race(RACERS, rename)
        assert won.count(True) == 1
        assert backend.find_user("acme", "wanted").user_id == ids[won.index(True)]
        assert len(backend.list_users("acme")) == RACERS

    def test_set_disabled_finds_the_user_by_its_normalised_identifier(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_user("globex", "alice")
        backend.set_disabled("acme", " ALICE ")
        assert backend.get_user("acme", alice.user_id).disabled
        assert not backend.find_user("globex", "alice").disabled  # the other tenant's alice
        backend.set_disabled("acme", "alice", False)
        assert not backend.get_user("acme", alice.user_id).disabled
        with pytest.raises(UserNotFound):
            backend.set_disabled("acme", "nobody")

    def test_users(self, backend: Any) -> None:
        alice = add_user(backend, "acme", " Alice ", "pw")
        assert alice.identifier == "alice" and alice.tenant == "acme" and not alice.disabled
        assert alice.created_at.tzinfo is not None
        assert ":" not in alice.user_id
        assert backend.find_user("acme", "alice") == alice
        assert backend.find_user("globex", "alice") is None
        assert backend.get_user("acme", alice.user_id) == alice
        assert backend.get_user("globex", alice.user_id) is None
        with pytest.raises(UserExists):
            add_user(backend, "acme", "ALICE", "other")
        other = backend.create_user("globex", "alice")
        assert other.user_id != alice.user_id
        assert [u.identifier for u in backend.list_users("acme")] == ["alice"]
        assert {(u.tenant, u.identifier) for u in backend.list_users()} == {
            ("acme", "alice"),
            ("globex", "alice"),
        }
        with pytest.raises(InvalidInput):
            backend.create_user("acme", "bad\x00name")

    def test_emails(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice", email=" Alice@Example.COM ")
        assert (alice.email, alice.email_verified_at) == ("alice@example.com", None)
        assert backend.find_user_by_email("acme", "Alice@EXAMPLE.com") == alice
        assert backend.find_user_by_email("acme", "ALICE@example.com") == alice  # the local part too
        assert backend.find_user_by_email("acme", "\uff41lice@example.com") is None  # no folding to ASCII
        assert backend.find_user_by_email("globex", "Alice@example.com") is None
        for variant in ("Alice@example.com", "aLiCe@EXAMPLE.COM"):
            with pytest.raises(UserExists):
                backend.create_user("acme", "alice2", email=variant)
        assert backend.find_user("acme", "alice2") is None
        bob = backend.create_user("acme", "bob")
        with pytest.raises(UserExists):  # another user's address, in another case
            backend.set_email("acme", bob.user_id, "ALICE@example.com", verified_at=None)
        moved = backend.set_email("acme", alice.user_id, "new@example.com", verified_at=T0)
        assert (moved.email, moved.email_verified_at) == ("new@example.com", T0)
        assert backend.get_user("acme", alice.user_id) == moved == backend.find_user("acme", "alice")
        assert backend.find_user_by_email("acme", "Alice@example.com") is None
        backend.set_email("acme", bob.user_id, "Alice@example.com", verified_at=None)  # free again
        with pytest.raises(UserNotFound):  # a user of another tenant is not found
            backend.set_email("globex", alice.user_id, "x@example.com", verified_at=None)
        for bad in (
            "no-at",
            "two@@example.com",
            "a b@example.com",
            "@example.com",
            "a@",
            "x" * 250 + "@e.com",
        ):
            with pytest.raises(InvalidInput):
                backend.create_user("acme", "carol", email=bad)
        assert backend.find_user("acme", "carol") is None

    def test_passwords(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "first")
        stored = backend.get_password_hash("acme", alice.user_id)
        assert stored is not None and stored.startswith("$argon2id$")
        assert FAST_HASHER.verify(stored, "first")
        assert backend.get_password_hash("globex", alice.user_id) is None
        backend.set_password_hash("acme", alice.user_id, FAST_HASHER.hash("second"))
        stored2 = backend.get_password_hash("acme", alice.user_id)
        assert FAST_HASHER.verify(stored2, "second") and not FAST_HASHER.verify(stored2, "first")
        nopw = backend.create_user("acme", "fed")
        assert backend.get_password_hash("acme", nopw.user_id) is None
        assert backend.required_factors("acme", nopw.user_id) == []
        backend.set_password_hash("acme", nopw.user_id, stored2)
        assert backend.get_password_hash("acme", nopw.user_id) == stored2

    def test_delete_user_removes_factors_counters_and_reservations(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        key = AttemptKey("acme", "alice", "password")
        backend.write(
            AuditRecord(time=T0, event="login", status="success", tenant="acme", user_id=alice.user_id)
        )
        backend.register_failure(key, now=T0, **WINDOW)
        for _ in range(4):  # in flight: 5 of 5 used
            assert backend.reserve_attempt(key, now=T0, **WINDOW).granted
        assert not backend.reserve_attempt(key, now=T0, **WINDOW).granted
        backend.register_failure(AttemptKey("acme", "bob", "password"), now=T0, **WINDOW)
        assert backend.delete_user("acme", " ALICE ") == alice
        assert backend.find_user("acme", "alice") is None
        assert backend.get_user("acme", alice.user_id) is None
        assert backend.get_password_hash("acme", alice.user_id) is None
        with pytest.raises(UserNotFound):
            backend.delete_user("acme", "alice")
        # A new account under the same name inherits no counter and no reservation.
        add_user(backend, "acme", "alice", "pw")
        assert all(backend.reserve_attempt(key, now=T0, **WINDOW).granted for _ in range(5))
        # Other users and the audit trail are untouched.
        assert backend.find_user("acme", "bob") == bob
        assert backend.register_failure(AttemptKey("acme", "bob", "password"), now=T0, **WINDOW).failures == 2
        assert [r.user_id for r in backend.audit_rows] == [alice.user_id]
