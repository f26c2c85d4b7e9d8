"""E-mail addresses are one address whatever their case.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29

Until this revision an account's address kept its local part as typed
(``Owner2@example.com``), so ``owner2@example.com`` could be a second account's address.
From now on every address is stored lower-cased in the whole address, after NFC (see
``flask_authflow._core.identifiers.normalise_email``), and the unique constraint on
``(tenant, email)`` holds case-insensitively. The upgrade rewrites every stored address
to that form. Addresses of one tenant that differ only in case are one address, which
only one account may keep:

* the account that **verified** it keeps it (the most recent verification first: it
  proved last who reads that mailbox; then the oldest account); with none verified, the
  oldest account keeps it;
* every other account of the group loses it: its ``email`` is cleared and it is no longer
  verified. Each such account gets an ``authflow_audit`` row (event ``email_cleared``,
  reason ``address_case_duplicate``) and a warning in the ``flask_authflow.migrations``
  log, so an operator can reach its owner (it cannot reset its password by mail until it
  has an address again).

The downgrade changes nothing: the lower-cased addresses work with the older code as they
are (it compares them exactly), and a cleared address is not restored.

The folding below is a copy of the one ``normalise_email`` had when this revision was
written: a revision must not change when the package's code does.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

log = logging.getLogger("flask_authflow.migrations")

_users = sa.table(
    "authflow_users",
    sa.column("user_id", sa.String),
    sa.column("tenant", sa.String),
    sa.column("identifier", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("email", sa.String),
    sa.column("email_verified_at", sa.DateTime(timezone=True)),
)
_audit = sa.table(
    "authflow_audit",
    sa.column("time", sa.DateTime(timezone=True)),
    sa.column("event", sa.String),
    sa.column("status", sa.String),
    sa.column("tenant", sa.String),
    sa.column("user_id", sa.String),
    sa.column("identifier", sa.String),
    sa.column("ip_source", sa.String),
    sa.column("reason", sa.String),
)
#: Far in the past: how an unverified or undated account sorts.
_NEVER = datetime(1, 1, 1, tzinfo=UTC)


def _lower_char(ch: str) -> str:
    if ch.isascii():
        return ch.lower()
    lowered = ch.lower()
    return ch if any(c.isascii() for c in lowered) else lowered


def folded(address: str) -> str:
    """The address as this revision stores it: NFC, lower-cased character by character
    (a character outside ASCII is never lowered into ASCII), NFC again."""
    composed = unicodedata.normalize("NFC", address)
    return unicodedata.normalize("NFC", "".join(_lower_char(ch) for ch in composed))


def _aware(value: datetime | None) -> datetime:
    if value is None:
        return _NEVER
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _keeper_first(row: Any) -> tuple[bool, float, float, str]:
    """Sort key: verified before unverified, then the latest verification, then the oldest account."""
    verified = row.email_verified_at is not None
    return (
        not verified,
        -_aware(row.email_verified_at).timestamp(),
        _aware(row.created_at).timestamp(),
        row.user_id,
    )


def _groups(connection: sa.Connection) -> dict[tuple[str, str], list[Any]]:
    query = sa.select(_users).where(_users.c.email.is_not(None))
    found: dict[tuple[str, str], list[Any]] = {}
    for row in connection.execute(query):
        found.setdefault((row.tenant, folded(row.email)), []).append(row)
    return found


def _clear(connection: sa.Connection, losers: Sequence[Any], now: datetime) -> None:
    for row in losers:
        connection.execute(
            sa.update(_users)
            .where(_users.c.user_id == row.user_id)
            .values(email=None, email_verified_at=None)
        )
        connection.execute(
            sa.insert(_audit).values(
                time=now,
                event="email_cleared",
                status="success",
                tenant=row.tenant,
                user_id=row.user_id,
                identifier=row.identifier,
                ip_source="unknown",
                reason="address_case_duplicate",
            )
        )
        log.warning(
            "migration 0009: the e-mail address of user %s (%r) in tenant %r was cleared: "
            "another account holds it in another case%s",
            row.user_id,
            row.identifier,
            row.tenant,
            "" if row.email_verified_at is None else " (this account had verified it too)",
        )


def fold_addresses(connection: sa.Connection) -> int:
    """Store every address in its folded form, clearing the duplicates a group of one
    folded address has (see the module's text); returns how many addresses were cleared.
    Running it again changes nothing."""
    now = datetime.now(UTC)
    if connection.dialect.name == "sqlite":  # UTCDateTime's naive UTC there
        now = now.replace(tzinfo=None)
    cleared = 0
    for (_tenant, address), rows in _groups(connection).items():
        keeper, *losers = sorted(rows, key=_keeper_first)
        _clear(connection, losers, now)  # first, so the keeper's new form is free
        cleared += len(losers)
        if keeper.email != address:
            connection.execute(
                sa.update(_users).where(_users.c.user_id == keeper.user_id).values(email=address)
            )
    return cleared


def upgrade() -> None:
    fold_addresses(op.get_bind())


def downgrade() -> None:
    """Nothing to undo (see the module's text)."""
