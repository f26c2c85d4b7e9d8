"""The account page's devices: the browsers the user signed in from, which of them is
this one, which are trusted (and until when), and "forget this device"."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask_authflow._core.devices import check_device_id
from flask_authflow._web import services
from flask_authflow._web.devices import current_device_id
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow.devices._labels import shown_label
from flask_authflow.errors import InvalidInput

__all__ = ["DeviceRow", "device_rows", "forget_device_of_current_user"]


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device as the account page shows it."""

    device_id: str
    label: str
    place: str | None
    first_seen_at: datetime
    last_seen_at: datetime
    trusted_until: datetime | None
    current: bool


def device_rows(tenant: str, user_id: str) -> dict[str, Any]:
    """``devices``: the user's devices for the account page, this browser's first."""
    now = get_state().clock.now()
    mine = current_device_id()
    rows = [
        DeviceRow(
            device_id=d.device_id,
            label=shown_label(d.label),
            place=d.place,
            first_seen_at=d.first_seen_at,
            last_seen_at=d.last_seen_at,
            trusted_until=d.trusted_until if d.trusted_at(now) else None,
            current=d.device_id == mine,
        )
        for d in services.devices().list(user_id, tenant=tenant)
    ]
    rows.sort(key=lambda r: not r.current)  # stable: the rest stay most recent first
    return {"devices": rows}


def forget_device_of_current_user(device_id: str) -> bool:
    """Forget one of the signed-in user's devices (audited ``device_forgotten``); false when
    the id is malformed or names no device of this user."""
    try:
        check_device_id(device_id)
    except InvalidInput:
        return False
    session = current_auth_session()
    return services.devices().revoke(str(session.user_id), device_id, tenant=str(session.tenant))
