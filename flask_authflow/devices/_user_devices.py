"""``authflow.devices``: the devices (browsers) a user signed in from, listed, forgotten,
and their trust ended, in the shape of :mod:`flask_authflow._core.service`.

The decisions are :class:`~flask_authflow.devices._service.DeviceService`'s; this object adds
the convention, and commits each change with its audit row (``device_forgotten``,
``device_trust_ended``) in one unit of work. The app wires the row writer in: in a
request it names the request's session and device, on the command line neither.
"""

from __future__ import annotations

from collections.abc import Callable

from flask_authflow._core.ports import DeviceRecord, UnitOfWork, one_unit
from flask_authflow._core.service import TenantScoped
from flask_authflow.devices._service import DeviceService

__all__ = ["Devices", "RecordEvent"]

#: ``(event, tenant, user_id, reason)``: writes one successful device audit row.
RecordEvent = Callable[[str, str, str, str], None]


class Devices(TenantScoped):
    """List and get a user's devices; revoke (forget) one; end their trust.

    :param service: the app's device decisions.
    :param record: writes a device audit row.
    :param begin_unit: opens the backend's unit of work.
    """

    def __init__(
        self,
        service: DeviceService,
        *,
        record: RecordEvent,
        begin_unit: Callable[[], UnitOfWork] | None,
        default_tenant: str,
    ) -> None:
        super().__init__(default_tenant=default_tenant)
        self.service = service
        self._record = record
        self._begin_unit = begin_unit

    def list(self, user_id: str, *, tenant: str | None = None) -> list[DeviceRecord]:
        """The user's devices, most recently seen first."""
        return self.service.devices(self._tenant(tenant), user_id)

    def get(self, user_id: str, device_id: str, *, tenant: str | None = None) -> DeviceRecord | None:
        """The user's device ``device_id``, or ``None``."""
        return next((d for d in self.list(user_id, tenant=tenant) if d.device_id == device_id), None)

    def revoke(self, user_id: str, device_id: str, *, tenant: str | None = None) -> bool:
        """Forget the device, and so its trust (audited ``device_forgotten``, the device in
        the reason): its next sign-in counts as a new device. False when the user has no
        such device."""
        tenant_name = self._tenant(tenant)
        with one_unit(self._begin_unit):
            if not self.service.forget(tenant_name, user_id, device_id):
                return False
            self._record("device_forgotten", tenant_name, user_id, f"device={device_id}")
        return True

    def revoke_trust(
        self,
        user_id: str,
        device_id: str | None = None,
        *,
        tenant: str | None = None,
        reason: str = "revoked_by_operator",
    ) -> int:
        """End the trust of one device, or of every device of the user (audited
        ``device_trust_ended`` with ``reason`` when any ended); how many ended."""
        tenant_name = self._tenant(tenant)
        with one_unit(self._begin_unit):
            ended = self.service.end_trust(tenant_name, user_id, device_id)
            if ended:
                self._record("device_trust_ended", tenant_name, user_id, reason)
        return ended
