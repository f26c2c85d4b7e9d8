"""The login store: identities, factors, attempts and audit rows with one unit of work."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from flask_authflow._core.audit import AuditSink
from flask_authflow._core.ports.attempts import (
    AttemptStore,
)
from flask_authflow._core.ports.factors import FactorRecordStore, KnownSecret
from flask_authflow._core.ports.sessions import SessionHandoff, SessionStore, SessionWrite
from flask_authflow._core.ports.users import IdentityStore, UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import Authenticated, FactorKind, FactorRequired, WorkflowPending

__all__ = ["LoginFacts", "LoginRecorder", "LoginStore", "UnitOfWork", "one_unit", "write_session_in_unit"]


@dataclass(frozen=True, slots=True)
class LoginFacts:
    """What ``begin_login`` decides on, read together (see :meth:`LoginStore.login_facts`)."""

    #: The user of the identifier in the tenant, if any (disabled ones included).
    user: UserRecord | None
    #: ``required_factors`` of that user; empty without one.
    kinds: list[FactorKind]
    #: The latest active lock on the identifier (as a lockout subject) or on one of the
    #: ``pairs`` asked for, or ``None``.
    locked_until: datetime | None
    #: The payload of the user's newest live account token of the ``token_kind`` asked
    #: for (a required enrollment), or ``None``.
    token_payload: Mapping[str, Any] | None = None
    #: The user's stored password hash, read with the rest (``None``: this store does not
    #: read it there; the password step then asks the store's ``get_password_hash``).
    password: KnownSecret | None = None


class UnitOfWork(Protocol):
    """The writes (and reads) of several store calls, kept together or not at all.

    Opened by :meth:`LoginStore.begin_unit`; every call of that store in the same context
    (thread, task) joins it until :meth:`commit` or :meth:`rollback`. A login step settles
    a credential check in one: the attempt row, the counter change, the single-use update
    of a one-time code and (when the store is also the audit sink) the audit rows.
    """

    def commit(self) -> None:
        """Keep every write of the unit; :class:`~flask_authflow.errors.AuditWriteError`
        (a :class:`~flask_authflow.errors.StoreUnavailable`) when that fails, and then
        nothing of the unit was kept."""
        ...

    def rollback(self) -> None:
        """Drop every write of the unit (never raises)."""
        ...

    def write_audit_now(self) -> None:
        """Write the audit rows the unit holds for its commit now, in its transaction, so
        that their failure comes before an effect outside the database (a mail). A store
        whose rows are chained keeps them for the commit (the chain's head would stay
        locked through the mail); :class:`~flask_authflow.errors.AuditWriteError` when
        the write fails."""
        ...

    def save_session(self, store: SessionStore, write: SessionWrite) -> bool:
        """Write a login step's session to ``store`` in the unit's transaction (as
        :meth:`SessionStore.save` with ``write``'s arguments), so that the session and the
        step's other writes commit together or not at all. ``False``: the session was
        revoked meanwhile (nothing written; roll the unit back). Which session stores
        write in a store's units is decided at wiring time; for any other ``store`` the
        unit raises ``RuntimeError`` (never a write outside its transaction)."""
        ...


def write_session_in_unit(
    handoff: SessionHandoff, store: SessionStore, session: AuthSession, unit: UnitOfWork
) -> Callable[[], None] | None:
    """Write ``session`` to ``store`` in ``unit`` (a login step's session writer): what to
    run once the unit committed, or ``None`` when the session was revoked meanwhile (roll
    the unit back).

    The session layer prepares the record and sends the cookie; the write itself is the
    unit's (storage never calls back into the session layer)."""
    write = handoff.prepare_write(session)
    if write is None:
        return lambda: None
    if not unit.save_session(store, write):
        return None
    return lambda: handoff.mark_written(session, write)


@contextmanager
def one_unit(begin_unit: Callable[[], UnitOfWork] | None) -> Iterator[None]:
    """The block's writes in one unit of work: begun with ``begin_unit`` and committed at
    the block's end (rolled back on an exception), or joined when this context has one open
    already (``begin_unit`` raises ``RuntimeError``; the unit's owner commits it). With
    ``None`` (a store without units) the writes run as they are."""
    if begin_unit is None:
        yield
        return
    try:
        unit = begin_unit()
    except RuntimeError:  # a unit of this context is open: the writes join it
        yield
        return
    try:
        yield
    except BaseException:
        unit.rollback()
        raise
    unit.commit()


class LoginStore(IdentityStore, FactorRecordStore, AttemptStore, AuditSink, Protocol):
    """What the login service runs on: identities, factors, attempt counters and audit
    rows in one store, with one unit of work across them (``InMemoryBackend``,
    ``SqlAlchemyBackend``)."""

    def login_facts(
        self,
        tenant: str,
        identifier: str,
        now: datetime,
        *,
        pairs: Sequence[str] = (),
        token_kind: str | None = None,
    ) -> LoginFacts:
        """What ``begin_login`` decides on, in one read: the user of ``identifier`` in
        ``tenant`` (as ``find_user``), their confirmed factor kinds (as
        ``required_factors``; empty without a user) and the latest active lock on
        ``identifier`` or on any of the lockout subjects ``pairs`` (the identifier with the
        client's host and network; as ``locked_until_any``) and, with ``token_kind``, the
        payload of the user's live account token of that kind (as ``live_account_token``).
        A phantom login makes the same read as a real one."""
        ...

    def begin_unit(self) -> UnitOfWork:
        """Open a unit of work in this context (see :class:`UnitOfWork`).

        :raises RuntimeError: a unit of this store is already open in this context (units
            do not nest; the calls then join the open one)."""
        ...


class LoginRecorder(Protocol):
    """What a flow outside the login package needs of the request-scoped login handle
    (:class:`~flask_authflow.login._service.AuthnRequest` implements it): log in a user the
    flow proved some other way, and write an audit row of its own."""

    def establish(
        self,
        session: AuthSession,
        tenant: str,
        user_id: str,
        *,
        method: str,
        skip_factors: bool = False,
        pending_workflow: bool = False,
        federation: Mapping[str, str] | None = None,
        multi_factor: bool = False,
    ) -> Authenticated | FactorRequired | WorkflowPending: ...

    def record_event(
        self,
        event: str,
        status: str,
        session: AuthSession,
        *,
        tenant: str | None = None,
        user_id: str | None = None,
        factor: str | None = None,
        reason: str | None = None,
    ) -> None: ...
