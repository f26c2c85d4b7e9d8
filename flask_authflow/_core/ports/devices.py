"""Devices: the browsers and apps users sign in from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["DeviceRecord", "DeviceStore"]


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """A browser a user signed in from: its random id (the device cookie's), a label read
    from its User-Agent, an approximate place if the application supplied one, when it was
    first and last seen, and until when the user trusts it (``None``: not trusted)."""

    tenant: str
    user_id: str
    device_id: str
    label: str
    first_seen_at: datetime
    last_seen_at: datetime
    place: str | None = None
    trusted_until: datetime | None = None

    def trusted_at(self, now: datetime) -> bool:
        """Whether the trust is still running at ``now``."""
        return self.trusted_until is not None and self.trusted_until > now


class DeviceStore(Protocol):
    """The devices each user signed in from, and the trust the user gave them.

    Device ids are checked with :func:`~flask_authflow._core.devices.check_device_id`
    (``InvalidInput`` otherwise); labels and places are cut to their column sizes. A
    deleted user's devices go with the user.
    """

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        """Record a sign-in from the device: a new record (true), or the last-seen time,
        label and place of the known one (false)."""
        ...

    def get_device(self, tenant: str, user_id: str, device_id: str) -> DeviceRecord | None:
        """The user's record of this device, if any."""
        ...

    def list_devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        """The user's devices, most recently seen first."""
        ...

    def forget_device(self, tenant: str, user_id: str, device_id: str) -> bool:
        """Remove the record (and so its trust); false if the user had no such device."""
        ...

    def trust_device(self, tenant: str, user_id: str, device_id: str, until: datetime) -> bool:
        """Trust the known device until ``until``; false if the user has no such device."""
        ...

    def end_device_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        """End the trust of one device, or of all the user's devices; how many were trusted."""
        ...
