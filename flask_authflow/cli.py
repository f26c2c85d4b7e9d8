"""The ``flask authflow`` command group.

Passwords are read from a hidden prompt or from standard input
(``--password-stdin``), never from the command line, where they would land in shell
history and ``ps`` output. Commands print no secret or key material.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import click
from flask.cli import AppGroup

from .audit.sinks import hash_session_id
from .audit.spool import SpoolAuditSink
from .authn.identifiers import check_tenant, normalise_identifier
from .errors import AuthFlowError
from .state import account_admin, get_state

__all__ = ["authflow_cli"]

authflow_cli = AppGroup("authflow", help="Manage flask-authflow users, sessions and issuer keys.")


def _read_password(password_stdin: bool, *, confirm: bool) -> str:
    if password_stdin:
        try:
            password = sys.stdin.readline().rstrip("\r\n")
        except UnicodeDecodeError:
            raise click.UsageError("the password on standard input is not valid UTF-8") from None
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=confirm)
    if not password:
        raise click.UsageError("the password is empty")
    return password


def _tenant(tenant: str | None) -> str:
    return tenant or get_state().config.default_tenant


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
    password = _read_password(password_stdin, confirm=True)
    try:
        revoked = account_admin().set_password(_tenant(tenant), username, password)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"password of {normalise_identifier(username)!r} changed; {revoked} session(s) revoked")


@authflow_cli.group("sessions")
def sessions() -> None:
    """List or revoke a user's sessions."""


def _find_user_id(username: str, tenant: str) -> str:
    try:
        user = get_state().backend.find_user(check_tenant(tenant), normalise_identifier(username))
    except AuthFlowError as error:
        raise click.ClickException(error.message) from None
    if user is None:
        raise click.ClickException(f"no user {username!r} in tenant {tenant!r}")
    return str(user.user_id)


@sessions.command("list")
@click.option("--user", "username", required=True, help="The user's name.")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
def sessions_list(username: str, tenant: str | None) -> None:
    """List the live sessions of a user (ids are shown hashed, never usable)."""
    tenant_name = _tenant(tenant)
    state = get_state()
    try:
        records = state.session_store.list_user_sessions(tenant_name, _find_user_id(username, tenant_name))
    except AuthFlowError as error:
        _fail(error)
        return
    for record in records:
        digest = str(hash_session_id(record.sid))[:16]
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


def _issuer() -> Any:
    issuer = get_state().issuer
    if issuer is None:
        raise click.ClickException(
            "the local issuer is off: set AUTHFLOW_ISSUER (and AUTHFLOW_ISSUER_KEY_STORE)"
        )
    from .issuer import MemoryLocalIdpKeyStore

    if isinstance(issuer.key_store, MemoryLocalIdpKeyStore):
        # Each CLI run would get its own throwaway key: no server would ever see it.
        raise click.ClickException(
            "AUTHFLOW_ISSUER_KEY_STORE='memory' keeps keys in this process only: this command "
            "would use a throwaway key that no server ever sees. Use 'sql' (the default) or "
            "'file:<directory>'"
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
def rotate_key(algorithm: str | None, kid: str | None, step: str | None, force: bool) -> None:
    """Rotate the issuer's signing key.

    The safe procedure relying parties can follow: ``--stage`` publishes the next key;
    after AUTHFLOW_ISSUER_JWKS_MAX_AGE, ``--activate`` (or plain ``rotate-key``) signs
    with it; later ``--prune`` removes retired keys whose longest token has expired.
    Plain ``rotate-key`` with nothing staged is refused unless ``--force`` (a new key
    that signs at once: relying parties with a cached JWKS must refetch).
    """
    from .issuer import LocalIdpSigningKey

    issuer = _issuer()
    try:
        if step == "prune":
            pruned = issuer.prune_retired_keys()
            click.echo(f"pruned {len(pruned)} retired key(s){': ' + ', '.join(pruned) if pruned else ''}")
            return
        staged = issuer.rotation_state().staged_kid
        if step == "activate" or (step is None and staged is not None):
            new_kid = issuer.activate_staged_key(force=force)
            click.echo(f"new current key {new_kid}; the JWKS has {len(issuer.jwks()['keys'])} key(s)")
            return
        # Relying parties pin the algorithm they were told about: keep it unless asked.
        key = LocalIdpSigningKey.generate(algorithm or get_state().config.issuer_algorithm)
        if kid is not None:
            key = key.with_key_id(kid)
        if step == "stage":
            issuer.stage_signing_key(key)
            wait = issuer.jwks_max_age
            click.echo(f"staged key {key.kid} ({key.algorithm}); activate it with rotate-key after {wait}")
            return
        if not force:
            raise click.ClickException(
                "nothing is staged: run rotate-key --stage, wait AUTHFLOW_ISSUER_JWKS_MAX_AGE, then "
                "rotate-key (or --force to sign with a new key at once)"
            )
        issuer.rotate_signing_key(key)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(
        f"new current key {key.kid} ({key.algorithm}); the JWKS now has {len(issuer.jwks()['keys'])} key(s)"
    )


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
def mint(subject: str, audiences: tuple[str, ...], ttl: int, claims: tuple[str, ...]) -> None:
    """Mint a token with the current key and print it."""
    from .issuer import MintClaims

    issuer = _issuer()
    try:
        exp = issuer.clock.now() + timedelta(seconds=ttl)
        request = MintClaims(subject, exp).with_audiences(audiences)
        for item in claims:
            name, value = _parse_claim(item)
            request = request.with_custom_claim(name, value)
        token = issuer.mint(request)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(token)


@authflow_cli.group("users")
def users() -> None:
    """Disable, enable or delete users (disabling and deleting end their sessions)."""


@users.command("disable")
@click.argument("username")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
def users_disable(username: str, tenant: str | None) -> None:
    """Disable USERNAME: logins fail and every session of the user ends now."""
    try:
        revoked = account_admin().disable(_tenant(tenant), username)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"user {normalise_identifier(username)!r} disabled; {revoked} session(s) revoked")


@users.command("enable")
@click.argument("username")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
def users_enable(username: str, tenant: str | None) -> None:
    """Allow USERNAME to log in again."""
    try:
        account_admin().enable(_tenant(tenant), username)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"user {normalise_identifier(username)!r} enabled")


@users.command("delete")
@click.argument("username")
@click.option("--tenant", help="Tenant of the user (default: AUTHFLOW_DEFAULT_TENANT).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def users_delete(username: str, tenant: str | None, yes: bool) -> None:
    """Delete USERNAME with its factors; its sessions end now (audit rows stay)."""
    if not yes:
        click.confirm(f"delete user {username!r} and end their sessions?", abort=True)
    try:
        revoked = account_admin().delete(_tenant(tenant), username)
    except AuthFlowError as error:
        _fail(error)
        return
    click.echo(f"user {normalise_identifier(username)!r} deleted; {revoked} session(s) revoked")


@authflow_cli.group("audit")
def audit() -> None:
    """Audit trail maintenance."""


@audit.command("replay-spool")
def audit_replay_spool() -> None:
    """Move audit rows spooled while the audit store was down into the store."""
    state = get_state()
    spool = state.service.audit_fallback
    if not isinstance(spool, SpoolAuditSink):
        raise click.ClickException("this app has no audit spool file")
    try:
        moved = spool.replay(state.backend)
    except AuthFlowError as error:
        left = len(spool.records())
        raise click.ClickException(f"{error.message}; {left} row(s) remain in {spool.path}") from None
    click.echo(f"{moved} audit row(s) moved from {spool.path}")
