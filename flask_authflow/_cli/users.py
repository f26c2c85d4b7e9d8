"""``create-user``, ``set-password`` and the ``users`` group."""

from __future__ import annotations

import click

from flask_authflow._cli.base import (
    CommandFailed,
    about_user,
    authflow_cli,
    emit,
    ended_text,
    find_user,
    iso_time,
    json_option,
    read_password,
    short_time,
    tenant_option,
    tenant_or_default,
    user_document,
    user_locked_until,
)
from flask_authflow._cli.roles import about_role
from flask_authflow._core.identifiers import normalise_identifier
from flask_authflow._web import services
from flask_authflow._web.security_notices import notify_now
from flask_authflow._web.state import get_state


@authflow_cli.command("create-user")
@click.argument("username")
@tenant_option
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option("--email", default=None, help="The user's e-mail address (stored as verified).")
@json_option
def create_user(
    username: str, tenant: str | None, password_stdin: bool, email: str | None, as_json: bool
) -> None:
    """Create USERNAME with a password (prompted, or read from stdin), and the application's
    row through its ``user_created`` hook."""
    tenant_name = tenant_or_default(tenant)
    password = read_password(password_stdin, confirm=True)
    verified_at = get_state().clock.now() if email is not None else None
    user = services.accounts().create(
        username, password, tenant=tenant_name, email=email, email_verified_at=verified_at, source="cli"
    )
    emit(
        as_json,
        user_document(user),
        f"created user {user.identifier!r} in tenant {user.tenant!r} (id {user.user_id})",
    )


@authflow_cli.command("set-password")
@click.argument("username")
@tenant_option
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@json_option
def set_password(username: str, tenant: str | None, password_stdin: bool, as_json: bool) -> None:
    """Set a new password for USERNAME; the user's sessions, API tokens, pending mailed
    links (reset, change of e-mail, verification) and lock end with the old one."""
    tenant_name = tenant_or_default(tenant)
    password = read_password(password_stdin, confirm=True)
    with about_user(username, tenant_name):
        ended = services.accounts().set_password(username, password, tenant=tenant_name)
    identifier = normalise_identifier(username)
    notify_now(
        "password_changed",
        tenant_name,
        find_user(username, tenant_name).user_id,
        reset=False,
        sessions=ended.sessions,
        api_tokens=ended.api_tokens,
        email_change=ended.email_change,
    )
    emit(
        as_json,
        {
            "identifier": identifier,
            "tenant": tenant_name,
            "password_changed": True,
            "sessions_revoked": ended.sessions,
            **ended.to_dict(),
        },
        f"password of {identifier!r} changed; {ended_text(ended)}",
    )


@authflow_cli.group("users")
def users() -> None:
    """List, disable, enable, unlock or delete users (disabling and deleting end their sessions);
    give or take their roles; import users of another application."""


@users.command("list")
@click.option("--tenant", help="Only this tenant (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option("--all-tenants", is_flag=True, help="Every tenant (not with --tenant).")
@json_option
def users_list(tenant: str | None, all_tenants: bool, as_json: bool) -> None:
    """List users: identifier, id, tenant, whether disabled and whether locked out now."""
    if all_tenants and tenant is not None:
        raise click.UsageError("give --tenant or --all-tenants, not both")
    state = get_state()
    tenant_name = None if all_tenants else tenant_or_default(tenant)
    now = state.clock.now()
    rows = [(user, user_locked_until(user, now)) for user in state.backend.list_users(tenant_name)]
    if as_json:
        emit(True, [user_document(user, until) for user, until in rows], "")
        return
    table = [("IDENTIFIER", "ID", "TENANT", "DISABLED", "LOCKED")] + [
        (
            user.identifier,
            user.user_id,
            user.tenant,
            "yes" if user.disabled else "no",
            f"until {short_time(until)}" if until is not None else "no",
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
    tenant_name = tenant_or_default(tenant)
    with about_user(username, tenant_name):
        revoked = services.accounts().disable(username, tenant=tenant_name)
    identifier = normalise_identifier(username)
    emit(
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
    tenant_name = tenant_or_default(tenant)
    with about_user(username, tenant_name):
        services.accounts().enable(username, tenant=tenant_name)
    identifier = normalise_identifier(username)
    emit(
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
    tenant_name = tenant_or_default(tenant)
    with about_user(username, tenant_name):
        done = services.accounts().unlock(username, tenant=tenant_name)
    identifier = normalise_identifier(username)
    until = done.locked_until
    if until is not None:
        text = f"user {identifier!r} unlocked (the lock ran until {short_time(until)})"
    else:
        text = f"user {identifier!r} was not locked; its failure count is reset"
    emit(
        as_json,
        {
            "identifier": identifier,
            "tenant": tenant_name,
            "was_locked": done.was_locked,
            "locked_until": iso_time(until),
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
    tenant_name = tenant_or_default(tenant)
    if not yes:
        click.confirm(f"delete user {username!r} and end their sessions?", abort=True, err=True)
    with about_user(username, tenant_name):
        revoked = services.accounts().delete(username, tenant=tenant_name)
    identifier = normalise_identifier(username)
    emit(
        as_json,
        {"identifier": identifier, "tenant": tenant_name, "deleted": True, "sessions_revoked": revoked},
        f"user {identifier!r} deleted; {revoked} session(s) revoked",
    )


@users.command("add-role")
@click.argument("username")
@click.argument("role")
@tenant_option
@json_option
def users_add_role(username: str, role: str, tenant: str | None, as_json: bool) -> None:
    """Give USERNAME the role ROLE (from the user's next request; no session ends)."""
    user = find_user(username, tenant_or_default(tenant))
    with about_role(role, user.tenant):
        changed = services.roles().grant(user.user_id, role, tenant=user.tenant)
    text = f"user {user.identifier!r} {'now holds' if changed else 'already held'} role {role!r}"
    emit(
        as_json,
        {"identifier": user.identifier, "tenant": user.tenant, "role": role, "changed": changed},
        text,
    )


@users.command("remove-role")
@click.argument("username")
@click.argument("role")
@tenant_option
@json_option
def users_remove_role(username: str, role: str, tenant: str | None, as_json: bool) -> None:
    """Take the role ROLE from USERNAME (from the user's next request; no session ends)."""
    user = find_user(username, tenant_or_default(tenant))
    with about_role(role, user.tenant):
        changed = services.roles().revoke(user.user_id, role, tenant=user.tenant)
    text = f"user {user.identifier!r} {'no longer holds' if changed else 'did not hold'} role {role!r}"
    emit(
        as_json,
        {"identifier": user.identifier, "tenant": user.tenant, "role": role, "changed": changed},
        text,
    )


@users.command("rename")
@click.argument("username")
@click.argument("new_username")
@tenant_option
@json_option
def users_rename(username: str, new_username: str, tenant: str | None, as_json: bool) -> None:
    """Rename USERNAME to NEW_USERNAME (sign-up's rules; audited; the account's address is told)."""
    from flask_authflow._web.views.accounts import rename_user

    tenant_name = tenant_or_default(tenant)
    with about_user(username, tenant_name):
        renamed = rename_user(tenant_name, username, new_username)
    emit(as_json, {"identifier": renamed, "previous": normalise_identifier(username), "tenant": tenant_name},
         f"user {normalise_identifier(username)!r} is now {renamed!r}")  # fmt: skip


@users.command("confirm")
@click.argument("username")
@tenant_option
@json_option
def confirm(username: str, tenant: str | None, as_json: bool) -> None:
    """Mark the e-mail address of USERNAME confirmed (a sign-up may then sign in)."""
    from flask_authflow._web.views.accounts import confirm_address

    tenant_name = tenant_or_default(tenant)
    with about_user(username, tenant_name):
        confirmed = confirm_address(tenant_name, normalise_identifier(username))
    if not confirmed:
        raise CommandFailed(f"{username!r} has no e-mail address to confirm", "no_email")
    identifier = normalise_identifier(username)
    emit(as_json, {"identifier": identifier, "tenant": tenant_name, "email_confirmed": True},
         f"the address of {identifier!r} is confirmed")  # fmt: skip


@users.command("send-reset")
@click.argument("username")
@tenant_option
@json_option
def send_reset(username: str, tenant: str | None, as_json: bool) -> None:
    """Mail USERNAME a password reset link (to the account's address)."""
    from flask_authflow._web.views.accounts import mail_reset_link
    from flask_authflow.errors import MailDeliveryError

    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    try:
        sent_to = mail_reset_link(tenant_name, user.identifier)
    except MailDeliveryError as exc:
        raise CommandFailed(exc.message, exc.code) from None
    if sent_to is None:
        raise CommandFailed(
            f"{username!r} has no e-mail address or is disabled: no link was sent", "no_email"
        )
    emit(as_json, {"identifier": user.identifier, "tenant": tenant_name, "sent_to": sent_to},
         f"a reset link for {user.identifier!r} was sent to {sent_to}")  # fmt: skip
