"""Session records in Redis (the ``[redis]`` extra), for sites whose hot path must not touch SQL.

Only the sessions move: users, factors, attempts, audit and issuer keys stay in SQL. A
protected request then costs one Redis round trip (one script call that reads the record
and, when the session is due, touches it) and no SQL at all.

Layout, under a key prefix (``authflow:`` by default)::

    <prefix>s:<sid_hash>                 hash  d = sealed record, e = expiry (µs since the epoch),
                                               u / f = the index sets the record is in,
                                               t = the tenant's set its user set is in,
                                               l = last seen (µs)
    <prefix>u:<sha256(tenant, user_id)>  set   sid hashes of the user's sessions
    <prefix>t:<sha256(tenant)>           set   the tenant's user sets (a tenant-wide logout)
    <prefix>f:<federation_key>           set   sid hashes of a provider session's logins

As in the SQL store the key is the SHA-256 of the session id, never the id itself (a
reader of Redis, an RDB dump or a replica, cannot replay a cookie), and the record is
sealed with :class:`~flask_authflow._core.crypto.SessionCrypto` whose associated data
is that key, so a value copied onto another session's key does not open. The index sets
and the ``u`` / ``f`` fields are clear and unauthenticated: listing trusts the decrypted
record only.

Time. The injected clock decides expiry, as in every store: the record's expiry is kept
in the value (``e``) and every read compares it with ``clock.now()``. Redis removes the
key itself when the session is over: the key's TTL is set with ``PEXPIRE`` to
``expires_at - clock.now()`` (the remaining lifetime as the application sees it) rather
than with ``PEXPIREAT expires_at``, which Redis would compare with *its own* clock: a
skew between the application hosts and the Redis host would shorten or lengthen every
session, and a test's :class:`~flask_authflow._clock.MockClock` (in the past) would make
every key expire at birth. An index set lives as long as its longest-lived member.

Revocation. Every write that must not bring a revoked session back is one Lua script,
so Redis runs its check and its write with nothing in between: ``existing=True`` updates
the key only if it still exists and is unexpired; a rotation deletes every id in
``replaces`` and inserts the new one only if all of them are still live, and otherwise
writes nothing. Deletions remove the record and its index entries in one script too.

The scripts touch the index keys a record names, so the store needs a single Redis
(primary, with replicas or Sentinel as you like), not Redis Cluster.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from flask_authflow._clock import Clock, SystemClock, utc
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import SessionTouch
from flask_authflow._core.session import SessionRecord, federation_key, record_federation_key, sid_hash
from flask_authflow.errors import (
    ConfigurationError,
    MissingExtraError,
    StoreUnavailable,
)
from flask_authflow.sessions._stores import RecordOpener, serialize_record, store_unavailable
from flask_authflow.storage._redis_scripts import (
    DELETE,
    DELETE_INDEX,
    DELETE_TENANT,
    LIST,
    PURGE,
    READ_TOUCH,
    SAVE,
    TOUCH,
)

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["RedisSessionStore"]

log = logging.getLogger("flask_authflow.sessions")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: Timeouts of a client built from a URL (a URL's own ``socket_timeout=`` wins): a Redis
#: that does not answer fails the request closed within this time instead of hanging it.
SOCKET_TIMEOUT = 5.0
#: Keys examined per ``SCAN`` step of :meth:`RedisSessionStore.purge_expired`.
PURGE_BATCH = 500


def _micros(value: datetime) -> int:
    """Microseconds since the epoch, exactly (no float rounding)."""
    return (utc(value) - _EPOCH) // _MICROSECOND


def _seen(record: SessionRecord | None, seen: Any) -> SessionRecord | None:
    """``record`` with the last-seen time a touch wrote (``l``), when that is later."""
    if record is None or seen is None:
        return record
    touched = _EPOCH + int(seen) * _MICROSECOND
    return replace(record, last_seen_at=touched) if touched > record.last_seen_at else record


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def _import_redis() -> Any:
    try:
        import redis
    except ImportError as exc:
        raise MissingExtraError("redis", exc.name or "redis") from exc
    return redis


class RedisSessionStore:
    """A :class:`~flask_authflow._core.ports.SessionStore` in Redis.

    :param url_or_client: a ``redis://`` / ``rediss://`` / ``unix://`` URL (a client is
        built with 5-second timeouts and one retry of a dropped connection; the URL's own
        options win), or a ``redis.Redis`` client of your own (used as it is; it must not
        decode responses).
    :param crypto: seals each record at rest (use a key of its own, not the cookie
        signing key; :func:`~flask_authflow._core.crypto.derive_key` can derive one).
    :param clock: the time used for expiry (see the module's notes on time).
    :param prefix: put in front of every key this store writes, so several apps (or
        tests) can share one Redis database.

    Every Redis failure is raised as :class:`~flask_authflow.errors.StoreUnavailable` so
    callers fail closed. A record that does not decrypt or decode (wrong key, tampering)
    is treated as absent and logged without any session data.

    :raises MissingExtraError: the ``redis`` package is not installed
        (``pip install 'flask-authflow[redis]'``).
    """

    def __init__(
        self,
        url_or_client: str | Redis,
        *,
        crypto: SessionCrypto,
        clock: Clock | None = None,
        prefix: str = "authflow:",
    ) -> None:
        if not isinstance(crypto, SessionCrypto):
            raise TypeError("crypto must be a SessionCrypto")
        if not isinstance(prefix, str):
            raise TypeError("prefix must be a string")
        redis = _import_redis()
        self._owns_client = isinstance(url_or_client, str)
        if isinstance(url_or_client, str):
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            try:
                client = redis.Redis.from_url(
                    url_or_client,
                    socket_timeout=SOCKET_TIMEOUT,
                    socket_connect_timeout=SOCKET_TIMEOUT,
                    # A pooled connection that died (a Redis restart) is retried once; an
                    # outage is then reported at once, not after seconds of back-off.
                    retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
                )
            except ValueError as exc:
                raise ConfigurationError(f"not a Redis URL: {exc}") from None
        elif isinstance(url_or_client, redis.Redis):
            client = url_or_client
        else:
            raise TypeError("url_or_client must be a Redis URL or a redis.Redis client")
        if client.get_connection_kwargs().get("decode_responses"):
            raise ConfigurationError("the Redis client of the session store must not decode responses")
        self._redis: Redis = client
        self._errors: type[Exception] = redis.RedisError
        self._crypto = crypto
        self._opener = RecordOpener(crypto, log=log, what="key")
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._clock_given = clock is not None
        self.prefix = prefix
        self._record_prefix = f"{prefix}s:"
        self._save = client.register_script(SAVE)
        self._delete = client.register_script(DELETE)
        self._touch = client.register_script(TOUCH)
        self._read_touch = client.register_script(READ_TOUCH)
        self._delete_index = client.register_script(DELETE_INDEX)
        self._delete_tenant = client.register_script(DELETE_TENANT)
        self._list = client.register_script(LIST)
        self._purge = client.register_script(PURGE)

    @property
    def client(self) -> Redis:
        """The Redis client (for health checks and tests)."""
        return self._redis

    def close(self) -> None:
        """Close the connections of a client this store built from a URL (a client you
        passed in is yours to close)."""
        if self._owns_client:
            self._redis.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:  # connection refused, timeouts, script errors, a full Redis
            # The message may carry the URL or arguments: keep it out of the log.
            raise store_unavailable(exc) from exc

    # --- keys --------------------------------------------------------------------------------

    def _record_key(self, sid: str) -> str:
        return self._record_prefix + sid_hash(sid)

    def _user_index(self, tenant: str, user_id: str) -> str:
        digest = hashlib.sha256(f"{len(tenant)}:{tenant}\n{user_id}".encode()).hexdigest()
        return f"{self.prefix}u:{digest}"

    def _tenant_index(self, tenant: str) -> str:
        return f"{self.prefix}t:{hashlib.sha256(tenant.encode()).hexdigest()}"

    def _federation_index(self, key: str) -> str:
        return f"{self.prefix}f:{key}"

    def _now(self) -> int:
        return _micros(self._clock.now())

    # --- record <-> value --------------------------------------------------------------------

    def _open(self, key: str, data: Any, expected_sid: str | None = None) -> SessionRecord | None:
        return self._opener.open(key, data, expected_sid)

    # --- SessionStore ------------------------------------------------------------------------

    def _live_fields(self, key: str) -> tuple[Any, Any] | None:
        """The sealed data and the last-seen field (``l``) of the live record ``key``: one
        ``HMGET``, no script; ``None`` when there is none or it is over."""
        with self._guard():
            data, expires, seen = self._redis.hmget(self._record_prefix + key, ("d", "e", "l"))
        if data is None or expires is None or int(expires) <= self._now():
            return None
        return data, seen

    def load(self, sid: str) -> SessionRecord | None:
        key = sid_hash(sid)
        found = self._live_fields(key)
        return None if found is None else _seen(self._open(key, found[0], expected_sid=sid), found[1])

    def load_touching(self, sid: str, touch: SessionTouch) -> tuple[SessionRecord, datetime | None] | None:
        """``load`` (one ``HMGET``, the whole cost of a session that is not due: nearly every
        request), then, only when due, one script call that touches and reads again (a
        pipeline cannot make its write depend on what its read found). A read that always
        ran the script cost every request 20-35 % more than the ``HMGET`` (measured on
        this machine), for a touch that falls due once in many requests."""
        key = sid_hash(sid)
        found = self._live_fields(key)
        if found is None:
            return None
        data, seen = found
        if seen is not None and int(seen) > _micros(touch.due_by):
            record = _seen(self._open(key, data, expected_sid=sid), seen)
            return None if record is None else (record, None)
        return self._read_touching(key, sid, touch)

    def _read_touching(
        self, key: str, sid: str, touch: SessionTouch
    ) -> tuple[SessionRecord, datetime | None] | None:
        """The touch script: it reads again and touches when still due (atomically)."""
        args = [
            self._now(),
            self._record_prefix,
            _micros(touch.due_by),
            _micros(touch.at),
            _micros(touch.expires_at),
        ]
        with self._guard():
            found = self._read_touch(keys=[self._record_prefix + key], args=args)
        if found is None:
            return None
        data, seen, expires, touched = found
        record = _seen(self._open(key, data, expected_sid=sid), seen or None)
        if record is None:
            return None
        replaced = _EPOCH + int(expires) * _MICROSECOND
        if touched >= 0:
            return record, replaced if touched else None
        # Written before the store kept the last-seen time and the tenant's set beside the
        # record: decided here, and touched with a second call, which adds both.
        if record.last_seen_at > touch.due_by:
            return record, None
        try:
            written = self.touch(replace(record, last_seen_at=touch.at), max(replaced, utc(touch.expires_at)))
        except StoreUnavailable:  # the read worked: a refresh that could not be written is skipped
            log.warning("session refresh skipped: the session store is unavailable")
            return record, None
        return record, replaced if written else None

    def touch(self, record: SessionRecord, expires_at: datetime) -> bool:
        """One script call: the live record's expiry and last-seen time, nothing else."""
        key = self._record_key(record.sid)
        now = self._now()
        expires = _micros(expires_at)
        tenant_index = self._tenant_index(record.tenant) if record.tenant is not None else ""
        ttl_ms = max(1, math.ceil((expires - now) / 1000))
        with self._guard():
            args = [now, self._record_prefix, expires, _micros(record.last_seen_at), ttl_ms, tenant_index]
            return bool(self._touch(keys=[key], args=args))

    def save(
        self,
        record: SessionRecord,
        expires_at: datetime,
        *,
        replaces: Sequence[str] = (),
        existing: bool = False,
    ) -> bool:
        """Write ``record`` under the contract of :meth:`SessionStore.save`, atomically (one
        Lua script: the liveness checks and the writes run with nothing in between)."""
        key = sid_hash(record.sid)
        now = self._now()
        expires = _micros(expires_at)
        ttl_ms = max(1, math.ceil((expires - now) / 1000))
        user_index = tenant_index = ""
        if record.tenant is not None and record.user_id is not None:
            user_index = self._user_index(record.tenant, record.user_id)
            tenant_index = self._tenant_index(record.tenant)
        fed_key = record_federation_key(record)
        olds = (
            []
            if existing
            else [self._record_key(old) for old in dict.fromkeys(replaces) if old != record.sid]
        )
        with self._guard():
            written = self._save(
                keys=[self._record_prefix + key, *olds],
                args=[
                    now,
                    self._record_prefix,
                    "1" if existing else "0",
                    expires,
                    ttl_ms,
                    self._crypto.encrypt(key, serialize_record(record)),
                    user_index,
                    "" if fed_key is None else self._federation_index(fed_key),
                    tenant_index,
                    _micros(record.last_seen_at),
                ],
            )
        return bool(written)

    def delete(self, sid: str) -> None:
        with self._guard():
            self._delete(keys=[self._record_key(sid)], args=[self._now(), self._record_prefix])

    def list_user_sessions(self, tenant: str, user_id: str) -> list[SessionRecord]:
        with self._guard():
            found = self._list(
                keys=[self._user_index(tenant, user_id)], args=[self._now(), self._record_prefix]
            )
        records = []
        for member, data, seen in sorted(zip(found[::3], found[1::3], found[2::3], strict=True)):
            record = _seen(self._open(member.decode("ascii"), data), seen or None)
            # The index is not authenticated: trust the decrypted record (a guest has no
            # user, so it never matches).
            if record is not None and record.tenant == tenant and record.user_id == user_id:
                records.append(record)
        return records

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        """Delete every session of the user; returns how many live sessions were revoked."""
        return self._drop_index(self._user_index(tenant, user_id), "u", self._tenant_index(tenant))

    def delete_tenant_sessions(self, tenant: str) -> int:
        """Delete every session of every user of ``tenant`` (guests carry no tenant and
        stay); returns how many live sessions were revoked. One script: a session saved
        concurrently is either deleted by it or, loaded before, finds its key gone and is
        not written back. Redis does nothing else while it runs (milliseconds per
        thousand sessions)."""
        with self._guard():
            return int(
                self._delete_tenant(
                    keys=[self._tenant_index(tenant)], args=[self._now(), self._record_prefix]
                )
            )

    def delete_federated_sessions(self, issuer: str, provider_sid: str) -> int:
        """Delete every session of the provider session (``issuer``, ``sid``)."""
        return self._drop_index(self._federation_index(federation_key(issuer, provider_sid)), "f", "")

    def _drop_index(self, index: str, field: str, tenant_index: str) -> int:
        with self._guard():
            return int(
                self._delete_index(keys=[index], args=[self._now(), self._record_prefix, field, tenant_index])
            )

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock when none was given at construction (``AuthFlow.init_app``
        calls it, so a store built at import time follows the app and a test's
        ``mock_clock``, as the backends do)."""
        if not self._clock_given:
            self._clock = clock

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Delete every record whose expiry has passed by the store's clock (only those of
        ``tenant`` when given); returns how many.

        Redis removes expired keys by itself, so with the system clock there is rarely
        anything left to do; this walks the store's keys (``SCAN``), or the tenant's index
        sets, for operators and for clocks that run ahead of Redis's.
        """
        removed = 0
        with self._guard():
            batch: list[Any] = []
            for key in self._record_keys() if tenant is None else self._tenant_record_keys(tenant):
                batch.append(key)
                if len(batch) >= PURGE_BATCH:
                    removed += int(self._purge(keys=batch, args=[self._now(), self._record_prefix]))
                    batch = []
            if batch:
                removed += int(self._purge(keys=batch, args=[self._now(), self._record_prefix]))
        return removed

    def _record_keys(self) -> Iterator[Any]:
        return iter(self._redis.scan_iter(match=_glob_escape(self._record_prefix) + "*", count=PURGE_BATCH))

    def _tenant_record_keys(self, tenant: str) -> Iterator[bytes]:
        """The record keys the tenant's user sets name (the purge script checks each expiry)."""
        prefix = self._record_prefix.encode()
        for user_index in self._redis.smembers(self._tenant_index(tenant)):
            for member in self._redis.smembers(user_index):  # bytes: the client never decodes
                yield prefix + (member.encode() if isinstance(member, str) else member)

    def database_engine(self) -> None:
        """``None``: the sessions are in Redis."""
        return None

    def __repr__(self) -> str:
        kwargs = self._redis.get_connection_kwargs()
        where = (
            f"unix://{kwargs['path']}"
            if "path" in kwargs
            else f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
        )
        return f"<RedisSessionStore {where} prefix={self.prefix!r}>"
