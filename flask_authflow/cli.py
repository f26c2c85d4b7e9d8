"""The ``flask authflow`` command group.

Passwords are read from a hidden prompt or from standard input
(``--password-stdin``), never from the command line, where they would land in shell
history and ``ps`` output. Commands print no secret or key material.
"""

from __future__ import annotations

import sys

import click
from flask.cli import AppGroup

from .errors import AuthFlowError
from .extension import get_state

__all__ = ["authflow_cli"]

authflow_cli = AppGroup("authflow", help="Manage flask-authflow users, sessions and issuer keys.")


def _read_password(password_stdin: bool, *, confirm: bool) -> str:
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=confirm)
    if not password:
        raise click.UsageError("the password is empty")
    return password


def _tenant(tenant: str | None) -> str:
    return tenant or str(get_state().config["AUTHFLOW_DEFAULT_TENANT"])


def _fail(error: AuthFlowError) -> None:
    raise click.ClickException(error.message)


@authflow_cli.command("create-user")
@click.argument("username")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
def create_user(username: str, tenant: str | None, password_stdin: bool) -> None:
    """Create USERNAME with a password (prompted, or read from stdin)."""
    state = get_state()
    password = _read_password(password_stdin, confirm=True)
    try:
        user = state.backend.create_user(_tenant(tenant), username, password)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"created user {user.identifier!r} in tenant {user.tenant!r} (id {user.user_id})")


@authflow_cli.command("set-password")
@click.argument("username")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
def set_password(username: str, tenant: str | None, password_stdin: bool) -> None:
    """Set a new password for USERNAME; the user's sessions are revoked."""
    state = get_state()
    password = _read_password(password_stdin, confirm=True)
    tenant_name = _tenant(tenant)
    try:
        user = state.backend.set_password(tenant_name, username, password)
        revoked = state.session_store.delete_user_sessions(tenant_name, user.user_id)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"password of {user.identifier!r} changed; {revoked} session(s) revoked")


@authflow_cli.group("sessions")
def sessions() -> None:
    """List or revoke a user's sessions."""


def _find_user_id(username: str, tenant: str) -> str:
    user = get_state().backend.find_user(tenant, username)
    if user is None:
        raise click.ClickException(f"no user {username!r} in tenant {tenant!r}")
    return str(user.user_id)


@sessions.command("list")
@click.option("--user", "username", required=True, help="The user's name.")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
def sessions_list(username: str, tenant: str | None) -> None:
    """List the live sessions of a user (ids are shown hashed, never usable)."""
    import hashlib

    tenant_name = _tenant(tenant)
    state = get_state()
    try:
        records = state.session_store.list_user_sessions(tenant_name, _find_user_id(username, tenant_name))
    except AuthFlowError as error:
        _fail(error)
        return
    for record in records:
        digest = hashlib.sha256(record.sid.encode()).hexdigest()[:16]
        click.echo(
            f"{digest}  {record.state.value:<16} created {record.created_at.isoformat()}  "
            f"last seen {record.last_seen_at.isoformat()}"
        )
    click.echo(f"{len(records)} session(s)")


@sessions.command("revoke")
@click.option("--user", "username", required=True, help="The user's name.")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
def sessions_revoke(username: str, tenant: str | None) -> None:
    """Revoke every session of a user."""
    tenant_name = _tenant(tenant)
    state = get_state()
    try:
        count = state.session_store.delete_user_sessions(tenant_name, _find_user_id(username, tenant_name))
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"{count} session(s) revoked")
