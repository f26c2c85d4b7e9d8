"""Personal API tokens in SQL: one row per token, its lookup id the primary key.

A verification is one primary-key read; the last-use time is a conditional ``UPDATE``
(written only when older than the interval, so a token in constant use does not write on
every request); revoking deletes the row, so once the delete has committed no
verification can find it. A deleted user's tokens go with the user (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from flask_authflow._core.ports import ApiTokenRecord
from flask_authflow.errors import ApiTokenNameTaken, UserNotFound
from flask_authflow.storage._sql.schema import UTCDateTime, api_tokens_table, users_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlApiTokens"]

_tokens = api_tokens_table.c
_GET = select(api_tokens_table).where(_tokens.token_id == bindparam("token_id"))
_OF_USER = (
    select(api_tokens_table)
    .where(_tokens.tenant == bindparam("tenant"), _tokens.user_id == bindparam("user_id"))
    .order_by(_tokens.name)
)
_TOUCH = (
    update(api_tokens_table)
    .where(
        _tokens.token_id == bindparam("b_token_id"),
        or_(_tokens.last_used_at.is_(None), _tokens.last_used_at < bindparam("since", type_=UTCDateTime())),
    )
    .values(last_used_at=bindparam("at", type_=UTCDateTime()))
)


def _record(row: Row[Any]) -> ApiTokenRecord:
    return ApiTokenRecord(
        token_id=row.token_id,
        tenant=row.tenant,
        user_id=row.user_id,
        name=row.name,
        token_hash=row.token_hash,
        scopes=tuple(row.scopes.split()),
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
    )


class SqlApiTokens(SqlConnections):
    """The API tokens of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    def add_api_token(self, record: ApiTokenRecord) -> None:
        values = {
            "token_id": record.token_id,
            "tenant": record.tenant,
            "user_id": record.user_id,
            "name": record.name,
            "token_hash": record.token_hash,
            "scopes": " ".join(record.scopes),
            "created_at": record.created_at,
            "expires_at": record.expires_at,
            "last_used_at": record.last_used_at,
        }
        owner = select(users_table.c.user_id).where(
            users_table.c.user_id == record.user_id, users_table.c.tenant == record.tenant
        )
        try:
            with self._tx() as conn:
                if conn.execute(owner).first() is None:
                    raise UserNotFound()
                conn.execute(insert(api_tokens_table).values(values))
        except IntegrityError as exc:
            raise ApiTokenNameTaken() from exc

    def get_api_token(self, token_id: str) -> ApiTokenRecord | None:
        row = self._fetch(lambda conn: conn.execute(_GET, {"token_id": token_id}).first())
        return _record(row) if row is not None else None

    def list_api_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        rows = self._fetch(lambda conn: conn.execute(_OF_USER, {"tenant": tenant, "user_id": user_id}).all())
        return [_record(row) for row in rows]

    def delete_api_token(self, tenant: str, user_id: str, name: str) -> ApiTokenRecord | None:
        statement = (
            delete(api_tokens_table)
            .where(_tokens.tenant == tenant, _tokens.user_id == user_id, _tokens.name == name)
            .returning(*api_tokens_table.c)
        )
        with self._tx() as conn:
            row = conn.execute(statement).first()
        return _record(row) if row is not None else None

    def delete_user_api_tokens(self, tenant: str, user_id: str) -> int:
        statement = delete(api_tokens_table).where(_tokens.tenant == tenant, _tokens.user_id == user_id)
        with self._tx() as conn:
            return int(conn.execute(statement).rowcount)

    def touch_api_token(self, token_id: str, at: datetime, *, unless_since: datetime) -> bool:
        return self._write_one(_TOUCH, {"b_token_id": token_id, "since": unless_since, "at": at}) == 1
