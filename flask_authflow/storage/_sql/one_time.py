"""One-time tokens in SQL: back-channel logout jtis and ``use_once`` tokens (an e-mail
code's digest, a WebAuthn challenge), in one table; the primary key lets one caller win
in every process."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from flask_authflow._clock import utc
from flask_authflow.storage._sql.schema import UTCDateTime, logout_jtis_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlOneTime"]


def _one_time_inserts() -> dict[str, Any]:
    """Per dialect: insert a one-time token unless it is there (no error, so an open unit
    of work's transaction stays usable); the row it returns says that this call won."""
    values: dict[str, Any] = {
        "issuer": bindparam("scope"),
        "jti": bindparam("token"),
        "expires_at": bindparam("expires_at"),
    }
    return {
        name: dialect_insert(logout_jtis_table)
        .values(**values)
        .on_conflict_do_nothing()
        .returning(logout_jtis_table.c.jti)
        for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
    }


_USE_ONCE = _one_time_inserts()
_DROP_EXPIRED_ONE_TIME = delete(logout_jtis_table).where(
    logout_jtis_table.c.issuer == bindparam("scope"),
    logout_jtis_table.c.expires_at <= bindparam("now", type_=UTCDateTime()),
)


class SqlOneTime(SqlConnections):
    """The one-time tokens of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    #: The insert that reports whether it won, for this engine's database (``None``: a
    #: savepoint absorbs the duplicate).
    _use_once_insert: Any = None

    def _use_dialect(self, engine: Engine) -> None:
        super()._use_dialect(engine)
        self._use_once_insert = _USE_ONCE.get(engine.dialect.name)

    def remember_jti(self, issuer: str, jti: str, expires_at: datetime) -> bool:
        """Insert (issuer, jti); the primary key makes a second insert fail in every process."""
        now = self.clock.now()
        seen = logout_jtis_table.c
        try:
            with self._tx() as conn:
                # An expired entry of the same jti no longer counts; old rows go in passing.
                conn.execute(delete(logout_jtis_table).where(seen.expires_at <= now))
                conn.execute(insert(logout_jtis_table).values(issuer=issuer, jti=jti, expires_at=expires_at))
        except IntegrityError:
            return False
        return True

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        """Insert (``one-time:<scope>``, token) into the one-time token table (the one
        logout jtis use); the primary key lets one caller win in every process. Expired
        tokens of the scope go in passing. In the open unit of work, if there is one."""
        params = {"scope": f"one-time:{scope}", "token": token, "expires_at": utc(expires_at)}
        statement = self._use_once_insert
        try:
            with self._tx() as conn:
                conn.execute(_DROP_EXPIRED_ONE_TIME, {**params, "now": utc(self.clock.now())})
                if statement is not None:
                    return conn.execute(statement, params).first() is not None
                # Other databases: a savepoint absorbs the duplicate.
                with conn.begin_nested():  # pragma: no cover - SQLite and PostgreSQL have upserts
                    row = {"issuer": params["scope"], "jti": token, "expires_at": params["expires_at"]}
                    conn.execute(insert(logout_jtis_table).values(**row))
        except IntegrityError:  # pragma: no cover - see above
            return False
        return True
