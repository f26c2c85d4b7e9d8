"""Account tokens in SQL: the mailed single-use tokens of sign-up, e-mail verification,
password reset and change of e-mail (only digests are stored).

Using a token is one conditional ``UPDATE ... WHERE used_at IS NULL AND expires_at > now
RETURNING ...`` (SQLite 3.35+ and PostgreSQL), so of parallel uses in any number of
processes exactly one gets the row back. Issuing a token voids its user's earlier unused
tokens of the kind in the same transaction.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, bindparam, case, insert, select, update

from flask_authflow._clock import utc
from flask_authflow._core.ports import AccountToken
from flask_authflow.storage._sql.schema import UTCDateTime, account_tokens_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlAccountTokens"]

_t = account_tokens_table.c
_Time = UTCDateTime()

_LIVE = and_(_t.used_at.is_(None), _t.expires_at > bindparam("b_now", type_=_Time))
_USE = (
    update(account_tokens_table)
    .where(_t.token_hash == bindparam("b_hash"), _t.kind == bindparam("b_kind"), _LIVE)
    .values(used_at=bindparam("b_now", type_=_Time))
    .returning(*account_tokens_table.c)
)
_USE_CODE = (
    update(account_tokens_table)
    .where(
        _t.token_hash == bindparam("b_hash"),
        _t.code_hash == bindparam("b_code"),
        _t.code_attempts < bindparam("b_max"),
        _LIVE,
    )
    .values(used_at=bindparam("b_now", type_=_Time))
    .returning(*account_tokens_table.c)
)
# A wrong code: one attempt more; the attempt that reaches the limit voids the token.
_COUNT_WRONG_CODE = (
    update(account_tokens_table)
    .where(_t.token_hash == bindparam("b_hash"), _t.code_hash != bindparam("b_code"), _LIVE)
    .values(
        code_attempts=_t.code_attempts + 1,
        used_at=case(
            (_t.code_attempts + 1 >= bindparam("b_max"), bindparam("b_now", type_=_Time)),
            else_=None,
        ),
    )
)
_FIND = select(account_tokens_table).where(_t.token_hash == bindparam("b_hash"))
_FIND_LIVE = (
    select(account_tokens_table)
    .where(
        _t.tenant == bindparam("b_tenant"),
        _t.user_id == bindparam("b_user"),
        _t.kind == bindparam("b_kind"),
        _LIVE,
    )
    .order_by(_t.created_at.desc())
    .limit(1)
)

_ANY_OF_KIND = (
    select(_t.token_hash)
    .where(
        _t.tenant == bindparam("b_tenant"), _t.user_id == bindparam("b_user"), _t.kind == bindparam("b_kind")
    )
    .limit(1)
)


def _token(row: Row[Any]) -> AccountToken:
    return AccountToken(
        token_hash=row.token_hash,
        kind=row.kind,
        tenant=row.tenant,
        user_id=row.user_id,
        code_hash=row.code_hash,
        created_at=utc(row.created_at),
        expires_at=utc(row.expires_at),
        payload=json.loads(row.payload),
        code_attempts=int(row.code_attempts),
        used_at=utc(row.used_at) if row.used_at is not None else None,
    )


def _void(tenant: str, user_id: str, kind: str | None) -> Any:
    query = update(account_tokens_table).where(
        _t.tenant == tenant, _t.user_id == user_id, _t.used_at.is_(None)
    )
    return query.where(_t.kind == kind) if kind is not None else query


class SqlAccountTokens(SqlConnections):
    """The account tokens of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    def issue_account_token(self, token: AccountToken) -> None:
        now = utc(token.created_at)
        with self._tx() as conn:
            conn.execute(_void(token.tenant, token.user_id, token.kind).values(used_at=now))
            conn.execute(
                insert(account_tokens_table).values(
                    token_hash=token.token_hash,
                    kind=token.kind,
                    tenant=token.tenant,
                    user_id=token.user_id,
                    code_hash=token.code_hash,
                    payload=json.dumps(dict(token.payload), sort_keys=True),
                    code_attempts=token.code_attempts,
                    created_at=now,
                    expires_at=utc(token.expires_at),
                    used_at=token.used_at,
                )
            )

    def find_account_token(self, token_hash: str) -> AccountToken | None:
        row = self._fetch(lambda conn: conn.execute(_FIND, {"b_hash": token_hash}).first())
        return _token(row) if row is not None else None

    def use_account_token(self, token_hash: str, kind: str, now: datetime) -> AccountToken | None:
        params = {"b_hash": token_hash, "b_kind": kind, "b_now": utc(now)}
        with self._tx() as conn:
            row = conn.execute(_USE, params).first()
        return _token(row) if row is not None else None

    def live_account_token(self, tenant: str, user_id: str, kind: str, now: datetime) -> AccountToken | None:
        params = {"b_tenant": tenant, "b_user": user_id, "b_kind": kind, "b_now": utc(now)}
        row = self._fetch(lambda conn: conn.execute(_FIND_LIVE, params).first())
        return _token(row) if row is not None else None

    def use_account_code(
        self, token_hash: str, code_hash: str, now: datetime, *, max_attempts: int
    ) -> AccountToken | None:
        params = {"b_hash": token_hash, "b_code": code_hash, "b_now": utc(now), "b_max": max_attempts}
        with self._tx() as conn:
            row = conn.execute(_USE_CODE, params).first()
            if row is None:
                conn.execute(_COUNT_WRONG_CODE, params)
        return _token(row) if row is not None else None

    def has_account_token(self, tenant: str, user_id: str, kind: str) -> bool:
        params = {"b_tenant": tenant, "b_user": user_id, "b_kind": kind}
        return self._fetch(lambda conn: conn.execute(_ANY_OF_KIND, params).first()) is not None

    def void_account_tokens(self, tenant: str, user_id: str, kind: str | None, now: datetime) -> int:
        with self._tx() as conn:
            result = conn.execute(_void(tenant, user_id, kind).values(used_at=utc(now)))
        return int(result.rowcount)
