"""What every ``flask authflow`` command shares: the group that turns failures into one-line
errors (or JSON under ``--json``), the common options and the user look-ups."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any, TypeVar

import click
from flask import Flask, current_app, has_app_context
from flask.cli import AppGroup
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from flask_authflow._core.identifiers import check_tenant, normalise_identifier
from flask_authflow._core.ports import UserRecord
from flask_authflow._web.state import get_state
from flask_authflow.errors import AuthFlowError, StoreUnavailable, UserNotFound
from flask_authflow.login._operator_change import account_locked_until
from flask_authflow.login._recovery import Ended

F = TypeVar("F", bound=Callable[..., Any])

#: ``ctx.meta`` key: the running command was given ``--json``.
_JSON_KEY = "flask_authflow._cli.json"
#: ``ctx.meta`` key: the arguments of ``flask authflow`` (to spot ``--json`` when parsing fails).
_ARGS_KEY = "flask_authflow._cli.args"
#: Characters of a session hash shown in text mode (JSON shows all 64).
SHORT_HASH = 16
#: Shortest session-hash prefix ``sessions revoke --session`` accepts.
MIN_HASH_PREFIX = 8
#: ``app.extensions`` key: the schema error ``init_app`` left for the CLI to report (see ``db``).
SCHEMA_ERROR_KEY = "authflow.schema_behind"


def defer_schema_refusal(app: Flask, error: AuthFlowError) -> bool:
    """Keep ``error`` (a database schema that is behind) for the command the Flask CLI is
    loading ``app`` for, instead of refusing to load it: ``flask authflow db ...`` runs (it
    is how the schema is brought up to date), every other ``flask authflow`` command reports
    the error. Returns ``False`` (refuse now) when the app is not being loaded by the CLI."""
    from flask.cli import FlaskGroup

    ctx = click.get_current_context(silent=True)
    if ctx is None or not isinstance(ctx.command, FlaskGroup):
        return False
    app.extensions[SCHEMA_ERROR_KEY] = error
    return True


def store_refusal(app: Flask, error: Exception) -> click.ClickException | None:
    """While the Flask CLI loads ``app`` for a command: the one-line failure that reports
    ``error`` (``init_app`` could not open the database: a server that does not answer, a
    file that cannot be opened or is locked, a folder that does not exist), saying what
    failed and what to check. Raised from ``init_app``, click prints it (``Error: ...``, or
    JSON under ``--json``) and exits with status 1 instead of the import's traceback.
    ``None`` outside the CLI or for an error that is not a store's (raise it as it is)."""
    from flask.cli import FlaskGroup

    ctx = click.get_current_context(silent=True)
    failure = _as_failure(error)
    if ctx is None or not isinstance(ctx.command, FlaskGroup) or failure is None:
        return None
    refusal = CommandFailed(
        f"{failure.message} (check AUTHFLOW_DATABASE_URL, {_database_url(app)}: that the server "
        "is running and reachable, the credentials, and that the file and its folder can be "
        "opened and written by this user)",
        "store_unavailable",
    )
    # The command's options are not parsed yet while the app loads: the process's arguments
    # say whether --json was given (before any "--").
    argv = sys.argv[1:]
    refusal.as_json = "--json" in (argv[: argv.index("--")] if "--" in argv else argv)
    return refusal


def _database_url(app: Flask) -> str:
    """The configured database URL without its password (or where the default file goes)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    configured = app.config.get("AUTHFLOW_DATABASE_URL")
    if not configured:
        return "unset: authflow.db in the instance folder"
    try:
        return make_url(str(configured)).render_as_string(hide_password=True)
    except ArgumentError:
        return "not a database URL"


class CommandFailed(click.ClickException):
    """A command failed: ``Error: <message>`` on stderr, or under ``--json`` the JSON
    ``{"error": code, "message": message}`` on stdout; the exit status is ``exit_code``."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code
        self.as_json = False

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps({"error": self.code, "message": self.message}), file=file)
        else:
            super().show(file)


class _UsageFailed(CommandFailed):
    """A usage error under ``--json``: reported as JSON, exit status 2 as click gives."""

    exit_code = 2


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def _database_detail(exc: SQLAlchemyError) -> str:
    # The driver's own message: SQLAlchemy's text adds the statement and its parameters.
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return _first_line(str(exc.orig)) or type(exc.orig).__name__
    return _first_line(str(exc)) or type(exc).__name__


def _database_message(exc: SQLAlchemyError) -> str:
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeoutError):
        return f"the database is unreachable: {_database_detail(exc)}"
    return f"database error: {_database_detail(exc)}"


def _os_message(exc: OSError) -> str:
    reason = exc.strerror or _first_line(str(exc)) or type(exc).__name__
    return f"{reason}: {exc.filename}" if exc.filename is not None else reason


def authflow_message(error: AuthFlowError) -> str:
    # "the authentication database is unavailable" says what; the driver says why.
    cause = error.__cause__
    if not isinstance(error, StoreUnavailable):
        return error.message
    if isinstance(cause, SQLAlchemyError):
        return f"{error.message}: {_database_detail(cause)}"
    if isinstance(cause, OSError):
        return f"{error.message}: {_os_message(cause)}"
    return error.message


def _json_mode(ctx: click.Context) -> bool:
    if _JSON_KEY in ctx.meta:
        return bool(ctx.meta[_JSON_KEY])
    # Parsing failed before the --json flag was read: look at the arguments.
    args: list[str] = ctx.meta.get(_ARGS_KEY, [])
    before_separator = args[: args.index("--")] if "--" in args else args
    return "--json" in before_separator


def _as_failure(exc: Exception) -> CommandFailed | None:
    """The :class:`CommandFailed` that reports ``exc``, or ``None`` to let it through."""
    if isinstance(exc, CommandFailed):
        return exc
    if isinstance(exc, click.UsageError):
        return _UsageFailed(exc.format_message(), "usage_error")
    if isinstance(exc, click.ClickException):
        return CommandFailed(exc.format_message())
    if isinstance(exc, click.Abort):
        return CommandFailed("aborted", "aborted")
    if isinstance(exc, AuthFlowError):
        return CommandFailed(authflow_message(exc), exc.code)
    if isinstance(exc, SQLAlchemyError):
        return CommandFailed(_database_message(exc), "store_unavailable")
    if isinstance(exc, OSError):
        return CommandFailed(_os_message(exc), "os_error")
    return None


class AuthflowGroup(AppGroup):
    """The ``authflow`` group: errors of its commands (and of its sub-groups' commands)
    become a message and a non-zero exit, never a traceback.

    :class:`~flask_authflow.errors.AuthFlowError`, ``sqlalchemy.exc.SQLAlchemyError`` and
    ``OSError`` end the command with ``Error: <message>`` and exit status 1; under
    ``--json`` every error, usage errors included, is printed as JSON on stdout.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta.setdefault(_ARGS_KEY, list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:  # sorted below; anything else is re-raised as it is
            as_json = _json_mode(ctx)
            if not as_json and isinstance(exc, click.UsageError | click.Abort):
                raise  # click's own report (usage line, "Aborted!")
            failure = _as_failure(exc)
            if failure is None:
                raise
            failure.as_json = as_json
            if failure is exc:
                raise
            raise failure from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        # A database schema that is behind: init_app let the app load for ``db`` only.
        error = current_app.extensions.get(SCHEMA_ERROR_KEY) if has_app_context() else None
        if error is not None and name != "db":
            raise error
        return name, command, rest


authflow_cli = AuthflowGroup(
    "authflow",
    help="Manage flask-authflow users, their factors, sessions and issuer keys (--json on every command).",
)


def _remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.meta[_JSON_KEY] = value
    return value


def json_option(function: F) -> F:
    """``--json``: read first (eager), so even a later usage error is reported as JSON."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        is_eager=True,
        callback=_remember_json,
        help="Print one JSON document on standard output (errors too).",
    )(function)


def tenant_option(function: F) -> F:
    return click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")(function)


def emit(as_json: bool, document: Any, text: str) -> None:
    click.echo(json.dumps(document, indent=2) if as_json else text)


def ended_text(ended: Ended) -> str:
    """What a password change or "log out everywhere" ended, in words: sessions, API
    tokens, pending mailed links by kind, the lock."""
    parts = [f"{ended.sessions} session(s) revoked", f"{ended.api_tokens} API token(s) revoked"]
    if ended.account_tokens:
        kinds = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in ended.account_tokens.items())
        parts.append(f"pending mailed links voided: {kinds}")
    if ended.lock_cleared:
        parts.append("lock cleared")
    return "; ".join(parts)


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def short_time(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def read_password(password_stdin: bool, *, confirm: bool) -> str:
    if password_stdin:
        try:
            password = sys.stdin.readline().rstrip("\r\n")
        except UnicodeDecodeError:
            raise click.UsageError("the password on standard input is not valid UTF-8") from None
    else:
        # On stderr: under --json, stdout carries the JSON document only.
        password = click.prompt("Password", hide_input=True, confirmation_prompt=confirm, err=True)
    if not password:
        raise click.UsageError("the password is empty")
    return password


def tenant_or_default(tenant: str | None) -> str:
    return check_tenant(tenant if tenant is not None else get_state().config.default_tenant)


@contextmanager
def about_user(username: str, tenant: str) -> Iterator[None]:
    """Report :class:`UserNotFound` with the name and tenant asked for."""
    try:
        yield
    except UserNotFound:
        raise CommandFailed(f"no user {username!r} in tenant {tenant!r}", UserNotFound.code) from None


def find_user(username: str, tenant: str) -> UserRecord:
    user = get_state().backend.find_user(tenant, normalise_identifier(username))
    if user is None:
        raise CommandFailed(f"no user {username!r} in tenant {tenant!r}", UserNotFound.code)
    return user


def user_locked_until(user: UserRecord, now: datetime) -> datetime | None:
    return account_locked_until(get_state().backend.locked_until, user, now)


def user_document(user: UserRecord, locked_until: datetime | None = None) -> dict[str, Any]:
    return {
        "id": user.user_id,
        "identifier": user.identifier,
        "tenant": user.tenant,
        "disabled": user.disabled,
        "email": user.email,
        "email_verified": user.email_verified_at is not None,
        "created_at": iso_time(user.created_at),
        "locked": locked_until is not None,
        "locked_until": iso_time(locked_until),
    }
