"""Provider tokens in memory, per (tenant, user id, provider), and each row's refresh claim."""

from __future__ import annotations

from datetime import datetime

from flask_authflow._core.ports import StoredProviderTokens
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryProviderTokens"]


class MemoryProviderTokens(MemoryState):
    """The provider tokens of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def save_provider_tokens(self, tokens: StoredProviderTokens) -> None:
        key = (tokens.tenant, tokens.user_id, tokens.provider)
        with self._lock:
            self._put(self._provider_tokens, key, tokens)
            self._remove(self._token_claims, key)

    def get_provider_tokens(self, tenant: str, user_id: str, provider: str) -> StoredProviderTokens | None:
        with self._lock:
            return self._provider_tokens.get((tenant, user_id, provider))

    def provider_tokens_of_user(self, tenant: str, user_id: str) -> list[StoredProviderTokens]:
        with self._lock:
            found = [row for key, row in self._provider_tokens.items() if key[:2] == (tenant, user_id)]
        return sorted(found, key=lambda row: row.provider)

    def delete_provider_tokens(self, tenant: str, user_id: str, provider: str) -> bool:
        key = (tenant, user_id, provider)
        with self._lock:
            self._remove(self._token_claims, key)
            return self._remove(self._provider_tokens, key) is not None

    def claim_provider_tokens(
        self, tenant: str, user_id: str, provider: str, claim: str, *, now: datetime, until: datetime
    ) -> bool:
        key = (tenant, user_id, provider)
        with self._lock:
            held = self._token_claims.get(key)
            if key not in self._provider_tokens or (held is not None and held[1] > now):
                return False
            self._put(self._token_claims, key, (claim, until))
            return True

    def replace_claimed_provider_tokens(self, tokens: StoredProviderTokens, claim: str) -> bool:
        key = (tokens.tenant, tokens.user_id, tokens.provider)
        with self._lock:
            held = self._token_claims.get(key)
            if held is None or held[0] != claim or key not in self._provider_tokens:
                return False
            self._put(self._provider_tokens, key, tokens)
            self._remove(self._token_claims, key)
            return True

    def release_provider_tokens(self, tenant: str, user_id: str, provider: str, claim: str) -> None:
        key = (tenant, user_id, provider)
        with self._lock:
            held = self._token_claims.get(key)
            if held is not None and held[0] == claim:
                self._remove(self._token_claims, key)
