"""The request-time session object: :class:`AuthSession` (``flask.session`` and
``current_session``) wraps one record, applies transitions to it, rotates its id and caps
the application's custom data (re-exported by :mod:`flask_authflow._core.session`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from flask.json.tag import TaggedJSONSerializer
from flask.sessions import SessionMixin
from werkzeug.datastructures import CallbackDict

from flask_authflow._core.session._record import (
    AuthState,
    SessionRecord,
    clean_user_agent,
    new_session_id,
    reset_to_guest,
)
from flask_authflow.errors import SessionDataTooLarge

#: Maximum size of ``SessionData.custom`` once serialised (64 KiB).
CUSTOM_DATA_LIMIT = 64 * 1024

#: Serialiser for custom data: Flask's own tagged JSON, so ``flask.session`` values
#: (tuples, bytes, Markup, datetimes, flashed messages) round-trip as they do in Flask.
custom_serializer = TaggedJSONSerializer()


def _custom_size(data: Mapping[str, Any]) -> int:
    if not data:
        return 0
    return len(custom_serializer.dumps(dict(data)).encode("utf-8"))


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """The request-visible state of an :class:`AuthSession` (see :meth:`AuthSession.snapshot`)."""

    record: SessionRecord
    dead_sids: tuple[str, ...]
    data: dict[str, Any]
    modified: bool
    accessed: bool


class AuthSession(CallbackDict[str, Any], SessionMixin):
    """The session of the current request (``flask.session`` and ``current_session``).

    Its items are the application's custom data (as with Flask's own session); the
    authentication state is read through typed properties and changed only through
    :meth:`transition`, which rotates the session id whenever the state changes.
    """

    def __init__(
        self,
        record: SessionRecord,
        *,
        new: bool,
        request_fingerprint: str | None = None,
        custom_limit: int = CUSTOM_DATA_LIMIT,
        sid_factory: Callable[[], str] = new_session_id,
    ) -> None:
        self._custom_limit = custom_limit

        def on_update(data: CallbackDict[str, Any]) -> None:
            assert isinstance(data, AuthSession)
            data.modified = True
            data.accessed = True
            data.used = True

        self._record = record
        #: the last record :attr:`record` composed, with the record it was composed from.
        self._composed: tuple[SessionRecord, SessionRecord] | None = None
        self._sid_factory = sid_factory
        self.request_fingerprint = request_fingerprint
        #: the request's User-Agent (recorded as ``device`` when the session leaves Guest).
        self.request_user_agent: str | None = None
        self.new = new
        self.modified = False
        self.accessed = False
        #: the session's content was read or changed in this request. Unlike ``accessed``
        #: (which Flask sets on any touch of the ``flask.session`` proxy, extension hooks
        #: included) this decides the last-seen refresh and ``Cache-Control``.
        self.used = False
        #: ids this session had earlier in the request; the interface deletes them at save.
        self.dead_sids: list[str] = []
        #: set when the binding check failed for this request (for metrics / audit).
        self.binding_mismatch = False
        super().__init__(dict(record.custom) if record.custom else None, on_update)

    # ``SessionMixin.permanent`` writes into the dict; our lifetime is set by config instead.
    @property
    def permanent(self) -> bool:
        return True

    @permanent.setter
    def permanent(self, value: bool) -> None:
        pass

    def __setitem__(self, key: str, value: Any) -> None:
        candidate = dict(self)
        candidate[key] = value
        self._check_size(candidate)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        candidate = dict(self)
        candidate.update(*args, **kwargs)
        self._check_size(candidate)
        super().update(*args, **kwargs)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    # Reading custom data marks the session accessed (as Flask's own session does), so a
    # response that depends on it gets ``Vary: Cookie`` and the caching headers.
    def __getitem__(self, key: str) -> Any:
        self.accessed = self.used = True
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.accessed = self.used = True
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.accessed = self.used = True
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self.accessed = self.used = True
        return super().__iter__()

    def __len__(self) -> int:
        self.accessed = self.used = True
        return super().__len__()

    def keys(self) -> Any:
        self.accessed = self.used = True
        return super().keys()

    def items(self) -> Any:
        self.accessed = self.used = True
        return super().items()

    def values(self) -> Any:
        self.accessed = self.used = True
        return super().values()

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]  # ``session |= {...}`` is capped too
        self.update(other)
        return self

    def _check_size(self, data: Mapping[str, Any]) -> None:
        size = _custom_size(data)
        if size > self._custom_limit:
            raise SessionDataTooLarge(size, self._custom_limit)

    def check_size(self) -> None:
        """Raise :class:`SessionDataTooLarge` if nested mutation grew custom data past the limit."""
        self._check_size(self)

    # --- typed read access -----------------------------------------------------------------

    def _touch(self) -> None:
        self.accessed = self.used = True

    @property
    def record(self) -> SessionRecord:
        """The current record, with the custom data as it is now.

        Composed again only when something changed since the last time: the record (a new
        one is assigned on every change) or the data (another key, another value object).
        """
        composed = self._composed
        if composed is not None and composed[0] is self._record and _holds_same(composed[1].custom, self):
            return composed[1]
        current = self._record
        record = replace(current, custom=dict(self))
        self._composed = (current, record)
        return record

    @property
    def sid(self) -> str:
        self._touch()
        return self._record.sid

    @property
    def state(self) -> AuthState:
        self._touch()
        return self._record.state

    @property
    def is_authenticated(self) -> bool:
        """True only in Authenticated (every required factor has passed)."""
        return self.state is AuthState.AUTHENTICATED

    @property
    def is_guest(self) -> bool:
        return self.state is AuthState.GUEST

    @property
    def is_authenticating(self) -> bool:
        return self.state is AuthState.AUTHENTICATING

    @property
    def is_pending_workflow(self) -> bool:
        return self.state is AuthState.PENDING_WORKFLOW

    @property
    def user_id(self) -> str | None:
        self._touch()
        return self._record.user_id

    @property
    def tenant(self) -> str | None:
        self._touch()
        return self._record.tenant

    @property
    def next_factor(self) -> str | None:
        self._touch()
        return self._record.next_factor

    @property
    def authenticated_at(self) -> datetime | None:
        self._touch()
        return self._record.authenticated_at

    @property
    def flow(self) -> Mapping[str, Any] | None:
        """Intermediate state of a ceremony in progress (federated login), or ``None``."""
        self._touch()
        return self._record.flow

    @property
    def workflow(self) -> Mapping[str, Any] | None:
        """The pending workflow (kind, data, expiry; its token only hashed), or ``None``."""
        self._touch()
        return self._record.workflow

    @property
    def custom(self) -> AuthSession:
        """The application's data: the session itself, as a dict (≤ 64 KiB serialised)."""
        self._touch()
        return self

    # --- changes --------------------------------------------------------------------------

    def transition(self, change: Callable[[SessionRecord], SessionRecord]) -> SessionRecord:
        """Apply a pure transition; rotate the id if the authentication state changed.

        The fingerprint of the request is bound at the first move out of Guest.
        """
        before = self.record
        after = change(before)
        # What the session itself changes (the binding, a new id), in one copy of the record.
        changes: dict[str, Any] = {}
        if after.state is not AuthState.GUEST and before.state is AuthState.GUEST:
            changes.update(
                fingerprint=self.request_fingerprint, device=clean_user_agent(self.request_user_agent)
            )
        if _auth_identity(before) != _auth_identity(after):
            self.dead_sids.append(before.sid)
            changes["sid"] = self._sid_factory()
        if changes:
            after = replace(after, **changes)
        # The record's own ``custom`` is never read (:attr:`record` reads the dict itself):
        # it is kept as it is, not copied empty.
        self._record = after
        if dict(self) != dict(after.custom):
            dict.clear(self)
            dict.update(self, after.custom)
        if _holds_same(after.custom, self):  # what :attr:`record` would compose now
            self._composed = (after, after)
        self.modified = True
        self.accessed = True
        return after

    def snapshot(self) -> SessionSnapshot:
        """What this request sees of the session now, to put back with :meth:`restore`."""
        return SessionSnapshot(
            record=self._record,
            dead_sids=tuple(self.dead_sids),
            data=dict(self),
            modified=self.modified,
            accessed=self.accessed,
        )

    def restore(self, snapshot: SessionSnapshot) -> None:
        """Undo every change since ``snapshot`` (a login step whose audit or commit failed)."""
        self._record = snapshot.record
        self.dead_sids[:] = snapshot.dead_sids
        dict.clear(self)
        dict.update(self, snapshot.data)
        self.modified = snapshot.modified
        self.accessed = snapshot.accessed

    def rotate_id(self) -> None:
        """Give the session a new id now; the old one dies when the response is saved."""
        self.dead_sids.append(self._record.sid)
        self._record = replace(self._record, sid=self._sid_factory())
        self.modified = True

    def clear(self) -> None:
        """Reset to Guest: custom data dropped, id rotated, cookie cleared on the response."""
        now = self._record.last_seen_at
        rotations = len(self.dead_sids)
        self.transition(lambda rec: reset_to_guest(rec, now=now))
        if len(self.dead_sids) == rotations:  # a guest with data: still a new id
            self.rotate_id()

    def __repr__(self) -> str:
        return (
            f"<AuthSession state={self._record.state.value} user={self._record.user_id!r} "
            f"keys={sorted(self.keys())!r}>"
        )


def _holds_same(custom: Mapping[str, Any], data: dict[str, Any]) -> bool:
    """``custom`` has the very keys and value objects of ``data``, in the same order (so a
    record with ``custom`` is what :attr:`AuthSession.record` would compose from ``data``).
    Compared by identity, not equality: ``1`` and ``True`` are equal, not the same value."""
    if len(custom) != dict.__len__(data):
        return False
    return all(
        key is other_key and value is other_value
        for (key, value), (other_key, other_value) in zip(custom.items(), dict.items(data), strict=True)
    )


def _auth_identity(record: SessionRecord) -> tuple[Any, ...]:
    """What, when it changes, must rotate the id (state, who, progress, freshness)."""
    return (
        record.state,
        record.tenant,
        record.user_id,
        record.factors_passed,
        record.authenticated_at,
    )
