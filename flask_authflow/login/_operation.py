"""The one template every login step runs in: :class:`Operation`.

A step opens it with ``with Operation(svc, ctx, session, event) as op:``. Inside, the step
changes the session through its state machine and collects what it will record: audit
rows (:meth:`Operation.audit`), signals and counters. The template owns the rest:

* **Nothing unaudited.** When the block ends cleanly the rows are written, then (in the
  step's unit of work, when it opened one) the session of a passed step, then the unit
  commits; only then are the counters moved and the signals sent. If any of that fails
  the session is put back exactly as it was (the snapshot taken on entry) and the error
  propagates: :class:`AuditWriteError` when a row could not be written.
* **Fail closed.** A :class:`StoreUnavailable` inside the block undoes the session change,
  drops the unit and records an ``error`` row if the audit sink still works. If the unit
  that settled a wrong credential failed, the failure is counted once more on its own
  (:meth:`Operation.recount_with`), so a broken commit never buys a free guess.
* **One unit of work per step.** :meth:`Operation.unit` opens the store's unit once, the
  first time the step needs it: the attempt settlement, the single-use update of a
  one-time code, the audit rows and the session write then commit together.
* **Reservations are handed off, or given back.** :meth:`Operation.reserve` takes the
  lockout reservation; :meth:`Operation.hand_off` gives its token to the settlement; one
  still held when the block ends (the check did not complete), or handed to a settlement
  that was not committed, is released in a transaction of its own.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, TypeVar

from flask import current_app, g, has_app_context

from flask_authflow import signals
from flask_authflow._clock import Clock
from flask_authflow._core.factors import Enrollment, Factor
from flask_authflow._core.ports import AccountTokenStore, AuditSink, KnownSecret, LoginStore, UnitOfWork
from flask_authflow._core.session import AuthSession, SessionSnapshot, reset_to_guest
from flask_authflow._outcomes import FactorKind
from flask_authflow._throttle import Throttle
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord, AuthCounters, hash_session_id
from flask_authflow.errors import AuditWriteError, AuthFlowError, LoginNotStarted, StoreUnavailable
from flask_authflow.login._lockout import Lockout
from flask_authflow.login._mfa_policy import MfaRequirement
from flask_authflow.login._password import PasswordHasher

__all__ = [
    "LOGIN_IDENTIFIER_KEY",
    "PHANTOM_PREFIX",
    "STEP_UP_KEY",
    "TRANSACTION_KEY",
    "BeginRead",
    "LoginServices",
    "Operation",
    "SessionWriter",
    "begin_read_for",
    "guard_store",
    "lockout_subject",
    "new_transaction",
    "note_begin_read",
    "record_event",
]

#: Prefix of the user id given to logins of identifiers that match no usable account.
#: Store ids never contain ``:``, so a phantom can never be mistaken for a real user.
PHANTOM_PREFIX = "unknown:"
#: Key of the session flow that remembers the normalised identifier during a login.
LOGIN_IDENTIFIER_KEY = "login_identifier"
#: Key of the session flow that names the factor a step-up waits for (see session.model).
STEP_UP_KEY = "step_up"
#: Key of the session flow holding the id of the login transaction (one-time codes bind to it).
TRANSACTION_KEY = "txn"

#: Writes the session a factor step passed in the step's unit of work: ``(session, unit) ->
#: after_commit``, ``None`` if the session was revoked meanwhile (see ``AuthnService``).
SessionWriter = Callable[[AuthSession, Any], Callable[[], None] | None]

T = TypeVar("T")

log = logging.getLogger("flask_authflow.login")


class LoginServices(Protocol):
    """What the login flows use of the service (``AuthnService`` provides it)."""

    @property
    def store(self) -> LoginStore: ...
    @property
    def account_tokens(self) -> AccountTokenStore | None: ...
    @property
    def hasher(self) -> PasswordHasher: ...
    @property
    def audit_sink(self) -> AuditSink: ...
    @property
    def audit_fallback(self) -> AuditSink | None: ...
    @property
    def lockout(self) -> Lockout: ...
    @property
    def throttle(self) -> Throttle: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def counters(self) -> AuthCounters: ...
    @property
    def freshness(self) -> timedelta: ...
    @property
    def site_name(self) -> str: ...
    @property
    def session_writer(self) -> SessionWriter | None: ...
    @property
    def revoke_sessions(self) -> Callable[[str, str, str | None, str], int] | None: ...
    @property
    def passkey_login_allowed(self) -> Callable[[str], bool]: ...
    @property
    def device_trusted(self) -> Callable[[str, str, str, datetime], bool] | None: ...
    @property
    def mfa_requirement(self) -> MfaRequirement | None: ...
    @property
    def on_sign_in(self) -> Callable[[str, str], None] | None: ...
    @property
    def linked_identities(self) -> Callable[[str, str], bool] | None: ...
    def phantom_user_id(self, tenant: str, identifier: str) -> str: ...

    def factor(self, kind: FactorKind) -> Factor | None: ...

    def enrollment(self, kind: FactorKind) -> Enrollment: ...

    def steps_for(self, tenant: str, user_id: str, kinds: Sequence[FactorKind]) -> list[str]: ...


def guard_store(call: Callable[[], T]) -> T:
    """Run a store call; anything but a clean answer becomes StoreUnavailable (fail closed)."""
    try:
        return call()
    except AuthFlowError:
        raise
    except Exception as exc:
        raise StoreUnavailable("a store needed for the login failed") from exc


def lockout_subject(flow: Mapping[str, Any], user_id: str) -> str:
    """What the lockout counts a session's attempts against: the login's normalised
    identifier, or the user id when the flow has none."""
    identifier = flow.get(LOGIN_IDENTIFIER_KEY)
    return identifier if isinstance(identifier, str) else f"user:{user_id}"


@dataclass(frozen=True, slots=True)
class BeginRead:
    """What ``begin_login`` read for a login in this request, so that its password step in
    the same request does not read it again: the locks of the subject (account, host,
    network; none was active), the kinds the user must enroll (empty: none) and the
    password hash to check (``None``: the store did not read it)."""

    transaction: str
    required: tuple[str, ...]
    password: KnownSecret | None = None


def note_begin_read(
    flow: Mapping[str, Any], required: tuple[str, ...], password: KnownSecret | None = None
) -> None:
    """``begin_login`` read the locks, the required enrollment and the password hash of the
    login ``flow``."""
    transaction = flow.get(TRANSACTION_KEY)
    if has_app_context() and isinstance(transaction, str):
        g.authflow_begin_read = BeginRead(transaction, required, password)


def begin_read_for(flow: Mapping[str, Any] | None) -> BeginRead | None:
    """What ``begin_login`` read for the login ``flow`` in this request, or ``None``."""
    if not has_app_context() or flow is None:
        return None
    read = g.get("authflow_begin_read")
    if isinstance(read, BeginRead) and read.transaction == flow.get(TRANSACTION_KEY):
        return read
    return None


def new_transaction() -> str:
    """A fresh login transaction id (one-time codes are bound to it)."""
    return secrets.token_urlsafe(16)


def _sender() -> object:
    """Signals are sent with the current Flask app as sender (as Flask does), if there is one."""
    if has_app_context():
        return current_app._get_current_object()  # type: ignore[attr-defined]
    return None


def write_rows(svc: LoginServices, rows: Iterable[AuditRecord]) -> None:
    """Write audit rows; any failure of the sink is :class:`AuditWriteError`."""
    sink = svc.audit_sink
    for row in rows:
        try:
            sink.write(row)
        except AuditWriteError:
            raise
        except Exception as exc:
            raise AuditWriteError() from exc


def audit_row(
    ctx: AuditContext, session: AuthSession, now: datetime, event: str, status: str, **fields: Any
) -> AuditRecord:
    """One audit row of ``session`` in the request ``ctx``; a phantom user is never stored."""
    user_id = fields.pop("user_id", None)
    if user_id is not None and user_id.startswith(PHANTOM_PREFIX):
        user_id = None
    return ctx.row(now, event, status, user_id=user_id, session_id=hash_session_id(session.sid), **fields)


def record_event(
    svc: LoginServices, ctx: AuditContext, event: str, status: str, session: AuthSession, **fields: Any
) -> None:
    """Write one audit row for an operation outside the login flows (see ``record_event``)."""
    write_rows(svc, [audit_row(ctx, session, svc.clock.now(), event, status, **fields)])


class Operation:
    """One login step: snapshot, audit rows, signals, counters, unit of work, commit-or-undo.

    :param fields: the audit fields every row of the step carries (``tenant``, ``user_id``,
        ``identifier``, ``factor``); :meth:`row` and :meth:`audit` may override them.
    :param refuse_on: errors besides :class:`StoreUnavailable` that undo the step and
        are recorded as an ``error`` row (a challenge whose mail could not be sent).
    """

    def __init__(
        self,
        svc: LoginServices,
        ctx: AuditContext,
        session: AuthSession,
        event: str,
        *,
        now: datetime | None = None,
        refuse_on: tuple[type[AuthFlowError], ...] = (),
        carried: Sequence[AuditRecord] = (),
        carried_since: SessionSnapshot | None = None,
        **fields: Any,
    ) -> None:
        self.svc = svc
        self.ctx = ctx
        self.session = session
        self.event = event
        self.now = now if now is not None else svc.clock.now()
        self.fields = fields
        self.refuse_on = refuse_on
        #: Rows of an earlier step of this request whose writing was left to this one
        #: (``carried``): written first, with this step's, or with its refusal.
        self._carried = list(carried)
        #: The session before the step that carried its rows here: put back if they are
        #: not written (that step's change is undone with them).
        self._carried_since = carried_since if carried else None
        self.rows: list[AuditRecord] = list(carried)
        #: Set by a step whose rows the next step of the request writes (see ``carried``).
        self.defer_rows_to: list[AuditRecord] | None = None
        self.signals: list[tuple[str, dict[str, Any]]] = []
        self.counters: list[str] = []
        #: The step passed: its session is written in its unit of work (``session_writer``).
        self.write_session = False
        self._snapshot: SessionSnapshot = session.snapshot()
        self._unit: UnitOfWork | None = None
        self._recount: Callable[[], object] | None = None
        self._reservation: tuple[str, str, str, str] | None = None
        #: A reservation handed to the settlement: given back if the step does not commit.
        self._handed: tuple[str, str, str, str] | None = None

    # --- what the step records -------------------------------------------------------------

    def row(
        self, status: str, reason: str | None = None, *, event: str | None = None, **fields: Any
    ) -> AuditRecord:
        """An audit row of this step (its event and fields, ``event`` and ``fields`` overriding them)."""
        merged = {**self.fields, **fields}
        return audit_row(
            self.ctx, self.session, self.now, event or self.event, status, reason=reason, **merged
        )

    def audit(self, status: str, reason: str | None = None, **fields: Any) -> None:
        """Add a row, written when the step commits."""
        self.rows.append(self.row(status, reason, **fields))

    def signal(self, name: str, **kwargs: Any) -> None:
        """Send the signal ``name`` once the step committed."""
        self.signals.append((name, kwargs))

    def count(self, *names: str) -> None:
        """Move these counters once the step committed."""
        self.counters.extend(names)

    def refuse(self, error: AuthFlowError, status: str, reason: str | None = None, **fields: Any) -> None:
        """Record ``error`` at once (nothing of the step is kept) and let it propagate."""
        self._drop()
        self.session.restore(self._snapshot)
        row = self.row(status, reason if reason is not None else error.code, **fields)
        if _write_refusal(self.svc, [*self._carried, row], error):
            self._carried_since = None

    def end_previous_login(self) -> None:
        """A new login on a logged-in session ends that login first: audited as a logout
        with reason ``new_login`` and announced with ``session_revoked``."""
        session = self.session
        old_user, old_tenant = session.user_id, session.tenant
        session.transition(lambda r: reset_to_guest(r, now=self.now))
        self.rows.append(
            audit_row(
                self.ctx, session, self.now, "logout", "success",
                tenant=old_tenant, user_id=old_user, reason="new_login",
            )
        )  # fmt: skip
        self.signal("session_revoked", user_id=old_user, tenant=old_tenant, reason="new_login")

    # --- unit of work and lockout reservation ----------------------------------------------

    def unit(self) -> None:
        """Open the store's unit of work for the rest of the step (once; later calls keep it).

        A unit already open in this context (the application's own) is joined instead."""
        if self._unit is None:
            try:
                self._unit = self.svc.store.begin_unit()
            except RuntimeError:
                return

    def write_rows_now(self) -> None:
        """Write the step's rows now, in its unit (before a mail, so that an audit failure
        sends nothing; see :meth:`~flask_authflow._core.ports.UnitOfWork.write_audit_now`)."""
        write_rows(self.svc, self.rows)
        self.rows.clear()
        if self._unit is not None:
            self._unit.write_audit_now()

    def discard_writes(self) -> None:
        """Drop what the step's unit wrote so far (its rows are written on their own)."""
        self._drop()

    def reserve(self, tenant: str, subject: str, factor: str) -> datetime | None:
        """Reserve one credential check; ``None`` when granted, else the end of the lock."""
        reserved = self.svc.lockout.reserve(tenant, subject, factor, self.now, self.ctx.client_ip)
        if reserved.token is None:
            return reserved.locked_until or self.now
        self._reservation = (tenant, subject, factor, reserved.token)
        return None

    def hand_off(self) -> str | None:
        """The reservation's token, for the settlement that takes it over."""
        held, self._reservation = self._reservation, None
        self._handed = held
        return held[3] if held is not None else None

    def recount_with(self, count: Callable[[], object]) -> None:
        """How to count a wrong credential again if the step's unit does not commit."""
        self._recount = count

    # --- the template ------------------------------------------------------------------------

    def __enter__(self) -> Operation:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                self._commit()
            elif isinstance(exc, AuditWriteError):
                self._drop()
                self.session.restore(self._snapshot)
            elif isinstance(exc, AuthFlowError) and isinstance(exc, (StoreUnavailable, *self.refuse_on)):
                self.refuse(exc, "error")
            else:
                self._drop()
        finally:
            self._release_reservation()
            if self._carried_since is not None:  # the carried rows were not written
                self.session.restore(self._carried_since)

    def _commit(self) -> None:
        written: Callable[[], None] | None = None
        unit = self._unit
        try:
            self._record_sign_ins()
            if self.defer_rows_to is not None and unit is None:
                self.defer_rows_to.extend(self.rows)  # the request's next step writes them
            else:
                write_rows(self.svc, self.rows)
            if unit is not None:
                written = self._write_session(unit)
                self._unit = None
                unit.commit()
        except LoginNotStarted as exc:  # the session was revoked meanwhile: nothing is kept
            self._drop()
            self.session.restore(self._snapshot)
            refused = replace(self.rows[-1], status="refused", reason=exc.code)
            if _write_refusal(self.svc, [*self._carried, refused], exc):
                self._carried_since = None
            raise
        except StoreUnavailable:
            self._drop()
            self.session.restore(self._snapshot)
            if unit is not None and self._recount is not None:
                # Nothing of the unit was written: a wrong credential still counts.
                try:
                    self._recount()
                except StoreUnavailable:
                    log.warning("a failed credential check could not be counted: the attempt store failed")
            raise
        self._handed = None  # settled with the step's commit
        self._carried_since = None  # the carried rows were written with it
        if written is not None:
            written()
        self.release()

    def _record_sign_ins(self) -> None:
        """Run ``on_sign_in`` (the device record) for each sign-in of the step, in its unit of
        work (or the one it joined), before the commit: kept with the sign-in or not at all."""
        hook = self.svc.on_sign_in
        if hook is None:
            return
        for name, kwargs in self.signals:
            if name == "login_succeeded" and not kwargs.get("step_up"):
                hook(kwargs["tenant"], kwargs["user_id"])

    def _write_session(self, unit: UnitOfWork) -> Callable[[], None] | None:
        """Write the session of a passed step in ``unit``.

        :raises LoginNotStarted: the session was ended by another request meanwhile (a
            parallel request of this session won the step): nothing of the step is kept."""
        writer = self.svc.session_writer
        if writer is None or not self.write_session:
            return None
        written = guard_store(lambda: writer(self.session, unit))
        if written is None:
            raise LoginNotStarted("this login ended in another request")
        return written

    def release(self) -> None:
        """Count and signal a step whose rows are written."""
        for name in self.counters:
            self.svc.counters.increment(name)
        if self.signals:
            app = _sender()
            sender = app if app is not None else self.svc
            for name, kwargs in self.signals:
                signals.send_after_commit(getattr(signals, name), sender, **kwargs)

    def _drop(self) -> None:
        unit, self._unit = self._unit, None
        if unit is not None:
            unit.rollback()

    def _release_reservation(self) -> None:
        """The check did not complete (a store or verifier error), or its settlement was not
        committed: give the slot back. If even that fails, the reservation expires by itself
        (``RESERVATION_TTL``)."""
        held = self._reservation or self._handed
        self._reservation = self._handed = None
        if held is not None:
            tenant, subject, factor, token = held
            try:
                self.svc.lockout.release(tenant, subject, factor, token)
            except StoreUnavailable:
                pass


def _write_refusal(svc: LoginServices, rows: Sequence[AuditRecord], error: AuthFlowError) -> bool:
    """Record a refused step if the sink still works (true: written). When the refusal is
    itself a store failure, that error is the more useful one: it propagates, not the audit
    failure."""
    try:
        write_rows(svc, rows)
    except AuditWriteError:
        if not isinstance(error, StoreUnavailable):
            raise
        return False
    return True
