"""The store contract of roles and permissions (``RoleStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow._core.ports import Role, RoleStore
from flask_authflow.errors import InvalidInput, RoleExists, RoleInUse, RoleNotFound, UserNotFound
from flask_authflow.testing._users import add_user
from tests.protocols import missing_members
from tests.store_contract import race


class RolesContract:
    """Roles per tenant, their permissions and the users who hold them."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, RoleStore) == []

    def test_roles_and_permissions(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        assert backend.create_role("acme", "editor", "Edits documents") == Role(
            "acme", "editor", "Edits documents"
        )
        backend.create_role("acme", "admin")
        with pytest.raises(RoleExists):
            backend.create_role("acme", "admin")
        assert backend.grant_permission("acme", "editor", "documents:edit")
        assert not backend.grant_permission("acme", "editor", "documents:edit")  # already granted
        assert backend.grant_permission("acme", "editor", "documents:read")
        assert backend.grant_permission("acme", "admin", "documents:read")
        assert backend.roles_of("acme", alice.user_id) == []
        assert backend.permissions_of("acme", alice.user_id) == []
        assert backend.add_user_role("acme", alice.user_id, "editor")
        assert not backend.add_user_role("acme", alice.user_id, "editor")
        assert backend.add_user_role("acme", alice.user_id, "admin")
        assert backend.roles_of("acme", alice.user_id) == ["admin", "editor"]
        assert backend.permissions_of("acme", alice.user_id) == ["documents:edit", "documents:read"]
        assert backend.list_roles("acme") == [
            Role("acme", "admin", "", ("documents:read",)),
            Role("acme", "editor", "Edits documents", ("documents:edit", "documents:read")),
        ]
        assert backend.revoke_permission("acme", "editor", "documents:edit")
        assert not backend.revoke_permission("acme", "editor", "documents:edit")
        assert backend.remove_user_role("acme", alice.user_id, "admin")
        assert not backend.remove_user_role("acme", alice.user_id, "admin")
        assert backend.roles_of("acme", alice.user_id) == ["editor"]
        assert backend.permissions_of("acme", alice.user_id) == ["documents:read"]

    def test_roles_are_tenant_scoped_and_refuse_unknown_names(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.create_role("other", "admin")  # the same name in another tenant is another role
        backend.grant_permission("other", "admin", "everything")
        backend.add_user_role("acme", alice.user_id, "admin")
        assert backend.permissions_of("acme", alice.user_id) == []
        assert backend.roles_of("other", alice.user_id) == []
        with pytest.raises(UserNotFound):  # alice is not a user of "other"
            backend.add_user_role("other", alice.user_id, "admin")
        with pytest.raises(UserNotFound):
            backend.add_user_role("acme", "no-such-user", "admin")
        with pytest.raises(RoleNotFound):
            backend.add_user_role("acme", alice.user_id, "ghost")
        with pytest.raises(RoleNotFound):
            backend.grant_permission("acme", "ghost", "x")
        with pytest.raises(RoleNotFound):
            backend.delete_role("acme", "ghost")
        for bad in ("", " admin", "a b", "x" * 65, "r\u00f4le", "-admin", "admin\n"):
            with pytest.raises(InvalidInput):
                backend.create_role("acme", bad)
        with pytest.raises(InvalidInput):
            backend.grant_permission("acme", "admin", "no spaces")
        with pytest.raises(InvalidInput):
            backend.create_role("acme", "fine", "bad\x00description")
        assert [r.name for r in backend.list_roles("acme")] == ["admin"]

    def test_deleting_a_role_in_use_needs_force(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.grant_permission("acme", "admin", "all")
        backend.add_user_role("acme", alice.user_id, "admin")
        with pytest.raises(RoleInUse):
            backend.delete_role("acme", "admin")
        assert backend.roles_of("acme", alice.user_id) == ["admin"]
        backend.delete_role("acme", "admin", force=True)
        assert backend.roles_of("acme", alice.user_id) == []
        assert backend.list_roles("acme") == []
        # A new role of the same name starts without the old grants.
        backend.create_role("acme", "admin")
        assert backend.list_roles("acme") == [Role("acme", "admin")]
        backend.delete_role("acme", "admin")  # not in use: no force needed
        assert backend.list_roles("acme") == []

    def test_deleting_a_user_removes_its_roles(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        backend.add_user_role("acme", alice.user_id, "admin")
        backend.delete_user("acme", "alice")
        assert backend.roles_of("acme", alice.user_id) == []
        backend.delete_role("acme", "admin")  # no longer in use
        assert backend.list_roles("acme") == []

    def test_parallel_role_changes_stay_consistent(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "admin")
        added = race(20, lambda i: backend.add_user_role("acme", alice.user_id, "admin"))
        assert added.count(True) == 1
        assert backend.roles_of("acme", alice.user_id) == ["admin"]
        removed = race(20, lambda i: backend.remove_user_role("acme", alice.user_id, "admin"))
        assert removed.count(True) == 1
        assert backend.roles_of("acme", alice.user_id) == []

    def test_a_rolled_back_unit_leaves_the_roles_as_they_were(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        backend.create_role("acme", "editor")
        backend.grant_permission("acme", "editor", "documents:read")
        backend.add_user_role("acme", alice.user_id, "editor")
        before = (backend.list_roles("acme"), backend.roles_of("acme", alice.user_id))
        unit = backend.begin_unit()
        backend.create_role("acme", "admin")
        backend.grant_permission("acme", "admin", "all")
        backend.add_user_role("acme", alice.user_id, "admin")
        backend.grant_permission("acme", "editor", "documents:edit")
        backend.revoke_permission("acme", "editor", "documents:read")
        backend.remove_user_role("acme", alice.user_id, "editor")
        unit.rollback()
        assert (backend.list_roles("acme"), backend.roles_of("acme", alice.user_id)) == before
        unit = backend.begin_unit()
        backend.delete_role("acme", "editor", force=True)
        unit.rollback()
        assert (backend.list_roles("acme"), backend.roles_of("acme", alice.user_id)) == before
        assert backend.permissions_of("acme", alice.user_id) == ["documents:read"]
