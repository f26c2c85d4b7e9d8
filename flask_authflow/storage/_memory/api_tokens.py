"""Personal API tokens in memory.

One dict, token id -> record; a user's tokens are found by a scan (a memory store holds few),
names are unique per user as the SQL store's constraint has them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import cast

from flask_authflow._core.ports import ApiTokenRecord
from flask_authflow.errors import ApiTokenNameTaken, UserNotFound
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryApiTokens"]


class MemoryApiTokens(MemoryState):
    """The API tokens of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def _user_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        return sorted(
            (r for r in self._api_tokens.values() if r.tenant == tenant and r.user_id == user_id),
            key=lambda r: r.name,
        )

    def _drop_api_tokens(self, tenant: str, user_id: str) -> int:
        doomed = [r.token_id for r in self._user_tokens(tenant, user_id)]
        for token_id in doomed:
            self._remove(self._api_tokens, token_id)
        return len(doomed)

    def add_api_token(self, record: ApiTokenRecord) -> None:
        with self._lock:
            if self._user_of(record.tenant, record.user_id) is None:
                raise UserNotFound()
            if record.token_id in self._api_tokens or any(
                r.name == record.name for r in self._user_tokens(record.tenant, record.user_id)
            ):
                raise ApiTokenNameTaken()
            self._put(self._api_tokens, record.token_id, record)

    def get_api_token(self, token_id: str) -> ApiTokenRecord | None:
        with self._lock:
            return self._api_tokens.get(token_id)

    def list_api_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        with self._lock:
            return self._user_tokens(tenant, user_id)

    def delete_api_token(self, tenant: str, user_id: str, name: str) -> ApiTokenRecord | None:
        with self._lock:
            for record in self._user_tokens(tenant, user_id):
                if record.name == name:
                    return cast(ApiTokenRecord, self._remove(self._api_tokens, record.token_id))
            return None

    def delete_user_api_tokens(self, tenant: str, user_id: str) -> int:
        with self._lock:
            return self._drop_api_tokens(tenant, user_id)

    def touch_api_token(self, token_id: str, at: datetime, *, unless_since: datetime) -> bool:
        with self._lock:
            record = self._api_tokens.get(token_id)
            if record is None or (record.last_used_at is not None and record.last_used_at >= unless_since):
                return False
            self._put(self._api_tokens, token_id, replace(record, last_used_at=at))
            return True
