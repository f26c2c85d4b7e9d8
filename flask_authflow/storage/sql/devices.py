"""Devices in SQL: the browsers each user signed in from, and the trust given to them.

A sign-in from a device is one upsert (``ON CONFLICT DO UPDATE`` on SQLite and
PostgreSQL), so parallel sign-ins from one new device leave one row and say "new" once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, Row
from sqlalchemy.exc import IntegrityError

from flask_authflow.clock import utc
from flask_authflow.core.devices import MAX_LABEL_LENGTH, MAX_PLACE_LENGTH, check_device_id, clean_text
from flask_authflow.core.identifiers import check_tenant
from flask_authflow.core.ports import DeviceRecord
from flask_authflow.errors import UserNotFound
from flask_authflow.storage.sql.schema import aware, devices_table, users_table
from flask_authflow.storage.sql.uow import SqlConnections

__all__ = ["SqlDevices"]

_d = devices_table.c
_KEY = (_d.tenant, _d.user_id, _d.device_id)


def _upserts() -> dict[str, Any]:
    """Per dialect: insert the device, or refresh the known one; ``new`` says which
    (PostgreSQL: ``xmax = 0`` for an inserted row; SQLite: first seen equals last seen)."""
    made: dict[str, Any] = {}
    for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert)):
        statement = dialect_insert(devices_table)
        excluded = statement.excluded
        made[name] = statement.on_conflict_do_update(
            index_elements=list(_KEY),
            set_={"label": excluded.label, "place": excluded.place, "last_seen_at": excluded.last_seen_at},
        )
    return made


_UPSERT = _upserts()


def _record(row: Row[Any]) -> DeviceRecord:
    return DeviceRecord(
        tenant=row.tenant,
        user_id=row.user_id,
        device_id=row.device_id,
        label=row.label,
        first_seen_at=utc(row.first_seen_at),
        last_seen_at=utc(row.last_seen_at),
        place=row.place,
        trusted_until=aware(row.trusted_until),
    )


class SqlDevices(SqlConnections):
    """The devices of :class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend`."""

    #: The upsert of this engine's database (``None``: insert, then update on a conflict).
    _device_upsert: Any = None
    _device_upserts: Mapping[str, Any] = MappingProxyType(_UPSERT)

    def _use_dialect(self, engine: Engine) -> None:
        super()._use_dialect(engine)
        self._device_upsert = self._device_upserts.get(engine.dialect.name)

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        row = {
            "tenant": check_tenant(tenant),
            "user_id": user_id,
            "device_id": check_device_id(device_id),
            "label": clean_text(label, MAX_LABEL_LENGTH),
            "place": clean_text(place, MAX_PLACE_LENGTH) if place is not None else None,
            "first_seen_at": utc(now),
            "last_seen_at": utc(now),
        }
        with self._tx(locking=True) as conn:
            if conn.execute(select(users_table.c.user_id).where(_user_is(tenant, user_id))).first() is None:
                raise UserNotFound()
            known = self._device_row(conn, row)
            if known is None:
                self._insert_device(conn, row)
                return True
            conn.execute(
                update(devices_table)
                .where(*_key_is(row))
                .values(label=row["label"], place=row["place"], last_seen_at=row["last_seen_at"])
            )
            return False

    @staticmethod
    def _device_row(conn: Connection, row: Mapping[str, Any]) -> Row[Any] | None:
        return conn.execute(select(_d.device_id).where(*_key_is(row))).first()

    def _insert_device(self, conn: Connection, row: dict[str, Any]) -> None:
        if self._device_upsert is not None:  # a parallel insert of the same device: refreshed
            conn.execute(self._device_upsert, row)
            return
        try:  # pragma: no cover - SQLite and PostgreSQL have upserts
            with conn.begin_nested():
                conn.execute(insert(devices_table), row)
        except IntegrityError:  # pragma: no cover - see above
            pass

    def get_device(self, tenant: str, user_id: str, device_id: str) -> DeviceRecord | None:
        key = {"tenant": check_tenant(tenant), "user_id": user_id, "device_id": check_device_id(device_id)}
        row = self._fetch(lambda conn: conn.execute(select(devices_table).where(*_key_is(key))).first())
        return _record(row) if row is not None else None

    def list_devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        query = (
            select(devices_table)
            .where(_d.tenant == tenant, _d.user_id == user_id)
            .order_by(_d.last_seen_at.desc(), _d.device_id.desc())
        )
        return [_record(row) for row in self._fetch(lambda conn: conn.execute(query).all())]

    def forget_device(self, tenant: str, user_id: str, device_id: str) -> bool:
        key = {"tenant": check_tenant(tenant), "user_id": user_id, "device_id": check_device_id(device_id)}
        with self._tx() as conn:
            return int(conn.execute(delete(devices_table).where(*_key_is(key))).rowcount) > 0

    def trust_device(self, tenant: str, user_id: str, device_id: str, until: datetime) -> bool:
        key = {"tenant": check_tenant(tenant), "user_id": user_id, "device_id": check_device_id(device_id)}
        with self._tx() as conn:
            statement = update(devices_table).where(*_key_is(key)).values(trusted_until=utc(until))
            return int(conn.execute(statement).rowcount) > 0

    def end_device_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        conditions = [_d.tenant == tenant, _d.user_id == user_id, _d.trusted_until.is_not(None)]
        if device_id is not None:
            conditions.append(_d.device_id == check_device_id(device_id))
        with self._tx() as conn:
            ended = conn.execute(update(devices_table).where(*conditions).values(trusted_until=None))
            return int(ended.rowcount)


def _user_is(tenant: str, user_id: str) -> Any:
    return (users_table.c.tenant == tenant) & (users_table.c.user_id == user_id)


def _key_is(key: Mapping[str, Any]) -> list[Any]:
    return [_d.tenant == key["tenant"], _d.user_id == key["user_id"], _d.device_id == key["device_id"]]
