"""Users in SQL: accounts (tenant, identifier), created, disabled, deleted and found."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from flask_authflow._clock import utc
from flask_authflow._core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow._core.ports import UserRecord
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import UserExists, UserNotFound
from flask_authflow.storage._sql.attempts import forget_counters
from flask_authflow.storage._sql.schema import (
    api_tokens_table,
    devices_table,
    factors_table,
    identity_links_table,
    lockouts_table,
    provider_tokens_table,
    reservations_table,
    user_roles_table,
    users_table,
)
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["FIND_USER", "GET_USER", "SqlUsers", "user_record"]


def user_record(row: Row[Any]) -> UserRecord:
    return UserRecord(
        user_id=row.user_id,
        tenant=row.tenant,
        identifier=row.identifier,
        created_at=utc(row.created_at),
        disabled=bool(row.disabled),
        email=row.email,
        email_verified_at=utc(row.email_verified_at) if row.email_verified_at is not None else None,
    )


# The login path's reads, built once: constructing a select() costs more than running
# it on SQLite, and SQLAlchemy caches the compiled form of a reused statement.
FIND_USER = select(users_table).where(
    users_table.c.tenant == bindparam("tenant"), users_table.c.identifier == bindparam("identifier")
)
FIND_BY_EMAIL = select(users_table).where(
    users_table.c.tenant == bindparam("tenant"), users_table.c.email == bindparam("email")
)
GET_USER = select(users_table).where(
    users_table.c.tenant == bindparam("tenant"), users_table.c.user_id == bindparam("user_id")
)


class SqlUsers(SqlConnections):
    """The users of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    def create_user(
        self,
        tenant: str,
        identifier: str,
        *,
        password_hash: str | None = None,
        email: str | None = None,
        email_verified_at: datetime | None = None,
    ) -> UserRecord:
        """Add a user (and their password's hash, made in ``login/``); :class:`UserExists`
        if the identifier or the address is taken in the tenant."""
        tenant = check_tenant(tenant)
        identifier = normalise_identifier(identifier)
        address = normalise_email(email) if email is not None else None
        now = utc(self.clock.now())
        user = UserRecord(uuid.uuid4().hex, tenant, identifier, now, False, address, email_verified_at)
        try:
            with self._account_tx() as conn:
                conn.execute(
                    insert(users_table).values(
                        user_id=user.user_id,
                        tenant=tenant,
                        identifier=identifier,
                        created_at=user.created_at,
                        disabled=False,
                        email=address,
                        email_verified_at=email_verified_at,
                    )
                )
                if password_hash is not None:
                    conn.execute(
                        insert(factors_table),
                        {
                            "user_id": user.user_id,
                            "kind": FactorKind.PASSWORD.value,
                            "secret": password_hash,
                            "created_at": user.created_at,
                            "factor_id": secrets.token_urlsafe(16),
                        },
                    )
        except IntegrityError as exc:
            raise UserExists() from exc
        return user

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None:
        with self._tx() as conn:
            result = conn.execute(
                update(users_table)
                .where(
                    users_table.c.tenant == tenant,
                    users_table.c.identifier == normalise_identifier(identifier),
                )
                .values(disabled=disabled)
            )
        if result.rowcount == 0:
            raise UserNotFound()

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user, factors, lockout counters, reservations and roles held in one transaction.

        Audit rows stay, and so do the attempt log and the account counter's latest success
        (see :func:`~flask_authflow.storage._sql.attempts.forget_counters`)."""
        user = self.find_user(check_tenant(tenant), normalise_identifier(identifier))
        if user is None:
            raise UserNotFound()
        lock = lockouts_table.c
        with self._account_tx() as conn:
            conn.execute(delete(factors_table).where(factors_table.c.user_id == user.user_id))
            forget_counters(conn, lock.tenant == user.tenant, lock.subject == user.identifier)
            held = reservations_table.c
            conn.execute(
                delete(reservations_table).where(held.tenant == user.tenant, held.subject == user.identifier)
            )
            conn.execute(delete(identity_links_table).where(identity_links_table.c.user_id == user.user_id))
            conn.execute(delete(provider_tokens_table).where(provider_tokens_table.c.user_id == user.user_id))
            # Also a foreign-key cascade, but not every SQLite connection enforces those.
            conn.execute(delete(user_roles_table).where(user_roles_table.c.user_id == user.user_id))
            conn.execute(delete(api_tokens_table).where(api_tokens_table.c.user_id == user.user_id))
            conn.execute(delete(devices_table).where(devices_table.c.user_id == user.user_id))
            gone = conn.execute(delete(users_table).where(users_table.c.user_id == user.user_id))
        if gone.rowcount == 0:
            raise UserNotFound()
        return user

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None:
        params = {"tenant": tenant, "identifier": identifier}
        row = self._fetch(lambda conn: conn.execute(FIND_USER, params).first())
        return user_record(row) if row is not None else None

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None:
        params = {"tenant": tenant, "user_id": user_id}
        row = self._fetch(lambda conn: conn.execute(GET_USER, params).first())
        return user_record(row) if row is not None else None

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None:
        params = {"tenant": tenant, "email": normalise_email(email)}
        row = self._fetch(lambda conn: conn.execute(FIND_BY_EMAIL, params).first())
        return user_record(row) if row is not None else None

    def set_email(
        self, tenant: str, user_id: str, email: str | None, *, verified_at: datetime | None
    ) -> UserRecord:
        address = normalise_email(email) if email is not None else None
        users = users_table.c
        try:
            with self._account_tx() as conn:
                row = conn.execute(
                    update(users_table)
                    .where(users.tenant == tenant, users.user_id == user_id)
                    .values(email=address, email_verified_at=verified_at)
                    .returning(*users_table.c)
                ).first()
        except IntegrityError as exc:
            raise UserExists() from exc
        if row is None:
            raise UserNotFound()
        return user_record(row)

    def set_identifier(self, tenant: str, user_id: str, identifier: str) -> UserRecord:
        users = users_table.c
        try:  # the unique (tenant, identifier) constraint decides a race: one rename wins
            with self._account_tx() as conn:
                row = conn.execute(
                    update(users_table)
                    .where(users.tenant == tenant, users.user_id == user_id)
                    .values(identifier=identifier)
                    .returning(*users_table.c)
                ).first()
        except IntegrityError as exc:
            raise UserExists() from exc
        if row is None:
            raise UserNotFound()
        return user_record(row)

    def list_users(self, tenant: str | None = None) -> list[UserRecord]:
        query = select(users_table).order_by(users_table.c.tenant, users_table.c.identifier)
        if tenant is not None:
            query = query.where(users_table.c.tenant == tenant)
        return [user_record(row) for row in self._fetch(lambda conn: conn.execute(query).all())]
