"""Shared SQLAlchemy plumbing: one ``MetaData`` for every table, and engine resolution.

All stores accept an :class:`~sqlalchemy.engine.Engine`, a database URL, or a
Flask-SQLAlchemy ``db`` object, so flask-authflow works with or without
Flask-SQLAlchemy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, Engine, MetaData, create_engine, event
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from ...clock import utc
from ...errors import MissingExtraError

__all__ = ["Base", "EngineSource", "UTCDateTime", "metadata", "resolve_engine"]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every dialect: the one time column type of every table.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as
    naive UTC there and made aware again on the way out. Comparisons in SQL stay correct
    on both because every value written is converted to UTC first.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)


class Base(DeclarativeBase):
    """Declarative base of every flask-authflow table (prefix ``authflow_``)."""

    metadata = metadata


EngineSource = Any  # Engine | str | flask_sqlalchemy.SQLAlchemy


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed during a write; busy_timeout waits instead of failing
    # at once when another connection holds the write lock.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def resolve_engine(source: EngineSource) -> Engine:
    """Turn an engine, a URL string or a Flask-SQLAlchemy ``db`` into an :class:`Engine`."""
    if isinstance(source, Engine):
        return source
    if isinstance(source, str):
        if source.startswith("sqlite"):
            kwargs: dict[str, Any] = {}
            if source in ("sqlite://", "sqlite:///:memory:"):
                # One shared in-memory database for every thread.
                kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
            engine = create_engine(source, **kwargs)
            event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        try:
            return create_engine(source, pool_pre_ping=True)
        except ModuleNotFoundError as exc:
            if source.startswith("postgresql"):
                raise MissingExtraError("postgres", exc.name or "psycopg") from exc
            raise
    db_engine = getattr(source, "engine", None)  # Flask-SQLAlchemy's db.engine (needs an app context)
    if isinstance(db_engine, Engine):
        return db_engine
    raise TypeError(
        "expected a SQLAlchemy Engine, a database URL, or a Flask-SQLAlchemy db object, "
        f"got {type(source).__name__}"
    )
