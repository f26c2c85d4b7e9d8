"""The ``sessions`` group: list, revoke and purge sessions."""

from __future__ import annotations

from typing import Any

import click

from flask_authflow._cli.base import (
    MIN_HASH_PREFIX,
    SHORT_HASH,
    CommandFailed,
    authflow_cli,
    emit,
    ended_text,
    find_user,
    iso_time,
    json_option,
    short_time,
    tenant_option,
    tenant_or_default,
)
from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.session import SessionRecord, sid_hash
from flask_authflow._web import services
from flask_authflow.devices._labels import device_label


@authflow_cli.group("sessions")
def sessions() -> None:
    """List or revoke a user's sessions (ids are shown hashed, never usable)."""


def _session_document(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_hash": sid_hash(record.sid),
        "state": record.state.value,
        "device": device_label(record.device),
        "user_agent": record.device,
        "created_at": iso_time(record.created_at),
        "last_seen_at": iso_time(record.last_seen_at),
        "authenticated_at": iso_time(record.authenticated_at),
        "auth_method": record.auth_method,
    }


def _session_line(record: SessionRecord) -> str:
    return (
        f"{sid_hash(record.sid)[:SHORT_HASH]}  {record.state.value:<16}  "
        f"last seen {short_time(record.last_seen_at)}  created {short_time(record.created_at)}  "
        f"{device_label(record.device)}"
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
    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    records = services.sessions().list(user.user_id, tenant=tenant_name)
    if as_json:
        emit(True, [_session_document(record) for record in records], "")
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
    hashes = {sid_hash(r.sid) for r in services.sessions().list(user_id, tenant=tenant)}
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
    (--all-users), or of a provider login session (--issuer and --sid).

    Every session of a user (--user U) is "log out everywhere": the user's API tokens,
    pending mailed links (reset, change of e-mail, verification) and lock end too, and the
    output says how many of each. One session (--session HASH) ends that session only.
    """
    federated = issuer is not None or provider_sid is not None
    if [username is not None, all_users, federated].count(True) != 1:
        raise click.UsageError("give one of --user U, --all-users, or --issuer with --sid")
    if session_hash is not None and username is None:
        raise click.UsageError("--session goes with --user")
    user_sessions = services.sessions()
    if federated:
        if issuer is None or provider_sid is None:
            raise click.UsageError("--issuer and --sid go together")
        if tenant is not None:
            raise click.UsageError("--tenant does not apply to --issuer/--sid (the provider session decides)")
        count = user_sessions.revoke_provider_session(issuer, provider_sid)
        emit(
            as_json,
            {"issuer": issuer, "sid": provider_sid, "sessions_revoked": count},
            f"{count} session(s) of provider session {provider_sid!r} at {issuer} revoked",
        )
        return
    tenant_name = tenant_or_default(tenant)
    if all_users:
        count = user_sessions.revoke_tenant(tenant=tenant_name)
        emit(
            as_json,
            {"tenant": tenant_name, "sessions_revoked": count},
            f"{count} session(s) of tenant {tenant_name!r} revoked",
        )
        return
    assert username is not None
    user = find_user(username, tenant_name)
    document: dict[str, Any] = {"identifier": user.identifier, "tenant": tenant_name}
    if session_hash is None:
        ended = user_sessions.revoke_all(user.user_id, tenant=tenant_name)
        emit(
            as_json,
            {**document, "sessions_revoked": ended.sessions, **ended.to_dict()},
            ended_text(ended),
        )
        return
    full = _resolve_session_hash(tenant_name, user.user_id, session_hash)
    if not user_sessions.revoke(user.user_id, full, tenant=tenant_name):
        # It ended (or its id rotated) between the lookup and the revocation.
        raise CommandFailed(f"the user has no session {session_hash!r}", "session_not_found")
    emit(
        as_json,
        {**document, "session_hash": full, "sessions_revoked": 1, "api_tokens_revoked": 0},
        f"session {full[:SHORT_HASH]} revoked; the user's other sessions and API tokens are kept",
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
    user_sessions = services.sessions()
    if tenant is None:
        purged = user_sessions.purge_expired()
        emit(as_json, {"purged": purged}, f"{purged} expired session(s) purged")
        return
    tenant_name = check_tenant(tenant)
    purged = user_sessions.purge_expired(tenant=tenant_name)
    emit(
        as_json,
        {"tenant": tenant_name, "purged": purged},
        f"{purged} expired session(s) of tenant {tenant_name!r} purged",
    )
