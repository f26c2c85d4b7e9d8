"""Sessions: the session store port and its maintenance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from flask_authflow._core.session import AuthSession, SessionRecord

__all__ = [
    "MaintainedSessionStore",
    "SessionHandoff",
    "SessionMaintenance",
    "SessionStore",
    "SessionTouch",
    "SessionWrite",
]


@dataclass(frozen=True, slots=True)
class SessionTouch:
    """A last-seen refresh folded into a session read (:meth:`SessionStore.load_touching`).

    The store writes ``at`` as the stored last-seen time and ``max(stored expiry,
    expires_at)`` as the expiry of the live session, only when its stored last-seen time
    is at or before ``due_by``; a session that is not due costs no write."""

    #: The new last-seen time (the request's time).
    at: datetime
    #: Touch only a session last seen at or before this.
    due_by: datetime
    #: The expiry the touch writes, unless the stored one is later.
    expires_at: datetime


class SessionStore(Protocol):
    """Persistence of session records, keyed by session id.

    A store never interprets the record beyond the index columns it needs (tenant,
    user id, expiry); persistent stores encrypt the record at rest.
    Every method raises :class:`~flask_authflow.errors.StoreUnavailable` when the
    backing service cannot be reached (callers fail closed).
    """

    def load(self, sid: str) -> SessionRecord | None:
        """The record with this id, or ``None`` if unknown or expired."""
        ...

    def load_touching(self, sid: str, touch: SessionTouch) -> tuple[SessionRecord, datetime | None] | None:
        """:meth:`load`, and the :class:`SessionTouch` when the session is due: a read that
        is not due costs what :meth:`load` costs (nearly every request), a due one is then
        touched atomically (the store re-checks the due time as it writes). Returns the
        record as it was stored before the touch and the expiry the touch replaced
        (``None``: no touch written, because the session was not due, or the store would
        have had to wait for it)."""
        ...

    def save(
        self,
        record: SessionRecord,
        expires_at: datetime,
        *,
        replaces: Sequence[str] = (),
        existing: bool = False,
    ) -> bool:
        """Write the record; it must be gone (``load`` → ``None``) after ``expires_at``.

        A deleted session is revoked, and no save may bring it back:

        * ``existing=True`` (the record was loaded from this store under ``record.sid``):
          update the live row only. If the row is gone (logout, ``sessions revoke``, a
          password change, expiry) nothing is written and ``False`` is returned. Between
          two live writers of one row the last one wins (ordinary updates).
        * ``existing=False``: ``record.sid`` is a brand-new id. ``replaces`` lists the
          earlier ids of this session that the store holds (before a rotation): they are
          deleted in the same atomic step as the insert, so no moment exists where both
          ids work. If any of them is already gone (revoked), nothing is written and
          ``False`` is returned.

        :returns: ``True`` if the record was written, ``False`` if the session was revoked.
        """
        ...

    def touch(self, record: SessionRecord, expires_at: datetime) -> bool:
        """Refresh the stored last-seen time of the live session ``record.sid`` to
        ``record.last_seen_at`` and its expiry to ``expires_at``: one small write of those
        two values only (the sealed record is not written again); ``load`` then returns
        the record with that last-seen time. Never re-creates a deleted session.

        A best-effort write: a store that would have to wait for it (SQLite's write lock
        held by another writer) skips it and returns ``False``, as it does for a session
        that is gone. :returns: ``True`` if the refresh was written.
        """
        ...

    def delete(self, sid: str) -> None:
        """Remove the record (no error if it is already gone)."""
        ...

    def list_user_sessions(self, tenant: str, user_id: str) -> list[SessionRecord]:
        """Live sessions of one user (any state other than Guest)."""
        ...

    def delete_user_sessions(self, tenant: str, user_id: str) -> int:
        """Revoke every session of one user; returns how many were removed."""
        ...

    def delete_tenant_sessions(self, tenant: str) -> int:
        """Revoke every session of every user of ``tenant`` (a tenant-wide logout);
        returns how many were removed. Guest sessions carry no tenant and stay."""
        ...

    def delete_federated_sessions(self, issuer: str, provider_sid: str) -> int:
        """Revoke every session established by a federated login of the provider session
        (``issuer``, ``sid``) (a back-channel logout); returns how many were removed."""
        ...


class SessionMaintenance(Protocol):
    """What the ``flask authflow`` commands call on a session store; every session store
    of the package implements it."""

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Delete the expired sessions now (only those of ``tenant`` when given); returns how many."""
        ...

    def adopt_clock(self, clock: Any) -> None:
        """Use the app's clock unless the store was built with one of its own."""
        ...

    def database_engine(self) -> Any:
        """The SQLAlchemy engine holding the sessions (``flask authflow db`` migrates it), or ``None``."""
        ...


class MaintainedSessionStore(SessionStore, SessionMaintenance, Protocol):
    """A :class:`SessionStore` the command line can maintain (what an app's store is)."""


@dataclass(frozen=True, slots=True)
class SessionWrite:
    """A login step's session as its unit of work writes it (:meth:`UnitOfWork.save_session`):
    the record (its last-seen time set), its expiry, and the :meth:`SessionStore.save`
    arguments that say how it replaces what the store holds."""

    record: SessionRecord
    expires_at: datetime
    replaces: tuple[str, ...] = ()
    existing: bool = False


class SessionHandoff(Protocol):
    """How the session layer (the Flask session interface) hands a login step's session to
    the step's unit of work, and takes it back once committed: it then only sends the cookie."""

    def prepare_write(self, session: AuthSession) -> SessionWrite | None:
        """What the unit writes of ``session``; ``None``: nothing of it to write there (the
        response takes care of it)."""
        ...

    def mark_written(self, session: AuthSession, write: SessionWrite) -> None:
        """``write`` was committed: only the cookie is left to send."""
        ...
