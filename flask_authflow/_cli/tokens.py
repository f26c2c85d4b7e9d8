"""The ``tokens`` group: create, list and revoke a user's personal API tokens.

``tokens create`` prints the new token once, alone on standard output (so
``TOKEN=$(flask authflow tokens create alice --name ci)`` captures nothing else); what it
says about the token goes to standard error. Nothing else ever prints a token: it is
stored hashed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from flask_authflow._cli.base import (
    CommandFailed,
    authflow_cli,
    emit,
    find_user,
    iso_time,
    json_option,
    short_time,
    tenant_option,
    tenant_or_default,
)
from flask_authflow._core.ports import ApiTokenRecord
from flask_authflow._web import services

__all__ = ["tokens"]


@authflow_cli.group("tokens")
def tokens() -> None:
    """Personal API tokens (Authorization: Bearer): create, list, revoke."""


def token_document(record: ApiTokenRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "id": record.token_id,
        "scopes": list(record.scopes),
        "created_at": iso_time(record.created_at),
        "expires_at": iso_time(record.expires_at),
        "last_used_at": iso_time(record.last_used_at),
    }


def _token_line(record: ApiTokenRecord) -> str:
    expires = short_time(record.expires_at) if record.expires_at else "never"
    used = short_time(record.last_used_at) if record.last_used_at else "never"
    scopes = " ".join(record.scopes) or "-"
    return f"{record.name}  id {record.token_id}  scopes {scopes}  expires {expires}  last used {used}"


@tokens.command("create")
@click.argument("identifier")
@click.option("--name", required=True, help="A name for the token, unique for the user (revoke uses it).")
@click.option("--scope", "scopes", multiple=True, help="A scope the token carries (repeatable).")
@click.option(
    "--expires-in",
    "days",
    type=click.IntRange(min=1),
    help="Days until it expires (default: AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY).",
)
@tenant_option
@json_option
def tokens_create(
    identifier: str, name: str, scopes: tuple[str, ...], days: int | None, tenant: str | None, as_json: bool
) -> None:
    """Create a token for the user and print it, once, alone on standard output."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    if days is None:
        created = services.tokens().create(user.user_id, name, scopes, tenant=tenant_name)
    else:
        created = services.tokens().create(
            user.user_id, name, scopes, tenant=tenant_name, expires_in=timedelta(days=days)
        )
    if as_json:
        emit(True, {**token_document(created.record), "token": created.value}, "")
        return
    click.echo(created.value)
    click.echo(
        f"Created token {created.record.name!r} for {user.identifier!r}: it is shown once, store it now.",
        err=True,
    )


@tokens.command("list")
@click.argument("identifier")
@tenant_option
@json_option
def tokens_list(identifier: str, tenant: str | None, as_json: bool) -> None:
    """List the user's tokens: name, id, scopes, expiry, last use (never the token)."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    records = services.tokens().list(user.user_id, tenant=tenant_name)
    if as_json:
        emit(True, [token_document(record) for record in records], "")
        return
    for record in records:
        click.echo(_token_line(record))
    click.echo(f"{len(records)} token(s)")


@tokens.command("revoke")
@click.argument("identifier")
@click.argument("name")
@tenant_option
@json_option
def tokens_revoke(identifier: str, name: str, tenant: str | None, as_json: bool) -> None:
    """Revoke the user's token called NAME: no request is accepted with it afterwards."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    if not services.tokens().revoke(user.user_id, name, tenant=tenant_name):
        raise CommandFailed(f"{user.identifier!r} has no token {name!r}", "token_not_found")
    emit(as_json, {"revoked": name}, f"token {name!r} revoked")
