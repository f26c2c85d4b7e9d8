"""The device decisions, on a :class:`~flask_authflow._core.ports.DeviceStore`: record a
sign-in, trust a device, say whether it is trusted now, forget it, end trusts."""

from __future__ import annotations

from datetime import datetime

from flask_authflow._core.ports import DeviceRecord, DeviceStore
from flask_authflow.devices._labels import device_label
from flask_authflow.devices._settings import DeviceSettings

__all__ = ["DeviceService"]


class DeviceService:
    """What the web layer and the command line ask of the devices of users.

    :param store: where device records live (every backend of this package is one).
    :param settings: how long a trust lasts (``AUTHFLOW_DEVICE_TRUST_DURATION``) and more.
    """

    def __init__(self, store: DeviceStore, settings: DeviceSettings) -> None:
        self.store = store
        self.settings = settings

    def is_trusted(self, tenant: str, user_id: str, device_id: str, now: datetime) -> bool:
        """Whether the user trusts this device at ``now`` (a known device, trust not expired)."""
        record = self.store.get_device(tenant, user_id, device_id)
        return record is not None and record.trusted_at(now)

    def signed_in(
        self,
        tenant: str,
        user_id: str,
        device_id: str,
        *,
        user_agent: str | None,
        place: str | None,
        now: datetime,
    ) -> bool:
        """Record a sign-in from the device, labelled from its User-Agent; true if the
        device is new for this user."""
        label = device_label(user_agent)
        return self.store.touch_device(tenant, user_id, device_id, label=label, place=place, now=now)

    def trust(self, tenant: str, user_id: str, device_id: str, now: datetime) -> datetime | None:
        """Trust the (known) device for the configured time; when it ends, or ``None`` if
        the user has no such device."""
        until = now + self.settings.trust_duration
        return until if self.store.trust_device(tenant, user_id, device_id, until) else None

    def devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        """The user's devices, most recently seen first."""
        return self.store.list_devices(tenant, user_id)

    def forget(self, tenant: str, user_id: str, device_id: str) -> bool:
        """Forget the device (and so its trust): its next sign-in counts as a new device."""
        return self.store.forget_device(tenant, user_id, device_id)

    def end_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        """End the trust of one device, or of every device of the user; how many ended."""
        return self.store.end_device_trust(tenant, user_id, device_id)
