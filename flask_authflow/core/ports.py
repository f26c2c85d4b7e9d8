"""What the login service needs from storage, as protocols.

The login service runs on one :class:`LoginStore`: identities, factors and attempt
counters in one store with one :class:`UnitOfWork` (``InMemoryBackend`` and
``SqlAlchemyBackend`` implement it, and every store takes the same path through the
service). Every method that a security decision depends on raises
:class:`~flask_authflow.errors.StoreUnavailable` when the store cannot answer, and the
service refuses the attempt (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from flask_authflow.audit.sinks import AuditRecord, AuditSink
from flask_authflow.core.session import AuthSession, SessionRecord
from flask_authflow.outcomes import Authenticated, FactorKind, FactorRequired, WorkflowPending

__all__ = [
    "PAIR_SEPARATOR",
    "RESERVATION_TTL",
    "AttemptKey",
    "AttemptLevel",
    "AttemptStore",
    "AuditRecord",
    "AuditSink",
    "FactorConfig",
    "FactorRecordStore",
    "FactorStore",
    "FailureCount",
    "IdentityStore",
    "KnownSecret",
    "LoginFacts",
    "LoginRecorder",
    "LoginStore",
    "Reservation",
    "SessionStore",
    "SessionTouch",
    "UnitOfWork",
    "UserRecord",
    "level_token",
    "one_unit",
]


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A local account. ``identifier`` is normalised; ``user_id`` never changes."""

    user_id: str
    tenant: str
    identifier: str
    created_at: datetime
    disabled: bool = False
    #: The account's e-mail address (``flask_authflow.core.identifiers.normalise_email``),
    #: unique per tenant; ``None`` when it has none.
    email: str | None = None
    #: When the owner proved they read mail at ``email`` (``None``: not verified).
    email_verified_at: datetime | None = None

    # What Flask-Login's UserMixin answers, so ``current_user`` works the same without a
    # user loader (then ``current_user`` is this record).
    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_active(self) -> bool:
        return not self.disabled

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return self.user_id


@dataclass(frozen=True, slots=True)
class FactorConfig:
    """An enrolled factor (or one being enrolled, ``confirmed=False``).

    :param factor_id: the factor's stable id (``secrets.token_urlsafe`` text, at most 64
        characters), unique across the store; the associated data of a sealed secret.
    :param secret: what the factor verifies against: a sealed key (TOTP, HOTP), a hash
        (password, recovery codes) or ``""``; kept out of ``repr``.
    :param counter: a number the store only moves forward atomically: the next HOTP
        counter, the next acceptable TOTP time step, a WebAuthn signature count, the
        version of a recovery-code set.
    :param data: public, JSON-serialisable metadata (a label, an e-mail address, a
        WebAuthn credential's public key and transports).
    :param lookup: an indexed value to find the factor without knowing its user (a
        WebAuthn credential id, for passkey logins), unique per kind; ``None`` otherwise.
    :param confirmed: ``False`` while an enrollment waits for proof of possession; such a
        factor is never used for a login.
    """

    user_id: str
    kind: FactorKind
    created_at: datetime
    secret: str = field(repr=False, default="")
    factor_id: str = ""
    counter: int = 0
    data: Mapping[str, Any] = field(default_factory=dict)
    lookup: str | None = None
    confirmed: bool = True
    last_used_at: datetime | None = None


#: Joins a lockout subject and a client's host or network into the subject of an (account,
#: host) or (account, network) pair (see :mod:`flask_authflow.login.lockout`).
PAIR_SEPARATOR = "\x1f@"


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """What failures are counted against: (tenant, normalised identifier, factor name)."""

    tenant: str
    subject: str
    factor: str


@dataclass(frozen=True, slots=True)
class FailureCount:
    """The result of counting one failure: failures in the window, and the lock it caused."""

    failures: int
    locked_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to :meth:`AttemptStore.reserve_attempt`.

    ``token`` is set when the attempt may run (settle it with ``register_failure`` or
    ``register_success``, or give it back with ``release_attempt``); otherwise
    ``locked_until`` says until when the subject is refused.
    """

    token: str | None
    locked_until: datetime | None = None

    @property
    def granted(self) -> bool:
        return self.token is not None


#: A reservation older than this no longer counts (its process died mid-attempt).
RESERVATION_TTL = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class AttemptLevel:
    """One counter a credential check is reserved on: its key and the failures that lock it."""

    key: AttemptKey
    max_failures: int


def level_token(token: str, index: int) -> str:
    """The reservation token of the ``index``-th level of a :meth:`AttemptStore.reserve_attempts`
    reservation (what ``register_failure`` of that level settles)."""
    return f"{token}{index}"


@runtime_checkable
class IdentityStore(Protocol):
    """Users, looked up by (tenant, normalised identifier)."""

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None: ...

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None: ...

    def create_user(
        self,
        tenant: str,
        identifier: str,
        password: str | None = None,
        *,
        email: str | None = None,
        email_verified_at: datetime | None = None,
    ) -> UserRecord:
        """Add a user (:class:`~flask_authflow.errors.UserExists` if the identifier or the
        e-mail address is taken in the tenant)."""
        ...

    def list_users(self, tenant: str | None = None) -> list[UserRecord]: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user and what is theirs (factors, counters, links, roles); audit rows
        stay. :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None:
        """The user of ``tenant`` whose address is ``email`` (in its normalised form)."""
        ...

    def set_email(
        self, tenant: str, user_id: str, email: str | None, *, verified_at: datetime | None
    ) -> UserRecord:
        """Replace the user's address and its verification time;
        :class:`~flask_authflow.errors.UserExists` if another user of the tenant has that
        address, :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...

    def set_identifier(self, tenant: str, user_id: str, identifier: str) -> UserRecord:
        """Rename the user to ``identifier`` (normalised by the caller); one statement, so
        of two parallel renames to one name exactly one wins:
        :class:`~flask_authflow.errors.UserExists` if another user of the tenant has it,
        :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...


@runtime_checkable
class FactorStore(Protocol):
    """Enrolled factors and password hashes."""

    def get_password_hash(self, tenant: str, user_id: str) -> str | None: ...

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None: ...

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        """The distinct kinds of the user's *confirmed* factors: password first, then the
        others in the order they were enrolled. The service turns them into login steps."""
        ...

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        """The user's confirmed factors (password included), oldest first."""
        ...


@runtime_checkable
class FactorRecordStore(FactorStore, Protocol):
    """Factor records with enrollment and atomic one-time use (``InMemoryBackend`` and
    ``SqlAlchemyBackend`` implement it).

    Every method checks that ``user_id`` belongs to ``tenant``: a factor of another
    tenant's user is never found, changed or deleted. Each change is one atomic step
    (one conditional statement or one transaction), so parallel requests in several
    processes see exactly one winner.
    """

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        """Insert ``config`` as given (usually ``confirmed=False``). A pending one
        (``confirmed=False``) replaces the user's other pending factors of its kind in the
        same transaction, serialised per user: at most one enrollment of a kind waits.

        :raises UserNotFound: the user is not in ``tenant``.
        :raises ValueError: ``config.factor_id`` is empty or already used, or
            ``(config.kind, config.lookup)`` is taken.
        """
        ...

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        """One factor, confirmed or not."""
        ...

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        """The user's factors, oldest first: confirmed ones, and pending ones on request."""
        ...

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        """The confirmed factor of ``kind`` whose ``lookup`` is ``lookup``, among ``tenant``'s users."""
        ...

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        """Mark a pending factor confirmed; with ``replace_kind``, delete the user's other
        factors of the same kind (confirmed or pending) in the same transaction, so
        re-enrolling leaves exactly one. False when no such pending factor exists."""
        ...

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        """Remove one factor (never the password: :class:`ValueError`). False when absent."""
        ...

    def lock_user(self, tenant: str, user_id: str) -> bool:
        """Hold the user's row until the open unit of work ends (PostgreSQL's row lock; the
        unit's own lock on SQLite and in memory), so that decisions over several of the
        user's factors (the last way to sign in) take turns. False without the user."""
        ...

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        """Set ``counter = new_counter`` and ``last_used_at = now`` only if the stored counter
        is *below* ``new_counter`` and the factor is confirmed; one conditional statement.
        True for the one caller that moved it; False for everyone else (replay, race)."""
        ...

    def swap_factor_secret(
        self,
        tenant: str,
        user_id: str,
        factor_id: str,
        *,
        expected_counter: int,
        secret: str,
        now: datetime,
    ) -> bool:
        """Compare-and-set: replace ``secret`` and set ``counter = expected_counter + 1``
        (and ``last_used_at``) only if the counter still equals ``expected_counter`` and the
        factor is confirmed. True for exactly one of several parallel callers."""
        ...

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        """Record the one-time ``token`` of ``scope`` as used until ``expires_at``: a login
        challenge or an e-mail code (its digest) kept in a session, which parallel requests
        of that session all read. One atomic statement: True for exactly one of several
        parallel callers, False for every other and for a replay until ``expires_at``."""
        ...


@runtime_checkable
class AttemptStore(Protocol):
    """Attempt log and lockout counters; every update is atomic across threads and processes."""

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        """The latest active lock on any factor of ``subject``, or ``None``."""
        ...

    def locked_until_any(self, tenant: str, subjects: Sequence[str], now: datetime) -> datetime | None:
        """The latest active lock on any factor of any of ``subjects``, or ``None`` (one read)."""
        ...

    def reserve_attempt(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
    ) -> Reservation:
        """Reserve one attempt before the credential is checked, atomically (one statement or a row lock).

        Granted only while no lock is active on the subject and the failures counted in
        the window plus the reservations in flight (younger than :data:`RESERVATION_TTL`)
        stay below ``max_failures``; otherwise refused with the end of the lock (or, while
        attempts are in flight, ``now + lock_duration``). So N parallel guesses run at most
        ``max_failures`` credential checks, across threads and processes.
        """
        ...

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        """Give a reservation back without counting anything (the attempt did not happen)."""
        ...

    def reserve_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> Reservation:
        """:meth:`reserve_attempt` on every level at once, in one transaction: granted on all
        of them (each level's token is :func:`level_token` of the answer's) or on none; the
        refusal names the end of the first lock met, in the order of ``levels``. The levels
        are those of one check: one tenant and factor, distinct subjects."""
        ...

    def admit_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> datetime | None:
        """Whether a check that ran **without** a reservation (verify first, count after) may
        be counted on every level: ``None`` when each has room, decided as
        :meth:`reserve_attempts` decides (no active lock, fewer counted failures and
        reservations in flight than its ``max_failures``), else the end of the first lock met
        in the order of ``levels``. Nothing is written. In the open unit of work it takes the
        levels' counter locks in their order (SQLite: the database write lock), held to the
        unit's end, so the failure the unit counts next is decided and written atomically."""
        ...

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        """Give back the reservation of :meth:`reserve_attempts` on ``keys`` (its levels, in order)."""
        ...

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> datetime | None:
        """A successful check reserved by :meth:`reserve_attempts` on ``keys``, settled in one
        transaction (the open unit of work's): if a lock is active on any key's subject (set
        by a parallel failure while the check ran), only the reservation is given back and
        the lock's end returned; otherwise a success is logged and the counter reset on
        every key, and ``None`` returned."""
        ...

    def register_failure(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> FailureCount:
        """Log the failure and count it (settling ``reservation`` in the same step); the failure
        that reaches ``max_failures`` sets the lock."""
        ...

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        """Log the success, reset the failure counter of ``key`` and settle ``reservation``."""
        ...

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        """How a successful check is settled: if a lock is active on ``key.subject`` (any
        factor, as ``locked_until``; set by a parallel failure while the check ran), give
        ``reservation`` back and return the lock's end, logging and resetting nothing.
        Otherwise do what ``register_success`` does and return ``None``. One atomic step."""
        ...

    def set_lock(self, key: AttemptKey, until: datetime) -> None: ...

    def clear_lock(self, tenant: str, subject: str) -> None:
        """End every lock of ``subject`` and forget its counters, those of its host and
        network pairs included (subjects that start with ``subject`` + ``"\x1f@"``)."""
        ...

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        """Failures of ``key`` logged after ``since`` and after the last success of ``key``
        (how far a lock escalates, and the failure cap)."""
        ...


@dataclass(frozen=True, slots=True)
class KnownSecret:
    """A stored secret a login already read in this request: ``value`` (``None``: none is
    stored), so that the step that checks it does not read it again."""

    value: str | None = field(repr=False)


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


@runtime_checkable
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


@runtime_checkable
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
        """:meth:`load`, and in the same read the :class:`SessionTouch` when the session is
        due (one round trip on a networked store). Returns the record as it was stored
        before the touch and the expiry the touch replaced (``None``: no touch written,
        because the session was not due, or the store would have had to wait for it)."""
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


class LoginRecorder(Protocol):
    """What a flow outside the login package needs of the request-scoped login handle
    (:class:`~flask_authflow.login.service.AuthnRequest` implements it): log in a user the
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


# --- maintenance: what the wiring and the command line call on the adapters -----------------------


class BackendMaintenance(Protocol):
    """What ``AuthFlow.init_app`` and the ``flask authflow`` commands call on an app's
    backend, beside the storage ports. :class:`~flask_authflow.storage.memory.InMemoryBackend`
    and :class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend` implement it; so does
    an application's own backend."""

    def bind_app(self, app: Any) -> BackendMaintenance:
        """The backend to use for ``app`` (``self``, or a copy bound to that app's database)."""
        ...

    def adopt_defaults(self, *, hasher: Any, clock: Any) -> None:
        """Use the app's password hasher and clock where none was given at construction."""
        ...

    def database_engine(self) -> Any:
        """The SQLAlchemy engine holding this backend's tables (the SQL session store and
        ``flask authflow db`` use it too), or ``None`` when it keeps none."""
        ...

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Delete the audit rows written before ``before`` (with ``unchained_only``, only
        those outside the tamper-evident chain); returns how many went."""
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


# --- roles and permissions -------------------------------------------------------------------

__all__ += ["Role", "RoleStore"]


@dataclass(frozen=True, slots=True)
class Role:
    """A role of a tenant and the permissions it grants (sorted)."""

    tenant: str
    name: str
    description: str = ""
    permissions: tuple[str, ...] = ()


@runtime_checkable
class RoleStore(Protocol):
    """Roles per tenant, the permissions they grant and the users who hold them.

    Names of roles and permissions are checked with
    :func:`~flask_authflow.core.roles.check_name` (``InvalidInput`` otherwise). A role
    that does not exist raises :class:`~flask_authflow.errors.RoleNotFound`; a user that
    does not exist in the tenant raises :class:`~flask_authflow.errors.UserNotFound`.
    Deleting a user removes the roles it held.
    """

    def create_role(self, tenant: str, name: str, description: str = "") -> Role:
        """Add a role; :class:`~flask_authflow.errors.RoleExists` if the name is taken."""
        ...

    def delete_role(self, tenant: str, name: str, *, force: bool = False) -> None:
        """Remove a role and its permissions; a role some user holds is refused
        (:class:`~flask_authflow.errors.RoleInUse`) unless ``force``, which also takes it
        from every user."""
        ...

    def list_roles(self, tenant: str) -> list[Role]:
        """The tenant's roles, by name, with their permissions."""
        ...

    def grant_permission(self, tenant: str, role: str, permission: str) -> bool:
        """Let ``role`` do ``permission``; false if it already could."""
        ...

    def revoke_permission(self, tenant: str, role: str, permission: str) -> bool:
        """Take ``permission`` from ``role``; false if it did not have it."""
        ...

    def add_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        """Give the user ``role``; false if the user already held it."""
        ...

    def remove_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        """Take ``role`` from the user; false if the user did not hold it."""
        ...

    def roles_of(self, tenant: str, user_id: str) -> list[str]:
        """The names of the roles the user holds, sorted."""
        ...

    def permissions_of(self, tenant: str, user_id: str) -> list[str]:
        """Every permission the user's roles grant, sorted, each once."""
        ...


# --- account tokens: mailed single-use tokens of sign-up, reset and change of e-mail ------------

__all__ += ["AccountToken", "AccountTokenStore"]


@dataclass(frozen=True, slots=True)
class AccountToken:
    """A mailed single-use token, as stored: only digests of the token and of its short code.

    :param token_hash: SHA-256 (hex) of the token in the mailed link; the row's key.
    :param kind: what it proves (``signup``, ``email_verification``, ``password_reset``,
        ``email_change``).
    :param code_hash: SHA-256 (hex) of the short code mailed beside the link, salted with
        ``token_hash`` (a separate secret bound to the same row).
    :param payload: public, JSON-serialisable data of the step (a new e-mail address).
    :param code_attempts: wrong codes tried against this token so far.
    :param used_at: when it was used, or voided by a newer token of its user and kind.
    """

    token_hash: str
    kind: str
    tenant: str
    user_id: str
    code_hash: str = field(repr=False)
    created_at: datetime
    expires_at: datetime
    payload: Mapping[str, Any] = field(default_factory=dict)
    code_attempts: int = 0
    used_at: datetime | None = None


@runtime_checkable
class AccountTokenStore(Protocol):
    """Mailed single-use tokens (``InMemoryBackend`` and ``SqlAlchemyBackend`` implement it).

    Using a token is one atomic step (one conditional ``UPDATE``), so of parallel uses of
    one token exactly one wins, across threads and processes.
    """

    def issue_account_token(self, token: AccountToken) -> None:
        """Insert ``token`` and, in the same transaction, void (``used_at``) every unused
        earlier token of its tenant, user and kind."""
        ...

    def find_account_token(self, token_hash: str) -> AccountToken | None:
        """The token with this digest, used or not (to tell why a use failed)."""
        ...

    def use_account_token(self, token_hash: str, kind: str, now: datetime) -> AccountToken | None:
        """Mark the unused, unexpired token of ``kind`` with this digest used at ``now`` and
        return it (used); ``None`` for every other caller. One statement."""
        ...

    def live_account_token(self, tenant: str, user_id: str, kind: str, now: datetime) -> AccountToken | None:
        """The user's unused, unexpired token of ``kind`` (issuing voids the older ones, so
        there is at most one): what a short code is checked against."""
        ...

    def use_account_code(
        self, token_hash: str, code_hash: str, now: datetime, *, max_attempts: int
    ) -> AccountToken | None:
        """Use the live token ``token_hash`` by its short code: one conditional statement
        that wins only if ``code_hash`` matches and fewer than ``max_attempts`` wrong codes
        were tried. A wrong code counts one attempt, and the attempt that reaches
        ``max_attempts`` voids the token. ``None`` unless this call used it."""
        ...

    def has_account_token(self, tenant: str, user_id: str, kind: str) -> bool:
        """Whether the user was ever issued a token of ``kind`` (used, void or live)."""
        ...

    def void_account_tokens(self, tenant: str, user_id: str, kind: str | None, now: datetime) -> int:
        """Void the user's unused tokens (of ``kind``, or every kind); returns how many."""
        ...


# --- personal API tokens ---------------------------------------------------------------------

__all__ += ["ApiTokenRecord", "ApiTokenStore"]


@dataclass(frozen=True, slots=True)
class ApiTokenRecord:
    """A personal API token as stored: never the token itself, only its SHA-256.

    ``token_id`` is the token's public lookup part (the one indexed read of a
    verification); ``name`` is unique per user; ``scopes`` are sorted.
    """

    token_id: str
    tenant: str
    user_id: str
    name: str
    token_hash: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None


@runtime_checkable
class ApiTokenStore(Protocol):
    """The personal API tokens of every user (deleting a user deletes its tokens).

    A revoked token is deleted: there is nothing left to verify it against.
    """

    def add_api_token(self, record: ApiTokenRecord) -> None:
        """Store a new token; :class:`~flask_authflow.errors.ApiTokenNameTaken` when the
        user has a token of that name, :class:`~flask_authflow.errors.UserNotFound` when
        the user does not exist in the tenant."""
        ...

    def get_api_token(self, token_id: str) -> ApiTokenRecord | None:
        """The token with this lookup id (one indexed read), or ``None``."""
        ...

    def list_api_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        """The user's tokens, by name."""
        ...

    def delete_api_token(self, tenant: str, user_id: str, name: str) -> ApiTokenRecord | None:
        """Delete the user's token called ``name``; the deleted record, or ``None``."""
        ...

    def delete_user_api_tokens(self, tenant: str, user_id: str) -> int:
        """Delete every token of the user; how many there were."""
        ...

    def touch_api_token(self, token_id: str, at: datetime, *, unless_since: datetime) -> bool:
        """Set the token's ``last_used_at`` to ``at`` unless it is already at or after
        ``unless_since`` (so a token in constant use is written at most once per interval);
        true if it was written."""
        ...


# --- provider tokens: a user's access and refresh tokens of a provider -------------------------

__all__ += ["ProviderTokenStore", "StoredProviderTokens"]


@dataclass(frozen=True, slots=True)
class StoredProviderTokens:
    """A user's tokens of one provider, as stored (federation's ``store_tokens``).

    ``sealed`` holds the access and refresh tokens, encrypted and bound to the row's key
    (tenant, user, provider); the other fields are not secret.
    """

    tenant: str
    user_id: str
    provider: str
    sealed: str = field(repr=False)
    token_type: str
    scopes: tuple[str, ...]
    expires_at: datetime | None
    updated_at: datetime


@runtime_checkable
class ProviderTokenStore(Protocol):
    """The provider tokens kept per (tenant, user, provider), and the claim that lets one
    process at a time refresh a row (so two workers never both spend a rotated refresh
    token). Deleting a user removes its rows."""

    def save_provider_tokens(self, tokens: StoredProviderTokens) -> None:
        """Insert or replace the row of (tenant, user, provider); any claim on it ends."""
        ...

    def get_provider_tokens(self, tenant: str, user_id: str, provider: str) -> StoredProviderTokens | None:
        """The row, or ``None``."""
        ...

    def provider_tokens_of_user(self, tenant: str, user_id: str) -> list[StoredProviderTokens]:
        """Every row of the user, by provider."""
        ...

    def delete_provider_tokens(self, tenant: str, user_id: str, provider: str) -> bool:
        """Remove the row; ``False`` if there was none."""
        ...

    def claim_provider_tokens(
        self, tenant: str, user_id: str, provider: str, claim: str, *, now: datetime, until: datetime
    ) -> bool:
        """Take the row's refresh claim (named ``claim``) until ``until``, unless another
        claim holds it past ``now``; ``False`` when it does or the row is gone. Atomic
        across threads and, for the SQL store, across processes."""
        ...

    def replace_claimed_provider_tokens(self, tokens: StoredProviderTokens, claim: str) -> bool:
        """Replace the row with ``tokens`` and end the claim, only while ``claim`` holds
        it; ``False`` (nothing written) otherwise."""
        ...

    def release_provider_tokens(self, tenant: str, user_id: str, provider: str, claim: str) -> None:
        """End the claim ``claim`` if it still holds the row; the row stays as it is."""
        ...


# --- devices -----------------------------------------------------------------------------------

__all__ += ["DeviceRecord", "DeviceStore"]


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """A browser a user signed in from: its random id (the device cookie's), a label read
    from its User-Agent, an approximate place if the application supplied one, when it was
    first and last seen, and until when the user trusts it (``None``: not trusted)."""

    tenant: str
    user_id: str
    device_id: str
    label: str
    first_seen_at: datetime
    last_seen_at: datetime
    place: str | None = None
    trusted_until: datetime | None = None

    def trusted_at(self, now: datetime) -> bool:
        """Whether the trust is still running at ``now``."""
        return self.trusted_until is not None and self.trusted_until > now


@runtime_checkable
class DeviceStore(Protocol):
    """The devices each user signed in from, and the trust the user gave them.

    Device ids are checked with :func:`~flask_authflow.core.devices.check_device_id`
    (``InvalidInput`` otherwise); labels and places are cut to their column sizes. A
    deleted user's devices go with the user.
    """

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        """Record a sign-in from the device: a new record (true), or the last-seen time,
        label and place of the known one (false)."""
        ...

    def get_device(self, tenant: str, user_id: str, device_id: str) -> DeviceRecord | None:
        """The user's record of this device, if any."""
        ...

    def list_devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        """The user's devices, most recently seen first."""
        ...

    def forget_device(self, tenant: str, user_id: str, device_id: str) -> bool:
        """Remove the record (and so its trust); false if the user had no such device."""
        ...

    def trust_device(self, tenant: str, user_id: str, device_id: str, until: datetime) -> bool:
        """Trust the known device until ``until``; false if the user has no such device."""
        ...

    def end_device_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        """End the trust of one device, or of all the user's devices; how many were trusted."""
        ...
