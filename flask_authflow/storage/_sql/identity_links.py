"""Identity links in SQL: a provider identity (issuer, subject) -> a local user."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from flask_authflow.federation._links import IdentityLink
from flask_authflow.storage._sql.schema import aware, identity_links_table
from flask_authflow.storage._sql.uow import SqlConnections

__all__ = ["SqlIdentityLinks"]

#: The insert of a link that leaves an existing link of the identity as it is, per database
#: (others: a savepoint absorbs the duplicate).
_CLAIMS = {
    name: dialect_insert(identity_links_table).on_conflict_do_nothing()
    for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


class SqlIdentityLinks(SqlConnections):
    """The identity links of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

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

    def claim_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        """Link (``issuer``, ``subject``) to the user unless the identity is linked already;
        returns the link in force (this one, or the earlier one, never replaced). One
        statement decides, so of parallel claims in any processes exactly one wins."""
        row = {"issuer": issuer, "subject": subject, "tenant": tenant, "user_id": user_id}
        links = identity_links_table.c
        with self._account_tx() as conn:
            statement = _CLAIMS.get(conn.dialect.name)
            if statement is not None:
                conn.execute(statement.values(**row, created_at=self.clock.now()))
            else:  # pragma: no cover - SQLite and PostgreSQL have upserts
                try:
                    with conn.begin_nested():
                        conn.execute(insert(identity_links_table).values(**row, created_at=self.clock.now()))
                except IntegrityError:
                    pass
            found = conn.execute(
                select(identity_links_table).where(links.issuer == issuer, links.subject == subject)
            ).one()
        return self._link(found)

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
