"""The ``db`` group: migrate flask-authflow's tables."""

from __future__ import annotations

from typing import Any

import click
from flask import current_app

from flask_authflow._cli.base import SCHEMA_ERROR_KEY, CommandFailed, authflow_cli, emit, json_option
from flask_authflow._web.state import get_state


@authflow_cli.group("db")
def db() -> None:
    """Migrate flask-authflow's tables (Alembic revisions shipped in the package).

    The revision is kept in the table authflow_alembic_version, apart from an
    application's own alembic_version.
    """


def _schema_engine() -> Any:
    """The engine of the app's flask-authflow tables (those of the backend, else of the sessions)."""
    state = get_state()
    for engine in (state.backend.database_engine(), state.session_store.database_engine()):
        if engine is not None:
            return engine
    raise CommandFailed(
        "this app keeps no flask-authflow tables in a SQL database (its stores are not SQLAlchemy "
        "ones): there is nothing to migrate",
        "no_database",
    )


def _revision_name(revision: str | None) -> str:
    return revision if revision is not None else "none"


@db.command("upgrade")
@click.argument("revision", default="head")
@json_option
def db_upgrade(revision: str, as_json: bool) -> None:
    """Migrate the database to REVISION (default: head, the newest).

    A database created before migrations existed is adopted first: missing tables are
    created and it is stamped with the baseline revision.
    """
    from flask_authflow.storage._sql import migrations

    result = migrations.upgrade(_schema_engine(), revision)
    current_app.extensions.pop(SCHEMA_ERROR_KEY, None)
    before, after = _revision_name(result.before), _revision_name(result.after)
    lines = [f"adopted a database created before migrations: {step}" for step in result.adopted]
    lines.append(
        f"already at revision {after}"
        if result.before == result.after and not result.adopted
        else f"upgraded from {before} to {after}"
    )
    emit(
        as_json,
        {"from": result.before, "to": result.after, "head": migrations.head(), "adopted": result.adopted},
        "\n".join(lines),
    )


@db.command("downgrade")
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def db_downgrade(revision: str, yes: bool, as_json: bool) -> None:
    """Migrate the database back to REVISION ("base" drops every flask-authflow table and its rows)."""
    from flask_authflow.storage._sql import migrations

    engine = _schema_engine()
    if not yes:
        click.confirm(
            f"downgrade {engine.url.render_as_string(hide_password=True)} to {revision}? "
            "Tables and columns of later revisions are dropped with their rows",
            abort=True,
            err=True,
        )
    result = migrations.downgrade(engine, revision)
    before, after = _revision_name(result.before), _revision_name(result.after)
    emit(
        as_json,
        {"from": result.before, "to": result.after, "head": migrations.head()},
        f"already at revision {after}"
        if result.before == result.after
        else f"downgraded from {before} to {after}",
    )


def _status_document() -> tuple[dict[str, Any], str | None]:
    from flask_authflow.storage._sql import migrations

    now, newest, problem = migrations.schema_status(_schema_engine())
    return {"current": now, "head": newest, "behind": problem is not None}, problem


@db.command("current")
@json_option
def db_current(as_json: bool) -> None:
    """Show the database's revision and the newest one this version ships."""
    document, problem = _status_document()
    now, newest = _revision_name(document["current"]), document["head"]
    text = f"revision {now} (head)" if problem is None else f"revision {now}; head is {newest}"
    emit(as_json, document, text)


@db.command("check")
@json_option
def db_check(as_json: bool) -> None:
    """Exit with status 1 when the database is not at head (for deploy scripts and probes)."""
    document, problem = _status_document()
    if problem is not None:
        raise CommandFailed(problem, "schema_behind")
    emit(as_json, document, f"the database is at head (revision {document['head']})")
