"""The browsers and apps the signed-in user signed in from: list them (this one first,
which are trusted and until when), and forget one (its record and trust go; its next
sign-in is a new device). The same calls as the account page's devices list.
"""

from __future__ import annotations

from flask_authflow._web.headless.routes import Answer, Call, Refusal, Reply, Routes
from flask_authflow._web.headless.schema import Array, Boolean, Nullable, Object, String
from flask_authflow._web.state import current_auth_session
from flask_authflow._web.views import devices
from flask_authflow._web.views.common import MESSAGES

__all__ = ["routes"]

routes = Routes("devices")

DEVICE_ID = String(64, min_length=1, pattern="[A-Za-z0-9_-]+", description="The device's id.")

DEVICE = Object(
    {
        "device_id": String(64),
        "label": String(512, description="Its browser and system, as people read them."),
        "place": Nullable(String(512)),
        "first_seen_at": String(64),
        "last_seen_at": String(64),
        "trusted_until": Nullable(String(64), description="Until when it skips the second factor."),
        "current": Boolean(description="The device of this request."),
    },
    required=("device_id", "label", "place", "first_seen_at", "last_seen_at", "trusted_until", "current"),
    name="Device",
)
DEVICES = Object({"devices": Array(DEVICE, 10_000)}, required=("devices",), name="Devices")
FORGOTTEN = Object(
    {"status": String(32, choices=("device_forgotten",))}, required=("status",), name="DeviceForgotten"
)


@routes.get(
    "/account/devices",
    "listDevices",
    "The user's devices",
    answers={200: Answer("This device first, then the most recently seen", DEVICES)},
    signed_in=True,
)
def list_devices(call: Call) -> Reply:
    session = current_auth_session()
    rows = devices.device_rows(str(session.tenant), str(session.user_id))["devices"]
    return Reply(
        {
            "devices": [
                {
                    "device_id": row.device_id,
                    "label": row.label,
                    "place": row.place,
                    "first_seen_at": row.first_seen_at.isoformat(),
                    "last_seen_at": row.last_seen_at.isoformat(),
                    "trusted_until": row.trusted_until.isoformat() if row.trusted_until else None,
                    "current": row.current,
                }
                for row in rows
            ]
        }
    )


@routes.delete(
    "/account/devices/{device_id}",
    "forgetDevice",
    "Forget a device",
    params={"device_id": DEVICE_ID},
    answers={200: Answer("Forgotten (audited ``device_forgotten``)", FORGOTTEN)},
    errors={404: ("not_found",)},
    signed_in=True,
)
def forget_device(call: Call) -> Reply:
    """An id that names none of the user's devices is 404."""
    if not devices.forget_device_of_current_user(call.params["device_id"]):
        raise Refusal("not_found", MESSAGES["no_device"], 404)
    return Reply({"status": "device_forgotten"})
