"""The schema under Alembic: the shipped revisions give exactly the models' tables on
SQLite and PostgreSQL, ``flask authflow db ...`` drives them, the SQLite default upgrades
itself while PostgreSQL refuses a schema that is behind, databases created before
migrations are adopted, and applications with their own Alembic can include or exclude
flask-authflow's tables."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata, produce_migrations, render_python_code
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from flask import Flask
from flask.cli import FlaskGroup
from flask.testing import FlaskCliRunner

import flask_authflow
from flask_authflow import AuthFlow, get_state
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql import migrations
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import add_tables_to, metadata
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.parts import child_processes

# The schema of the app's SQL database is the point: never the plugin's in-memory stores.
pytestmark = pytest.mark.authflow_stores("sql")

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct horse battery staple"
HASHER = PasswordHasher.fast_for_tests()
AUTHFLOW_TABLES = set(metadata.tables)  # the schema module defines every table


@pytest.fixture
def engines() -> Iterator[Callable[[str], sa.Engine]]:
    """Engines on a URL, disposed of after the test."""
    made: list[sa.Engine] = []

    def make(url: str) -> sa.Engine:
        engine = sa.create_engine(url)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.dispose()


@pytest.fixture
def apps(app_factory: AppFactory) -> Callable[..., Flask]:
    """``make(url, tmp_path, **config)``: an ``app_factory`` app on the default store (``url``
    ``None``: SQLite in the instance folder) with one signing key for every app of the test."""

    def make(url: str | None, tmp: Path, **config: Any) -> Flask:
        if url is not None:
            config["AUTHFLOW_DATABASE_URL"] = url
        return app_factory(instance_path=tmp / "instance", AUTHFLOW_SIGNING_KEY="m" * 40, **config)

    return make


def differences(engine: sa.Engine, target: sa.MetaData | list[sa.MetaData], **hooks: Any) -> list[Any]:
    """What Alembic's autogenerate would change to make the database match ``target``."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, **hooks})
        return list(compare_metadata(context, target))  # type: ignore[arg-type]


def schema_differences(engine: sa.Engine, target: sa.MetaData = metadata) -> list[Any]:
    """What autogenerate would change, as our own migrations see it (their version table is theirs)."""
    return differences(engine, target, version_table=migrations.VERSION_TABLE)


def table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def check_partial_indexes(engine: sa.Engine) -> None:
    def insert(statement: str, **values: Any) -> None:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), values)

    now = "2026-01-01 00:00:00"
    insert(
        "INSERT INTO authflow_users (user_id, tenant, identifier, created_at, disabled) "
        "VALUES ('u', 't', 'i', :now, false)",
        now=now,
    )
    factor = (
        "INSERT INTO authflow_factors (factor_id, user_id, kind, secret, created_at) "
        "VALUES (:factor_id, 'u', :kind, 's', :now)"
    )
    for number, kind in enumerate(("webauthn", "webauthn", "password")):
        insert(factor, factor_id=f"f{number}", kind=kind, now=now)
    with pytest.raises(sa.exc.IntegrityError):
        insert(factor, factor_id="f3", kind="password", now=now)
    key = "INSERT INTO authflow_issuer_keys VALUES (:kid, 'pem', 'ES256', :current, :now)"
    for kid, current in (("a", False), ("b", False), ("c", True)):
        insert(key, kid=kid, current=current, now=now)
    with pytest.raises(sa.exc.IntegrityError):
        insert(key, kid="d", current=True, now=now)
    with engine.begin() as conn:
        for table in ("authflow_factors", "authflow_users", "authflow_issuer_keys"):
            conn.execute(sa.text(f"DELETE FROM {table}"))


# -- the revisions give exactly the models' schema ----------------------------------------------------


def test_upgrading_an_empty_database_gives_exactly_the_models_schema(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    engine = engines(database_url)
    assert migrations.current(engine) is None
    assert migrations.is_behind(engine)
    result = migrations.upgrade(engine)
    assert (result.before, result.after, result.adopted) == (None, migrations.head(), [])
    assert migrations.current(engine) == migrations.head()
    assert not migrations.is_behind(engine)
    assert schema_differences(engine) == []
    # Our own version table, never the application's alembic_version.
    assert table_names(engine) == AUTHFLOW_TABLES | {"authflow_alembic_version"}

    # The comparison is not vacuous: a model the revisions do not have is a difference.
    changed = sa.MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["authflow_users"].append_column(sa.Column("nickname", sa.String(40)))
    found = schema_differences(engine, changed)
    assert [(d[0], d[2], d[3].name) for d in found] == [("add_column", "authflow_users", "nickname")]

    # Partial unique indexes (autogenerate does not compare their WHERE): one password per
    # user but several keys of another kind, one current issuer key but several retired ones.
    check_partial_indexes(engine)

    # Upgrading again does nothing; the stores work on the migrated schema.
    assert migrations.upgrade(engine).before == migrations.head()
    store = SqlAlchemyBackend(engine, create_tables=False)
    add_user(store, "default", "alice", PASSWORD, hasher=HASHER)
    assert store.find_user("default", "alice") is not None


def test_downgrade_to_base_leaves_no_authflow_table(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    engine = engines(database_url)
    app_metadata().create_all(engine)  # an application's own table stays
    migrations.upgrade(engine)
    result = migrations.downgrade(engine, "base")
    assert (result.before, result.after) == (migrations.head(), None)
    assert table_names(engine) == {"notes"}
    assert migrations.current(engine) is None
    # And back up again.
    migrations.upgrade(engine)
    assert differences(engine, [metadata, app_metadata()], version_table=migrations.VERSION_TABLE) == []


def _upgrade_when_all_are_ready(url: str, ready: Any, outcomes: Any) -> None:
    migrations.head()  # the revisions loaded before the race
    engine = sa.create_engine(url)
    try:
        ready.wait(60)
        result = migrations.upgrade(engine)
        outcomes.put(("upgraded", result.before, result.after))
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        outcomes.put(("failed", repr(exc), None))
    finally:
        engine.dispose()


@pytest.mark.multiprocess
def test_processes_upgrading_at_once_take_turns(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    """Several processes (workers starting together) upgrading one new database: the
    schema lock makes one do the work and the others find it done."""
    context = child_processes()
    ready = context.Barrier(3)
    outcomes = context.Queue()
    processes = [
        context.Process(target=_upgrade_when_all_are_ready, args=(database_url, ready, outcomes))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    results = [outcomes.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    head = migrations.head()
    # One did the work; the others waited for its lock and found the schema at head.
    assert sorted(results, key=repr) == sorted(
        [("upgraded", None, head), ("upgraded", head, head), ("upgraded", head, head)], key=repr
    )
    assert schema_differences(engines(database_url)) == []


# -- the app at start-up ------------------------------------------------------------------------------


@pytest.mark.authflow_stores("app")  # the default database, in the instance folder
def test_the_sqlite_default_upgrades_itself(tmp_path: Path, apps: Callable[..., Flask]) -> None:
    app = apps(None, tmp_path)  # no AUTHFLOW_DATABASE_URL: SQLite in the instance folder
    engine = get_state(app).backend.engine
    assert engine.url.database == str(tmp_path / "instance" / "authflow.db")
    assert migrations.current(engine) == migrations.head()
    assert schema_differences(engine) == []
    add_user(get_state(app).backend, "default", "alice", PASSWORD)
    # A second start finds it at head and keeps the data.
    again = apps(None, tmp_path)
    assert get_state(again).backend.find_user("default", "alice") is not None


@pytest.mark.postgres
def test_the_app_refuses_a_postgresql_database_behind_head(
    postgres_server: Any, tmp_path: Path, apps: Callable[..., Flask]
) -> None:
    url = postgres_server.new_database()
    with pytest.raises(ConfigurationError) as refused:
        apps(url, tmp_path)
    message = str(refused.value)
    assert "the database schema of postgresql+psycopg://authflow@127.0.0.1" in message
    assert f"is behind (no flask-authflow tables yet, head {migrations.head()})" in message
    assert message.endswith("run `flask authflow db upgrade`")
    assert migrations.current(url) is None  # nothing was created behind the operator's back

    migrations.upgrade(url)
    app = apps(url, tmp_path)
    assert add_user(get_state(app).backend, "default", "alice", PASSWORD).identifier == "alice"


def test_a_database_migrated_by_a_newer_version_is_refused(
    database_url: str, tmp_path: Path, engines: Callable[[str], sa.Engine], apps: Callable[..., Flask]
) -> None:
    engine = engines(database_url)
    migrations.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE authflow_alembic_version SET version_num = '9999'"))
    with pytest.raises(ConfigurationError, match="at revision 9999, which this version of flask-authflow"):
        apps(database_url, tmp_path)
    with pytest.raises(ConfigurationError, match="migrated by a newer version"):
        migrations.ensure_schema(engine, auto_upgrade=True)


# -- flask authflow db ... ----------------------------------------------------------------------------


def run(runner: FlaskCliRunner, *args: str) -> tuple[int, str]:
    result = runner.invoke(args=["authflow", *args])
    return result.exit_code, result.output


def test_db_commands_on_a_database_behind_head(
    tmp_path: Path, engines: Callable[[str], sa.Engine], app_factory: AppFactory
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    # A backend of the application's own: its schema is left to the operator.
    backend = SqlAlchemyBackend(url, create_tables=False)
    app = app_factory(backend=backend, session_store=MemorySessionStore())
    runner = app.test_cli_runner()
    head = migrations.head()
    try:
        code, output = run(runner, "db", "check")
        assert code == 1
        assert output == (
            f"Error: the database schema of {url} is behind (no flask-authflow tables yet, head {head}): "
            "run `flask authflow db upgrade`\n"
        )
        code, output = run(runner, "db", "check", "--json")
        assert code == 1
        assert json.loads(output)["error"] == "schema_behind"
        assert run(runner, "db", "current") == (0, f"revision none; head is {head}\n")
        code, output = run(runner, "db", "current", "--json")
        assert json.loads(output) == {"current": None, "head": head, "behind": True}

        assert run(runner, "db", "upgrade") == (0, f"upgraded from none to {head}\n")
        assert run(runner, "db", "upgrade") == (0, f"already at revision {head}\n")
        assert run(runner, "db", "check") == (0, f"the database is at head (revision {head})\n")
        assert run(runner, "db", "current") == (0, f"revision {head} (head)\n")
        assert schema_differences(engines(url)) == []

        code, output = run(runner, "db", "downgrade", "base")  # asks first; no answer: nothing happens
        assert code == 1 and f"downgrade {url} to base?" in output  # asked, then click's abort
        assert migrations.current(url) == head
        code, output = run(runner, "db", "downgrade", "base", "--yes", "--json")
        assert code == 0
        assert json.loads(output) == {"from": head, "to": None, "head": head}
        assert table_names(engines(url)) & AUTHFLOW_TABLES == set()
        code, output = run(runner, "db", "upgrade", "--json")
        assert json.loads(output) == {"from": None, "to": head, "head": head, "adopted": []}
    finally:
        backend.close()


def test_db_commands_need_a_sql_store(app_factory: AppFactory) -> None:
    app = app_factory(backend=InMemoryBackend(), session_store=MemorySessionStore())
    code, output = run(app.test_cli_runner(), "db", "current")
    assert code == 1
    assert output.startswith("Error: this app keeps no flask-authflow tables in a SQL database")


def test_db_commands_migrate_the_session_stores_database(tmp_path: Path, app_factory: AppFactory) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(secrets.token_bytes(32)), create_tables=False)
    app = app_factory(backend=InMemoryBackend(), session_store=store)
    head = migrations.head()
    try:
        assert run(app.test_cli_runner(), "db", "upgrade") == (0, f"upgraded from none to {head}\n")
        assert migrations.current(store.engine) == head
    finally:
        store.engine.dispose()


@pytest.mark.postgres
def test_the_flask_cli_runs_db_upgrade_on_a_database_it_refuses_otherwise(postgres_server: Any) -> None:
    """``flask authflow db ...`` loads an app whose schema is behind; every other command
    (and serving it) is refused with the message."""
    url = postgres_server.new_database()
    made: list[Flask] = []

    def create_app() -> Flask:
        app = Flask(__name__)
        app.config.update(
            TESTING=True,
            AUTHFLOW_SIGNING_KEY="m" * 40,
            AUTHFLOW_DATABASE_URL=url,
            AUTHFLOW_ISSUER="https://issuer.example",
        )
        AuthFlow(app, hasher=HASHER)
        made.append(app)
        return app

    cli = FlaskGroup(create_app=create_app)
    runner = CliRunner()

    def flask(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        return result.exit_code, result.output

    try:
        behind = f"is behind (no flask-authflow tables yet, head {migrations.head()})"
        code, output = flask("authflow", "users", "list")
        assert code == 1 and behind in output and "run `flask authflow db upgrade`" in output
        code, output = flask("authflow", "mint", "--sub", "svc", "--aud", "api", "--json")
        assert code == 1 and json.loads(output)["error"] == "configuration_error"
        code, output = flask("authflow", "db", "check")
        assert code == 1 and behind in output
        assert migrations.current(url) is None  # the issuer created no table either

        assert flask("authflow", "db", "upgrade") == (0, f"upgraded from none to {migrations.head()}\n")
        assert flask("authflow", "db", "check")[0] == 0
        assert flask("authflow", "users", "list")[1].endswith("0 user(s) in tenant 'default'\n")
    finally:
        for app in made:
            get_state(app).backend.close()


# -- databases created before migrations --------------------------------------------------------------


def create_pre_migration_schema(engine: sa.Engine) -> None:
    """The tables of the first releases (``create_all``, before migrations): no attempt
    reservations, identity links, logout jtis or key schedule; sessions without
    ``federation_key``. With one user and one session row."""
    old = sa.MetaData(naming_convention=metadata.naming_convention)
    for name in ("authflow_attempts", "authflow_lockouts"):
        metadata.tables[name].to_metadata(old)
    sa.Table(  # as the baseline has it (revision 0004 added the e-mail columns)
        "authflow_users",
        old,
        sa.Column("user_id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("identifier", sa.String(254), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False, default=False),
        sa.UniqueConstraint("tenant", "identifier", name="uq_authflow_users_tenant_identifier"),
    )
    factors = sa.Table(  # as the baseline has it (revision 0002 added the factor record columns)
        "authflow_factors",
        old,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(32),
            sa.ForeignKey("authflow_users.user_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    only_passwords = factors.c.kind == "password"
    sa.Index(
        "uq_authflow_factors_password",
        factors.c.user_id,
        factors.c.kind,
        unique=True,
        sqlite_where=only_passwords,
        postgresql_where=only_passwords,
    )
    sa.Index("ix_authflow_factors_user", factors.c.user_id)
    metadata.tables["authflow_audit"].to_metadata(old)
    metadata.tables["authflow_issuer_keys"].to_metadata(old)
    sa.Table(
        "authflow_sessions",
        old,
        sa.Column("sid_hash", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(255), nullable=True),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Index("ix_authflow_sessions_tenant_user_id", "tenant", "user_id"),
    )
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE authflow_audit DROP COLUMN device_id"))  # revision 0007 added it
        conn.execute(sa.text("DROP INDEX ix_authflow_audit_tenant_seq"))  # revision 0010 added it ...
        for column in ("seq", "mac", "key_id"):  # ... and the chain's columns
            conn.execute(sa.text(f"ALTER TABLE authflow_audit DROP COLUMN {column}"))
        conn.execute(sa.text("ALTER TABLE authflow_lockouts DROP COLUMN last_success_at"))  # revision 0011
        conn.execute(
            sa.text(
                "INSERT INTO authflow_users (user_id, tenant, identifier, created_at, disabled) "
                "VALUES ('u1', 'default', 'alice', '2026-01-01 00:00:00', false)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO authflow_sessions (sid_hash, state, expires_at, updated_at, data) "
                "VALUES ('h1', 'guest', '2099-01-01 00:00:00', '2026-01-01 00:00:00', :data)"
            ),
            {"data": b"sealed"},
        )


ADOPTED = [
    "added authflow_sessions.federation_key",
    "created authflow_attempt_reservations",
    "created authflow_identity_links",
    "created authflow_logout_jtis",
    "created authflow_issuer_key_schedule",
]


def test_a_pre_migration_database_is_adopted(database_url: str, engines: Callable[[str], sa.Engine]) -> None:
    engine = engines(database_url)
    create_pre_migration_schema(engine)
    assert migrations.current(engine) is None
    status = migrations.schema_status(engine)
    assert status[2] is not None and "(tables created before migrations, no revision, head" in status[2]

    result = migrations.upgrade(engine)
    assert (result.before, result.after) == (None, migrations.head())
    assert result.adopted == ADOPTED
    assert schema_differences(engine) == []
    with engine.connect() as conn:  # the rows are still there
        assert conn.execute(sa.text("SELECT identifier FROM authflow_users")).scalar_one() == "alice"
        assert conn.execute(sa.text("SELECT federation_key FROM authflow_sessions")).one() == (None,)


def test_a_database_made_by_this_versions_models_is_stamped_at_head(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    """``SqlAlchemyBackend(url)`` creates the tables from the models without a version
    table; a later ``db upgrade`` recognises them as head instead of refusing them."""
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = SqlAlchemyBackend(database_url)
    backend.create_user("acme", "alice")
    backend.close()
    engine = engines(database_url)
    assert migrations.current(engine) is None
    result = migrations.upgrade(engine)
    assert (result.before, result.after, result.adopted) == (None, migrations.head(), [])
    assert schema_differences(engine) == []
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT identifier FROM authflow_users")).scalar_one() == "alice"


def test_the_sqlite_default_adopts_a_pre_migration_database(
    tmp_path: Path, engines: Callable[[str], sa.Engine], apps: Callable[..., Flask]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    create_pre_migration_schema(engines(url))
    app = apps(url, tmp_path)
    assert get_state(app).backend.find_user("default", "alice") is not None
    assert migrations.current(url) == migrations.head()
    assert schema_differences(engines(url)) == []


def test_a_pre_migration_table_of_another_shape_is_refused(
    tmp_path: Path, engines: Callable[[str], sa.Engine]
) -> None:
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    engine = engines(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE authflow_users (user_id VARCHAR(32) PRIMARY KEY, name TEXT)"))
    with pytest.raises(ConfigurationError) as refused:
        migrations.upgrade(engine)
    assert "table authflow_users was not created by flask-authflow as this version knows it" in str(
        refused.value
    )
    # Nothing of the attempt stayed: the upgrade is one transaction.
    assert table_names(engine) == {"authflow_users"}


# -- applications with their own Alembic / Flask-Migrate ---------------------------------------------


def app_metadata() -> sa.MetaData:
    notes = sa.MetaData()
    sa.Table("notes", notes, sa.Column("id", sa.Integer, primary_key=True), sa.Column("text", sa.Text))
    return notes


def autogenerate_and_apply(engine: sa.Engine, target: sa.MetaData) -> str:
    """What ``flask db migrate`` then ``flask db upgrade`` do: render the autogenerated
    revision as Python and run it."""
    with engine.begin() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "target_metadata": target})
        script = produce_migrations(context, target)
        rendered = render_python_code(script.upgrade_ops)  # type: ignore[arg-type]
        code = textwrap.dedent("\n".join(line for line in rendered.splitlines() if not line.startswith("#")))
        with Operations.context(context):
            from alembic import op

            exec(code, {"op": op, "sa": sa, "flask_authflow": flask_authflow})
    return code


def test_an_application_can_include_our_tables_in_its_own_migrations(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    engine = engines(database_url)
    target = app_metadata()
    add_tables_to(target)  # what SqlAlchemyBackend(db) does with db.metadata
    code = autogenerate_and_apply(engine, target)
    assert "op.create_table('authflow_sessions'" in code
    assert differences(engine, target) == []
    # The application's revisions made exactly our schema.
    assert differences(engine, [metadata, app_metadata()]) == []
    assert "authflow_alembic_version" not in table_names(engine)


def test_an_application_can_leave_our_tables_to_our_migrations(
    database_url: str, engines: Callable[[str], sa.Engine]
) -> None:
    engine = engines(database_url)
    migrations.upgrade(engine)  # flask authflow db upgrade
    notes = app_metadata()
    notes.create_all(engine)  # the application's own revisions
    hooks = {
        "include_name": migrations.exclude_authflow_tables,
        "include_object": migrations.exclude_authflow_objects,
    }
    assert differences(engine, notes, **hooks) == []
    # Without the hooks its autogenerate would drop our tables and our version table.
    dropped = {d[1].name for d in differences(engine, notes) if d[0] == "remove_table"}
    assert dropped == AUTHFLOW_TABLES | {"authflow_alembic_version"}

    # Our tables in the application's metadata too (SqlAlchemyBackend(db)), managed by ours:
    both = app_metadata()
    add_tables_to(both)
    assert differences(engine, both, **hooks) == []
    with_changed_users = app_metadata()
    add_tables_to(with_changed_users)
    with_changed_users.tables["authflow_users"].append_column(sa.Column("nickname", sa.String(40)))
    assert differences(engine, with_changed_users, **hooks) == []
    assert differences(engine, with_changed_users, include_name=migrations.exclude_authflow_tables) != []


# -- the reference app on PostgreSQL ------------------------------------------------------------------


@pytest.mark.postgres
def test_reference_app_on_postgresql_after_db_upgrade(
    postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's "Running on PostgreSQL": one variable, ``flask authflow db upgrade``, and a
    session that survives a restart of the app."""
    from examples.reference.app import create_app

    url = postgres_server.new_database()
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_DATABASE_URL": url,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        # a signing key of its own takes the app out of development: its mailed links need an origin
        "FLASK_AUTHFLOW_EXTERNAL_URL": "https://app.example.com",
        "PYTHONPATH": str(ROOT),
    }
    for name, value in env.items():
        if name.startswith("FLASK_AUTHFLOW_"):
            monkeypatch.setenv(name, value)
    config = {
        "TESTING": True,
        "AUTHFLOW_ARGON2_TIME_COST": 1,
        "AUTHFLOW_ARGON2_MEMORY_COST": 8,
        "AUTHFLOW_ARGON2_PARALLELISM": 1,
    }
    instance = str(tmp_path / "instance")
    with pytest.raises(ConfigurationError, match=r"run `flask authflow db upgrade`"):
        create_app(config, instance_path=instance)

    flask = [sys.executable, "-m", "flask", "--app", "examples/reference/app.py", "authflow"]
    upgraded = subprocess.run(
        [*flask, "db", "upgrade"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout == f"upgraded from none to {migrations.head()}\n"

    first = create_app(config, instance_path=instance)
    second: Flask | None = None
    try:
        with first.app_context():
            add_user(get_state().backend, "default", "alice", PASSWORD)
        client = first.test_client()
        login = client.post("/login", json={"username": "alice", "password": PASSWORD})
        assert login.text == "authenticated\n"
        assert client.get("/dashboard").status_code == 200
        cookie = client.get_cookie("authflow_session")
        assert cookie is not None

        second = create_app(config, instance_path=instance)  # the restart: a new app, same database
        restarted = second.test_client()
        restarted.set_cookie("authflow_session", cookie.value)
        page = restarted.get("/dashboard")
        assert page.status_code == 200
        assert page.text.startswith("dashboard of user ")
    finally:
        for app in (first, second):
            if app is not None:
                get_state(app).backend.close()
