"""Identity links in SQL: a provider identity (issuer, subject) -> a local user."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, insert, select

from flask_authflow.federation.links import IdentityLink
from flask_authflow.storage.sql.schema import aware, identity_links_table
from flask_authflow.storage.sql.uow import SqlConnections

__all__ = ["SqlIdentityLinks"]


class SqlIdentityLinks(SqlConnections):
    """The identity links of :class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend`."""

    @staticmethod
    def _link(row: Row[Any]) -> IdentityLink:
        return IdentityLink(
            row.issuer, row.subject, row.tenant, row.user_id, aware(row.created_at) or row.created_at
        )

    def link_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        now = self.clock.now()
        links = identity_links_table.c
        with self._account_tx() as conn:
            # Replace in one transaction: delete then insert is portable and atomic.
            conn.execute(delete(identity_links_table).where(links.issuer == issuer, links.subject == subject))
            conn.execute(
                insert(identity_links_table).values(
                    issuer=issuer, subject=subject, tenant=tenant, user_id=user_id, created_at=now
                )
            )
        return IdentityLink(issuer, subject, tenant, user_id, now)

    def find_link(self, issuer: str, subject: str) -> IdentityLink | None:
        links = identity_links_table.c
        query = select(identity_links_table).where(links.issuer == issuer, links.subject == subject)
        row = self._fetch(lambda conn: conn.execute(query).first())
        return None if row is None else self._link(row)

    def links_of_user(self, tenant: str, user_id: str) -> list[IdentityLink]:
        links = identity_links_table.c
        query = (
            select(identity_links_table)
            .where(links.tenant == tenant, links.user_id == user_id)
            .order_by(links.issuer, links.subject)
        )
        return [self._link(row) for row in self._fetch(lambda conn: conn.execute(query).all())]

    def unlink_identity(self, issuer: str, subject: str) -> bool:
        links = identity_links_table.c
        with self._tx() as conn:
            gone = conn.execute(
                delete(identity_links_table).where(links.issuer == issuer, links.subject == subject)
            )
        return bool(gone.rowcount)
