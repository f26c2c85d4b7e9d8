"""``enroll-totp`` and the ``factors`` and ``recovery-codes`` groups."""

from __future__ import annotations

from collections.abc import Sequence
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
from flask_authflow._core.identifiers import normalise_identifier
from flask_authflow._core.ports import FactorConfig
from flask_authflow._outcomes import FactorKind
from flask_authflow._web import services
from flask_authflow._web.security_notices import notify_now
from flask_authflow._web.views.security import KIND_NAMES


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
    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    uri = services.factors().create_totp(user.user_id, tenant=tenant_name)
    notify_now("factor_added", tenant_name, user.user_id, kind=KIND_NAMES["totp"])
    if as_json:
        emit(True, {"otpauth_uri": uri}, "")
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
        "created_at": iso_time(config.created_at),
        "last_used_at": iso_time(config.last_used_at),
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
    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    configs = services.factors().list(user.user_id, tenant=tenant_name, include_pending=True)
    if as_json:
        emit(True, [_factor_document(config) for config in configs], "")
        return
    _table(
        [("ID", "KIND", "LABEL", "CREATED", "LAST USED", "CONFIRMED")]
        + [
            (
                config.factor_id,
                config.kind.value,
                _factor_label(config),
                short_time(config.created_at),
                short_time(config.last_used_at) if config.last_used_at is not None else "never",
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
    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    factors_of = services.factors()
    config = factors_of.get(user.user_id, factor_id, tenant=tenant_name)
    if config is not None and config.kind is FactorKind.PASSWORD:
        raise CommandFailed(
            "the password is not disabled as a factor: set another one with set-password",
            "password_factor",
        )
    # ``False`` also when the factor went away between the lookup and the deletion.
    if config is None or not factors_of.revoke(user.user_id, factor_id, tenant=tenant_name):
        raise CommandFailed(f"the user has no factor {factor_id!r} (see factors list)", "factor_not_found")
    identifier, document = _user_summary(username, tenant_name)
    notify_now(
        "factor_removed",
        tenant_name,
        user.user_id,
        kind=KIND_NAMES.get(config.kind.value, config.kind.value),
    )
    emit(
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
    tenant_name = tenant_or_default(tenant)
    user = find_user(username, tenant_name)
    codes = services.factors().create_recovery_codes(user.user_id, tenant=tenant_name)
    identifier, document = _user_summary(username, tenant_name)
    notify_now(
        "factor_added",
        tenant_name,
        user.user_id,
        kind=KIND_NAMES["recovery_code"],
    )
    warning = "the previous recovery codes no longer work"
    if as_json:
        emit(True, {**document, "codes": codes, "warning": warning}, "")
        return
    click.echo(
        f"New recovery codes for {identifier!r} in tenant {tenant_name!r}: {warning}; the user's "
        "sessions are revoked. Give these to the user now, they are not shown again:",
        err=True,
    )
    for code in codes:
        click.echo(code)
