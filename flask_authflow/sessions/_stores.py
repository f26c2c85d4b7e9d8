"""Where session records live: the :class:`SessionStore` protocol and the in-memory store.

Also the wire format persistent stores use for a record (:func:`serialize_record`):
versioned JSON, with the application's custom data in Flask's tagged JSON so that
``flask.session`` values round-trip exactly as with Flask's own cookie session.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from flask_authflow._clock import Clock, SystemClock, utc
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionStore, SessionTouch
from flask_authflow._core.session import (
    AuthState,
    InvalidTransition,
    SessionRecord,
    custom_serializer,
    federation_key,
    record_federation_key,
    sid_hash,
)
from flask_authflow.errors import SessionDecryptError, SessionRecordError, StoreUnavailable

__all__ = [
    "RECORD_SCHEMA",
    "MemorySessionStore",
    "RecordOpener",
    "SessionStore",
    "deserialize_record",
    "serialize_record",
    "store_unavailable",
]

#: Version of the serialised record layout written by :func:`serialize_record`.
RECORD_SCHEMA = 1


# --- in-memory store ------------------------------------------------------------------------------


def _detached(record: SessionRecord) -> SessionRecord:
    """A copy whose mutable parts (custom data, flow) share nothing with ``record``.

    Records are immutable, but their ``custom`` and ``flow`` mappings hold mutable
    values (lists, dicts). Without the copy a view that mutates a nested value would
    change the stored session without saving it, bypassing the size limit and the
    dirty flag. Records with no custom data and no flow (the common authenticated
    session) are returned as they are: nothing to copy, nothing to pay.
    """
    if not record.custom and not record.flow and not record.workflow:
        return record
    return replace(
        record,
        custom=copy.deepcopy(dict(record.custom)) if record.custom else {},
        flow=copy.deepcopy(dict(record.flow)) if record.flow else record.flow,
        workflow=copy.deepcopy(dict(record.workflow)) if record.workflow else record.workflow,
    )


class MemorySessionStore:
    """Session records in a dict of this process (tests, development, one-process apps).

    Thread-safe. Records are kept until their expiry and dropped lazily (on access) and
    in bulk every ``purge_every`` saves, so abandoned guest sessions do not accumulate.
    Nothing survives a restart and nothing is shared between processes: use
    :class:`~flask_authflow.storage._sql.session_store.SqlAlchemySessionStore`
    when the app runs more than one worker.
    """

    def __init__(self, *, clock: Clock | None = None, purge_every: int = 1024) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._clock_given = clock is not None
        self._lock = threading.Lock()
        self._records: dict[str, tuple[SessionRecord, datetime]] = {}
        self._by_user: dict[tuple[str, str], set[str]] = {}
        self._by_federation: dict[str, set[str]] = {}
        self._purge_every = max(1, purge_every)
        self._saves = 0

    def count(self) -> int:
        """How many records the store holds (expired ones not yet dropped included).

        A method, not ``__len__``: an empty store must stay truthy (``if store:``).
        """
        with self._lock:
            return len(self._records)

    def _unindex(self, record: SessionRecord) -> None:
        # Caller holds the lock.
        fed_key = record_federation_key(record)
        if fed_key is not None:
            fed_sids = self._by_federation.get(fed_key)
            if fed_sids is not None:
                fed_sids.discard(record.sid)
                if not fed_sids:
                    del self._by_federation[fed_key]
        if record.tenant is None or record.user_id is None:
            return
        key = (record.tenant, record.user_id)
        sids = self._by_user.get(key)
        if sids is not None:
            sids.discard(record.sid)
            if not sids:
                del self._by_user[key]

    def _remove(self, sid: str) -> SessionRecord | None:
        # Caller holds the lock.
        entry = self._records.pop(sid, None)
        if entry is None:
            return None
        self._unindex(entry[0])
        return entry[0]

    def load(self, sid: str) -> SessionRecord | None:
        now = self._clock.now()
        with self._lock:
            entry = self._records.get(sid)
            if entry is None:
                return None
            record, expires_at = entry
            if expires_at <= now:
                self._remove(sid)
                return None
        return _detached(record)

    def _live(self, sid: str, now: datetime) -> bool:
        # Caller holds the lock.
        entry = self._records.get(sid)
        return entry is not None and entry[1] > now

    def save(
        self,
        record: SessionRecord,
        expires_at: datetime,
        *,
        replaces: Sequence[str] = (),
        existing: bool = False,
    ) -> bool:
        stored = _detached(record)
        expires_at = utc(expires_at)
        now = self._clock.now()
        with self._lock:
            if existing:
                if not self._live(record.sid, now):
                    return False  # revoked (or expired): never re-created
            else:
                olds = [old for old in dict.fromkeys(replaces) if old != record.sid]
                if not all(self._live(old, now) for old in olds):
                    return False  # an earlier id was revoked: the rotation creates nothing
                for old in olds:
                    self._remove(old)
            self._remove(record.sid)
            self._records[record.sid] = (stored, expires_at)
            if record.tenant is not None and record.user_id is not None:
                self._by_user.setdefault((record.tenant, record.user_id), set()).add(record.sid)
            fed_key = record_federation_key(record)
            if fed_key is not None:
                self._by_federation.setdefault(fed_key, set()).add(record.sid)
            self._saves += 1
            purge = self._saves % self._purge_every == 0
        if purge:
            self.purge_expired()
        return True

    def load_touching(self, sid: str, touch: SessionTouch) -> tuple[SessionRecord, datetime | None] | None:
        # Through load and touch, so that a subclass that watches them (a store switched
        # off in a test, a counter) sees the folded touch as it saw the separate one.
        record = self.load(sid)
        if record is None:
            return None
        if record.last_seen_at > touch.due_by:
            return record, None
        with self._lock:
            entry = self._records.get(sid)
        if entry is None:
            return record, None
        try:
            touched = self.touch(replace(record, last_seen_at=touch.at), max(entry[1], touch.expires_at))
            return record, entry[1] if touched else None
        except StoreUnavailable:  # the read worked: a refresh that could not be written is skipped
            logging.getLogger("flask_authflow.sessions").warning(
                "session refresh skipped: the session store is unavailable"
            )
            return record, None

    def touch(self, record: SessionRecord, expires_at: datetime) -> bool:
        now = self._clock.now()
        with self._lock:
            entry = self._records.get(record.sid)
            if entry is None or entry[1] <= now:
                return False  # revoked (or expired): never re-created
            stored = replace(entry[0], last_seen_at=record.last_seen_at)
            self._records[record.sid] = (stored, utc(expires_at))
        return True

    def delete(self, sid: str) -> None:
        with self._lock:
            self._remove(sid)

    def list_user_sessions(self, tenant: str, user_id: str) -> list[SessionRecord]:
        now = self._clock.now()
        with self._lock:
            sids = sorted(self._by_user.get((tenant, user_id), ()))
            found = [self._records[sid] for sid in sids]
        return [_detached(rec) for rec, exp in found if exp > now and rec.state is not AuthState.GUEST]

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        now = self._clock.now()
        removed = 0
        with self._lock:
            for sid in list(self._by_user.get((tenant, user_id), ())):
                entry = self._records.get(sid)
                self._remove(sid)
                if entry is not None and entry[1] > now:
                    removed += 1
        return removed

    def delete_tenant_sessions(self, tenant: str) -> int:
        now = self._clock.now()
        removed = 0
        with self._lock:
            for key in [key for key in self._by_user if key[0] == tenant]:
                for sid in list(self._by_user.get(key, ())):
                    entry = self._records.get(sid)
                    self._remove(sid)
                    if entry is not None and entry[1] > now:
                        removed += 1
        return removed

    def delete_federated_sessions(self, issuer: str, provider_sid: str) -> int:
        now = self._clock.now()
        removed = 0
        with self._lock:
            for sid in list(self._by_federation.get(federation_key(issuer, provider_sid), ())):
                entry = self._records.get(sid)
                self._remove(sid)
                if entry is not None and entry[1] > now:
                    removed += 1
        return removed

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock when none was given at construction (``AuthFlow.init_app``
        calls it, so a store built at import time follows the app and a test's
        ``mock_clock``, as the backends do)."""
        if not self._clock_given:
            self._clock = clock

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Drop every expired record now (only those of ``tenant`` when given); returns how
        many were dropped."""
        now = self._clock.now()
        with self._lock:
            expired = [
                sid
                for sid, (rec, exp) in self._records.items()
                if exp <= now and (tenant is None or rec.tenant == tenant)
            ]
            for sid in expired:
                self._remove(sid)
        return len(expired)

    def database_engine(self) -> None:
        """``None``: the sessions are in process memory."""
        return None

    def __repr__(self) -> str:
        return f"<MemorySessionStore sessions={self.count()}>"


# --- wire format for persistent stores ------------------------------------------------------------


def _dt(value: datetime | None) -> str | None:
    return None if value is None else utc(value).isoformat()


def _parse_dt(value: Any) -> datetime:
    if not isinstance(value, str):
        raise SessionRecordError("malformed session record: bad timestamp")
    return utc(datetime.fromisoformat(value))


def _parse_opt_dt(value: Any) -> datetime | None:
    return None if value is None else _parse_dt(value)


def serialize_record(record: SessionRecord) -> bytes:
    """Encode ``record`` as versioned JSON (UTF-8) for a persistent store.

    Custom data and the ceremony state go through Flask's tagged JSON serializer so
    tuples, bytes, datetimes, ``Markup`` and flashed messages keep their types.
    """
    doc: dict[str, Any] = {
        "v": RECORD_SCHEMA,
        "sid": record.sid,
        "state": record.state.value,
        "created_at": _dt(record.created_at),
        "last_seen_at": _dt(record.last_seen_at),
        "tenant": record.tenant,
        "user_id": record.user_id,
        "factors_pending": list(record.factors_pending),
        "factors_passed": list(record.factors_passed),
        "login_started_at": _dt(record.login_started_at),
        "authenticated_at": _dt(record.authenticated_at),
        "auth_method": record.auth_method,
        "fingerprint": record.fingerprint,
        "device": record.device,
        "federation": dict(record.federation) if record.federation else None,
        "flow": None if record.flow is None else custom_serializer.dumps(dict(record.flow)),
        "custom": custom_serializer.dumps(dict(record.custom)) if record.custom else None,
        "workflow": dict(record.workflow) if record.workflow is not None else None,
        "remember": record.remember,
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _opt_str(doc: Mapping[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise SessionRecordError(f"malformed session record: bad {name}")
    return value


def _str_map(doc: Mapping[str, Any], name: str) -> dict[str, str] | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SessionRecordError(f"malformed session record: bad {name}")
    return value


def _str_tuple(doc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = doc.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SessionRecordError(f"malformed session record: bad {name}")
    return tuple(value)


def deserialize_record(data: bytes) -> SessionRecord:
    """Decode what :func:`serialize_record` wrote.

    :raises SessionRecordError: unknown schema version or malformed content (the
        caller treats the session as absent).
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SessionRecordError("malformed session record: not JSON") from exc
    if not isinstance(doc, dict):
        raise SessionRecordError("malformed session record: not an object")
    if doc.get("v") != RECORD_SCHEMA:
        raise SessionRecordError(f"unknown session record schema {doc.get('v')!r}")
    try:
        sid = doc["sid"]
        if not isinstance(sid, str) or not sid:
            raise SessionRecordError("malformed session record: bad sid")
        flow_raw = _opt_str(doc, "flow")
        custom_raw = _opt_str(doc, "custom")
        flow = None if flow_raw is None else custom_serializer.loads(flow_raw)
        custom = {} if custom_raw is None else custom_serializer.loads(custom_raw)
        if (flow is not None and not isinstance(flow, dict)) or not isinstance(custom, dict):
            raise SessionRecordError("malformed session record: bad flow or custom data")
        workflow = doc.get("workflow")  # absent from records written before workflows
        if workflow is not None and not isinstance(workflow, dict):
            raise SessionRecordError("malformed session record: bad workflow")
        return SessionRecord(
            sid=sid,
            state=AuthState(doc.get("state")),
            created_at=_parse_dt(doc.get("created_at")),
            last_seen_at=_parse_dt(doc.get("last_seen_at")),
            tenant=_opt_str(doc, "tenant"),
            user_id=_opt_str(doc, "user_id"),
            factors_pending=_str_tuple(doc, "factors_pending"),
            factors_passed=_str_tuple(doc, "factors_passed"),
            login_started_at=_parse_opt_dt(doc.get("login_started_at")),
            authenticated_at=_parse_opt_dt(doc.get("authenticated_at")),
            auth_method=_opt_str(doc, "auth_method"),
            fingerprint=_opt_str(doc, "fingerprint"),
            device=_opt_str(doc, "device"),
            federation=_str_map(doc, "federation"),
            flow=flow,
            custom=custom,
            workflow=workflow,
            remember=doc.get("remember") is True,  # absent from records written before "remember me"
        )
    except SessionRecordError:
        raise
    except InvalidTransition as exc:  # the record breaks an invariant of the state machine
        raise SessionRecordError("malformed session record: invalid state") from exc
    except (KeyError, ValueError, TypeError) as exc:
        # A bad enum value, a bad ISO date or bad tagged JSON.
        raise SessionRecordError("malformed session record") from exc


# --- what the persistent stores share --------------------------------------------------------------


def store_unavailable(exc: BaseException) -> StoreUnavailable:
    """The error a SQL or Redis session store raises for a failure of its database, logged
    by the failure's type only (a driver's message may carry SQL, arguments or a URL)."""
    logging.getLogger("flask_authflow.sessions").warning("session store unavailable: %s", type(exc).__name__)
    return StoreUnavailable("the session store is unavailable")


# --- opening sealed records -----------------------------------------------------------------------


class RecordOpener:
    """Opens the sealed records of a persistent store (SQL, Redis): decrypt, decode, check.

    :param crypto: the store's :class:`~flask_authflow._core.crypto.SessionCrypto`.
    :param log: where refusals are logged (without any session data).
    :param what: what the store calls one record in those messages (``"row"``, ``"key"``).

    Every read is opened afresh: nothing is remembered between requests.
    """

    __slots__ = ("_crypto", "_log", "_what")

    def __init__(self, crypto: SessionCrypto, *, log: logging.Logger, what: str = "row") -> None:
        self._crypto = crypto
        self._log = log
        self._what = what

    def open(self, key: str, data: Any, expected_sid: str | None = None) -> SessionRecord | None:
        """The record sealed in ``data`` under ``key`` (``sid_hash`` of its id), or ``None``
        (logged) if it does not decrypt, does not decode, or is another session's record
        (its id does not hash to ``key``, or differs from ``expected_sid`` when given)."""
        try:
            record = deserialize_record(self._crypto.decrypt(key, bytes(data)))
        except (SessionDecryptError, SessionRecordError) as exc:
            name = type(exc).__name__
            self._log.warning("session %s %s… unreadable (%s); treated as absent", self._what, key[:8], name)
            return None
        if sid_hash(record.sid) != key or (expected_sid is not None and record.sid != expected_sid):
            self._log.warning(
                "session %s %s… holds another session's record; treated as absent", self._what, key[:8]
            )
            return None
        return record
