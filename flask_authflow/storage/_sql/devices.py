"""Devices in SQL: the browsers each user signed in from, and the trust given to them.

A sign-in from a device is one statement (an ``INSERT ... SELECT`` from the user's row
with ``ON CONFLICT DO UPDATE``, on SQLite and PostgreSQL): parallel sign-ins from one new
device leave one row, and a login costs one round trip more, not a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, delete, literal_column, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, Row
from sqlalchemy.exc import SQLAlchemyError

from flask_authflow._clock import utc
from flask_authflow._core.devices import MAX_LABEL_LENGTH, MAX_PLACE_LENGTH, check_device_id, clean_text
from flask_authflow._core.identifiers import check_tenant
from flask_authflow._core.ports import DeviceRecord
from flask_authflow.errors import UserNotFound
from flask_authflow.storage._sql.schema import UTCDateTime, aware, devices_table, users_table
from flask_authflow.storage._sql.uow import SqlConnections, store_error

__all__ = ["SqlDevices"]

_d = devices_table.c
_KEY = (_d.tenant, _d.user_id, _d.device_id)


def _touches() -> dict[str, Any]:
    """Per dialect, one statement for a sign-in from a device: insert the device of a user
    that exists in the tenant (``INSERT ... SELECT`` from the users table: no row, no user),
    or refresh the known one (``ON CONFLICT DO UPDATE``), returning whether it was new
    (PostgreSQL: ``xmax = 0`` for an inserted row; SQLite: its first sign-in is now)."""
    now = bindparam("now", type_=UTCDateTime())
    source = select(
        bindparam("tenant", type_=String()),
        users_table.c.user_id,
        bindparam("device_id", type_=String()),
        bindparam("label", type_=String()),
        bindparam("place", type_=String()),
        now,
        now,
    ).where(users_table.c.tenant == bindparam("tenant"), users_table.c.user_id == bindparam("user_id"))
    columns = ["tenant", "user_id", "device_id", "label", "place", "first_seen_at", "last_seen_at"]
    made: dict[str, Any] = {}
    for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert)):
        statement = dialect_insert(devices_table).from_select(columns, source)
        excluded = statement.excluded
        upsert = statement.on_conflict_do_update(
            index_elements=list(_KEY),
            set_={"label": excluded.label, "place": excluded.place, "last_seen_at": excluded.last_seen_at},
        )
        new = literal_column("xmax = 0") if name == "postgresql" else _d.first_seen_at == now
        made[name] = upsert.returning(new.label("new"))
    return made


_TOUCH = _touches()


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
    """The devices of :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend`."""

    #: The one-statement sign-in of this engine's database (SQLite or PostgreSQL).
    _device_touch: Any = None

    def _use_dialect(self, engine: Engine) -> None:
        super()._use_dialect(engine)
        self._device_touch = _TOUCH.get(engine.dialect.name)

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        params = {
            "tenant": check_tenant(tenant),
            "user_id": user_id,
            "device_id": check_device_id(device_id),
            "label": clean_text(label, MAX_LABEL_LENGTH),
            "place": clean_text(place, MAX_PLACE_LENGTH) if place is not None else None,
            "now": utc(now),
        }
        row = self._returning(self._device_touch, params)
        if row is None:
            raise UserNotFound()
        return bool(row.new)

    def _returning(self, statement: Any, params: dict[str, Any]) -> Row[Any] | None:
        """Run one write that returns a row, committed on its own (in AUTOCOMMIT on a server
        database: one round trip), or in the open unit of work."""
        if self._unit() is not None or self._read_engine is self.engine:
            with self._tx() as conn:
                return conn.execute(statement, params).first()
        try:
            with self._read_engine.connect() as conn:
                return conn.execute(statement, params).first()
        except SQLAlchemyError as exc:
            raise store_error(exc) from exc

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


def _key_is(key: Mapping[str, Any]) -> list[Any]:
    return [_d.tenant == key["tenant"], _d.user_id == key["user_id"], _d.device_id == key["device_id"]]
