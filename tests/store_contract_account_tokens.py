"""The store contract of account tokens (``AccountTokenStore``).

Mixed into a test class whose module gives ``backend`` and ``clock`` fixtures
(tests/test_store_contracts.py runs it on every adapter).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_authflow.testing._users import add_user
from tests.protocols import missing_members
from tests.store_contract import RACERS, T0, race


class AccountTokensContract:
    """Mailed single-use tokens by digest: used once, voided by a newer one, codes counted."""

    def _account_token(self, user_id: str, name: str, *, kind: str = "password_reset", **kw: Any) -> Any:
        from flask_authflow._core.ports import AccountToken

        fields: dict[str, Any] = {
            "token_hash": f"{name:0<64}"[:64],
            "kind": kind,
            "tenant": "acme",
            "user_id": user_id,
            "code_hash": f"code-{name}",
            "created_at": T0,
            "expires_at": T0 + timedelta(minutes=30),
            "payload": {"email": "a@example.com"},
        }
        return AccountToken(**{**fields, **kw})

    def test_account_tokens_are_single_use_and_expire(self, backend: Any) -> None:
        from flask_authflow._core.ports import AccountTokenStore

        assert missing_members(backend, AccountTokenStore) == []
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "a")
        backend.issue_account_token(token)
        assert backend.find_account_token(token.token_hash) == token
        # Another kind, or past its expiry: not used, and still there.
        assert backend.use_account_token(token.token_hash, "signup", T0) is None
        assert backend.use_account_token(token.token_hash, "password_reset", token.expires_at) is None
        assert backend.find_account_token(token.token_hash).used_at is None
        used = backend.use_account_token(token.token_hash, "password_reset", T0 + timedelta(minutes=1))
        assert used is not None and used.user_id == alice.user_id and used.payload == token.payload
        assert used.used_at == T0 + timedelta(minutes=1)
        later = T0 + timedelta(minutes=2)
        assert backend.use_account_token(token.token_hash, "password_reset", later) is None
        assert backend.find_account_token("f" * 64) is None
        assert backend.use_account_token("f" * 64, "password_reset", T0) is None

    def test_a_new_account_token_voids_the_older_ones_of_its_kind(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        bob = add_user(backend, "acme", "bob", "pw")
        first = self._account_token(alice.user_id, "1")
        other_kind = self._account_token(alice.user_id, "2", kind="email_change")
        bobs = self._account_token(bob.user_id, "3")
        for token in (first, other_kind, bobs):
            backend.issue_account_token(token)
        second = self._account_token(alice.user_id, "4", created_at=T0 + timedelta(minutes=1))
        backend.issue_account_token(second)
        assert backend.find_account_token(first.token_hash).used_at == second.created_at
        assert backend.use_account_token(first.token_hash, "password_reset", second.created_at) is None
        assert backend.live_account_token("acme", alice.user_id, "password_reset", T0) == second
        # The other kind and the other user keep theirs.
        assert backend.live_account_token("acme", alice.user_id, "email_change", T0) == other_kind
        assert backend.live_account_token("acme", bob.user_id, "password_reset", T0) == bobs
        assert backend.live_account_token("globex", alice.user_id, "password_reset", T0) is None
        assert backend.has_account_token("acme", alice.user_id, "password_reset")
        assert not backend.has_account_token("acme", alice.user_id, "signup")
        assert not backend.has_account_token("globex", alice.user_id, "password_reset")
        assert backend.void_account_tokens("acme", alice.user_id, None, T0) == 2
        assert backend.has_account_token("acme", alice.user_id, "password_reset")  # void, still issued
        assert backend.live_account_token("acme", alice.user_id, "email_change", T0) is None
        assert backend.live_account_token("acme", bob.user_id, "password_reset", T0) == bobs

    def test_account_codes_count_wrong_guesses(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "c")
        backend.issue_account_token(token)
        for tried in range(1, 3):
            assert backend.use_account_code(token.token_hash, "wrong", T0, max_attempts=3) is None
            assert backend.find_account_token(token.token_hash).code_attempts == tried
        used = backend.use_account_code(token.token_hash, token.code_hash, T0, max_attempts=3)
        assert used is not None and used.used_at == T0
        assert backend.use_account_code(token.token_hash, token.code_hash, T0, max_attempts=3) is None
        # The attempt that reaches the limit voids the token: the right code is then refused.
        again = self._account_token(alice.user_id, "d")
        backend.issue_account_token(again)
        for _ in range(3):
            assert backend.use_account_code(again.token_hash, "wrong", T0, max_attempts=3) is None
        assert backend.find_account_token(again.token_hash).used_at == T0
        assert backend.use_account_code(again.token_hash, again.code_hash, T0, max_attempts=3) is None
        assert backend.live_account_token("acme", alice.user_id, "password_reset", T0) is None

    def test_parallel_uses_of_one_account_token_have_one_winner(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "r")
        backend.issue_account_token(token)
        digest = token.token_hash
        won = race(RACERS, lambda _i: backend.use_account_token(digest, "password_reset", T0) is not None)
        assert won.count(True) == 1
        coded = self._account_token(alice.user_id, "s")
        backend.issue_account_token(coded)
        won = race(
            RACERS,
            lambda _i: (
                backend.use_account_code(coded.token_hash, coded.code_hash, T0, max_attempts=5) is not None
            ),
        )
        assert won.count(True) == 1

    def test_a_rolled_back_unit_leaves_the_account_token_unused(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "u")
        backend.issue_account_token(token)
        unit = backend.begin_unit()
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is not None
        unit.rollback()
        assert backend.find_account_token(token.token_hash).used_at is None
        unit = backend.begin_unit()
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is not None
        unit.commit()
        assert backend.find_account_token(token.token_hash).used_at == T0

    def test_deleting_a_user_leaves_no_live_account_token(self, backend: Any) -> None:
        alice = add_user(backend, "acme", "alice", "pw")
        token = self._account_token(alice.user_id, "x")
        backend.issue_account_token(token)
        backend.delete_user("acme", "alice")
        assert backend.use_account_token(token.token_hash, "password_reset", T0) is None
