"""The local issuer's keys in a SQL table, for issuers running on several machines.

Table ``authflow_issuer_keys`` (kid, pem, alg, is_current, created_at). A partial
unique index allows one row with ``is_current`` true, so two processes rotating
at once cannot both end up current; on PostgreSQL rotations also take a table
lock that serialises rotators without blocking readers.

With a ``crypto`` (:class:`~flask_authflow._core.crypto.SessionCrypto`; the app
passes one keyed by ``AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY`` or a key derived from the
signing key) the ``pem`` column holds ``enc1:`` + base64 of an AES-256-GCM envelope
whose associated data is the kid, so a sealed key copied onto another row does not
open. Rows written unencrypted (older versions) are still read and are sealed on the
first read that has a ``crypto``.
"""

from __future__ import annotations

import base64
import binascii
import random
import threading
import time
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, delete, false, insert, inspect, select, text, true, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow.errors import (
    DuplicateKeyId,
    KeyStoreError,
    RotationRefused,
    SessionDecryptError,
    SigningKeyError,
)
from flask_authflow.issuer._keys import LoadedKeys, LocalIdpSigningKey
from flask_authflow.issuer._keystores import RotationState, StagedRotationStore
from flask_authflow.storage._sql.engine import EngineSource, resolve_engine
from flask_authflow.storage._sql.schema import issuer_key_schedule_table, issuer_keys_table, metadata

__all__ = ["SqlAlchemyLocalIdpKeyStore"]

T = TypeVar("T")

_RETRIES = 30
_SEALED_PREFIX = "enc1:"


_table = issuer_keys_table
_schedule = issuer_key_schedule_table

#: Per database, what serialises rotators: PostgreSQL's table lock lets plain SELECTs
#: (load_all) through. A rotation on another database writes first instead.
_ROTATION_LOCKS: dict[str, Any] = {
    "postgresql": text(f"LOCK TABLE {_table.name} IN SHARE ROW EXCLUSIVE MODE"),
}
#: Elsewhere a write that changes nothing takes SQLite's write lock before any read.
_TAKE_WRITE_LOCK = update(_table).where(false()).values(is_current=False)


class SqlAlchemyLocalIdpKeyStore:
    """A :class:`~flask_authflow.issuer._keystores.LocalIdpKeyStore` over SQLAlchemy.

    ``engine_source`` is an Engine, a URL or a Flask-SQLAlchemy ``db``. The table
    is created on first use if missing (only this table).
    """

    def __init__(
        self, engine_source: EngineSource, *, clock: Clock | None = None, crypto: SessionCrypto | None = None
    ) -> None:
        self._engine: Engine = resolve_engine(engine_source)
        self._crypto = crypto
        self._owns_engine = isinstance(engine_source, str)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._ready = False
        self._ready_lock = threading.Lock()
        # This database's locking statements, chosen once.
        self._rotation_lock: Any = _ROTATION_LOCKS.get(self._engine.dialect.name)
        self._write_lock: Any = self._rotation_lock if self._rotation_lock is not None else _TAKE_WRITE_LOCK

    @property
    def engine(self) -> Engine:
        return self._engine

    def create_table(self) -> None:
        """Create ``authflow_issuer_keys`` and its index if they do not exist."""
        with self._ready_lock:
            if self._ready:
                return
            try:
                metadata.create_all(self._engine, tables=[_table, _schedule], checkfirst=True)
            except SQLAlchemyError as exc:
                # Another process may have created it between the check and the CREATE.
                try:
                    exists = inspect(self._engine).has_table(_table.name)
                except SQLAlchemyError:
                    exists = False
                if not exists:
                    raise KeyStoreError(f"cannot create {_table.name}: {type(exc).__name__}") from exc
            self._ready = True

    def is_initialized(self) -> bool:
        """Whether the table holds a current key."""
        self.create_table()
        try:
            with self._engine.connect() as conn:
                row = conn.execute(select(_table.c.kid).where(_table.c.is_current == true())).first()
        except SQLAlchemyError as exc:
            raise KeyStoreError(f"cannot read {_table.name}: {type(exc).__name__}") from exc
        return row is not None

    def ensure_current(self, factory: Callable[[], LocalIdpSigningKey]) -> LoadedKeys:
        """Load the keys, first storing ``factory()`` as current if the table is empty."""
        if not self.is_initialized():
            try:
                self.rotate(factory())
            except DuplicateKeyId:
                pass
        return self.load_all()

    def load_all(self) -> LoadedKeys:
        """Every key, from a single SELECT (one consistent snapshot)."""
        self.create_table()
        try:
            with self._engine.connect() as conn:
                rows = conn.execute(
                    select(_table.c.kid, _table.c.pem, _table.c.alg, _table.c.is_current).order_by(
                        _table.c.created_at.desc(), _table.c.kid
                    )
                ).all()
        except SQLAlchemyError as exc:
            raise KeyStoreError(f"cannot read {_table.name}: {type(exc).__name__}") from exc
        current: list[LocalIdpSigningKey] = []
        historical: list[LocalIdpSigningKey] = []
        unsealed: list[str] = []
        for kid, stored, alg, is_current in rows:
            if not stored.startswith(_SEALED_PREFIX):
                unsealed.append(kid)
            try:
                key = LocalIdpSigningKey.from_pem(self._open(kid, stored), algorithm=alg, kid=kid)
            except SigningKeyError as exc:
                raise KeyStoreError(f"issuer key {kid!r} is unusable: {exc.message}") from exc
            (current if is_current else historical).append(key)
        if unsealed and self._crypto is not None:
            self._seal_rows({k.kid: k for k in (*current, *historical) if k.kid in unsealed})
        if len(current) != 1:
            raise KeyStoreError(
                f"{_table.name} must hold exactly one current key, found {len(current)}"
                + ("; store a key with rotate()" if not rows else "")
            )
        return LoadedKeys(current[0], historical)

    def rotate(self, new_current: LocalIdpSigningKey) -> None:
        """Insert ``new_current`` as current and demote the previous one, in one transaction."""
        if not isinstance(new_current, LocalIdpSigningKey):
            raise KeyStoreError("rotate() needs a LocalIdpSigningKey")
        self.create_table()
        pem = self._seal(new_current)
        last: Exception | None = None
        for attempt in range(_RETRIES):
            try:
                with self._engine.begin() as conn:
                    if self._rotation_lock is not None:
                        # Serialises rotators; plain SELECTs (load_all) are not blocked.
                        conn.execute(self._rotation_lock)
                    # Write first: on SQLite this takes the write lock before any read,
                    # so concurrent rotators queue instead of failing on a stale snapshot.
                    conn.execute(update(_table).where(_table.c.is_current == true()).values(is_current=False))
                    if conn.execute(select(_table.c.kid).where(_table.c.kid == new_current.kid)).first():
                        raise DuplicateKeyId(new_current.kid)
                    conn.execute(
                        insert(_table).values(
                            kid=new_current.kid,
                            pem=pem,
                            alg=new_current.algorithm,
                            is_current=True,
                            created_at=self._clock.now(),
                        )
                    )
                return
            except DBAPIError as exc:
                # Lock timeouts, serialization failures or the one-current index firing
                # under a race: the transaction rolled back, so try again.
                last = exc
                time.sleep(min(0.5, 0.01 * (attempt + 1)) * random.random())  # noqa: S311 - jitter only
        raise KeyStoreError(f"rotation failed after {_RETRIES} attempts: {type(last).__name__}")

    # -- staged rotation ---------------------------------------------------------------------------

    def _write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction, serialised like :meth:`rotate` (retried on races)."""
        self.create_table()
        last: Exception | None = None
        for attempt in range(_RETRIES):
            try:
                with self._engine.begin() as conn:
                    conn.execute(self._write_lock)  # before any read
                    return work(conn)
            except DBAPIError as exc:
                last = exc
                time.sleep(min(0.5, 0.01 * (attempt + 1)) * random.random())  # noqa: S311 - jitter only
        raise KeyStoreError(f"key store write failed after {_RETRIES} attempts: {type(last).__name__}")

    @staticmethod
    def _state(conn: Connection) -> RotationState:
        rows = conn.execute(select(_schedule.c.kid, _schedule.c.staged_at, _schedule.c.retired_at)).all()
        staged = [(kid, at) for kid, at, _ in rows if at is not None]
        retired = {kid: at for kid, _, at in rows if at is not None}
        kid, at = staged[0] if staged else (None, None)
        return RotationState(kid, at, retired)

    def staged_rotation(self) -> StagedRotationStore:
        """This store: it keeps staged rotation."""
        return self

    def rotation_state(self) -> RotationState:
        self.create_table()
        try:
            with self._engine.connect() as conn:
                return self._state(conn)
        except SQLAlchemyError as exc:
            raise KeyStoreError(f"cannot read {_schedule.name}: {type(exc).__name__}") from exc

    def stage(self, key: LocalIdpSigningKey, at: datetime) -> None:
        if not isinstance(key, LocalIdpSigningKey):
            raise KeyStoreError("stage() needs a LocalIdpSigningKey")
        pem = self._seal(key)

        def work(conn: Connection) -> None:
            state = self._state(conn)
            if state.staged_kid is not None:
                raise RotationRefused(f"key {state.staged_kid!r} is already staged: activate it first")
            if conn.execute(select(_table.c.kid).where(_table.c.kid == key.kid)).first():
                raise DuplicateKeyId(key.kid)
            conn.execute(
                insert(_table).values(
                    kid=key.kid, pem=pem, alg=key.algorithm, is_current=False, created_at=self._clock.now()
                )
            )
            conn.execute(insert(_schedule).values(kid=key.kid, staged_at=at, retired_at=None))

        self._write(work)

    def activate(self, at: datetime) -> str:
        def work(conn: Connection) -> str:
            staged = self._state(conn).staged_kid
            if staged is None:
                raise RotationRefused("no staged key to activate")
            previous = conn.execute(select(_table.c.kid).where(_table.c.is_current == true())).scalar_one()
            conn.execute(update(_table).where(_table.c.is_current == true()).values(is_current=False))
            conn.execute(update(_table).where(_table.c.kid == staged).values(is_current=True))
            conn.execute(delete(_schedule).where(_schedule.c.kid.in_([staged, previous])))
            conn.execute(insert(_schedule).values(kid=previous, staged_at=None, retired_at=at))
            return str(staged)

        return self._write(work)

    def prune(self, kids: Collection[str]) -> None:
        wanted = list(kids)

        def work(conn: Connection) -> None:
            current = conn.execute(select(_table.c.kid).where(_table.c.is_current == true())).scalar_one()
            staged = self._state(conn).staged_kid
            present = set(conn.execute(select(_table.c.kid).where(_table.c.kid.in_(wanted))).scalars())
            for kid in wanted:
                if kid in (current, staged):
                    raise RotationRefused(f"key {kid!r} is current or staged and cannot be pruned")
                if kid not in present:
                    raise RotationRefused(f"no key {kid!r} in the store")
            conn.execute(delete(_table).where(_table.c.kid.in_(wanted)))
            conn.execute(delete(_schedule).where(_schedule.c.kid.in_(wanted)))

        self._write(work)

    def _seal(self, key: LocalIdpSigningKey) -> str:
        pem = key.private_pem()
        if self._crypto is None:
            return pem.decode("ascii")
        return _SEALED_PREFIX + base64.b64encode(self._crypto.encrypt(key.kid, pem)).decode("ascii")

    def _open(self, kid: str, stored: str) -> bytes:
        if not stored.startswith(_SEALED_PREFIX):
            return stored.encode("utf-8")  # written unencrypted by an older version
        if self._crypto is None:
            raise KeyStoreError(
                f"issuer key {kid!r} is encrypted: set AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY "
                "(or the signing key it was derived from)"
            )
        try:
            blob = base64.b64decode(stored[len(_SEALED_PREFIX) :], validate=True)
            return self._crypto.decrypt(kid, blob)
        except (binascii.Error, SessionDecryptError) as exc:
            raise KeyStoreError(
                f"issuer key {kid!r} does not decrypt: wrong or missing "
                "AUTHFLOW_ISSUER_KEY_ENCRYPTION_KEY / AUTHFLOW_PREVIOUS_ISSUER_KEY_ENCRYPTION_KEYS"
            ) from exc

    def _seal_rows(self, keys: dict[str, LocalIdpSigningKey]) -> None:
        """Encrypt rows written unencrypted (the migration path); best effort."""
        try:
            with self._engine.begin() as conn:
                for kid, key in keys.items():
                    conn.execute(
                        update(_table)
                        .where(_table.c.kid == kid, ~_table.c.pem.startswith(_SEALED_PREFIX))
                        .values(pem=self._seal(key))
                    )
        except SQLAlchemyError:
            pass  # still readable as it is; the next load tries again

    def dispose(self) -> None:
        """Close pooled connections of an engine this store created from a URL."""
        if self._owns_engine:
            self._engine.dispose()

    def __repr__(self) -> str:
        return f"<SqlAlchemyLocalIdpKeyStore {self._engine.url.render_as_string(hide_password=True)!r}>"
