"""The ``flask authflow`` command group.

Passwords are read from a hidden prompt or from standard input
(``--password-stdin``), never from the command line, where they would land in shell
history and ``ps`` output. Commands print no secret or key material, and session ids
only hashed; the two exceptions are what an operator asks for and must hand to the user,
printed once: the ``otpauth://`` URI of ``enroll-totp`` (it holds the new key) and the codes
of ``recovery-codes regenerate``.

Every command takes ``--json``: its result is then one JSON document on standard
output, and so is an error (``{"error": code, "message": ...}``). Without ``--json`` an
error is ``Error: <message>`` on standard error. Either way a failed command exits with
status 1 (2 for a usage error) and never prints a traceback: :class:`AuthflowGroup`
turns library errors, database errors and operating-system errors into that message.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import IO, Any, TypeVar

import click
from flask import Flask, current_app, has_app_context
from flask.cli import AppGroup
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from .audit.spool import SpoolAuditSink
from .authn.identifiers import check_tenant, normalise_identifier
from .authn.outcomes import FactorKind
from .authn.stores import FactorConfig, UserRecord
from .errors import AuthFlowError, StoreUnavailable, UserNotFound
from .session.model import SessionRecord, describe_device, sid_hash
from .state import account_admin, get_state

__all__ = ["AuthflowGroup", "CommandFailed", "authflow_cli"]

F = TypeVar("F", bound=Callable[..., Any])

#: ``ctx.meta`` key: the running command was given ``--json``.
_JSON_KEY = "flask_authflow.cli.json"
#: ``ctx.meta`` key: the arguments of ``flask authflow`` (to spot ``--json`` when parsing fails).
_ARGS_KEY = "flask_authflow.cli.args"
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


def _authflow_message(error: AuthFlowError) -> str:
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
        return CommandFailed(_authflow_message(exc), exc.code)
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


# --- shared options and helpers ------------------------------------------------------------------


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


def _emit(as_json: bool, document: Any, text: str) -> None:
    click.echo(json.dumps(document, indent=2) if as_json else text)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _short_time(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def _read_password(password_stdin: bool, *, confirm: bool) -> str:
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


def _tenant(tenant: str | None) -> str:
    return check_tenant(tenant if tenant is not None else get_state().config.default_tenant)


@contextmanager
def _about(username: str, tenant: str) -> Iterator[None]:
    """Report :class:`UserNotFound` with the name and tenant asked for."""
    try:
        yield
    except UserNotFound:
        raise CommandFailed(f"no user {username!r} in tenant {tenant!r}", UserNotFound.code) from None


def _find_user(username: str, tenant: str) -> UserRecord:
    user = get_state().backend.find_user(tenant, normalise_identifier(username))
    if user is None:
        raise CommandFailed(f"no user {username!r} in tenant {tenant!r}", UserNotFound.code)
    return user


def _lock_subjects(user: UserRecord) -> tuple[str, str]:
    # Logins count failures per normalised identifier; a step-up without one in the
    # login flow counts them per "user:<id>" (see AuthnService.verify_factor).
    return user.identifier, f"user:{user.user_id}"


def _locked_until(user: UserRecord, now: datetime) -> datetime | None:
    backend = get_state().backend
    ends = [end for s in _lock_subjects(user) if (end := backend.locked_until(user.tenant, s, now))]
    return max(ends) if ends else None


def _user_document(user: UserRecord, locked_until: datetime | None = None) -> dict[str, Any]:
    return {
        "id": user.user_id,
        "identifier": user.identifier,
        "tenant": user.tenant,
        "disabled": user.disabled,
        "created_at": _time(user.created_at),
        "locked": locked_until is not None,
        "locked_until": _time(locked_until),
    }


# --- create-user, set-password ---------------------------------------------------------------------


@authflow_cli.command("create-user")
@click.argument("username")
@tenant_option
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@json_option
def create_user(username: str, tenant: str | None, password_stdin: bool, as_json: bool) -> None:
    """Create USERNAME with a password (prompted, or read from stdin)."""
    tenant_name = _tenant(tenant)
    password = _read_password(password_stdin, confirm=True)
    user = account_admin().create_user(tenant_name, username, password)
    _emit(
        as_json,
        _user_document(user),
        f"created user {user.identifier!r} in tenant {user.tenant!r} (id {user.user_id})",
    )


@authflow_cli.command("set-password")
@click.argument("username")
@tenant_option
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@json_option
def set_password(username: str, tenant: str | None, password_stdin: bool, as_json: bool) -> None:
    """Set a new password for USERNAME; the user's sessions are revoked."""
    tenant_name = _tenant(tenant)
    password = _read_password(password_stdin, confirm=True)
    with _about(username, tenant_name):
        revoked = account_admin().set_password(tenant_name, username, password)
    identifier = normalise_identifier(username)
    _emit(
        as_json,
        {
            "identifier": identifier,
            "tenant": tenant_name,
            "password_changed": True,
            "sessions_revoked": revoked,
        },
        f"password of {identifier!r} changed; {revoked} session(s) revoked",
    )


# --- sessions --------------------------------------------------------------------------------------


@authflow_cli.group("sessions")
def sessions() -> None:
    """List or revoke a user's sessions (ids are shown hashed, never usable)."""


def _session_document(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_hash": sid_hash(record.sid),
        "state": record.state.value,
        "device": describe_device(record.device),
        "user_agent": record.device,
        "created_at": _time(record.created_at),
        "last_seen_at": _time(record.last_seen_at),
        "authenticated_at": _time(record.authenticated_at),
        "auth_method": record.auth_method,
    }


def _session_line(record: SessionRecord) -> str:
    return (
        f"{sid_hash(record.sid)[:SHORT_HASH]}  {record.state.value:<16}  "
        f"last seen {_short_time(record.last_seen_at)}  created {_short_time(record.created_at)}  "
        f"{describe_device(record.device)}"
    )


@sessions.command("list")
@click.option("--user", "username", required=True, help="The user's name.")
@tenant_option
@json_option
def sessions_list(username: str, tenant: str | None, as_json: bool) -> None:
    """List the live sessions of a user: hashed id, state, last seen, created, device.

    Text mode shows the first 16 hex characters of the SHA-256 of each session id;
    ``--json`` prints an array with the full hash, the device label and the raw User-Agent.
    """
    tenant_name = _tenant(tenant)
    user = _find_user(username, tenant_name)
    records = sorted(
        get_state().session_store.list_user_sessions(tenant_name, user.user_id),
        key=lambda record: record.last_seen_at,
        reverse=True,
    )
    if as_json:
        _emit(True, [_session_document(record) for record in records], "")
        return
    for record in records:
        click.echo(_session_line(record))
    click.echo(f"{len(records)} session(s)")


def _resolve_session_hash(tenant: str, user_id: str, prefix: str) -> str:
    wanted = prefix.strip().lower()
    if len(wanted) < MIN_HASH_PREFIX or any(ch not in "0123456789abcdef" for ch in wanted):
        raise click.BadParameter(
            f"give the hash sessions list prints (at least {MIN_HASH_PREFIX} hex characters)",
            param_hint="--session",
        )
    hashes = {sid_hash(r.sid) for r in get_state().session_store.list_user_sessions(tenant, user_id)}
    matches = [h for h in hashes if h.startswith(wanted)]
    if not matches:
        raise CommandFailed(f"the user has no session {prefix!r}", "session_not_found")
    if len(matches) > 1:
        raise CommandFailed(f"{prefix!r} matches {len(matches)} sessions: give more of the hash", "ambiguous")
    return matches[0]


@sessions.command("revoke")
@click.option("--user", "username", help="The user's name.")
@click.option("--all-users", is_flag=True, help="Every session of every user of the tenant.")
@tenant_option
@click.option(
    "--session",
    "session_hash",
    metavar="HASH",
    help="Revoke only this session: its hash as sessions list shows it (or any unique prefix).",
)
@click.option("--issuer", help="With --sid: every session of this provider login session.")
@click.option("--sid", "provider_sid", help="The provider's session id (sid) to end, with --issuer.")
@json_option
def sessions_revoke(
    username: str | None,
    all_users: bool,
    tenant: str | None,
    session_hash: str | None,
    issuer: str | None,
    provider_sid: str | None,
    as_json: bool,
) -> None:
    """Revoke every session of a user (or one with --session HASH), of a tenant
    (--all-users), or of a provider login session (--issuer and --sid)."""
    federated = issuer is not None or provider_sid is not None
    if [username is not None, all_users, federated].count(True) != 1:
        raise click.UsageError("give one of --user U, --all-users, or --issuer with --sid")
    if session_hash is not None and username is None:
        raise click.UsageError("--session goes with --user")
    store = get_state().session_store
    if federated:
        if issuer is None or provider_sid is None:
            raise click.UsageError("--issuer and --sid go together")
        if tenant is not None:
            raise click.UsageError("--tenant does not apply to --issuer/--sid (the provider session decides)")
        count = store.delete_federated_sessions(issuer, provider_sid)
        _emit(
            as_json,
            {"issuer": issuer, "sid": provider_sid, "sessions_revoked": count},
            f"{count} session(s) of provider session {provider_sid!r} at {issuer} revoked",
        )
        return
    tenant_name = _tenant(tenant)
    if all_users:
        count = store.delete_tenant_sessions(tenant_name)
        _emit(
            as_json,
            {"tenant": tenant_name, "sessions_revoked": count},
            f"{count} session(s) of tenant {tenant_name!r} revoked",
        )
        return
    assert username is not None
    user = _find_user(username, tenant_name)
    admin = account_admin()
    document: dict[str, Any] = {"identifier": user.identifier, "tenant": tenant_name}
    if session_hash is None:
        count = admin.revoke_sessions(tenant_name, user.user_id)
        _emit(as_json, {**document, "sessions_revoked": count}, f"{count} session(s) revoked")
        return
    full = _resolve_session_hash(tenant_name, user.user_id, session_hash)
    if not admin.revoke_session(tenant_name, user.user_id, full):
        # It ended (or its id rotated) between the lookup and the revocation.
        raise CommandFailed(f"the user has no session {session_hash!r}", "session_not_found")
    _emit(
        as_json,
        {**document, "session_hash": full, "sessions_revoked": 1},
        f"session {full[:SHORT_HASH]} revoked",
    )


@sessions.command("purge")
@click.option("--tenant", help="Only the expired sessions of this tenant (default: every session).")
@json_option
def sessions_purge(tenant: str | None, as_json: bool) -> None:
    """Delete expired sessions from the store now (they are never loaded; this frees the rows).

    Without --tenant every expired session goes, guests' included: expired rows hold no
    session of anyone. The SQL store also purges in small batches while it saves
    sessions; run this from cron to keep the table small between busy periods.
    """
    store = get_state().session_store
    purge = getattr(store, "purge_expired", None)
    if purge is None:
        raise CommandFailed(
            f"{type(store).__name__} has no purge: it drops expired sessions by itself", "not_supported"
        )
    if tenant is None:
        purged = int(purge())
        _emit(as_json, {"purged": purged}, f"{purged} expired session(s) purged")
        return
    tenant_name = check_tenant(tenant)
    if "tenant" not in inspect.signature(purge).parameters:
        raise CommandFailed(f"{type(store).__name__} cannot purge one tenant's sessions", "not_supported")
    purged = int(purge(tenant=tenant_name))
    _emit(
        as_json,
        {"tenant": tenant_name, "purged": purged},
        f"{purged} expired session(s) of tenant {tenant_name!r} purged",
    )


# --- issuer keys and tokens ------------------------------------------------------------------------


def _issuer() -> Any:
    issuer = get_state().issuer
    if issuer is None:
        raise CommandFailed(
            "the local issuer is off: set AUTHFLOW_ISSUER (and AUTHFLOW_ISSUER_KEY_STORE)", "issuer_off"
        )
    from .issuer import MemoryLocalIdpKeyStore

    if isinstance(issuer.key_store, MemoryLocalIdpKeyStore):
        # Each CLI run would get its own throwaway key: no server would ever see it.
        raise CommandFailed(
            "AUTHFLOW_ISSUER_KEY_STORE='memory' keeps keys in this process only: this command "
            "would use a throwaway key that no server ever sees. Use 'sql' (the default) or "
            "'file:<directory>'",
            "configuration_error",
        )
    return issuer


@authflow_cli.command("rotate-key")
@click.option(
    "--algorithm",
    type=click.Choice(["ES256", "RS256"]),
    help="Algorithm of the new key (default: AUTHFLOW_ISSUER_ALGORITHM).",
)
@click.option("--kid", help="Key id for the new key (default: its RFC 7638 thumbprint).")
@click.option(
    "--stage", "step", flag_value="stage", help="Publish a new key in the JWKS without signing with it."
)
@click.option(
    "--activate",
    "step",
    flag_value="activate",
    help="Sign with the staged key (published for >= the max-age).",
)
@click.option(
    "--prune", "step", flag_value="prune", help="Unpublish retired keys whose tokens have all expired."
)
@click.option(
    "--force", is_flag=True, help="Skip the wait: activate early, or rotate at once without staging."
)
@json_option
def rotate_key(algorithm: str | None, kid: str | None, step: str | None, force: bool, as_json: bool) -> None:
    """Rotate the issuer's signing key.

    The safe procedure relying parties can follow: ``--stage`` publishes the next key;
    after AUTHFLOW_ISSUER_JWKS_MAX_AGE, ``--activate`` (or plain ``rotate-key``) signs
    with it; later ``--prune`` removes retired keys whose longest token has expired.
    Plain ``rotate-key`` with nothing staged is refused unless ``--force`` (a new key
    that signs at once: relying parties with a cached JWKS must refetch).
    """
    from .issuer import LocalIdpSigningKey

    issuer = _issuer()
    document: dict[str, Any]
    if step == "prune":
        pruned = issuer.prune_retired_keys()
        text = f"pruned {len(pruned)} retired key(s){': ' + ', '.join(pruned) if pruned else ''}"
        document = {"action": "pruned", "pruned": pruned}
    elif step == "activate" or (step is None and issuer.rotation_state().staged_kid is not None):
        new_kid = issuer.activate_staged_key(force=force)
        text = f"new current key {new_kid}; the JWKS has {len(issuer.jwks()['keys'])} key(s)"
        document = {"action": "activated", "kid": new_kid, "algorithm": issuer.algorithm}
    else:
        # Relying parties pin the algorithm they were told about: keep it unless asked.
        key = LocalIdpSigningKey.generate(algorithm or get_state().config.issuer.algorithm)
        if kid is not None:
            key = key.with_key_id(kid)
        if step == "stage":
            issuer.stage_signing_key(key)
            wait = issuer.jwks_max_age
            text = f"staged key {key.kid} ({key.algorithm}); activate it with rotate-key after {wait}"
            document = {
                "action": "staged",
                "kid": key.kid,
                "algorithm": key.algorithm,
                "activate_after_seconds": int(wait.total_seconds()),
            }
        elif not force:
            raise CommandFailed(
                "nothing is staged: run rotate-key --stage, wait AUTHFLOW_ISSUER_JWKS_MAX_AGE, then "
                "rotate-key (or --force to sign with a new key at once)",
                "nothing_staged",
            )
        else:
            issuer.rotate_signing_key(key)
            size = len(issuer.jwks()["keys"])
            text = f"new current key {key.kid} ({key.algorithm}); the JWKS now has {size} key(s)"
            document = {"action": "rotated", "kid": key.kid, "algorithm": key.algorithm}
    _emit(as_json, {**document, "jwks_keys": len(issuer.jwks()["keys"])}, text)


def _parse_claim(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not k=v", param_hint="--claim")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


@authflow_cli.command("mint")
@click.option("--sub", "subject", required=True, help="Subject of the token.")
@click.option("--aud", "audiences", required=True, multiple=True, help="Audience (repeat for several).")
@click.option(
    "--ttl", type=click.IntRange(min=1), default=300, show_default=True, help="Lifetime in seconds."
)
@click.option("--claim", "claims", multiple=True, help="Extra claim k=v (v parsed as JSON when it is JSON).")
@json_option
def mint(subject: str, audiences: tuple[str, ...], ttl: int, claims: tuple[str, ...], as_json: bool) -> None:
    """Mint a token with the current key and print it."""
    from .issuer import MintClaims

    issuer = _issuer()
    exp = issuer.clock.now() + timedelta(seconds=ttl)
    request = MintClaims(subject, exp).with_audiences(audiences)
    for item in claims:
        name, value = _parse_claim(item)
        request = request.with_custom_claim(name, value)
    minted = issuer.mint_with_details(request)
    _emit(
        as_json,
        {
            "token": minted.token,
            "kid": minted.key_id,
            "algorithm": minted.algorithm,
            "claims": dict(minted.claims),
        },
        minted.token,
    )


# --- users -----------------------------------------------------------------------------------------


@authflow_cli.group("users")
def users() -> None:
    """List, disable, enable, unlock or delete users (disabling and deleting end their sessions)."""


@users.command("list")
@click.option("--tenant", help="Only this tenant (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option("--all-tenants", is_flag=True, help="Every tenant (not with --tenant).")
@json_option
def users_list(tenant: str | None, all_tenants: bool, as_json: bool) -> None:
    """List users: identifier, id, tenant, whether disabled and whether locked out now."""
    if all_tenants and tenant is not None:
        raise click.UsageError("give --tenant or --all-tenants, not both")
    state = get_state()
    tenant_name = None if all_tenants else _tenant(tenant)
    now = state.clock.now()
    rows = [(user, _locked_until(user, now)) for user in state.backend.list_users(tenant_name)]
    if as_json:
        _emit(True, [_user_document(user, until) for user, until in rows], "")
        return
    table = [("IDENTIFIER", "ID", "TENANT", "DISABLED", "LOCKED")] + [
        (
            user.identifier,
            user.user_id,
            user.tenant,
            "yes" if user.disabled else "no",
            f"until {_short_time(until)}" if until is not None else "no",
        )
        for user, until in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    where = "all tenants" if tenant_name is None else f"tenant {tenant_name!r}"
    click.echo(f"{len(rows)} user(s) in {where}")


@users.command("disable")
@click.argument("username")
@tenant_option
@json_option
def users_disable(username: str, tenant: str | None, as_json: bool) -> None:
    """Disable USERNAME: logins fail and every session of the user ends now."""
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        revoked = account_admin().disable(tenant_name, username)
    identifier = normalise_identifier(username)
    _emit(
        as_json,
        {"identifier": identifier, "tenant": tenant_name, "disabled": True, "sessions_revoked": revoked},
        f"user {identifier!r} disabled; {revoked} session(s) revoked",
    )


@users.command("enable")
@click.argument("username")
@tenant_option
@json_option
def users_enable(username: str, tenant: str | None, as_json: bool) -> None:
    """Allow USERNAME to log in again (a lockout stays: see users unlock)."""
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        account_admin().enable(tenant_name, username)
    identifier = normalise_identifier(username)
    _emit(
        as_json,
        {"identifier": identifier, "tenant": tenant_name, "disabled": False},
        f"user {identifier!r} enabled",
    )


@users.command("unlock")
@click.argument("username")
@tenant_option
@json_option
def users_unlock(username: str, tenant: str | None, as_json: bool) -> None:
    """End USERNAME's lockout and forget its counted failures (the full number of tries again)."""
    state = get_state()
    tenant_name = _tenant(tenant)
    user = _find_user(username, tenant_name)
    until = _locked_until(user, state.clock.now())
    for subject in _lock_subjects(user):
        state.backend.clear_lock(user.tenant, subject)
    if until is not None:
        text = f"user {user.identifier!r} unlocked (the lock ran until {_short_time(until)})"
    else:
        text = f"user {user.identifier!r} was not locked; its failure count is reset"
    _emit(
        as_json,
        {
            "identifier": user.identifier,
            "tenant": user.tenant,
            "was_locked": until is not None,
            "locked_until": _time(until),
        },
        text,
    )


@users.command("delete")
@click.argument("username")
@tenant_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def users_delete(username: str, tenant: str | None, yes: bool, as_json: bool) -> None:
    """Delete USERNAME with its factors; its sessions end now (audit rows stay)."""
    tenant_name = _tenant(tenant)
    if not yes:
        click.confirm(f"delete user {username!r} and end their sessions?", abort=True, err=True)
    with _about(username, tenant_name):
        revoked = account_admin().delete(tenant_name, username)
    identifier = normalise_identifier(username)
    _emit(
        as_json,
        {"identifier": identifier, "tenant": tenant_name, "deleted": True, "sessions_revoked": revoked},
        f"user {identifier!r} deleted; {revoked} session(s) revoked",
    )


# --- second factors --------------------------------------------------------------------------------


def _user_summary(username: str, tenant: str) -> tuple[str, dict[str, Any]]:
    identifier = normalise_identifier(username)
    return identifier, {"identifier": identifier, "tenant": tenant}


@authflow_cli.command("enroll-totp")
@click.argument("username")
@tenant_option
@json_option
def enroll_totp(username: str, tenant: str | None, as_json: bool) -> None:
    """Provision a TOTP key for USERNAME and print its otpauth:// URI.

    The key counts at once (an operator cannot prove possession, so no code is asked)
    and replaces the user's earlier TOTP key; the user's sessions are revoked. The URI
    holds the key: hand it to the user over a channel you trust (a QR code of it, shown
    in person). Standard output is the URI alone; the notice goes to standard error.
    """
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        uri = account_admin().enroll_totp(tenant_name, username)
    if as_json:
        _emit(True, {"otpauth_uri": uri}, "")
        return
    click.echo(uri)
    identifier = normalise_identifier(username)
    click.echo(
        f"TOTP enrolled for {identifier!r} in tenant {tenant_name!r} (any earlier TOTP key no longer "
        "works); the user's sessions are revoked. The URI holds the key: give it to the user only, "
        "it is not shown again",
        err=True,
    )


@authflow_cli.group("factors")
def factors() -> None:
    """List or disable a user's factors (secrets are never shown)."""


def _factor_label(config: FactorConfig) -> str:
    label = config.data.get("label")
    if isinstance(label, str) and label:
        return label
    return "Password" if config.kind is FactorKind.PASSWORD else config.kind.value


def _factor_document(config: FactorConfig) -> dict[str, Any]:
    # Never config.secret (a sealed key, a hash or code digests) nor config.data beyond the label.
    return {
        "id": config.factor_id,
        "kind": config.kind.value,
        "label": _factor_label(config),
        "created_at": _time(config.created_at),
        "last_used_at": _time(config.last_used_at),
        "confirmed": config.confirmed,
    }


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@factors.command("list")
@click.argument("username")
@tenant_option
@json_option
def factors_list(username: str, tenant: str | None, as_json: bool) -> None:
    """List USERNAME's factors: id, kind, label, created, last used, confirmed (or pending)."""
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        configs = account_admin().list_factors(tenant_name, username, include_pending=True)
    if as_json:
        _emit(True, [_factor_document(config) for config in configs], "")
        return
    _table(
        [("ID", "KIND", "LABEL", "CREATED", "LAST USED", "CONFIRMED")]
        + [
            (
                config.factor_id,
                config.kind.value,
                _factor_label(config),
                _short_time(config.created_at),
                _short_time(config.last_used_at) if config.last_used_at is not None else "never",
                "yes" if config.confirmed else "pending",
            )
            for config in configs
        ]
    )
    click.echo(f"{len(configs)} factor(s) of {normalise_identifier(username)!r} in tenant {tenant_name!r}")


# Factor ids are token_urlsafe text: one in 64 starts with "-". Unknown options are taken
# as arguments, so such an id needs no "--" before it (this command has no short options).
@factors.command("disable", context_settings={"ignore_unknown_options": True})
@click.argument("username")
@click.argument("factor_id")
@tenant_option
@json_option
def factors_disable(username: str, factor_id: str, tenant: str | None, as_json: bool) -> None:
    """Remove USERNAME's factor FACTOR_ID (as factors list shows it); the user's sessions are
    revoked. The password cannot be removed (set-password replaces it)."""
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        admin = account_admin()
        configs = admin.list_factors(tenant_name, username, include_pending=True)
        config = next((c for c in configs if c.factor_id == factor_id), None)
        if config is not None and config.kind is FactorKind.PASSWORD:
            raise CommandFailed(
                "the password is not disabled as a factor: set another one with set-password",
                "password_factor",
            )
        # ``False`` also when the factor went away between the listing and the deletion.
        if config is None or not admin.disable_factor(tenant_name, username, factor_id):
            raise CommandFailed(
                f"the user has no factor {factor_id!r} (see factors list)", "factor_not_found"
            )
    identifier, document = _user_summary(username, tenant_name)
    _emit(
        as_json,
        {**document, "factor_id": factor_id, "kind": config.kind.value, "disabled": True},
        f"{config.kind.value} factor {factor_id} of {identifier!r} disabled; the user's sessions are revoked",
    )


@authflow_cli.group("recovery-codes")
def recovery_codes() -> None:
    """Issue recovery codes to a user."""


@recovery_codes.command("regenerate")
@click.argument("username")
@tenant_option
@json_option
def recovery_codes_regenerate(username: str, tenant: str | None, as_json: bool) -> None:
    """Issue a new set of 10 recovery codes for USERNAME and print them, once.

    The previous set stops working now and the user's sessions are revoked. Only digests
    are stored: the codes cannot be shown again. Standard output is the codes, one a
    line; the warning goes to standard error.
    """
    tenant_name = _tenant(tenant)
    with _about(username, tenant_name):
        codes = account_admin().regenerate_recovery_codes(tenant_name, username)
    identifier, document = _user_summary(username, tenant_name)
    warning = "the previous recovery codes no longer work"
    if as_json:
        _emit(True, {**document, "codes": codes, "warning": warning}, "")
        return
    click.echo(
        f"New recovery codes for {identifier!r} in tenant {tenant_name!r}: {warning}; the user's "
        "sessions are revoked. Give these to the user now, they are not shown again:",
        err=True,
    )
    for code in codes:
        click.echo(code)


# --- audit -----------------------------------------------------------------------------------------


@authflow_cli.group("audit")
def audit() -> None:
    """Audit trail maintenance."""


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class AgeType(click.ParamType[timedelta, Any]):
    """An age such as ``90d``, ``12w``, ``36h``, ``30m`` or ``3600s``."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        number, unit = text[:-1], text[-1:]
        if unit not in _AGE_UNITS or not number.isdigit() or int(number) == 0:
            self.fail(f"{value!r} is not an age such as 90d, 12w, 36h, 30m or 3600s", param, ctx)
        return timedelta(seconds=int(number) * _AGE_UNITS[unit])


def _age_text(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, name in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % unit == 0:
            return f"{seconds // unit} {name}(s)"
    return f"{seconds} second(s)"


@audit.command("purge")
@click.option(
    "--older-than",
    "older_than",
    type=AgeType(),
    help="Delete rows older than this (90d, 12w ...); at least AUTHFLOW_AUDIT_RETENTION, the default.",
)
@json_option
def audit_purge(older_than: timedelta | None, as_json: bool) -> None:
    """Delete audit rows older than AUTHFLOW_AUDIT_RETENTION (or a longer --older-than).

    Rows younger than the retention are never deleted: a shorter --older-than is refused.
    """
    state = get_state()
    retention = state.config.audit.retention
    if retention is None:
        raise CommandFailed(
            "AUTHFLOW_AUDIT_RETENTION is None: audit rows are kept forever; set a retention to purge",
            "retention",
        )
    age = older_than if older_than is not None else retention
    if age < retention:
        raise CommandFailed(
            f"--older-than {_age_text(age)} is shorter than AUTHFLOW_AUDIT_RETENTION "
            f"({_age_text(retention)}): rows younger than the retention are never deleted",
            "retention",
        )
    purge = getattr(state.backend, "purge_audit", None)
    if purge is None:
        raise CommandFailed(f"{type(state.backend).__name__} cannot purge audit rows", "not_supported")
    before = state.clock.now() - age
    deleted = int(purge(before))
    _emit(
        as_json,
        {"deleted": deleted, "before": _time(before), "older_than_seconds": int(age.total_seconds())},
        f"{deleted} audit row(s) older than {_age_text(age)} deleted (written before {_short_time(before)})",
    )


@audit.command("replay-spool")
@json_option
def audit_replay_spool(as_json: bool) -> None:
    """Move audit rows spooled while the audit store was down into the store."""
    state = get_state()
    spool = state.service.audit_fallback
    if not isinstance(spool, SpoolAuditSink):
        raise CommandFailed("this app has no audit spool file", "no_spool")
    try:
        moved = spool.replay(state.backend)
    except AuthFlowError as error:
        left = len(spool.records())
        raise CommandFailed(
            f"{_authflow_message(error)}; {left} row(s) remain in {spool.path}", error.code
        ) from None
    _emit(
        as_json,
        {"moved": moved, "remaining": len(spool.records()), "spool": str(spool.path)},
        f"{moved} audit row(s) moved from {spool.path}",
    )


# --- db --------------------------------------------------------------------------------------------


@authflow_cli.group("db")
def db() -> None:
    """Migrate flask-authflow's tables (Alembic revisions shipped in the package).

    The revision is kept in the table authflow_alembic_version, apart from an
    application's own alembic_version.
    """


def _schema_engine() -> Any:
    """The engine of the app's flask-authflow tables (those of the backend, else of the sessions)."""
    from sqlalchemy import Engine

    state = get_state()
    for store in (state.backend, state.session_store):
        engine = getattr(store, "engine", None)
        if isinstance(engine, Engine):
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
    from .stores.sqlalchemy import migrations

    result = migrations.upgrade(_schema_engine(), revision)
    current_app.extensions.pop(SCHEMA_ERROR_KEY, None)
    before, after = _revision_name(result.before), _revision_name(result.after)
    lines = [f"adopted a database created before migrations: {step}" for step in result.adopted]
    lines.append(
        f"already at revision {after}"
        if result.before == result.after and not result.adopted
        else f"upgraded from {before} to {after}"
    )
    _emit(
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
    from .stores.sqlalchemy import migrations

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
    _emit(
        as_json,
        {"from": result.before, "to": result.after, "head": migrations.head()},
        f"already at revision {after}"
        if result.before == result.after
        else f"downgraded from {before} to {after}",
    )


def _status_document() -> tuple[dict[str, Any], str | None]:
    from .stores.sqlalchemy import migrations

    now, newest, problem = migrations.schema_status(_schema_engine())
    return {"current": now, "head": newest, "behind": problem is not None}, problem


@db.command("current")
@json_option
def db_current(as_json: bool) -> None:
    """Show the database's revision and the newest one this version ships."""
    document, problem = _status_document()
    now, newest = _revision_name(document["current"]), document["head"]
    text = f"revision {now} (head)" if problem is None else f"revision {now}; head is {newest}"
    _emit(as_json, document, text)


@db.command("check")
@json_option
def db_check(as_json: bool) -> None:
    """Exit with status 1 when the database is not at head (for deploy scripts and probes)."""
    document, problem = _status_document()
    if problem is not None:
        raise CommandFailed(problem, "schema_behind")
    _emit(as_json, document, f"the database is at head (revision {document['head']})")
