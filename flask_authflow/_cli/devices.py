"""The ``devices`` group: list a user's devices, forget one, end trusts."""

from __future__ import annotations

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
from flask_authflow._core.devices import check_device_id
from flask_authflow._core.ports import DeviceRecord
from flask_authflow._web import services
from flask_authflow._web.state import get_state
from flask_authflow.errors import InvalidInput


@authflow_cli.group("devices")
def devices() -> None:
    """List a user's devices (browsers they signed in from), forget one, end trusts."""


def _document(record: DeviceRecord, now: Any) -> dict[str, Any]:
    return {
        "device_id": record.device_id,
        "label": record.label,
        "place": record.place,
        "first_seen_at": iso_time(record.first_seen_at),
        "last_seen_at": iso_time(record.last_seen_at),
        "trusted_until": iso_time(record.trusted_until) if record.trusted_at(now) else None,
    }


def _line(record: DeviceRecord, now: Any) -> str:
    trusted = (
        f"  trusted until {short_time(record.trusted_until)}"
        if record.trusted_until and record.trusted_at(now)
        else ""
    )
    place = f" ({record.place})" if record.place else ""
    return f"{record.device_id}  last seen {short_time(record.last_seen_at)}  {record.label}{place}{trusted}"


def _device_id(value: str) -> str:
    try:
        return check_device_id(value)
    except InvalidInput:
        raise click.BadParameter(
            "give a device id as devices list prints it", param_hint="DEVICE_ID"
        ) from None


@devices.command("list")
@click.argument("identifier")
@tenant_option
@json_option
def devices_list(identifier: str, tenant: str | None, as_json: bool) -> None:
    """List the devices of the user IDENTIFIER, most recently seen first: id, last seen,
    label (browser and system), place if the app supplies one, and the trust's end."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    now = get_state().clock.now()
    records = services.devices().list(user.user_id, tenant=tenant_name)
    if as_json:
        emit(True, [_document(record, now) for record in records], "")
        return
    for record in records:
        click.echo(_line(record, now))
    click.echo(f"{len(records)} device(s)")


@devices.command("forget")
@click.argument("identifier")
@click.argument("device_id")
@tenant_option
@json_option
def devices_forget(identifier: str, device_id: str, tenant: str | None, as_json: bool) -> None:
    """Forget the device DEVICE_ID of the user IDENTIFIER: its record and its trust go, and
    its next sign-in counts as a new device (audited ``device_forgotten``)."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    wanted = _device_id(device_id)
    if not services.devices().revoke(user.user_id, wanted, tenant=tenant_name):
        raise CommandFailed(f"the user has no device {device_id!r}", "device_not_found")
    emit(
        as_json,
        {"identifier": user.identifier, "tenant": tenant_name, "device_id": wanted},
        f"device {wanted} forgotten",
    )


@devices.command("untrust")
@click.argument("identifier")
@click.argument("device_id", required=False)
@tenant_option
@json_option
def devices_untrust(identifier: str, device_id: str | None, tenant: str | None, as_json: bool) -> None:
    """End the trust of the device DEVICE_ID of the user IDENTIFIER, or of all their
    devices without DEVICE_ID: their next sign-in asks for every step again (audited
    ``device_trust_ended``, reason ``revoked_by_operator``)."""
    tenant_name = tenant_or_default(tenant)
    user = find_user(identifier, tenant_name)
    wanted = _device_id(device_id) if device_id is not None else None
    ended = services.devices().revoke_trust(
        user.user_id, wanted, tenant=tenant_name, reason="revoked_by_operator"
    )
    emit(
        as_json,
        {"identifier": user.identifier, "tenant": tenant_name, "device_id": wanted, "trusts_ended": ended},
        f"{ended} device trust(s) ended",
    )
