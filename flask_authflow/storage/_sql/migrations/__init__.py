"""flask-authflow's schema under Alembic: the revisions ship in the package.

Every ``authflow_*`` table is created and changed by the revisions in ``versions/``; the
database records its revision in ``authflow_alembic_version`` (never ``alembic_version``,
so an application's own Alembic or Flask-Migrate history is left alone). Operators run
``flask authflow db upgrade``; the functions here are what that command and
``AuthFlow.init_app`` call, and they work on any :class:`~sqlalchemy.engine.Engine`.

A database created before migrations existed (the stores' ``create_all``; tables and no
version table) is adopted by :func:`upgrade`: the tables those versions had not created
yet are created, ``authflow_sessions`` gains its ``federation_key`` column, every table is
checked to have the baseline's columns, and the database is stamped with the baseline
revision before the later revisions run.

Upgrades hold a lock for their whole transaction (``BEGIN IMMEDIATE`` on SQLite, an
advisory lock on PostgreSQL), so processes starting at once on a new database do not
race: the second waits, then finds the schema at head.

Adding a revision (maintainers): write ``versions/authflow_NNNN_<slug>.py`` with
``down_revision`` set to the current head; ``tests/test_migrations.py`` fails until the
revisions produce exactly the models' schema.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from flask_authflow.errors import ConfigurationError
from flask_authflow.storage._sql.engine import EngineSource, resolve_engine
from flask_authflow.storage._sql.schema import metadata

__all__ = [
    "BASELINE",
    "VERSION_TABLE",
    "UpgradeResult",
    "authflow_table_names",
    "current",
    "downgrade",
    "ensure_schema",
    "exclude_authflow_objects",
    "exclude_authflow_tables",
    "head",
    "is_behind",
    "schema_status",
    "upgrade",
]

#: Where flask-authflow records its schema revision (an application's Alembic keeps ``alembic_version``).
VERSION_TABLE = "authflow_alembic_version"
#: The first revision: every table as it was when migrations were introduced.
BASELINE = "0001"
#: The command an operator runs, named by every refusal.
UPGRADE_COMMAND = "flask authflow db upgrade"

FOLDER = Path(__file__).resolve().parent
#: pg_advisory_xact_lock key of schema changes (any constant shared by every process).
_PG_LOCK_KEY = 0x617574686677  # "authfw"
#: One upgrade at a time within a process (alembic's op proxy is module-global).
_local_lock = threading.RLock()


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade` did: the revision before (``None``: no schema, or one created
    before migrations) and after, and the steps that adopted a pre-migration database."""

    before: str | None
    after: str | None
    adopted: list[str] = field(default_factory=list)


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(FOLDER).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    config.attributes["connection"] = connection
    return config


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision this version of flask-authflow ships."""
    revision = _scripts().get_current_head()
    assert revision is not None  # the package ships at least the baseline
    return revision


def _known(revision: str) -> bool:
    return any(script.revision == revision for script in _scripts().walk_revisions())


def _current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


@contextmanager
def _engine(source: EngineSource) -> Iterator[Engine]:
    """The engine of ``source``; one made here from a URL is disposed of afterwards."""
    engine = resolve_engine(source)
    try:
        yield engine
    finally:
        if engine is not source and isinstance(source, str):
            engine.dispose()


def current(engine: EngineSource) -> str | None:
    """The database's revision, or ``None`` when it has none (empty, or created before
    migrations). ``engine``: an Engine, a URL or a Flask-SQLAlchemy ``db``."""
    with _engine(engine) as bound, bound.connect() as connection:
        return _current(connection)


def _authflow_tables(connection: Connection) -> set[str]:
    names = set(inspect(connection).get_table_names())
    return names & authflow_table_names()


def _where(revision: str | None, connection: Connection) -> str:
    if revision is not None:
        return f"at revision {revision}"
    if _authflow_tables(connection) - {VERSION_TABLE}:
        return "tables created before migrations, no revision"
    return "no flask-authflow tables yet"


def schema_status(engine: EngineSource) -> tuple[str | None, str, str | None]:
    """``(current, head, problem)``: ``problem`` is ``None`` at head, else the sentence
    :func:`ensure_schema` would raise (naming ``flask authflow db upgrade``)."""
    with _engine(engine) as bound, bound.connect() as connection:
        now = _current(connection)
        newest = head()
        if now == newest:
            return now, newest, None
        url = bound.url.render_as_string(hide_password=True)
        if now is not None and not _known(now):
            return (
                now,
                newest,
                (
                    f"the database {url} is at revision {now}, which this version of flask-authflow "
                    f"does not know (its head is {newest}): it was migrated by a newer version; "
                    "run that version, or downgrade the database with it"
                ),
            )
        return (
            now,
            newest,
            (
                f"the database schema of {url} is behind ({_where(now, connection)}, head {newest}): "
                f"run `{UPGRADE_COMMAND}`"
            ),
        )


def is_behind(engine: EngineSource) -> bool:
    """Whether the database needs :func:`upgrade` (or comes from a newer version)."""
    return schema_status(engine)[2] is not None


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the schema lock until it commits."""
    with _local_lock, engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # pysqlite opens transactions lazily and never for DDL: take over (autocommit
            # at the driver, our own BEGIN IMMEDIATE) so the DDL is transactional and a
            # second process waits here (busy_timeout) instead of racing.
            driver: Any = connection.connection.driver_connection
            previous = driver.isolation_level
            driver.isolation_level = None
            try:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                try:
                    yield connection
                except BaseException:
                    connection.rollback()
                    raise
                connection.commit()
            finally:
                driver.isolation_level = previous
            return
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            yield connection


def _revision_module(revision: str) -> Any:
    script = _scripts().get_revision(revision)
    assert script is not None
    return script.module


def _baseline_module() -> Any:
    return _revision_module(BASELINE)


def _matches_models(connection: Connection, tables: set[str]) -> bool:
    """Every flask-authflow table that exists has exactly the current models' columns, and
    at least one of them differs from the baseline (else the baseline adoption applies)."""
    reflected = inspect(connection)
    expected: dict[str, set[str]] = _baseline_module().expected_columns()
    newer = False
    for table in metadata.sorted_tables:
        if table.name not in tables:
            continue
        found = {column["name"] for column in reflected.get_columns(table.name)}
        if found != {column.name for column in table.columns}:
            return False
        newer = newer or found != expected.get(table.name, found)
    return newer


def _adopt(connection: Connection) -> list[str]:
    """Stamp a pre-migration database with the baseline after completing its tables."""
    tables = _authflow_tables(connection)
    if not tables or VERSION_TABLE in tables:
        return []
    if _matches_models(connection, tables):
        # Created by this version's models (``SqlAlchemyBackend(create_tables=True)``):
        # complete the missing tables from the models, and it is at head. The models
        # cannot tell whether its rows predate revision 0009's data step (one address
        # whatever its case), so that step runs here too; it is idempotent.
        metadata.create_all(connection)
        _revision_module("0009").fold_addresses(connection)
        command.stamp(_config(connection), "head")
        return []
    baseline = _baseline_module()
    expected: dict[str, set[str]] = baseline.expected_columns()
    existing = {
        name: {column["name"] for column in inspect(connection).get_columns(name)}
        for name in tables
        if name in expected
    }
    with Operations.context(MigrationContext.configure(connection)):
        done: list[str] = baseline.adopt(existing)
    reflected = inspect(connection)
    for name, columns in expected.items():
        found = {column["name"] for column in reflected.get_columns(name)}
        if found != columns:
            url = connection.engine.url.render_as_string(hide_password=True)
            raise ConfigurationError(
                f"{url}: table {name} was not created by flask-authflow as this version knows it "
                f"(columns {sorted(found)}, expected {sorted(columns)}): fix or rename it, then run "
                f"`{UPGRADE_COMMAND}` again"
            )
    command.stamp(_config(connection), BASELINE)
    return done


def upgrade(engine: EngineSource, revision: str = "head") -> UpgradeResult:
    """Migrate the database to ``revision`` (default: the newest), in one transaction
    (PostgreSQL; on SQLite too), adopting a database created before migrations first."""
    with _engine(engine) as bound, _locked(bound) as connection:
        before = _current(connection)
        adopted = _adopt(connection)
        command.upgrade(_config(connection), revision)
        return UpgradeResult(before, _current(connection), adopted)


def downgrade(engine: EngineSource, revision: str) -> UpgradeResult:
    """Migrate the database back to ``revision``; ``"base"`` drops every flask-authflow
    table (and its rows)."""
    with _engine(engine) as bound, _locked(bound) as connection:
        before = _current(connection)
        command.downgrade(_config(connection), revision)
        after = _current(connection)
        if after is None:  # at base: nothing of flask-authflow stays, not even the empty version table
            connection.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
        return UpgradeResult(before, after)


def ensure_schema(engine: EngineSource, *, auto_upgrade: bool | None = None) -> UpgradeResult | None:
    """Make sure the database is at head before an app uses it.

    With ``auto_upgrade`` (by default: on SQLite, the embedded store of one machine) a
    database that is behind is upgraded; otherwise (PostgreSQL, shared by several
    machines: the operator migrates, deliberately) a
    :class:`~flask_authflow.errors.ConfigurationError` says which revision it is at and
    names ``flask authflow db upgrade``. A database migrated by a newer version is
    refused either way. Returns what an upgrade did, or ``None`` when at head.
    """
    with _engine(engine) as bound:
        now, _newest, problem = schema_status(bound)
        if problem is None:
            return None
        if auto_upgrade is None:
            auto_upgrade = bound.dialect.name == "sqlite"
        if auto_upgrade and (now is None or _known(now)):
            return upgrade(bound)
        raise ConfigurationError(problem)


# --- applications that run their own Alembic or Flask-Migrate ------------------------------------


def authflow_table_names() -> frozenset[str]:
    """Every table flask-authflow creates, its version table included."""
    return frozenset(metadata.tables) | {VERSION_TABLE}


def exclude_authflow_tables(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """An Alembic ``include_name`` hook that leaves flask-authflow's tables out.

    For an application's own ``env.py`` when flask-authflow keeps its tables with
    ``flask authflow db upgrade`` in the same database: autogenerate then neither drops
    them nor the ``authflow_alembic_version`` table. Pass it with
    :func:`exclude_authflow_objects` when the application's metadata holds the tables too
    (``SqlAlchemyBackend(db)`` adds them to ``db.metadata``)::

        context.configure(
            connection=connection,
            target_metadata=db.metadata,
            include_name=exclude_authflow_tables,
            include_object=exclude_authflow_objects,
        )
    """
    ours = authflow_table_names()
    if type_ == "table":
        return name not in ours
    return parent_names.get("table_name") not in ours


def exclude_authflow_objects(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """An Alembic ``include_object`` hook that leaves flask-authflow's tables out (those of
    the application's metadata and those of the database), with their columns, indexes and
    constraints."""
    ours = authflow_table_names()
    if type_ == "table":
        return name not in ours
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in ours
