"""Devices in memory: (tenant, user id, device id) -> record."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from flask_authflow._clock import utc
from flask_authflow._core.devices import MAX_LABEL_LENGTH, MAX_PLACE_LENGTH, check_device_id, clean_text
from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import DeviceRecord
from flask_authflow.errors import UserNotFound
from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryDevices"]


class MemoryDevices(MemoryState):
    """The devices of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def _device_key(self, tenant: str, user_id: str, device_id: str) -> tuple[str, str, str]:
        return (check_tenant(tenant), user_id, check_device_id(device_id))

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        label = clean_text(label, MAX_LABEL_LENGTH)
        place = clean_text(place, MAX_PLACE_LENGTH) if place is not None else None
        with self._lock:
            if self._user_of(key[0], user_id) is None:
                raise UserNotFound()
            known = self._devices.get(key)
            if known is None:
                self._put(self._devices, key, DeviceRecord(*key, label, utc(now), utc(now), place))
                return True
            self._put(self._devices, key, replace(known, label=label, place=place, last_seen_at=utc(now)))
            return False

    def get_device(self, tenant: str, user_id: str, device_id: str) -> DeviceRecord | None:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            return self._devices.get(key)

    def list_devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        with self._lock:
            mine = [r for k, r in self._devices.items() if k[:2] == (tenant, user_id)]
        return sorted(mine, key=lambda r: (r.last_seen_at, r.device_id), reverse=True)

    def forget_device(self, tenant: str, user_id: str, device_id: str) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            return self._remove(self._devices, key) is not None

    def trust_device(self, tenant: str, user_id: str, device_id: str, until: datetime) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            known = self._devices.get(key)
            if known is None:
                return False
            self._put(self._devices, key, replace(known, trusted_until=utc(until)))
            return True

    def end_device_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        wanted = check_device_id(device_id) if device_id is not None else None
        with self._lock:
            keys = [
                k
                for k, r in self._devices.items()
                if k[:2] == (tenant, user_id) and r.trusted_until is not None and wanted in (None, k[2])
            ]
            for key in keys:
                self._put(self._devices, key, replace(self._devices[key], trusted_until=None))
            return len(keys)
