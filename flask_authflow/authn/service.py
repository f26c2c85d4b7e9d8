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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from .. import signals
from ..audit.context import AuditContext
from ..audit.sinks import AuditRecord, AuthCounters, hash_session_id
from ..clock import Clock, SystemClock
from ..errors import (
    AccountDisabled,
    AuditWriteError,
    AuthFlowError,
    ConfigurationError,
    InvalidInput,
    LoginNotStarted,
    StoreUnavailable,
    UserNotFound,
)
from ..session.model import (
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
)
from .factors.base import FactorVerifier, Refused
from .factors.password import PasswordHasher, PasswordVerifier
from .identifiers import check_tenant, normalise_identifier
from .lockout import Lockout, LockoutPolicy
from .outcomes import (
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
from .stores import AttemptStore, AuditSink, FactorStore, IdentityStore

__all__ = [
    "LOGIN_IDENTIFIER_KEY",
    "PHANTOM_PREFIX",
    "STEP_UP_KEY",
    "AuthnRequest",
    "AuthnService",
    "normalise_identifier",
]

#: Prefix of the user id given to logins of identifiers that match no usable account.
#: Store ids never contain ``:``, so a phantom can never be mistaken for a real user.
PHANTOM_PREFIX = "unknown:"
#: Key of the session flow that remembers the normalised identifier during a login.
LOGIN_IDENTIFIER_KEY = "login_identifier"
#: Key of the session flow that names the factor a step-up waits for (see session.model).
STEP_UP_KEY = "step_up"

#: What ``login_user(method=...)`` accepts: a short lowercase label ("signup", "magic_link",
#: "oidc:google"), stored in the session and the audit row.
_METHOD_RE = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,31}")  # the audit column holds 32

T = TypeVar("T")

log = logging.getLogger("flask_authflow.authn")


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
        self._verifiers: dict[FactorKind, FactorVerifier] = {}
        self.register_verifier(PasswordVerifier(hasher, factor_store))
        # Per-process key: phantom ids are stable for one identifier but unguessable.
        self._phantom_key = secrets.token_bytes(32)

    def register_verifier(self, verifier: FactorVerifier) -> None:
        """Plug in the verifier of a factor kind (replaces an earlier one of the same kind)."""
        self._verifiers[verifier.kind] = verifier

    def verifier(self, kind: FactorKind) -> FactorVerifier | None:
        return self._verifiers.get(kind)

    def with_audit_context(self, ctx: AuditContext | None) -> AuthnRequest:
        """The request-scoped handle; login operations exist only on it, so every row has a context."""
        return AuthnRequest(self, ctx if ctx is not None else AuditContext.unknown())

    def phantom_user_id(self, tenant: str, identifier: str) -> str:
        mac = hmac.new(self._phantom_key, f"{tenant}\x00{identifier}".encode(), hashlib.sha256)
        return PHANTOM_PREFIX + mac.hexdigest()[:32]

    def __repr__(self) -> str:
        return f"<AuthnService policy={self.policy!r} hasher={self.hasher!r}>"


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
        try:
            self._write(pending.rows)
            if unit is not None:
                unit.commit()
        except AuditWriteError:
            self._drop(unit)
            snapshot.restore(session)
            if unit is not None and pending.recount is not None:
                # Nothing of the unit was written: a wrong credential still counts.
                try:
                    pending.recount()
                except StoreUnavailable:
                    log.warning("a failed credential check could not be counted: the attempt store failed")
            raise
        self._release(pending)

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
            user = _guard_store(lambda: svc.identity_store.find_user(tenant, ident))
            usable = user is not None and not user.disabled
            subject_id = user.user_id if usable and user is not None else svc.phantom_user_id(tenant, ident)
            # The phantom asks the store too, so both paths make the same round trips.
            factors = _guard_store(lambda: svc.factor_store.required_factors(tenant, subject_id))
            if not usable or not factors or factors[0] is not FactorKind.PASSWORD:
                subject_id = svc.phantom_user_id(tenant, ident)
                factors = [FactorKind.PASSWORD]
            until = svc.lockout.locked_until(tenant, ident, now)
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
                names = [kind.value for kind in factors]
                session.transition(
                    lambda r: begin_flow(
                        start_login(r, tenant=tenant, user_id=subject_id, factors=names, now=now),
                        {LOGIN_IDENTIFIER_KEY: ident},
                    )
                )
                reason = None if usable else ("disabled" if user is not None else "unknown_identifier")
                if usable and user is not None and subject_id != user.user_id:
                    reason = "no_password"
                pending.rows.append(
                    self._row(
                        "login_begin", "started", session, now,
                        tenant=tenant, user_id=audit_user, identifier=ident, factor=names[0], reason=reason,
                    )
                )  # fmt: skip
                outcome = FactorRequired(factors[0])
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

    def verify_factor(self, credential: FactorCredential, session: AuthSession) -> FactorOutcome:
        """Check the credential for the factor the session waits for (credential first, as in the spec)."""
        svc = self.service
        now = svc.clock.now()
        record = session.record
        flow = record.flow or {}
        kind_name = credential.kind.value
        step_up_factor = flow.get(STEP_UP_KEY) if record.state is AuthState.AUTHENTICATED else None
        if record.state is AuthState.AUTHENTICATING and record.next_factor is not None:
            expected = record.next_factor
        elif isinstance(step_up_factor, str):
            expected = step_up_factor
        else:
            snapshot = _Snapshot.take(session)
            pending = _Pending(counters=["login_attempts", "login_failures"])
            pending.rows.append(
                self._row(
                    "factor_verify", "failure", session, now, factor=kind_name, reason="no_login_in_progress"
                )
            )
            self._commit(session, snapshot, pending)
            return InvalidCredential()

        tenant = record.tenant or ""
        user_id = record.user_id or ""
        ident_value = flow.get(LOGIN_IDENTIFIER_KEY)
        subject = ident_value if isinstance(ident_value, str) else f"user:{user_id}"
        identifier = ident_value if isinstance(ident_value, str) else None
        phantom = user_id.startswith(PHANTOM_PREFIX)
        step_up = record.state is AuthState.AUTHENTICATED
        verifier = svc.verifier(credential.kind)

        def row(status: str, reason: str | None = None) -> AuditRecord:
            return self._row(
                "factor_verify", status, session, now,
                tenant=tenant, user_id=user_id, identifier=identifier, factor=expected, reason=reason,
            )  # fmt: skip

        if verifier is not None:
            try:
                verifier.check_input(credential)
            except InvalidInput as exc:
                code = exc.code
                self._refuse(session, None, exc, lambda: row("error", code))
                raise

        def abandon(r: SessionRecord) -> SessionRecord:
            # A failed step-up keeps the login but forgets the step-up; a failed login ends it.
            return clear_flow(r) if r.state is AuthState.AUTHENTICATED else fail_login(r, now=now)

        snapshot = _Snapshot.take(session)
        pending = _Pending(counters=["login_attempts"])
        lockout = svc.lockout
        reservation: str | None = None
        unit: Any = None
        try:
            # Reserve the attempt before any credential check: the store grants at most
            # ``max_failures`` checks in flight and in the window, atomically, so a burst
            # of parallel guesses cannot buy more Argon2 verifications than the policy allows.
            reserved = lockout.reserve(tenant, subject, expected, now)
            reservation = reserved.token
            outcome: FactorOutcome
            if reservation is None:
                outcome = self._locked(
                    session, pending, row, abandon, tenant, identifier, reserved.locked_until or now, "locked"
                )
            else:
                if verifier is None or kind_name != expected:
                    ok, reason = (
                        False,
                        ("unexpected_factor" if kind_name != expected else "unsupported_factor"),
                    )
                else:
                    checked = _guard_store(lambda: verifier.verify(tenant, user_id, credential, now))
                    ok = bool(checked) and not phantom
                    reason = (
                        "unknown_identifier"
                        if phantom
                        else checked.reason
                        if isinstance(checked, Refused)
                        else "invalid_credential"
                    )
                # A lock set while this check ran (by a parallel failure) wins over a success.
                locked_now = lockout.locked_until(tenant, subject, now) if ok else None
                if locked_now is not None:
                    token, reservation = reservation, None
                    lockout.release(tenant, subject, expected, token)
                    outcome = self._locked(
                        session, pending, row, abandon, tenant, identifier, locked_now, "locked_during_check"
                    )
                elif ok:
                    token, reservation = reservation, None
                    unit = self._begin_unit()  # the settlement and the audit rows: one transaction
                    lockout.success(tenant, subject, expected, now, self.ctx.client_ip, reservation=token)

                    def advance(r: SessionRecord) -> SessionRecord:
                        after = pass_factor(r, expected, now=now)
                        return clear_flow(after) if after.state is AuthState.AUTHENTICATED else after

                    after = session.transition(advance)
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
                        outcome = FactorRequired(FactorKind(after.factors_pending[0]))
                else:
                    token, reservation = reservation, None
                    unit = self._begin_unit()

                    def count_failure(token: str | None = token) -> object:
                        return lockout.failure(
                            tenant, subject, expected, now, self.ctx.client_ip, reservation=token
                        )

                    result = lockout.failure(
                        tenant, subject, expected, now, self.ctx.client_ip, reservation=token
                    )
                    pending.recount = count_failure
                    session.transition(abandon)
                    pending.counters.append("login_failures")
                    if result.locked_until is not None:
                        pending.rows.append(row("locked", reason))
                        pending.counters.append("lockouts")
                        outcome = Locked(result.locked_until)
                    else:
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
            remaining = [kind.value for kind in enrolled if kind is not FactorKind.PASSWORD]
            skipped = skip_factors and bool(remaining)
            if skip_factors:
                remaining = []
            if session.state in (AuthState.AUTHENTICATED, AuthState.PENDING_WORKFLOW):
                self._end_previous_login(session, now, pending)
            elif session.state is AuthState.AUTHENTICATING:  # an unfinished login: dropped, not a logout
                session.transition(lambda r: reset_to_guest(r, now=now))
            identity_flow = {LOGIN_IDENTIFIER_KEY: user.identifier}
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
                outcome = FactorRequired(FactorKind(remaining[0]))
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

    def begin_step_up(self, session: AuthSession) -> StepUpRequired:
        """Ask an Authenticated session to re-verify its first factor (refreshes ``authenticated_at``).

        The login stays Authenticated throughout; :meth:`verify_factor` completes the step-up.
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
            factors = _guard_store(lambda: svc.factor_store.required_factors(tenant, user_id))
            kind = factors[0] if factors else FactorKind.PASSWORD
            flow: dict[str, str] = {STEP_UP_KEY: kind.value}
            if user is not None:
                flow[LOGIN_IDENTIFIER_KEY] = user.identifier
            session.transition(lambda r: begin_flow(r, flow))
            pending = _Pending(
                rows=[
                    self._row(
                        "step_up_begin", "started", session, now,
                        tenant=tenant, user_id=user_id, identifier=flow.get(LOGIN_IDENTIFIER_KEY),
                        factor=kind.value,
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
        return StepUpRequired((kind,))

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
