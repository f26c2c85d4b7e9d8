"""The database sources ``users import --from-url`` knows, and how it opens the database.

The URL may leave the password out: it is then read from
``AUTHFLOW_IMPORT_DATABASE_PASSWORD`` or asked for (``--password-prompt``), so it never has
to be on the command line (where the process list and the shell history keep it).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import URL, create_engine, inspect, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from flask_authflow._cli.base import CommandFailed
from flask_authflow._cli.importing.allauth import AllauthReader
from flask_authflow._cli.importing.fst import FstReader
from flask_authflow._cli.importing.model import SourceData, SourceReader

__all__ = ["PASSWORD_VARIABLE", "database_url", "read_database", "readers"]

#: The environment variable holding the source database's password.
PASSWORD_VARIABLE = "AUTHFLOW_IMPORT_DATABASE_PASSWORD"  # noqa: S105 - a variable name


def readers(table: str, *, django_groups_as_roles: bool = False) -> tuple[SourceReader, ...]:
    """The sources tried, in order (``table``: Flask-Security-Too's users table;
    ``django_groups_as_roles``: a Django project's groups become roles)."""
    return (FstReader(table), AllauthReader(groups_as_roles=django_groups_as_roles))


def database_url(url: str, password: str | None) -> URL:
    """``url`` with ``password`` set (``None``: as given).

    :raises CommandFailed: not a database URL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as error:
        raise CommandFailed(f"not a database URL: {error}", "invalid_input") from None
    return parsed if password is None else parsed.set(password=password)


def read_database(
    url: URL, table: str, config: Mapping[str, object], *, django_groups_as_roles: bool = False
) -> tuple[str, SourceData]:
    """``(source name, what it read)`` from the first source that recognises the database.

    :raises CommandFailed: no known source's schema, or the database cannot be read."""
    try:
        engine = create_engine(url)
    except (ArgumentError, ValueError) as error:
        raise CommandFailed(f"not a database URL: {error}", "invalid_input") from None
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            for reader in readers(table, django_groups_as_roles=django_groups_as_roles):
                if reader.recognises(conn, tables):
                    return reader.name, reader.read(conn, config)
    except SQLAlchemyError as error:
        raise CommandFailed(
            f"the database could not be read: {error.__class__.__name__}", "store_unavailable"
        ) from None
    finally:
        engine.dispose()
    raise CommandFailed(
        f"the database is of no known source (a Flask-Security-Too {table!r} table with email, password "
        "and fs_uniquifier columns, or a django-allauth project's auth_user and account_emailaddress)",
        "invalid_input",
    )
