"""Account tokens in memory: mailed single-use tokens by digest.

Each change holds the lock for the whole step and goes through the unit's journal, so a
rolled-back step leaves its token unused.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from flask_authflow._core.ports import AccountToken
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryAccountTokens"]


class MemoryAccountTokens(MemoryState):
    """The account tokens of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def issue_account_token(self, token: AccountToken) -> None:
        with self._lock:
            self.void_account_tokens(token.tenant, token.user_id, token.kind, token.created_at)
            self._put(self._account_tokens, token.token_hash, replace(token, payload=dict(token.payload)))

    def find_account_token(self, token_hash: str) -> AccountToken | None:
        with self._lock:
            return self._account_tokens.get(token_hash)

    def _live_token(self, token_hash: str, now: datetime) -> AccountToken | None:
        found = self._account_tokens.get(token_hash)
        return found if found is not None and found.used_at is None and found.expires_at > now else None

    def use_account_token(self, token_hash: str, kind: str, now: datetime) -> AccountToken | None:
        with self._lock:
            live = self._live_token(token_hash, now)
            if live is None or live.kind != kind:
                return None
            used = replace(live, used_at=now)
            self._put(self._account_tokens, token_hash, used)
            return used

    def live_account_token(self, tenant: str, user_id: str, kind: str, now: datetime) -> AccountToken | None:
        with self._lock:
            for token in self._account_tokens.values():
                if (token.tenant, token.user_id, token.kind) == (tenant, user_id, kind):
                    if self._live_token(token.token_hash, now) is not None:
                        return token
        return None

    def use_account_code(
        self, token_hash: str, code_hash: str, now: datetime, *, max_attempts: int
    ) -> AccountToken | None:
        with self._lock:
            live = self._live_token(token_hash, now)
            if live is None or live.code_attempts >= max_attempts:
                return None
            if live.code_hash == code_hash:
                used = replace(live, used_at=now)
                self._put(self._account_tokens, token_hash, used)
                return used
            tried = live.code_attempts + 1
            voided = now if tried >= max_attempts else None
            self._put(self._account_tokens, token_hash, replace(live, code_attempts=tried, used_at=voided))
            return None

    def has_account_token(self, tenant: str, user_id: str, kind: str) -> bool:
        with self._lock:
            return any(
                (token.tenant, token.user_id, token.kind) == (tenant, user_id, kind)
                for token in self._account_tokens.values()
            )

    def void_account_tokens(self, tenant: str, user_id: str, kind: str | None, now: datetime) -> int:
        with self._lock:
            voided = [
                token
                for token in self._account_tokens.values()
                if (token.tenant, token.user_id) == (tenant, user_id)
                and (kind is None or token.kind == kind)
                and token.used_at is None
            ]
            for token in voided:
                self._put(self._account_tokens, token.token_hash, replace(token, used_at=now))
            return len(voided)
