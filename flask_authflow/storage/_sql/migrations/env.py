"""Alembic's environment for flask-authflow's revisions: run on the connection the
caller hands over (``config.attributes["connection"]``), inside the caller's transaction.

Only :mod:`flask_authflow.storage._sql.migrations` runs it (through
``alembic.command``); it is no place for an application's settings.
"""

from __future__ import annotations

from alembic import context

from flask_authflow.storage._sql.migrations import VERSION_TABLE


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "flask-authflow's migrations run through flask_authflow.storage._sql.migrations "
            "(or `flask authflow db upgrade`), on a connection it hands over"
        )
    context.configure(connection=connection, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


# Alembic runs this file with its context established; imported as a module, it does nothing.
if getattr(context, "config", None) is not None:
    run_migrations()
