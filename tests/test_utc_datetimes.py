"""Every datetime column stores UTC: one column type for every table, aware values in any
offset stored as their UTC instant and read back as aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import DateTime, create_engine, text

from flask_authflow.issuer._keys import LocalIdpSigningKey
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from flask_authflow.storage._sql.schema import metadata


def test_every_datetime_column_uses_the_shared_utc_type() -> None:
    from flask_authflow.storage._sql.schema import UTCDateTime

    columns = [
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, DateTime) or isinstance(column.type, UTCDateTime)
    ]
    assert columns, "expected datetime columns"
    wrong = [
        name
        for table in metadata.sorted_tables
        for column in table.columns
        if (name := f"{table.name}.{column.name}") in columns and not isinstance(column.type, UTCDateTime)
    ]
    assert wrong == []


class _OffsetClock:
    """A clock answering in UTC+02:00 (aware, but not UTC)."""

    def now(self) -> datetime:
        return datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))


def test_issuer_key_times_are_stored_as_utc_on_sqlite(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'keys.db'}")
    store = SqlAlchemyLocalIdpKeyStore(engine, clock=_OffsetClock())
    store.rotate(LocalIdpSigningKey.generate_es256())
    with engine.connect() as conn:
        raw = conn.execute(text("SELECT created_at FROM authflow_issuer_keys")).scalar_one()
    # Before the fix the wall time of the +02:00 value (14:00) was stored as if it were UTC.
    assert str(raw).startswith("2026-03-01 12:00:00")


def test_utc_datetime_round_trips_as_aware_utc(tmp_path: Path) -> None:
    from sqlalchemy import Column, Integer, MetaData, Table, insert, select

    from flask_authflow.storage._sql.schema import UTCDateTime

    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True), Column("at", UTCDateTime()))
    table.metadata.create_all(engine)
    moment = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    with engine.begin() as conn:
        conn.execute(insert(table).values(id=1, at=moment))
        back = conn.execute(select(table.c.at)).scalar_one()
    assert back == moment
    assert back.tzinfo is UTC
