"""The ``roles`` group: create, delete and list a tenant's roles, grant and revoke their
permissions. Giving a role to a user is ``users add-role`` / ``users remove-role``.

Unknown roles, taken names and invalid names end the command with a message and exit
status 1 (``{"error": "role_not_found", ...}`` under ``--json``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from flask_authflow._cli.base import CommandFailed, authflow_cli, emit, json_option, tenant_or_default
from flask_authflow._web import services
from flask_authflow.errors import RoleExists, RoleInUse, RoleNotFound

__all__ = ["about_role", "roles"]


@contextmanager
def about_role(role: str, tenant: str) -> Iterator[None]:
    """Report a missing, taken or held role with the name and tenant asked for."""
    try:
        yield
    except RoleNotFound:
        raise CommandFailed(f"no role {role!r} in tenant {tenant!r}", RoleNotFound.code) from None
    except RoleExists:
        raise CommandFailed(f"role {role!r} already exists in tenant {tenant!r}", RoleExists.code) from None
    except RoleInUse:
        message = f"role {role!r} is held by users in tenant {tenant!r}; --force takes it from them"
        raise CommandFailed(message, RoleInUse.code) from None


def _tenant_option(function: click.decorators.FC) -> click.decorators.FC:
    return click.option("--tenant", help="Tenant of the role (default: AUTHFLOW_DEFAULT_TENANT).")(function)


@authflow_cli.group("roles")
def roles() -> None:
    """Create, delete and list roles; grant and revoke their permissions."""


@roles.command("create")
@click.argument("name")
@click.option("--description", default="", help="What the role is for.")
@_tenant_option
@json_option
def roles_create(name: str, description: str, tenant: str | None, as_json: bool) -> None:
    """Create the role NAME."""
    tenant_name = tenant_or_default(tenant)
    with about_role(name, tenant_name):
        role = services.roles().create(name, tenant=tenant_name, description=description)
    emit(
        as_json,
        {"tenant": role.tenant, "name": role.name, "description": role.description},
        f"created role {role.name!r} in tenant {role.tenant!r}",
    )


@roles.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete it even while users hold it (they lose it).")
@_tenant_option
@json_option
def roles_delete(name: str, force: bool, tenant: str | None, as_json: bool) -> None:
    """Delete the role NAME and its permissions (refused while users hold it, unless --force)."""
    tenant_name = tenant_or_default(tenant)
    with about_role(name, tenant_name):
        services.roles().delete(name, tenant=tenant_name, force=force)
    emit(as_json, {"tenant": tenant_name, "name": name, "deleted": True}, f"deleted role {name!r}")


@roles.command("list")
@_tenant_option
@json_option
def roles_list(tenant: str | None, as_json: bool) -> None:
    """List the tenant's roles with their permissions."""
    tenant_name = tenant_or_default(tenant)
    found = services.roles().list(tenant=tenant_name)
    if as_json:
        documents = [
            {"name": r.name, "description": r.description, "permissions": list(r.permissions)} for r in found
        ]
        emit(True, documents, "")
        return
    for role in found:
        granted = ", ".join(role.permissions) or "-"
        about = f" ({role.description})" if role.description else ""
        click.echo(f"{role.name}{about}: {granted}")
    click.echo(f"{len(found)} role(s) in tenant {tenant_name!r}")


@roles.command("grant")
@click.argument("role")
@click.argument("permission")
@_tenant_option
@json_option
def roles_grant(role: str, permission: str, tenant: str | None, as_json: bool) -> None:
    """Let ROLE do PERMISSION."""
    tenant_name = tenant_or_default(tenant)
    with about_role(role, tenant_name):
        changed = services.roles().grant_permission(role, permission, tenant=tenant_name)
    text = f"role {role!r} {'now has' if changed else 'already had'} permission {permission!r}"
    emit(as_json, {"tenant": tenant_name, "role": role, "permission": permission, "changed": changed}, text)


@roles.command("revoke")
@click.argument("role")
@click.argument("permission")
@_tenant_option
@json_option
def roles_revoke(role: str, permission: str, tenant: str | None, as_json: bool) -> None:
    """Take PERMISSION from ROLE."""
    tenant_name = tenant_or_default(tenant)
    with about_role(role, tenant_name):
        changed = services.roles().revoke_permission(role, permission, tenant=tenant_name)
    text = f"role {role!r} {'no longer has' if changed else 'did not have'} permission {permission!r}"
    emit(as_json, {"tenant": tenant_name, "role": role, "permission": permission, "changed": changed}, text)
