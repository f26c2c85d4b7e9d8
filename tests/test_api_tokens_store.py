"""The API token store contract, on every store: memory, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow._core.ports import ApiTokenRecord, ApiTokenStore
from flask_authflow.errors import ApiTokenNameTaken, UserNotFound
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from tests.protocols import missing_members

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def token(user_id: str, name: str, token_id: str, *, tenant: str = "acme", **fields: Any) -> ApiTokenRecord:
    values: dict[str, Any] = {
        "token_id": token_id,
        "tenant": tenant,
        "user_id": user_id,
        "name": name,
        "token_hash": "ab" * 32,
        "scopes": ("notes:read", "notes:write"),
        "created_at": T0,
        "expires_at": T0 + timedelta(days=30),
    }
    values.update(fields)
    return ApiTokenRecord(**values)


class ApiTokenContract:
    """What every store answers (the ``backend`` fixture is given by each subclass)."""

    def test_implements_the_port(self, backend: Any) -> None:
        assert missing_members(backend, ApiTokenStore) == []

    def test_round_trip_list_and_lookup(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.add_api_token(token(alice.user_id, "zeta", "00000000000000aa"))
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000bb", expires_at=None, scopes=()))
        found = backend.get_api_token("00000000000000aa")
        assert found == token(alice.user_id, "zeta", "00000000000000aa")
        assert found.created_at.tzinfo is not None
        assert [t.name for t in backend.list_api_tokens("acme", alice.user_id)] == ["ci", "zeta"]
        assert backend.list_api_tokens("acme", alice.user_id)[0].scopes == ()
        assert backend.list_api_tokens("acme", alice.user_id)[0].expires_at is None
        assert backend.get_api_token("00000000000000cc") is None
        assert backend.list_api_tokens("other", alice.user_id) == []

    def test_names_are_unique_per_user_and_users_must_exist(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("acme", "bob")
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000aa"))
        with pytest.raises(ApiTokenNameTaken):
            backend.add_api_token(token(alice.user_id, "ci", "00000000000000ab"))
        backend.add_api_token(token(bob.user_id, "ci", "00000000000000ac"))  # another user's name
        with pytest.raises(UserNotFound):
            backend.add_api_token(token("0" * 32, "x", "00000000000000ad"))
        with pytest.raises(UserNotFound):  # the user exists, in another tenant
            backend.add_api_token(token(alice.user_id, "x", "00000000000000ae", tenant="other"))
        assert backend.get_api_token("00000000000000ab") is None

    def test_delete_one_by_name_and_all_of_a_user(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        bob = backend.create_user("acme", "bob")
        for index, name in enumerate(["a", "b", "c"]):
            backend.add_api_token(token(alice.user_id, name, f"00000000000000a{index}"))
        backend.add_api_token(token(bob.user_id, "a", "00000000000000b0"))
        gone = backend.delete_api_token("acme", alice.user_id, "b")
        assert gone is not None and gone.token_id == "00000000000000a1"
        assert backend.delete_api_token("acme", alice.user_id, "b") is None
        assert backend.delete_api_token("other", alice.user_id, "a") is None  # tenant-scoped
        assert backend.get_api_token("00000000000000a1") is None
        assert backend.delete_user_api_tokens("acme", alice.user_id) == 2
        assert backend.list_api_tokens("acme", alice.user_id) == []
        assert [t.name for t in backend.list_api_tokens("acme", bob.user_id)] == ["a"]

    def test_deleting_the_user_deletes_its_tokens(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000aa"))
        backend.delete_user("acme", "alice")
        assert backend.get_api_token("00000000000000aa") is None

    def test_touch_writes_at_most_once_per_interval(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000aa"))
        minute = timedelta(minutes=1)
        assert backend.touch_api_token("00000000000000aa", T0, unless_since=T0 - minute)
        assert not backend.touch_api_token("00000000000000aa", T0 + minute / 2, unless_since=T0 - minute / 2)
        assert backend.get_api_token("00000000000000aa").last_used_at == T0
        assert backend.touch_api_token("00000000000000aa", T0 + 2 * minute, unless_since=T0 + minute)
        assert backend.get_api_token("00000000000000aa").last_used_at == T0 + 2 * minute
        assert not backend.touch_api_token("00000000000000zz", T0, unless_since=T0)

    def test_parallel_touches_write_once(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000aa"))
        barrier = threading.Barrier(8)
        results: list[bool] = []

        def touch() -> None:
            barrier.wait(30)
            since = T0 - timedelta(minutes=1)
            results.append(backend.touch_api_token("00000000000000aa", T0, unless_since=since))

        threads = [threading.Thread(target=touch) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(results) == [False] * 7 + [True]

    def test_a_rolled_back_unit_keeps_no_token(self, backend: Any) -> None:
        alice = backend.create_user("acme", "alice")
        backend.add_api_token(token(alice.user_id, "kept", "00000000000000a0"))
        unit = backend.begin_unit()
        backend.add_api_token(token(alice.user_id, "ci", "00000000000000aa"))
        backend.delete_api_token("acme", alice.user_id, "kept")
        unit.rollback()
        assert backend.get_api_token("00000000000000aa") is None
        assert backend.get_api_token("00000000000000a0") is not None


class TestMemoryStore(ApiTokenContract):
    @pytest.fixture
    def backend(self) -> InMemoryBackend:
        return InMemoryBackend(clock=MockClock())


class TestSqlStore(ApiTokenContract):
    @pytest.fixture
    def backend(self, database_url: str) -> Iterator[SqlAlchemyBackend]:
        store = SqlAlchemyBackend(database_url, clock=MockClock())
        yield store
        store.close()
