"""The login service: begin a login, verify factors one by one, log out.

Three rules shape every method here:

* **No oracle.** An unknown identifier, a user of another tenant and a disabled account
  go through the same steps as a real account: ``begin_login`` answers
  ``FactorRequired(PASSWORD)`` and moves the session to Authenticating for a *phantom*
  user that can never authenticate; ``verify_factor`` then spends one Argon2 verify on a
  dummy hash and answers ``InvalidCredential``. Outcomes, store round trips, lockout and
  timing match those of a wrong password.
* **Fail closed.** If the attempt store cannot count a failure, the attempt is refused
  with :class:`StoreUnavailable`; it never succeeds by default.
* **Nothing unaudited.** The session change is applied, the audit row (which carries the
  resulting session id, hashed) is written, and if that write fails the session is put
  back exactly as it was and :class:`AuditWriteError` is raised. When the attempt store
  is also the audit sink and offers ``begin_unit()`` (``SqlAlchemyBackend`` does), the
  settlement of a credential check (attempt row, counter change) and its audit rows
  commit in one transaction: both or neither. If that transaction fails after a wrong
  credential, the failure is counted once more on its own (fail closed).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from flask_authflow import signals
from flask_authflow.audit.context import AuditContext
from flask_authflow.audit.sinks import AuditRecord, AuthCounters, hash_session_id
from flask_authflow.clock import Clock, SystemClock
from flask_authflow.core.factors import (
    Accepted,
    EnrollContext,
    Enrollment,
    EnrollmentStart,
    Factor,
    FactorCheck,
    FactorContext,
    PasskeyFactor,
    Rejected,
    RejectReason,
)
from flask_authflow.core.identifiers import check_tenant, normalise_identifier
from flask_authflow.core.ports import (
    AttemptStore,
    AuditSink,
    FactorConfig,
    FactorRecordStore,
    FactorStore,
    IdentityStore,
    LoginLookup,
)
from flask_authflow.core.session import (
    AuthSession,
    AuthState,
    SessionRecord,
    begin_flow,
    clear_flow,
    complete_login,
    fail_login,
    pass_factor,
    reset_to_guest,
    start_login,
    step_kinds,
    step_name,
)
from flask_authflow.errors import (
    AccountDisabled,
    AuditWriteError,
    AuthFlowError,
    ConfigurationError,
    EnrollmentError,
    FactorNotRegistered,
    InvalidInput,
    LoginNotStarted,
    PermissionDenied,
    StepUpNeeded,
    StoreUnavailable,
    UserNotFound,
)
from flask_authflow.login.lockout import Lockout, LockoutPolicy
from flask_authflow.login.password import PasswordFactor, PasswordHasher
from flask_authflow.outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
    Locked,
    LoginOutcome,
    StepUpRequired,
)

__all__ = [
    "ENROLLMENT_TTL",
    "LOGIN_IDENTIFIER_KEY",
    "PHANTOM_PREFIX",
    "SECOND_FACTOR_ORDER",
    "STEP_UP_KEY",
    "TRANSACTION_KEY",
    "AuthnRequest",
    "AuthnService",
    "LoginSteps",
    "default_login_steps",
    "normalise_identifier",
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
#: Prefix of a factor's slot in the session flow (``"factor:email_otp"``).
_FACTOR_SLOT = "factor:"
#: Prefix of an enrollment's slot in the session flow (``"enroll:webauthn"``).
_ENROLL_SLOT = "enroll:"
#: Slot of the session flow holding a passkey login's challenge.
_PASSKEY_SLOT = "passkey"
#: How long a begun enrollment waits for its proof of possession.
ENROLLMENT_TTL = timedelta(minutes=10)

#: The order of a default second step's alternatives (kinds the user has enrolled, in this
#: order; an application's own kinds follow).
SECOND_FACTOR_ORDER: tuple[FactorKind, ...] = (
    FactorKind.TOTP,
    FactorKind.WEBAUTHN,
    FactorKind.HOTP,
    FactorKind.EMAIL_OTP,
    FactorKind.RECOVERY_CODE,
)

#: Turns a user's enrolled kinds (password first) into the login's steps; each step is
#: passed by any one of its kinds. ``(tenant, user_id, kinds) -> steps``.
LoginSteps = Callable[[str, str, Sequence[FactorKind]], list[tuple[FactorKind, ...]]]


def default_login_steps(
    tenant: str, user_id: str, kinds: Sequence[FactorKind]
) -> list[tuple[FactorKind, ...]]:
    """``[password]`` then ``[totp | webauthn | hotp | email_otp | recovery_code]``, keeping the
    kinds the user has enrolled (and an application's own kinds at the end of the second step).

    A user without a password gets no steps here (the service then refuses the login the
    way it refuses an unknown user); recovery codes alone never make a step: they stand in
    for another second factor, they are not one.
    """
    if FactorKind.PASSWORD not in kinds:
        return []
    others = [k for k in SECOND_FACTOR_ORDER if k in kinds]
    others += [k for k in kinds if k not in SECOND_FACTOR_ORDER and k is not FactorKind.PASSWORD]
    if others == [FactorKind.RECOVERY_CODE]:
        others = []
    steps: list[tuple[FactorKind, ...]] = [(FactorKind.PASSWORD,)]
    if others:
        steps.append(tuple(others))
    return steps


#: What ``login_user(method=...)`` accepts: a short lowercase label ("signup", "magic_link",
#: "oidc:google"), stored in the session and the audit row.
_METHOD_RE = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,31}")  # the audit column holds 32

T = TypeVar("T")

#: See :attr:`AuthnService.session_writer`.
SessionWriter = Callable[[AuthSession, Any], Callable[[], None] | None]

log = logging.getLogger("flask_authflow.login")


def _guard_store(call: Callable[[], T]) -> T:
    """Run a store call; anything but a clean answer becomes StoreUnavailable (fail closed)."""
    try:
        return call()
    except AuthFlowError:
        raise
    except Exception as exc:
        raise StoreUnavailable("a store needed for the login failed") from exc


@dataclass(slots=True)
class _Snapshot:
    """The request-visible state of an AuthSession, to undo a change whose audit failed."""

    record: SessionRecord
    dead_sids: list[str]
    data: dict[str, Any]
    modified: bool
    accessed: bool

    @classmethod
    def take(cls, session: AuthSession) -> _Snapshot:
        return cls(
            record=session._record,
            dead_sids=list(session.dead_sids),
            data=dict(session),
            modified=session.modified,
            accessed=session.accessed,
        )

    def restore(self, session: AuthSession) -> None:
        session._record = self.record
        session.dead_sids[:] = self.dead_sids
        dict.clear(session)
        dict.update(session, self.data)
        session.modified = self.modified
        session.accessed = self.accessed


class AuthnService:
    """Password login with chained factors, lockout, audit and counters.

    :param identity_store, factor_store: where users and their factors live (may be one object).
    :param attempt_store, audit_sink: default to whichever of the two stores implements them.
    :param hasher: defaults to the factor store's ``hasher`` (so hashes it writes verify at the
        same parameters), else Argon2id with the RFC 9106 low-memory profile.
    """

    def __init__(
        self,
        identity_store: IdentityStore,
        factor_store: FactorStore,
        *,
        attempt_store: AttemptStore | None = None,
        audit_sink: AuditSink | None = None,
        hasher: PasswordHasher | None = None,
        lockout: LockoutPolicy | None = None,
        clock: Clock | None = None,
        counters: AuthCounters | None = None,
        audit_fallback: AuditSink | None = None,
        login_steps: LoginSteps | None = None,
        freshness: timedelta = timedelta(minutes=10),
        site_name: str = "flask-authflow",
        passkey_login_allowed: Callable[[str], bool] = lambda tenant: False,
        revoke_sessions: Callable[[str, str, str | None, str], int] | None = None,
        session_writer: SessionWriter | None = None,
    ) -> None:
        self.identity_store = identity_store
        #: Where a logout's audit row goes when the audit sink fails (a logout always succeeds).
        self.audit_fallback = audit_fallback
        self.factor_store = factor_store
        # ``is None``, not ``or``: a store or sink may define __len__ and be falsy when empty.
        attempts = (
            attempt_store
            if attempt_store is not None
            else next((s for s in (identity_store, factor_store) if isinstance(s, AttemptStore)), None)
        )
        if attempts is None:
            raise ConfigurationError("AuthnService needs an attempt store (for lockout counting)")
        sink = (
            audit_sink
            if audit_sink is not None
            else next((s for s in (identity_store, factor_store) if isinstance(s, AuditSink)), None)
        )
        if sink is None:
            raise ConfigurationError("AuthnService needs an audit sink")
        self.attempt_store: AttemptStore = attempts
        self.audit_sink: AuditSink = sink
        if hasher is None:
            store_hasher = getattr(factor_store, "hasher", None)
            hasher = store_hasher if isinstance(store_hasher, PasswordHasher) else PasswordHasher()
        self.hasher = hasher
        self.policy = lockout or LockoutPolicy()
        self.lockout = Lockout(self.policy, attempts)
        self.clock: Clock = clock or SystemClock()
        self.counters = counters if counters is not None else AuthCounters()
        self._factors: dict[FactorKind, Factor] = {}
        self.register_factor(PasswordFactor(hasher, factor_store))
        #: ``(tenant, user_id, enrolled kinds) -> steps``; see ``default_login_steps``.
        self.login_steps: LoginSteps = login_steps or default_login_steps
        #: How recent the last authentication must be to enroll, change or disable a factor.
        self.freshness = freshness
        #: Ends a user's sessions but ``keep_sid`` (wired by ``init_app`` to the session
        #: store): ``(tenant, user_id, keep_sid, reason) -> count``. A factor change calls it.
        self.revoke_sessions = revoke_sessions
        #: The site's name, shown by authenticator apps beside the account (``AUTHFLOW_SITE_NAME``).
        self.site_name = site_name
        #: Whether ``tenant`` may log in with a passkey alone (``AUTHFLOW_PASSKEY_LOGIN``).
        self.passkey_login_allowed = passkey_login_allowed
        #: Writes the session a factor step passed in the step's unit of work (given by
        #: ``init_app`` when the session store shares the backend's database), so that a
        #: one-time credential is used up in the commit that keeps the session it logged
        #: in, or not at all: ``(session, unit) -> after_commit``, ``None`` if the session
        #: was revoked meanwhile. Without it the session is written with the response.
        self.session_writer = session_writer
        # Per-process key: phantom ids are stable for one identifier but unguessable.
        self._phantom_key = secrets.token_bytes(32)

    @property
    def login_lookup(self) -> LoginLookup | None:
        """The store that answers ``begin_login``'s reads in one (:class:`LoginLookup`), when
        one object is the identity, factor and attempt store; else ``None``."""
        store: object = self.identity_store
        factors: object = self.factor_store
        attempts: object = self.attempt_store
        if store is factors and store is attempts and isinstance(store, LoginLookup):
            return store
        return None

    def register_factor(self, factor: Factor) -> None:
        """Plug in the factor of a kind (replaces an earlier one of the same kind)."""
        if not isinstance(factor, Factor):
            raise TypeError("a factor needs kind, check_input, challenge and verify (see Factor)")
        self._factors[factor.kind] = factor

    def factor(self, kind: FactorKind) -> Factor | None:
        """The registered factor of ``kind``, if any."""
        return self._factors.get(kind)

    def enrollment(self, kind: FactorKind) -> Enrollment:
        """The registered factor of ``kind`` as an :class:`Enrollment`.

        :raises FactorNotRegistered: none is registered, or it cannot be enrolled."""
        factor = self._factors.get(kind)
        if factor is None or not isinstance(factor, Enrollment):
            raise FactorNotRegistered(f"no enrollable factor of kind {kind.value!r} is registered")
        return factor

    @property
    def factor_kinds(self) -> tuple[FactorKind, ...]:
        """The kinds of the registered factors."""
        return tuple(self._factors)

    def record_store(self) -> FactorRecordStore:
        """The factor store as a :class:`FactorRecordStore` (second factors need one)."""
        store = self.factor_store
        if not isinstance(store, FactorRecordStore):
            raise ConfigurationError(
                "second factors need a factor store with records (InMemoryBackend or SqlAlchemyBackend)"
            )
        return store

    def steps_for(self, tenant: str, user_id: str, kinds: Sequence[FactorKind]) -> list[str]:
        """The stored form of the login steps of a user with ``kinds`` enrolled."""
        return [step_name(k.value for k in step) for step in self.login_steps(tenant, user_id, kinds) if step]

    def with_audit_context(self, ctx: AuditContext | None) -> AuthnRequest:
        """The request-scoped handle; login operations exist only on it, so every row has a context."""
        return AuthnRequest(self, ctx if ctx is not None else AuditContext.unknown())

    def phantom_user_id(self, tenant: str, identifier: str) -> str:
        mac = hmac.new(self._phantom_key, f"{tenant}\x00{identifier}".encode(), hashlib.sha256)
        return PHANTOM_PREFIX + mac.hexdigest()[:32]

    def __repr__(self) -> str:
        return f"<AuthnService policy={self.policy!r} hasher={self.hasher!r}>"


def _lockout_subject(flow: Mapping[str, Any], user_id: str) -> str:
    """What the lockout counts a session's attempts against: the login's normalised
    identifier, or the user id when the flow has none."""
    identifier = flow.get(LOGIN_IDENTIFIER_KEY)
    return identifier if isinstance(identifier, str) else f"user:{user_id}"


def _required(kinds: Sequence[str], public: Mapping[FactorKind, Mapping[str, Any]]) -> FactorRequired:
    known = tuple(FactorKind(k) for k in kinds if k in FactorKind)
    return FactorRequired(known[0], known, dict(public))


def _sender() -> object:
    """Signals are sent with the current Flask app as sender (as Flask does), if there is one."""
    try:
        from flask import current_app, has_app_context

        if has_app_context():
            return current_app._get_current_object()  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Flask is a dependency
        pass
    return None


@dataclass(slots=True)
class _Pending:
    """Rows and signals of one operation, released only once every row is written."""

    rows: list[AuditRecord] = field(default_factory=list)
    signals: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)
    #: Counts a failed credential check again if its unit of work did not commit.
    recount: Callable[[], object] | None = None
    #: The step passed: its session is written in its unit of work (see session_writer).
    write_session: bool = False


class AuthnRequest:
    """Login operations bound to one request's :class:`AuditContext`."""

    __slots__ = ("ctx", "service")

    def __init__(self, service: AuthnService, ctx: AuditContext) -> None:
        self.service = service
        self.ctx = ctx

    # --- plumbing ---------------------------------------------------------------------------

    def _row(
        self,
        event: str,
        status: str,
        session: AuthSession,
        now: datetime,
        *,
        tenant: str | None = None,
        user_id: str | None = None,
        identifier: str | None = None,
        factor: str | None = None,
        reason: str | None = None,
    ) -> AuditRecord:
        if user_id is not None and user_id.startswith(PHANTOM_PREFIX):
            user_id = None  # a phantom is not a user: never store it
        return AuditRecord(
            time=now,
            event=event,
            status=status,
            tenant=tenant,
            user_id=user_id,
            identifier=identifier,
            session_id=hash_session_id(session.sid),
            factor=factor,
            client_ip=self.ctx.client_ip,
            ip_source=self.ctx.ip_source,
            user_agent=self.ctx.user_agent,
            request_id=self.ctx.request_id,
            reason=reason,
        )

    def _write(self, rows: Iterable[AuditRecord]) -> None:
        sink = self.service.audit_sink
        for row in rows:
            try:
                sink.write(row)
            except AuditWriteError:
                raise
            except Exception as exc:
                raise AuditWriteError() from exc

    def _begin_unit(self) -> Any:
        """A unit of work of the attempt store that also takes the audit rows, or ``None``.

        Opened just before a credential check is settled; :meth:`_commit` commits it with
        the audit rows, so the attempt row, the counter change and the audit rows of one
        check are written together or not at all.
        """
        store = self.service.attempt_store
        begin = getattr(store, "begin_unit", None)
        sink: object = self.service.audit_sink
        if begin is None or store is not sink:
            return None
        try:
            return begin()
        except RuntimeError:  # a unit is already open in this context: write as it does
            return None

    @staticmethod
    def _drop(unit: Any) -> None:
        if unit is not None:
            unit.rollback()

    def _commit(self, session: AuthSession, snapshot: _Snapshot, pending: _Pending, unit: Any = None) -> None:
        written: Callable[[], None] | None = None
        try:
            self._write(pending.rows)
            if unit is not None:
                written = self._write_session(session, pending, unit)
                unit.commit()
        except LoginNotStarted as exc:  # the session was revoked meanwhile: nothing is kept
            self._drop(unit)
            snapshot.restore(session)
            row = replace(pending.rows[-1], status="refused", reason=exc.code)
            self._refuse(session, None, exc, lambda: row)
            raise
        except StoreUnavailable:
            self._drop(unit)
            snapshot.restore(session)
            if unit is not None and pending.recount is not None:
                # Nothing of the unit was written: a wrong credential still counts.
                try:
                    pending.recount()
                except StoreUnavailable:
                    log.warning("a failed credential check could not be counted: the attempt store failed")
            raise
        if written is not None:
            written()
        self._release(pending)

    def _write_session(self, session: AuthSession, pending: _Pending, unit: Any) -> Callable[[], None] | None:
        """Write the session of a passed step in ``unit`` (see :attr:`AuthnService.session_writer`).

        :raises LoginNotStarted: the session was ended by another request meanwhile (a
            parallel request of this session won the step): nothing of the step is kept."""
        writer = self.service.session_writer
        if writer is None or not pending.write_session:
            return None
        written = _guard_store(lambda: writer(session, unit))
        if written is None:
            raise LoginNotStarted("this login ended in another request")
        return written

    def _release(self, pending: _Pending) -> None:
        """Count and signal an operation whose rows are written."""
        counters = self.service.counters
        for name in pending.counters:
            counters.increment(name)
        if pending.signals:
            app = _sender()
            sender = app if app is not None else self.service
            for name, kwargs in pending.signals:
                getattr(signals, name).send(sender, **kwargs)

    def _end_previous_login(self, session: AuthSession, now: datetime, pending: _Pending) -> None:
        """A new login on a logged-in session ends that login first: audited as a logout
        with reason ``new_login`` and announced with ``session_revoked``."""
        old_user, old_tenant = session.user_id, session.tenant
        session.transition(lambda r: reset_to_guest(r, now=now))
        pending.rows.append(
            self._row(
                "logout", "success", session, now, tenant=old_tenant, user_id=old_user, reason="new_login"
            )
        )
        pending.signals.append(
            ("session_revoked", {"user_id": old_user, "tenant": old_tenant, "reason": "new_login"})
        )

    def _refuse(
        self,
        session: AuthSession,
        snapshot: _Snapshot | None,
        exc: AuthFlowError,
        row: Callable[[], AuditRecord],
    ) -> None:
        """Undo the change, record the error if the sink still works, and let ``exc`` propagate."""
        if snapshot is not None:
            snapshot.restore(session)
        try:
            self._write([row()])
        except AuditWriteError:
            if not isinstance(exc, StoreUnavailable):
                raise
            # The original StoreUnavailable is the more useful error; it propagates below.

    # --- operations -------------------------------------------------------------------------

    def begin_login(self, identifier: str, tenant: str, session: AuthSession) -> LoginOutcome:
        """Start a login for ``identifier`` in ``tenant``; see the module docstring for unknown users."""
        svc = self.service
        now = svc.clock.now()
        try:
            ident = normalise_identifier(identifier)
            tenant = check_tenant(tenant)
        except InvalidInput as exc:
            code = exc.code
            self._refuse(
                session, None, exc, lambda: self._row("login_begin", "error", session, now, reason=code)
            )
            raise
        snapshot = _Snapshot.take(session)
        pending = _Pending()
        try:
            if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
                self._end_previous_login(session, now, pending)
            # When one store is identity, factor and attempt store: one read for the user,
            # their factor kinds and the lock (the same for a phantom: no user, no kinds).
            lookup = svc.login_lookup
            facts = None
            if lookup is not None:
                facts = _guard_store(lambda: lookup.login_facts(tenant, ident, now))
                user = facts.user
            else:
                user = _guard_store(lambda: svc.identity_store.find_user(tenant, ident))
            usable = user is not None and not user.disabled
            subject_id = user.user_id if usable and user is not None else svc.phantom_user_id(tenant, ident)
            if facts is not None:
                enrolled = facts.kinds if usable else []
            else:
                # The phantom asks the store too, so both paths make the same round trips.
                enrolled = _guard_store(lambda: svc.factor_store.required_factors(tenant, subject_id))
            steps = svc.steps_for(tenant, subject_id, enrolled) if usable else []
            if not steps or FactorKind.PASSWORD.value not in step_kinds(steps[0]):
                subject_id = svc.phantom_user_id(tenant, ident)
                steps = [FactorKind.PASSWORD.value]
            until = facts.locked_until if facts is not None else svc.lockout.locked_until(tenant, ident, now)
            audit_user = user.user_id if user is not None else None
            if until is not None:
                session.transition(lambda r: fail_login(r, now=now))
                pending.rows.append(
                    self._row(
                        "login_begin", "locked", session, now,
                        tenant=tenant, user_id=audit_user, identifier=ident, reason="locked",
                    )
                )  # fmt: skip
                pending.signals.append(
                    ("login_failed", {"tenant": tenant, "identifier": ident, "reason": "locked"})
                )
                pending.counters.append("login_failures")
                outcome: LoginOutcome = Locked(until)
            else:
                flow = {LOGIN_IDENTIFIER_KEY: ident, TRANSACTION_KEY: secrets.token_urlsafe(16)}
                session.transition(
                    lambda r: begin_flow(
                        start_login(r, tenant=tenant, user_id=subject_id, factors=steps, now=now), flow
                    )
                )
                reason = None if usable else ("disabled" if user is not None else "unknown_identifier")
                if usable and user is not None and subject_id != user.user_id:
                    reason = "no_password"
                pending.rows.append(
                    self._row(
                        "login_begin", "started", session, now,
                        tenant=tenant, user_id=audit_user, identifier=ident, factor=steps[0], reason=reason,
                    )
                )  # fmt: skip
                outcome = FactorRequired(FactorKind.PASSWORD)
        except AuditWriteError:
            snapshot.restore(session)
            raise
        except StoreUnavailable as exc:
            code = exc.code
            self._refuse(
                session, snapshot, exc,
                lambda: self._row(
                    "login_begin", "error", session, now, tenant=tenant, identifier=ident, reason=code
                ),
            )  # fmt: skip
            raise
        self._commit(session, snapshot, pending)
        return outcome

    # --- factor steps ---------------------------------------------------------------------------

    def _factor_context(
        self,
        session: AuthSession,
        kind: FactorKind,
        *,
        tenant: str,
        user_id: str,
        identifier: str | None,
        now: datetime,
        purpose: str,
        factors: tuple[FactorConfig, ...] | None = None,
    ) -> FactorContext:
        """The context a factor sees: the user's confirmed factors of ``kind`` and its flow slot."""
        svc = self.service
        store = svc.factor_store
        if factors is None:
            if user_id.startswith(PHANTOM_PREFIX) or kind is FactorKind.PASSWORD:
                factors = ()
            elif isinstance(store, FactorRecordStore):
                found = _guard_store(lambda: store.list_user_factors(tenant, user_id, kind=kind))
                factors = tuple(found)
            else:
                listed = _guard_store(lambda: store.list_factors(tenant, user_id))
                factors = tuple(f for f in listed if f.kind is kind)
        flow = session.record.flow or {}
        slot = flow.get(_FACTOR_SLOT + kind.value)
        transaction = flow.get(TRANSACTION_KEY)
        return FactorContext(
            tenant=tenant,
            user_id=user_id,
            now=now,
            store=store,  # type: ignore[arg-type]  # only FactorRecordStore-backed factors use it
            factors=factors,
            flow=dict(slot) if isinstance(slot, Mapping) else {},
            transaction=transaction if isinstance(transaction, str) else session.sid,
            purpose=purpose,
            identifier=identifier,
        )

    def _challenge_step(
        self,
        session: AuthSession,
        kinds: Sequence[str],
        *,
        tenant: str,
        user_id: str,
        identifier: str | None,
        now: datetime,
        purpose: str,
        only: FactorKind | None = None,
    ) -> tuple[dict[FactorKind, Mapping[str, Any]], dict[str, Any]]:
        """Call ``challenge`` of the step's factors; returns their public answers and the flow
        slots to store. A factor whose challenge has side effects (an e-mail) is challenged on
        entry only when it is the step's only kind; otherwise on request (``only``)."""
        public: dict[FactorKind, Mapping[str, Any]] = {}
        slots: dict[str, Any] = {}
        for name in kinds:
            try:
                kind = FactorKind(name)
            except ValueError:
                continue
            factor = self.service.factor(kind)
            if factor is None or (only is not None and kind is not only):
                continue
            if only is None and len(kinds) > 1 and getattr(factor, "challenge_on_request", False):
                public[kind] = {"on_request": True}
                continue
            ctx = self._factor_context(
                session, kind, tenant=tenant, user_id=user_id, identifier=identifier, now=now, purpose=purpose
            )
            try:
                answer = factor.challenge(ctx)
            except AuthFlowError as exc:
                if only is not None:
                    raise
                log.warning("challenge of factor %s failed: %s", kind.value, exc.code)
                answer = {"error": exc.code}
            if ctx.flow_update is not None:
                slots[_FACTOR_SLOT + kind.value] = ctx.flow_update
            if answer is not None:
                public[kind] = answer
        return public, slots

    def verify_factor(self, credential: FactorCredential, session: AuthSession) -> FactorOutcome:
        """Check the credential for the step the session waits for (credential first, then the session).

        Any kind of the pending step passes it; a kind outside the step is refused
        (``InvalidCredential``, audited ``unexpected_factor``), never a skip. A wrong credential
        ends the login at its first step (the password), and keeps it at a later step so
        the user can retry within the lockout policy; the session id rotates after each
        passed step.
        """
        svc = self.service
        now = svc.clock.now()
        record = session.record
        flow = record.flow or {}
        kind_name = credential.kind.value
        step = record.pending_step
        if not step:
            snapshot = _Snapshot.take(session)
            pending = _Pending(counters=["login_attempts", "login_failures"])
            pending.rows.append(
                self._row(
                    "factor_verify", "failure", session, now, factor=kind_name, reason="no_login_in_progress"
                )
            )
            self._commit(session, snapshot, pending)
            return InvalidCredential()

        in_step = kind_name in step
        expected = kind_name if in_step else step[0]
        tenant = record.tenant or ""
        user_id = record.user_id or ""
        ident_value = flow.get(LOGIN_IDENTIFIER_KEY)
        subject = _lockout_subject(flow, user_id)
        identifier = ident_value if isinstance(ident_value, str) else None
        phantom = user_id.startswith(PHANTOM_PREFIX)
        step_up = record.state is AuthState.AUTHENTICATED
        first_step = not step_up and not record.factors_passed
        factor = svc.factor(credential.kind) if in_step else None
        purpose = "step_up" if step_up else "login"

        def row(status: str, reason: str | None = None) -> AuditRecord:
            return self._row(
                "factor_verify", status, session, now,
                tenant=tenant, user_id=user_id, identifier=identifier, factor=expected, reason=reason,
            )  # fmt: skip

        if factor is not None:
            try:
                factor.check_input(credential)
            except InvalidInput as exc:
                code = exc.code
                self._refuse(session, None, exc, lambda: row("error", code))
                raise

        slot_key = _FACTOR_SLOT + expected

        def keep_trying(update: dict[str, Any] | None) -> Callable[[SessionRecord], SessionRecord]:
            def change(r: SessionRecord) -> SessionRecord:
                # A failed step-up keeps the login but forgets the step-up; a failure at the
                # first step ends the login; at a later step the login waits for another try.
                if r.state is AuthState.AUTHENTICATED:
                    return clear_flow(r)
                if first_step or phantom:
                    return fail_login(r, now=now)
                if update is None:
                    return r
                return begin_flow(r, {**(r.flow or {}), slot_key: update})

            return change

        def end(r: SessionRecord) -> SessionRecord:
            return clear_flow(r) if r.state is AuthState.AUTHENTICATED else fail_login(r, now=now)

        snapshot = _Snapshot.take(session)
        pending = _Pending(counters=["login_attempts"])
        lockout = svc.lockout
        reservation: str | None = None
        unit: Any = None
        try:
            # Reserve the attempt before any credential check: the store grants at most
            # ``max_failures`` checks in flight and in the window, atomically, so a burst
            # of parallel guesses cannot buy more verifications than the policy allows.
            if factor is not None and not getattr(factor, "expensive", True):
                # A cheap check (no Argon2): reservation, check, single-use update, settlement
                # and audit rows in one transaction. The reservation's lock on the counter row
                # (or SQLite's write lock) holds parallel checks of the subject until it
                # commits, so they still count one after another: one commit per step.
                unit = self._begin_unit()
            reserved = lockout.reserve(tenant, subject, expected, now)
            reservation = reserved.token
            outcome: FactorOutcome
            if reservation is None:
                outcome = self._locked(
                    session, pending, row, end, tenant, identifier, reserved.locked_until or now, "locked"
                )
            else:
                ctx: FactorContext | None = None
                checked: FactorCheck
                if not in_step:
                    checked = Rejected(RejectReason.WRONG_KIND)
                elif factor is None:
                    checked = Rejected("unsupported_factor")
                else:
                    ctx = self._factor_context(
                        session, credential.kind,
                        tenant=tenant, user_id=user_id, identifier=identifier, now=now, purpose=purpose,
                    )  # fmt: skip
                    checked = _guard_store(lambda: factor.verify(ctx, credential))
                ok = bool(checked) and not phantom
                single_use = isinstance(checked, Accepted) and checked.commit is not None
                # A lock set while this check ran (by a parallel failure) wins over a success.
                settled = ok and not single_use
                held = reservation  # the token of this check's reservation
                if settled:
                    # Looked for while the success is settled, in the settlement's transaction
                    # (one statement on PostgreSQL); found, only the reservation is given back.
                    token, reservation = held, None
                    if unit is None:
                        unit = self._begin_unit()
                    locked_now = lockout.success_unless_locked(
                        tenant, subject, expected, now, self.ctx.client_ip, reservation=token
                    )
                else:
                    locked_now = lockout.locked_until(tenant, subject, now) if ok else None
                if ok and locked_now is None and isinstance(checked, Accepted) and checked.commit is not None:
                    # The single-use update joins the settlement's transaction (a SQL store):
                    # the code is used up exactly when the step passes and its rows are written.
                    if unit is None:
                        unit = self._begin_unit()
                    commit = checked.commit
                    if not _guard_store(commit):  # a parallel request used the credential first
                        ok, checked = False, Rejected(RejectReason.REPLAYED)
                reason = (
                    "unknown_identifier"
                    if phantom
                    else checked.code
                    if isinstance(checked, Rejected)
                    else "invalid_credential"
                )
                update = ctx.flow_update if ctx is not None else None
                if locked_now is not None:
                    if not settled:
                        token, reservation = held, None
                        lockout.release(tenant, subject, expected, token)
                    outcome = self._locked(
                        session, pending, row, end, tenant, identifier, locked_now, "locked_during_check"
                    )
                elif ok:
                    if not settled:
                        token, reservation = held, None
                        if unit is None:  # the settlement and the audit rows: one transaction
                            unit = self._begin_unit()
                        lockout.success(tenant, subject, expected, now, self.ctx.client_ip, reservation=token)

                    def advance(r: SessionRecord) -> SessionRecord:
                        after = pass_factor(r, expected, now=now)
                        if after.state is AuthState.AUTHENTICATED:
                            return clear_flow(after)
                        rest = {k: v for k, v in (after.flow or {}).items() if not k.startswith(_FACTOR_SLOT)}
                        return begin_flow(after, rest)

                    after = session.transition(advance)
                    pending.write_session = True  # with the credential it used up, or not at all
                    pending.signals.append(
                        ("factor_verified", {"user_id": user_id, "tenant": tenant, "factor": expected})
                    )
                    if after.state is AuthState.AUTHENTICATED:
                        pending.rows.append(row("success", "step_up" if step_up else None))
                        pending.counters.append("login_successes")
                        pending.signals.append(
                            ("login_succeeded", {"user_id": user_id, "tenant": tenant, "step_up": step_up})
                        )
                        outcome = Authenticated(user_id, tenant)
                    else:
                        pending.rows.append(row("success", "next_factor"))
                        outcome = self._next_step(session, tenant, user_id, identifier, now)
                else:
                    token, reservation = held, None
                    if unit is None:
                        unit = self._begin_unit()

                    def count_failure(token: str | None = token) -> object:
                        return lockout.failure(
                            tenant, subject, expected, now, self.ctx.client_ip, reservation=token
                        )

                    result = lockout.failure(
                        tenant, subject, expected, now, self.ctx.client_ip, reservation=token
                    )
                    pending.recount = count_failure
                    pending.counters.append("login_failures")
                    if result.locked_until is not None:
                        session.transition(end)
                        pending.rows.append(row("locked", reason))
                        pending.counters.append("lockouts")
                        outcome = Locked(result.locked_until)
                    else:
                        session.transition(keep_trying(update))
                        pending.rows.append(row("failure", reason))
                        outcome = InvalidCredential()
                    pending.signals.append(
                        (
                            "login_failed",
                            {
                                "tenant": tenant,
                                "identifier": identifier,
                                "reason": "locked" if result.locked_until else "invalid_credential",
                            },
                        )
                    )
        except AuditWriteError:
            self._drop(unit)
            snapshot.restore(session)
            raise
        except StoreUnavailable as exc:
            self._drop(unit)  # the error row below is written on its own
            code = exc.code
            self._refuse(session, snapshot, exc, lambda: row("error", code))
            raise
        except BaseException:
            self._drop(unit)
            raise
        finally:
            if reservation is not None:
                # The check did not complete (a store or verifier error): give the slot back.
                # If even that fails, the reservation expires by itself (RESERVATION_TTL).
                try:
                    lockout.release(tenant, subject, expected, reservation)
                except StoreUnavailable:
                    pass
        self._commit(session, snapshot, pending, unit)
        return outcome

    def _next_step(
        self, session: AuthSession, tenant: str, user_id: str, identifier: str | None, now: datetime
    ) -> FactorRequired:
        """The outcome for the step the session now waits for, its factors challenged."""
        kinds = session.record.next_step
        public, slots = self._challenge_step(
            session, kinds, tenant=tenant, user_id=user_id, identifier=identifier, now=now, purpose="login"
        )
        if slots:
            session.transition(lambda r: begin_flow(r, {**(r.flow or {}), **slots}))
        return _required(kinds, public)

    def challenge(self, kind: FactorKind, session: AuthSession) -> FactorRequired:
        """(Re)issue the challenge of ``kind`` for the pending step: "send me a code by
        e-mail", "use my security key". The step must accept ``kind``.

        :raises LoginNotStarted: no step is pending, or ``kind`` does not pass it.
        :raises FactorNotRegistered: no factor of ``kind`` is registered.
        """
        svc = self.service
        now = svc.clock.now()
        record = session.record
        flow = record.flow or {}
        kinds = record.pending_step
        if kind.value not in kinds or (record.user_id or "").startswith(PHANTOM_PREFIX):
            raise LoginNotStarted(f"no pending step accepts {kind.value!r}")
        if svc.factor(kind) is None:
            raise FactorNotRegistered(f"no factor of kind {kind.value!r} is registered")
        ident = flow.get(LOGIN_IDENTIFIER_KEY)
        snapshot = _Snapshot.take(session)

        def row(status: str, reason: str | None = None) -> AuditRecord:
            return self._row(
                "factor_challenge", status, session, now,
                tenant=record.tenant, user_id=record.user_id, factor=kind.value, reason=reason,
            )  # fmt: skip

        try:
            public, slots = self._challenge_step(
                session, kinds,
                tenant=record.tenant or "", user_id=record.user_id or "",
                identifier=ident if isinstance(ident, str) else None, now=now,
                purpose="step_up" if record.state is AuthState.AUTHENTICATED else "login", only=kind,
            )  # fmt: skip
        except AuthFlowError as exc:  # the mail server is down, no sender is configured
            code = exc.code
            self._refuse(session, snapshot, exc, lambda: row("error", code))
            raise
        if slots:
            session.transition(lambda r: begin_flow(r, {**(r.flow or {}), **slots}))
        error = public.get(kind, {}).get("error")
        refused = isinstance(error, str)
        pending = _Pending(rows=[row("refused" if refused else "sent", error if refused else None)])
        self._commit(session, snapshot, pending)
        return _required(kinds, public)

    def _locked(
        self,
        session: AuthSession,
        pending: _Pending,
        row: Callable[[str, str | None], AuditRecord],
        abandon: Callable[[SessionRecord], SessionRecord],
        tenant: str,
        identifier: str | None,
        until: datetime,
        reason: str,
    ) -> Locked:
        """Refuse the attempt as locked: no credential check was counted for it."""
        session.transition(abandon)
        pending.rows.append(row("locked", reason))
        pending.counters.append("login_failures")
        pending.signals.append(
            ("login_failed", {"tenant": tenant, "identifier": identifier, "reason": "locked"})
        )
        return Locked(until)

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
    ) -> Authenticated | FactorRequired:
        """Log ``user_id`` in on ``session`` after the application proved who it is some other
        way (sign-up, a magic link, a federated login): ``method`` names that way.

        The session goes through the state machine like any login: a login of another
        user on it ends first (audited), the id rotates, the User-Agent binding is set,
        the audit row carries ``method``, and ``login_succeeded`` is sent. ``method``
        stands in for the password only: factors beyond the password that the user has
        enrolled stay required (the outcome is ``FactorRequired``, continued with
        :meth:`verify_factor`) unless ``skip_factors`` is true, which is audited
        (reason ``factors_skipped``). ``pending_workflow`` ends in PendingWorkflow instead
        of Authenticated (a federated step of a longer ceremony, such as a sign-up);
        ``federation`` is kept on the session (see ``SessionRecord.federation``).
        ``multi_factor`` says ``method`` proved every factor at once (a passkey with user
        verification): no later step remains, and nothing is audited as skipped.

        :raises UserNotFound: no such user. :raises AccountDisabled: the account is
            disabled. :raises InvalidInput: ``method`` is not a short lowercase label.
        """
        svc = self.service
        now = svc.clock.now()
        if not isinstance(method, str) or not _METHOD_RE.fullmatch(method):
            raise InvalidInput(
                "method must be a short lowercase label such as 'signup', 'magic_link' or 'oidc:google'"
            )
        try:
            tenant = check_tenant(tenant)
        except InvalidInput as exc:
            code = exc.code
            self._refuse(session, None, exc, lambda: self._row("login", "error", session, now, reason=code))
            raise
        snapshot = _Snapshot.take(session)
        pending = _Pending()
        try:
            user = _guard_store(lambda: svc.identity_store.get_user(tenant, user_id))
            if user is None or user.disabled:
                error: AuthFlowError = UserNotFound() if user is None else AccountDisabled()
                reason = error.code
                self._refuse(
                    session, None, error,
                    lambda: self._row(
                        "login", "refused", session, now,
                        tenant=tenant, user_id=user_id if user is not None else None,
                        factor=method, reason=reason,
                    ),
                )  # fmt: skip
                raise error
            enrolled = _guard_store(lambda: svc.factor_store.required_factors(tenant, user.user_id))
            # ``method`` stands in for the first step (the password); later steps remain.
            steps = svc.steps_for(tenant, user.user_id, [FactorKind.PASSWORD, *enrolled])
            remaining = steps[1:]
            skipped = skip_factors and bool(remaining) and not multi_factor
            if skip_factors or multi_factor:
                remaining = []
            if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
                self._end_previous_login(session, now, pending)
            elif session.state is AuthState.AUTHENTICATING:  # an unfinished login: dropped, not a logout
                session.transition(lambda r: reset_to_guest(r, now=now))
            identity_flow = {
                LOGIN_IDENTIFIER_KEY: user.identifier,
                TRANSACTION_KEY: secrets.token_urlsafe(16),
            }
            outcome: Authenticated | FactorRequired
            if remaining:
                session.transition(
                    lambda r: begin_flow(
                        replace(
                            start_login(r, tenant=tenant, user_id=user.user_id, factors=remaining, now=now),
                            factors_passed=(method,),
                            auth_method=method,
                            federation=dict(federation) if federation else None,
                        ),
                        identity_flow,
                    )
                )
                pending.rows.append(
                    self._row(
                        "login", "next_factor", session, now,
                        tenant=tenant, user_id=user.user_id, identifier=user.identifier, factor=method,
                    )
                )  # fmt: skip
                outcome = self._next_step(session, tenant, user.user_id, user.identifier, now)
            else:
                session.transition(
                    lambda r: complete_login(
                        r,
                        tenant=tenant,
                        user_id=user.user_id,
                        method=method,
                        now=now,
                        pending_workflow=pending_workflow,
                        federation=federation,
                    )
                )
                pending.rows.append(
                    self._row(
                        "login", "pending_workflow" if pending_workflow else "success", session, now,
                        tenant=tenant, user_id=user.user_id, identifier=user.identifier, factor=method,
                        reason="factors_skipped" if skipped else None,
                    )
                )  # fmt: skip
                if not pending_workflow:
                    pending.counters.append("login_successes")
                    pending.signals.append(
                        (
                            "login_succeeded",
                            {"user_id": user.user_id, "tenant": tenant, "step_up": False, "method": method},
                        )
                    )
                outcome = Authenticated(user.user_id, tenant)
        except AuditWriteError:
            snapshot.restore(session)
            raise
        except StoreUnavailable as exc:
            code = exc.code
            self._refuse(
                session, snapshot, exc,
                lambda: self._row(
                    "login", "error", session, now, tenant=tenant, user_id=user_id, reason=code
                ),
            )  # fmt: skip
            raise
        self._commit(session, snapshot, pending)
        return outcome

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
    ) -> None:
        """Write one audit row for an operation outside the login methods above (a
        federated callback that failed, a back-channel logout).

        :raises AuditWriteError: the row could not be written.
        """
        now = self.service.clock.now()
        row = self._row(
            event, status, session, now, tenant=tenant, user_id=user_id, factor=factor, reason=reason
        )
        self._write([row])

    def begin_step_up(self, session: AuthSession, *, strongest: bool = False) -> StepUpRequired:
        """Ask an Authenticated session to re-verify a factor (refreshes ``authenticated_at``).

        By default the first step (the password). With ``strongest``, the user's last step
        instead (``totp | webauthn | ... | recovery_code`` when second factors are enrolled,
        else the password); its factors are challenged (WebAuthn options, an e-mail code when
        it is the only kind; :meth:`challenge` for the others). Enrolling, changing or removing
        a factor needs a step-up of this kind (see :meth:`begin_enrollment`). The login stays
        Authenticated throughout; :meth:`verify_factor` completes the step-up.
        """
        svc = self.service
        now = svc.clock.now()
        if not session.is_authenticated:
            error = LoginNotStarted("step-up needs an authenticated session")
            self._refuse(
                session,
                None,
                error,
                lambda: self._row("step_up_begin", "error", session, now, reason=error.code),
            )
            raise error
        tenant = session.tenant or ""
        user_id = session.user_id or ""
        snapshot = _Snapshot.take(session)
        try:
            user = _guard_store(lambda: svc.identity_store.get_user(tenant, user_id))
            enrolled = _guard_store(lambda: svc.factor_store.required_factors(tenant, user_id))
            steps = svc.steps_for(tenant, user_id, enrolled)
            step = (steps[-1] if strongest else steps[0]) if steps else FactorKind.PASSWORD.value
            flow: dict[str, str] = {STEP_UP_KEY: step, TRANSACTION_KEY: secrets.token_urlsafe(16)}
            if user is not None:
                flow[LOGIN_IDENTIFIER_KEY] = user.identifier
            session.transition(lambda r: begin_flow(r, flow))
            subject = _lockout_subject(flow, user_id)
            slots: dict[str, Any] = {}
            if svc.lockout.locked_until(tenant, subject, now) is None:  # a locked user gets no e-mail
                _, slots = self._challenge_step(
                    session, step_kinds(step),
                    tenant=tenant, user_id=user_id, identifier=flow.get(LOGIN_IDENTIFIER_KEY), now=now,
                    purpose="step_up",
                )  # fmt: skip
            if slots:
                session.transition(lambda r: begin_flow(r, {**(r.flow or {}), **slots}))
            pending = _Pending(
                rows=[
                    self._row(
                        "step_up_begin", "started", session, now,
                        tenant=tenant, user_id=user_id, identifier=flow.get(LOGIN_IDENTIFIER_KEY),
                        factor=step,
                    )
                ]
            )  # fmt: skip
        except StoreUnavailable as exc:
            code = exc.code
            self._refuse(
                session, snapshot, exc,
                lambda: self._row(
                    "step_up_begin", "error", session, now, tenant=tenant, user_id=user_id, reason=code
                ),
            )  # fmt: skip
            raise
        self._commit(session, snapshot, pending)
        return StepUpRequired(tuple(FactorKind(k) for k in step_kinds(step) if k in FactorKind))

    # --- enrollment -----------------------------------------------------------------------------

    def _fresh_user(self, session: AuthSession, action: str) -> tuple[str, str, datetime]:
        """The (tenant, user_id) of a session fresh enough to change factors, and now.

        :raises StepUpNeeded: not authenticated, or the last authentication is older than
            the service's ``freshness``."""
        now = self.service.clock.now()
        record = session.record
        if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
            raise StepUpNeeded(f"{action} needs an authenticated session")
        if record.authenticated_at is None or now - record.authenticated_at > self.service.freshness:
            raise StepUpNeeded(f"{action} needs a fresh authentication: verify your identity again")
        # The factor verified last must be of the user's strongest step: a password step-up
        # alone does not let a stolen session with a known password remove the second factor.
        svc = self.service
        tenant, user_id = record.tenant, record.user_id
        enrolled = _guard_store(lambda: svc.factor_store.required_factors(tenant, user_id))
        steps = svc.steps_for(tenant, user_id, enrolled)
        last = record.factors_passed[-1] if record.factors_passed else None
        # A login that proved the user another way and passed nothing since (a passkey, a
        # federated login, ``login_user``) counts as it is.
        other_way = len(record.factors_passed) == 1 and last == record.auth_method and last not in FactorKind
        # A second factor verified last counts even if it was removed since (the strongest
        # step may have become the password).
        second_factor = last is not None and last in FactorKind and last != FactorKind.PASSWORD.value
        if steps and last not in step_kinds(steps[-1]) and not other_way and not second_factor:
            raise StepUpNeeded(f"{action} needs your second factor again (a step-up of the strongest step)")
        return tenant, user_id, now

    def _enroll_context(
        self, session: AuthSession, kind: FactorKind, tenant: str, user_id: str, now: datetime
    ) -> EnrollContext:
        svc = self.service
        user = _guard_store(lambda: svc.identity_store.get_user(tenant, user_id))
        if user is None or user.disabled:
            raise UserNotFound()
        slot = (session.record.flow or {}).get(_ENROLL_SLOT + kind.value)
        return EnrollContext(
            tenant=tenant,
            user_id=user_id,
            account_name=user.identifier,
            issuer_name=self.site_name,
            now=now,
            store=svc.record_store(),
            flow=dict(slot) if isinstance(slot, Mapping) else {},
        )

    @property
    def site_name(self) -> str:
        return self.service.site_name

    def _store_enroll_slot(self, session: AuthSession, kind: FactorKind, ctx: EnrollContext) -> None:
        if ctx.flow_update is None:
            return
        key = _ENROLL_SLOT + kind.value
        update = ctx.flow_update

        def change(r: SessionRecord) -> SessionRecord:
            flow = {k: v for k, v in (r.flow or {}).items() if k != key}
            if update:
                flow[key] = update
            return begin_flow(r, flow) if flow else clear_flow(r)

        session.transition(change)

    def begin_enrollment(
        self, session: AuthSession, kind: FactorKind, params: Mapping[str, Any] | None = None
    ) -> EnrollmentStart:
        """Start adding a factor of ``kind`` for the session's user (who must have
        authenticated within ``freshness``). The factor is stored pending; it counts for
        logins only once :meth:`confirm_enrollment` has its proof of possession.

        :raises StepUpNeeded: the session is not fresh. :raises FactorNotRegistered: no
            enrollable factor of ``kind``. :raises InvalidInput: bad ``params``.
        """
        tenant, user_id, now = self._fresh_user(session, "adding a factor")
        enrollment = self.service.enrollment(kind)
        ctx = self._enroll_context(session, kind, tenant, user_id, now)
        snapshot = _Snapshot.take(session)
        start = _guard_store(lambda: enrollment.begin(ctx, dict(params or {})))
        self._store_enroll_slot(session, kind, ctx)
        pending = _Pending(
            rows=[
                self._row(
                    "factor_enroll",
                    "started",
                    session,
                    now,
                    tenant=tenant,
                    user_id=user_id,
                    factor=kind.value,
                )
            ]
        )
        self._commit(session, snapshot, pending)
        return start

    def confirm_enrollment(
        self, session: AuthSession, kind: FactorKind, factor_id: str, credential: FactorCredential
    ) -> FactorConfig:
        """Finish an enrollment with the user's proof (a code from the new authenticator, the
        WebAuthn attestation). On success the factor counts from now on, an earlier factor of
        the kind is replaced (unless the kind allows several, as WebAuthn does), the user's
        other sessions end and this session gets a new id.

        :raises EnrollmentError: no such pending factor, it expired, or the proof is wrong.
        :raises StepUpNeeded: the session is not fresh any more.
        """
        tenant, user_id, now = self._fresh_user(session, "adding a factor")
        svc = self.service
        enrollment = svc.enrollment(kind)
        factor = svc.factor(kind)
        if factor is not None:
            factor.check_input(credential)
        ctx = self._enroll_context(session, kind, tenant, user_id, now)
        store = ctx.store
        snapshot = _Snapshot.take(session)

        def refuse(reason: str, slot: dict[str, Any] | None = None) -> EnrollmentError:
            # The enrollment's slot as the factor left it (a try counted); ``{}`` ends it.
            self._store_enroll_slot(session, kind, replace(ctx, flow_update=slot))
            self._write(
                [self._row("factor_enroll", "failure", session, now, tenant=tenant, user_id=user_id,
                           factor=kind.value, reason=reason)]
            )  # fmt: skip
            return EnrollmentError(
                "the code or response did not match: try again"
                if reason == RejectReason.INVALID.value
                else "the enrollment could not be confirmed: start again"
            )

        config = _guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
        if config is None or config.kind is not kind or config.confirmed:
            raise refuse("no_pending_factor", {})
        if now - config.created_at > ENROLLMENT_TTL:
            _guard_store(lambda: store.delete_factor(tenant, user_id, factor_id))
            raise refuse("expired", {})
        checked = _guard_store(lambda: enrollment.confirm(ctx, factor_id, credential))
        if not checked:
            code = checked.code if isinstance(checked, Rejected) else "invalid"
            raise refuse(code, ctx.flow_update)
        if not _guard_store(
            lambda: store.confirm_factor(tenant, user_id, factor_id, replace_kind=enrollment.replaces_kind)
        ):
            raise refuse("no_pending_factor", {})
        # An enrollment's commit runs once the factor counts (it marks the proving code used).
        if isinstance(checked, Accepted) and checked.commit is not None and not _guard_store(checked.commit):
            log.warning("the code that proved a new %s factor could not be marked used", kind.value)
        self._store_enroll_slot(session, kind, replace(ctx, flow_update={}))
        self._after_factor_change(
            session, tenant, user_id, "factor_enrolled", kind, now, snapshot, credit=True
        )
        confirmed = _guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
        return confirmed if confirmed is not None else replace(config, confirmed=True)

    def disable_factor(self, session: AuthSession, factor_id: str) -> bool:
        """Remove one of the session's user's factors (not the password). Needs a fresh
        authentication; the user's other sessions end and this session gets a new id.
        False when the user has no such factor."""
        tenant, user_id, now = self._fresh_user(session, "removing a factor")
        store = self.service.record_store()
        config = _guard_store(lambda: store.get_factor(tenant, user_id, factor_id))
        if config is None or config.kind is FactorKind.PASSWORD:
            return False
        snapshot = _Snapshot.take(session)
        if not _guard_store(lambda: store.delete_factor(tenant, user_id, factor_id)):
            return False
        self._after_factor_change(session, tenant, user_id, "factor_disabled", config.kind, now, snapshot)
        return True

    def _after_factor_change(
        self,
        session: AuthSession,
        tenant: str,
        user_id: str,
        event: str,
        kind: FactorKind,
        now: datetime,
        snapshot: _Snapshot,
        *,
        credit: bool = False,
    ) -> None:
        """Revoke the user's other sessions, rotate this one's id, audit. With ``credit`` the
        factor counts as verified in this login (confirming it proved possession), so adding
        another factor right after needs no further step-up."""
        revoke = self.service.revoke_sessions
        revoked = 0
        if revoke is not None:
            revoked = _guard_store(lambda: revoke(tenant, user_id, session.sid, event))
        sid = session.sid
        if credit:
            session.transition(lambda r: replace(r, factors_passed=(*r.factors_passed, kind.value)))
        if session.sid == sid:
            session.rotate_id()
        pending = _Pending(
            rows=[
                self._row(
                    event, "success", session, now, tenant=tenant, user_id=user_id, factor=kind.value,
                    reason=f"revoked_sessions={revoked}" if revoked else None,
                )
            ]
        )  # fmt: skip
        self._commit(session, snapshot, pending)

    def user_factors(self, session: AuthSession) -> list[FactorConfig]:
        """The session's user's confirmed factors (for an account page); empty for a guest."""
        record = session.record
        if record.state is not AuthState.AUTHENTICATED or record.tenant is None or record.user_id is None:
            return []
        store = self.service.factor_store
        tenant, user_id = record.tenant, record.user_id
        return _guard_store(lambda: store.list_factors(tenant, user_id))

    # --- passkeys -------------------------------------------------------------------------------

    def begin_passkey_login(self, tenant: str, session: AuthSession) -> Mapping[str, Any]:
        """Start a usernameless login with a passkey (a discoverable WebAuthn credential with
        user verification): the WebAuthn request options for ``navigator.credentials.get``.

        :raises PermissionDenied: passkey login is not enabled for ``tenant``
            (``AUTHFLOW_PASSKEY_LOGIN``). :raises FactorNotRegistered: WebAuthn is not configured.
        """
        svc = self.service
        now = svc.clock.now()
        tenant = check_tenant(tenant)
        factor = self._passkey_factor(tenant)
        if session.state in (AuthState.AUTHENTICATING,):
            session.transition(lambda r: reset_to_guest(r, now=now))
        ctx = FactorContext(
            tenant=tenant, user_id="", now=now, store=svc.record_store(), factors=(),
            flow={}, transaction=secrets.token_urlsafe(16), purpose="passkey",
        )  # fmt: skip
        options = factor.passkey_challenge(ctx)
        slot = {"tenant": tenant, **(ctx.flow_update or {})}
        session.transition(lambda r: begin_flow(r, {**(r.flow or {}), _PASSKEY_SLOT: slot}))
        return options

    def _passkey_factor(self, tenant: str) -> PasskeyFactor:
        factor = self.service.factor(FactorKind.WEBAUTHN)
        if not isinstance(factor, PasskeyFactor):
            raise FactorNotRegistered("passkey login needs the WebAuthn factor (AUTHFLOW_WEBAUTHN_RP_ID)")
        if not self.service.passkey_login_allowed(tenant):
            raise PermissionDenied(
                f"passkey login is not enabled for tenant {tenant!r} (AUTHFLOW_PASSKEY_LOGIN)"
            )
        return factor

    def finish_passkey_login(self, credential: FactorCredential, session: AuthSession) -> FactorOutcome:
        """Finish a passkey login begun with :meth:`begin_passkey_login`: the credential names
        its user; the signature, the challenge (single use), the origin, the RP id, user
        verification and the signature counter are checked. Counted by the lockout policy
        like a password; audited with method ``passkey``."""
        svc = self.service
        now = svc.clock.now()
        flow = session.record.flow or {}
        slot = flow.get(_PASSKEY_SLOT)
        tenant = slot.get("tenant") if isinstance(slot, Mapping) else None
        if credential.kind is not FactorKind.WEBAUTHN:
            raise InvalidInput("a passkey login takes a WebAuthn credential")
        snapshot = _Snapshot.take(session)

        def forget(r: SessionRecord) -> SessionRecord:
            rest = {k: v for k, v in (r.flow or {}).items() if k != _PASSKEY_SLOT}
            return begin_flow(r, rest) if rest else clear_flow(r)

        def failed(reason: str, user_id: str | None = None) -> InvalidCredential:
            session.transition(forget)
            pending = _Pending(counters=["login_attempts", "login_failures"])
            pending.rows.append(
                self._row("passkey_login", "failure", session, now, tenant=tenant, user_id=user_id,
                          factor=FactorKind.WEBAUTHN.value, reason=reason)
            )  # fmt: skip
            self._commit(session, snapshot, pending)
            return InvalidCredential()

        if not isinstance(tenant, str):
            return failed("no_challenge")
        factor = self._passkey_factor(tenant)
        factor.check_input(credential)
        store = svc.record_store()
        config = _guard_store(lambda: factor.find_passkey(store, tenant, credential))
        if config is None:
            return failed("unknown_credential")
        user = _guard_store(lambda: svc.identity_store.get_user(tenant, config.user_id))
        if user is None or user.disabled:
            return failed("disabled" if user is not None else "unknown_user", config.user_id)
        subject = user.identifier
        lockout = svc.lockout
        reserved = lockout.reserve(tenant, subject, FactorKind.WEBAUTHN.value, now)
        if reserved.token is None:
            session.transition(forget)
            pending = _Pending(counters=["login_attempts", "login_failures"])
            pending.rows.append(
                self._row("passkey_login", "locked", session, now, tenant=tenant, user_id=user.user_id,
                          factor=FactorKind.WEBAUTHN.value, reason="locked")
            )  # fmt: skip
            self._commit(session, snapshot, pending)
            return Locked(reserved.locked_until or now)
        token: str | None = reserved.token
        try:
            ctx = FactorContext(
                tenant=tenant, user_id=user.user_id, now=now, store=store, factors=(config,),
                flow=dict(slot) if isinstance(slot, Mapping) else {},
                transaction="", purpose="passkey", identifier=user.identifier,
            )  # fmt: skip
            checked: FactorCheck = _guard_store(lambda: factor.verify(ctx, credential))
            if (
                isinstance(checked, Accepted)
                and checked.commit is not None
                and not _guard_store(checked.commit)
            ):
                checked = Rejected(RejectReason.REPLAYED)
            if not checked:
                settle, token = token, None
                lockout.failure(
                    tenant, subject, FactorKind.WEBAUTHN.value, now, self.ctx.client_ip, reservation=settle
                )
                reason = checked.code if isinstance(checked, Rejected) else "invalid"
                return failed(reason, user.user_id)
            settle, token = token, None
            lockout.success(
                tenant, subject, FactorKind.WEBAUTHN.value, now, self.ctx.client_ip, reservation=settle
            )
        finally:
            if token is not None:
                try:
                    lockout.release(tenant, subject, FactorKind.WEBAUTHN.value, token)
                except StoreUnavailable:
                    pass
        session.transition(forget)
        return self.establish(session, tenant, user.user_id, method="passkey", multi_factor=True)

    def logout(self, session: AuthSession) -> None:
        """Back to Guest: everything dropped, session id rotated."""
        now = self.service.clock.now()
        user_id, tenant = session.user_id, session.tenant
        session.clear()
        pending = _Pending(
            rows=[self._row("logout", "success", session, now, tenant=tenant, user_id=user_id)],
        )
        if user_id is not None and not user_id.startswith(PHANTOM_PREFIX):
            pending.signals.append(
                ("session_revoked", {"user_id": user_id, "tenant": tenant, "reason": "logout"})
            )
        try:
            self._write(pending.rows)
        except AuditWriteError:
            # Logging out is the safe direction: the session ends whatever the audit
            # store says. The row goes to the durable fallback, and the failure is
            # counted and logged, never dropped silently.
            self._fallback(pending.rows)
        self._release(pending)

    def _fallback(self, rows: list[AuditRecord]) -> None:
        counters = self.service.counters
        fallback = self.service.audit_fallback
        for row in rows:
            try:
                if fallback is None:
                    raise AuditWriteError("no audit fallback is configured")
                fallback.write(row)
            except Exception:  # noqa: BLE001 - every failure is logged and counted below
                counters.increment("audit_lost_writes")
                log.error(
                    "audit row of a logout lost: the audit store and its fallback both failed (%s)", row
                )
            else:
                counters.increment("audit_fallback_writes")
                log.warning("audit store failed; logout row written to the fallback %r", fallback)

    def __repr__(self) -> str:
        return f"<AuthnRequest request_id={self.ctx.request_id}>"
