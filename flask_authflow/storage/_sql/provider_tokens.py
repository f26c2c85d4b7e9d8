"""Provider tokens in SQL: a user's sealed tokens of one provider, and the refresh claim.

The claim is one conditional ``UPDATE``: it takes the row only when no other claim holds
it past now, so of several processes refreshing the same row at once exactly one wins,
and only the winner's ``UPDATE ... WHERE claim = :mine`` writes the refreshed tokens.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from flask_authflow._core.ports import StoredProviderTokens
from flask_authflow.storage._sql.schema import aware, provider_tokens_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlProviderTokens"]

_T = provider_tokens_table.c


def _row_of(tenant: str, user_id: str, provider: str) -> Any:
    return and_(_T.tenant == tenant, _T.user_id == user_id, _T.provider == provider)


def _values(tokens: StoredProviderTokens) -> dict[str, Any]:
    return {
        "sealed": tokens.sealed,
        "token_type": tokens.token_type,
        "scopes": " ".join(tokens.scopes),
        "expires_at": tokens.expires_at,
        "updated_at": tokens.updated_at,
        "claim": None,
        "claimed_until": None,
    }


class SqlProviderTokens(SqlConnections):
    """The provider tokens of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    @staticmethod
    def _tokens(row: Row[Any]) -> StoredProviderTokens:
        return StoredProviderTokens(
            tenant=row.tenant,
            user_id=row.user_id,
            provider=row.provider,
            sealed=row.sealed,
            token_type=row.token_type,
            scopes=tuple(row.scopes.split()),
            expires_at=aware(row.expires_at),
            updated_at=aware(row.updated_at) or row.updated_at,
        )

    def save_provider_tokens(self, tokens: StoredProviderTokens) -> None:
        where = _row_of(tokens.tenant, tokens.user_id, tokens.provider)
        key = {"tenant": tokens.tenant, "user_id": tokens.user_id, "provider": tokens.provider}
        for _ in range(2):  # a concurrent first save may insert between our update and insert
            with self._tx() as conn:
                if conn.execute(update(provider_tokens_table).where(where).values(_values(tokens))).rowcount:
                    return
            try:
                with self._tx() as conn:
                    conn.execute(insert(provider_tokens_table).values(**key, **_values(tokens)))
                return
            except IntegrityError:
                continue
        raise RuntimeError("the provider token row kept changing under the save")  # pragma: no cover

    def get_provider_tokens(self, tenant: str, user_id: str, provider: str) -> StoredProviderTokens | None:
        query = select(provider_tokens_table).where(_row_of(tenant, user_id, provider))
        row = self._fetch(lambda conn: conn.execute(query).first())
        return None if row is None else self._tokens(row)

    def provider_tokens_of_user(self, tenant: str, user_id: str) -> list[StoredProviderTokens]:
        query = (
            select(provider_tokens_table)
            .where(_T.tenant == tenant, _T.user_id == user_id)
            .order_by(_T.provider)
        )
        return [self._tokens(row) for row in self._fetch(lambda conn: conn.execute(query).all())]

    def delete_provider_tokens(self, tenant: str, user_id: str, provider: str) -> bool:
        with self._tx() as conn:
            gone = conn.execute(delete(provider_tokens_table).where(_row_of(tenant, user_id, provider)))
        return bool(gone.rowcount)

    def claim_provider_tokens(
        self, tenant: str, user_id: str, provider: str, claim: str, *, now: datetime, until: datetime
    ) -> bool:
        free = or_(_T.claimed_until.is_(None), _T.claimed_until <= now)
        statement = (
            update(provider_tokens_table)
            .where(_row_of(tenant, user_id, provider), free)
            .values(claim=claim, claimed_until=until)
        )
        with self._tx() as conn:
            return bool(conn.execute(statement).rowcount)

    def replace_claimed_provider_tokens(self, tokens: StoredProviderTokens, claim: str) -> bool:
        statement = (
            update(provider_tokens_table)
            .where(_row_of(tokens.tenant, tokens.user_id, tokens.provider), _T.claim == claim)
            .values(_values(tokens))
        )
        with self._tx() as conn:
            return bool(conn.execute(statement).rowcount)

    def release_provider_tokens(self, tenant: str, user_id: str, provider: str, claim: str) -> None:
        statement = (
            update(provider_tokens_table)
            .where(_row_of(tenant, user_id, provider), _T.claim == claim)
            .values(claim=None, claimed_until=None)
        )
        with self._tx() as conn:
            conn.execute(statement)
