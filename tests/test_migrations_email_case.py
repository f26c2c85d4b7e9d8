"""Revision 0009: e-mail addresses are one address whatever their case. Stored addresses are
rewritten to their lower-case form; where accounts of a tenant held one address in several
cases, the verified one keeps it and the others lose it, each with an audit row and a
warning (on SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from flask_authflow._core.identifiers import normalise_email
from flask_authflow.errors import UserExists
from flask_authflow.storage._sql import migrations
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import audit_table, metadata, users_table

pytestmark = pytest.mark.authflow_stores("sql")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: user id -> (tenant, identifier, created, email, verified at)
ROWS: dict[str, tuple[str, str, datetime, str | None, datetime | None]] = {
    # One address in three cases: two verified (the later verification keeps it), one not.
    "a": ("acme", "ann", T0 + timedelta(days=1), "Owner2@example.com", T0 + timedelta(days=2)),
    "b": ("acme", "bea", T0, "owner2@example.com", None),
    "c": ("acme", "cat", T0 + timedelta(days=3), "OWNER2@example.com", T0 + timedelta(days=4)),
    # Alone in its case: only lower-cased.
    "d": ("acme", "dan", T0, "Solo@example.com", None),
    # The same address in another tenant is another tenant's business.
    "e": ("globex", "eve", T0, "Owner2@example.com", None),
    # None verified: the oldest account keeps it.
    "f": ("acme", "fay", T0 + timedelta(days=1), "Pair@example.com", None),
    "g": ("acme", "gus", T0, "pair@example.com", None),
    # No address at all.
    "h": ("acme", "hal", T0, None, None),
}


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    made = sa.create_engine(database_url)
    yield made
    made.dispose()


def insert_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(users_table),
            [
                {
                    "user_id": user_id,
                    "tenant": tenant,
                    "identifier": identifier,
                    "created_at": created,
                    "disabled": False,
                    "email": email,
                    "email_verified_at": verified,
                }
                for user_id, (tenant, identifier, created, email, verified) in ROWS.items()
            ],
        )


def addresses(engine: sa.Engine) -> dict[str, tuple[str | None, bool]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(users_table)).all()
    return {row.user_id: (row.email, row.email_verified_at is not None) for row in rows}


def cleared_rows(engine: sa.Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(audit_table).where(audit_table.c.event == "email_cleared")).all()
    return sorted((r.tenant, r.user_id, r.identifier, r.status, r.reason, r.ip_source) for r in rows)


EXPECTED = {
    "a": (None, False),
    "b": (None, False),
    "c": ("owner2@example.com", True),
    "d": ("solo@example.com", False),
    "e": ("owner2@example.com", False),
    "f": (None, False),
    "g": ("pair@example.com", False),
    "h": (None, False),
}
EXPECTED_AUDIT = [
    ("acme", user_id, identifier, "success", "address_case_duplicate", "unknown")
    for user_id, identifier in (("a", "ann"), ("b", "bea"), ("f", "fay"))
]


def test_the_upgrade_folds_addresses_and_keeps_each_with_its_verified_account(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    migrations.upgrade(engine, "0008")
    insert_rows(engine)
    with caplog.at_level(logging.WARNING, logger="flask_authflow.migrations"):
        result = migrations.upgrade(engine)  # through 0009 (and the later revisions)
    assert (result.before, result.after) == ("0008", migrations.head())
    assert addresses(engine) == EXPECTED
    assert cleared_rows(engine) == EXPECTED_AUDIT
    warned = [record.getMessage() for record in caplog.records if record.name == "flask_authflow.migrations"]
    assert len(warned) == 3 and all("was cleared" in message for message in warned)
    assert sum("had verified it too" in message for message in warned) == 1  # ann's
    # The schema is still exactly the models'.
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


def test_after_the_upgrade_an_address_is_one_address_whatever_its_case(engine: sa.Engine) -> None:
    migrations.upgrade(engine, "0008")
    insert_rows(engine)
    migrations.upgrade(engine)
    backend = SqlAlchemyBackend(engine, create_tables=False)
    cat = backend.find_user_by_email("acme", "oWnEr2@EXAMPLE.com")
    assert cat is not None and cat.user_id == "c"
    with pytest.raises(UserExists):
        backend.create_user("acme", "mallory", email="OWNER2@Example.com")
    with pytest.raises(UserExists):
        backend.set_email("acme", "h", "SOLO@example.com", verified_at=None)
    assert backend.find_user("acme", "mallory") is None


def test_the_step_is_idempotent_and_the_downgrade_keeps_the_addresses(engine: sa.Engine) -> None:
    migrations.upgrade(engine, "0008")
    insert_rows(engine)
    migrations.upgrade(engine)
    migrations.downgrade(engine, "0008")
    assert addresses(engine) == EXPECTED
    migrations.upgrade(engine)  # runs the step again: nothing left to change
    assert addresses(engine) == EXPECTED
    assert cleared_rows(engine) == EXPECTED_AUDIT


def test_a_database_the_models_created_gets_the_step_when_it_is_adopted(engine: sa.Engine) -> None:
    """``create_tables=True`` made the tables (no version table): adoption stamps it at
    head, so it runs the data step itself."""
    metadata.create_all(engine)
    insert_rows(engine)
    result = migrations.upgrade(engine)
    assert (result.before, result.after) == (None, migrations.head())
    assert addresses(engine) == EXPECTED
    assert cleared_rows(engine) == EXPECTED_AUDIT


@pytest.mark.parametrize(
    "address",
    [
        "Owner2@Example.COM",
        "\u00c9mile@example.com",
        "E\u0301mile@example.com",
        "\uff21lice@example.com",
        "\u0130stanbul@example.com",
        "\u212aim@example.com",
        "MiXeD.Case+Tag@Sub.Example.ORG",
    ],
)
def test_the_revision_folds_as_normalise_email_does(address: str) -> None:
    revision = migrations._revision_module("0009")
    assert revision.folded(address) == normalise_email(address)
