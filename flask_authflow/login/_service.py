"""The login service: :class:`AuthnService` (construction and the registry of factors) and
:class:`AuthnRequest` (the login operations of one request, bound to its audit context).

Each operation is a flow module of its own, run in the one template every login step uses
(:class:`~flask_authflow.login._operation.Operation`): ``begin`` (begin_login), ``verify``
(verify_factor, challenge), ``establish``, ``step_up``, ``enrollment``, ``passkey`` and
``logout``. Three rules shape every one of them:

* **No oracle.** An unknown identifier, a user of another tenant and a disabled account
  go through the same steps as a real account (a *phantom* user that can never
  authenticate); outcomes, store round trips, lockout and timing match those of a wrong
  password (see :mod:`flask_authflow.login._begin`).
* **Fail closed.** If the attempt store cannot count a failure, the attempt is refused
  with :class:`StoreUnavailable`; it never succeeds by default (see
  :mod:`flask_authflow.login._verify`).
* **Nothing unaudited.** The session change is applied, the audit row (which carries the
  resulting session id, hashed) is written, and if that write fails the session is put
  back exactly as it was and :class:`AuditWriteError` is raised. The settlement of a
  credential check (attempt row, counter change, the single-use update of a one-time
  code) and its audit rows commit in the store's one unit of work: both or neither. If
  that unit fails after a wrong credential, the failure is counted once more on its own
  (see :mod:`flask_authflow.login._operation`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.factors import Enrollment, EnrollmentStart, Factor
from flask_authflow._core.identifiers import normalise_identifier
from flask_authflow._core.ports import (
    AccountTokenStore,
    ApiTokenStore,
    AttemptStore,
    AuditSink,
    FactorConfig,
    FactorRecordStore,
    IdentityStore,
    LoginStore,
)
from flask_authflow._core.session import AuthSession, step_name
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    LoginOutcome,
    StepUpRequired,
    WorkflowPending,
)
from flask_authflow._throttle import Throttle
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord, AuthCounters
from flask_authflow.errors import ConfigurationError, FactorNotRegistered
from flask_authflow.login import _begin as begin
from flask_authflow.login import _enrollment as enrollment
from flask_authflow.login import _establish as establish
from flask_authflow.login import _login_code as login_code
from flask_authflow.login import _logout as logout
from flask_authflow.login import _passkey as passkey
from flask_authflow.login import _step_up as step_up
from flask_authflow.login import _verify as verify
from flask_authflow.login._enrollment import ENROLLMENT_TTL
from flask_authflow.login._legacy_hashes import LegacyHashes
from flask_authflow.login._lockout import Lockout, LockoutPolicy
from flask_authflow.login._mfa_policy import MfaRequirement
from flask_authflow.login._operation import (
    LOGIN_IDENTIFIER_KEY,
    PHANTOM_PREFIX,
    STEP_UP_KEY,
    TRANSACTION_KEY,
    SessionWriter,
    record_event,
)
from flask_authflow.login._password import PasswordFactor, PasswordHasher

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
    "SessionWriter",
    "default_login_steps",
    "normalise_identifier",
]

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


class AuthnService:
    """Password login with chained factors, lockout, audit and counters.

    :param identity_store, factor_store: where users and their factors live: one
        :class:`~flask_authflow._core.ports.LoginStore` (``InMemoryBackend``,
        ``SqlAlchemyBackend``) passed as both, which also counts attempts.
    :param attempt_store: the same store (given or not, it must be the one store).
    :param audit_sink: defaults to the store; another sink's rows are written before the
        store's unit commits, outside it.
    :param hasher: verifies and rehashes passwords (the wiring passes the app's; default
        Argon2id with the RFC 9106 low-memory profile).
    :param account_tokens: the backend's account tokens (its ``store_ports().account_tokens``):
        sign-up, password reset, e-mail change and required enrollments keep theirs there.
        ``None``: those flows raise :class:`~flask_authflow.errors.ConfigurationError`.
    :param api_token_store: the personal API tokens a password reset, a password change and
        "log out everywhere" delete (:mod:`~flask_authflow.login._recovery`; the wiring
        passes the backend). ``None``: those flows end no API token.
    """

    def __init__(
        self,
        identity_store: LoginStore,
        factor_store: LoginStore,
        *,
        attempt_store: LoginStore | None = None,
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
        legacy_hashes: LegacyHashes | None = None,
        throttle: Throttle | None = None,
        api_token_store: ApiTokenStore | None = None,
        account_tokens: AccountTokenStore | None = None,
    ) -> None:
        self.store: LoginStore = _one_store(identity_store, factor_store, attempt_store)
        self.identity_store: IdentityStore = self.store
        self.factor_store: FactorRecordStore = self.store
        self.attempt_store: AttemptStore = self.store
        #: Where sign-up, reset, e-mail change and required enrollments keep their tokens
        #: (the backend's declared port; ``None``: those flows are refused).
        self.account_tokens = account_tokens
        # ``is None``, not ``or``: a sink may define __len__ and be falsy when empty.
        self.audit_sink: AuditSink = audit_sink if audit_sink is not None else self.store
        #: Where a logout's audit row goes when the audit sink fails (a logout always succeeds).
        self.audit_fallback = audit_fallback
        self.hasher = hasher if hasher is not None else PasswordHasher()
        self.policy = lockout or LockoutPolicy()
        self.lockout = Lockout(self.policy, self.store)
        #: Rate limits checked before any credential (none unless given: ``init_app`` gives one).
        self.throttle = throttle if throttle is not None else Throttle.disabled()
        self.clock: Clock = clock or SystemClock()
        self.counters = counters if counters is not None else AuthCounters()
        self._factors: dict[FactorKind, Factor] = {}
        self.register_factor(PasswordFactor(self.hasher, self.store, legacy_hashes))
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
        #: ``(tenant, user_id, device_id, now) -> bool``: whether the user trusts that device
        #: now (wired by ``init_app`` to the device store); a login from a trusted device asks
        #: for the password only. ``None``: no device is ever trusted.
        self.device_trusted: Callable[[str, str, str, datetime], bool] | None = None
        #: Second factors required by policy (``AUTHFLOW_MFA_REQUIRED``, wired by ``init_app``;
        #: ``None``: nobody is required to have one).
        self.mfa_requirement: MfaRequirement | None = None
        #: ``(tenant, user_id) -> None``: run for a sign-in in its step's unit of work, before
        #: the commit (wired by ``init_app`` to record the request's device); ``None``: nothing.
        self.on_sign_in: Callable[[str, str], None] | None = None
        #: ``(tenant, user_id) -> bool``: whether the user has a linked provider identity (a
        #: way to sign in besides the password and passkeys; wired by ``init_app`` when
        #: federation is on). ``None``: no links count.
        self.linked_identities: Callable[[str, str], bool] | None = None
        #: The personal API tokens a password reset, a password change and "log out
        #: everywhere" delete with the user's sessions (wired by ``init_app`` to the
        #: backend; ``None``: the flows end no API token). See :mod:`~flask_authflow.login._recovery`.
        self.api_token_store: ApiTokenStore | None = api_token_store
        # Per-process key: phantom ids are stable for one identifier but unguessable.
        self._phantom_key = secrets.token_bytes(32)

    def register_factor(self, factor: Factor) -> None:
        """Plug in the factor of a kind (replaces an earlier one of the same kind)."""
        if not isinstance(factor, Factor):
            raise TypeError(
                "a factor needs kind, expensive, challenge_on_request, digits, check_input, challenge "
                "and verify (see Factor)"
            )
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
        """The store's factor records (what second factors use)."""
        return self.store

    def steps_for(self, tenant: str, user_id: str, kinds: Sequence[FactorKind]) -> list[str]:
        """The stored form of the login steps of a user with ``kinds`` enrolled."""
        return [step_name(k.value for k in step) for step in self.login_steps(tenant, user_id, kinds) if step]

    def with_audit_context(self, ctx: AuditContext | None) -> AuthnRequest:
        """The request-scoped handle; login operations exist only on it, so every row has a context."""
        return AuthnRequest(self, ctx if ctx is not None else AuditContext.unknown())

    def phantom_user_id(self, tenant: str, identifier: str) -> str:
        """The stable, unguessable id of a login whose identifier matches no usable account."""
        mac = hmac.new(self._phantom_key, f"{tenant}\x00{identifier}".encode(), hashlib.sha256)
        return PHANTOM_PREFIX + mac.hexdigest()[:32]

    def __repr__(self) -> str:
        return f"<AuthnService policy={self.policy!r} hasher={self.hasher!r}>"


def _one_store(identity: LoginStore, factors: LoginStore, attempts: LoginStore | None) -> LoginStore:
    """The one store of identities, factors and attempts (see :class:`LoginStore`)."""
    store = attempts if attempts is not None else identity
    if identity is not store or factors is not store:
        raise ConfigurationError("the identity, factor and attempt store must be one LoginStore")
    return store


class AuthnRequest:
    """Login operations bound to one request's :class:`AuditContext`; each is a flow module."""

    __slots__ = ("ctx", "service")

    def __init__(self, service: AuthnService, ctx: AuditContext) -> None:
        self.service = service
        self.ctx = ctx

    @property
    def site_name(self) -> str:
        return self.service.site_name

    def begin_login(self, identifier: str, tenant: str, session: AuthSession) -> LoginOutcome:
        """Start a login for ``identifier`` in ``tenant``; see :mod:`flask_authflow.login._begin`."""
        return begin.begin_login(self.service, self.ctx, identifier, tenant, session)

    def login_with_password(
        self, identifier: str, tenant: str, session: AuthSession, credential: FactorCredential
    ) -> LoginOutcome | FactorOutcome:
        """:meth:`begin_login` and, when it asks for the password, :meth:`verify_factor` with
        ``credential``, in one request: the begin's audit rows are written in the password
        step's commit (one commit for the whole sign-in)."""
        rows: list[AuditRecord] = []
        before = session.snapshot()
        begun = begin.begin_login(self.service, self.ctx, identifier, tenant, session, defer_rows_to=rows)
        if not (isinstance(begun, FactorRequired) and begun.kind is FactorKind.PASSWORD):
            return begun
        return verify.verify_factor(
            self.service, self.ctx, credential, session, carried=rows, carried_since=before
        )

    def request_login_code(
        self, given: object, tenant: str, session: AuthSession, codes: login_code.CodeIssuer
    ) -> login_code.LoginCodeRequest:
        """Start a sign-in by e-mailed code for the account ``given`` (an identifier or an
        address) names, with a code from ``codes`` (the app's ``login_code`` factor): mail
        the answer's code to its ``to`` when set; see :mod:`flask_authflow.login._login_code`."""
        return login_code.request_login_code(self.service, self.ctx, session, tenant, given, codes)

    def verify_factor(self, credential: FactorCredential, session: AuthSession) -> FactorOutcome:
        """Check the credential for the step the session waits for (credential first, then the session).

        Any kind of the pending step passes it; a kind outside the step is refused
        (``InvalidCredential``, audited ``unexpected_factor``), never a skip. A wrong credential
        ends the login at its first step (the password), and keeps it at a later step so
        the user can retry within the lockout policy; the session id rotates after each
        passed step.
        """
        return verify.verify_factor(self.service, self.ctx, credential, session)

    def challenge(self, kind: FactorKind, session: AuthSession) -> FactorRequired:
        """(Re)issue the challenge of ``kind`` for the pending step: "send me a code by
        e-mail", "use my security key". The step must accept ``kind``.

        :raises LoginNotStarted: no step is pending, or ``kind`` does not pass it.
        :raises FactorNotRegistered: no factor of ``kind`` is registered.
        """
        return verify.challenge(self.service, self.ctx, kind, session)

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
    ) -> Authenticated | FactorRequired | WorkflowPending:
        """Log ``user_id`` in on ``session`` after the application proved who it is some other
        way (sign-up, a magic link, a federated login): ``method`` names that way.

        The session goes through the state machine like any login: a login of another
        user on it ends first (audited), the id rotates, the User-Agent binding is set,
        the audit row carries ``method``, and ``login_succeeded`` is sent. ``method``
        stands in for the password only: factors beyond the password that the user has
        enrolled stay required (the outcome is ``FactorRequired``, continued with
        :meth:`verify_factor`) unless ``skip_factors`` is true, which is audited
        (reason ``factors_skipped``). ``pending_workflow`` ends in PendingWorkflow instead
        of Authenticated (a federated step of a longer ceremony, such as a sign-up; the
        outcome is then ``WorkflowPending``);
        ``federation`` is kept on the session (see ``SessionRecord.federation``).
        ``multi_factor`` says ``method`` proved every factor at once (a passkey with user
        verification): no later step remains, and nothing is audited as skipped.

        :raises UserNotFound: no such user. :raises AccountDisabled: the account is
            disabled. :raises InvalidInput: ``method`` is not a short lowercase label.
        """
        how = establish.Establish(method, skip_factors, pending_workflow, federation, multi_factor)
        return establish.establish(self.service, self.ctx, session, tenant, user_id, how)

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
        fields = {"tenant": tenant, "user_id": user_id, "factor": factor, "reason": reason}
        record_event(self.service, self.ctx, event, status, session, **fields)

    def begin_step_up(self, session: AuthSession, *, strongest: bool = False) -> StepUpRequired:
        """Ask an Authenticated session to re-verify a factor (refreshes ``authenticated_at``).

        By default the first step (the password). With ``strongest``, the user's last step
        instead (``totp | webauthn | ... | recovery_code`` when second factors are enrolled,
        else the password); its factors are challenged (WebAuthn options, an e-mail code when
        it is the only kind; :meth:`challenge` for the others). Enrolling, changing or removing
        a factor needs a step-up of this kind (see :meth:`begin_enrollment`). The login stays
        Authenticated throughout; :meth:`verify_factor` completes the step-up.
        """
        return step_up.begin_step_up(self.service, self.ctx, session, strongest=strongest)

    def check_password_change(self, session: AuthSession) -> None:
        """Refuse a change of the session's user's password when the user has a second factor
        and this session has not passed the strongest login step within ``freshness`` (a
        stolen session with a known password cannot change it). Call it before asking for
        the current password.

        :raises StepUpNeeded: ask for ``begin_step_up(session, strongest=True)`` first.
        """
        enrollment.check_password_change(self.service, session)

    def begin_enrollment(
        self, session: AuthSession, kind: FactorKind, params: Mapping[str, Any] | None = None
    ) -> EnrollmentStart:
        """Start adding a factor of ``kind`` for the session's user (who must have
        authenticated within ``freshness``). The factor is stored pending; it counts for
        logins only once :meth:`confirm_enrollment` has its proof of possession.

        :raises StepUpNeeded: the session is not fresh. :raises FactorNotRegistered: no
            enrollable factor of ``kind``. :raises InvalidInput: bad ``params``.
        """
        return enrollment.begin_enrollment(self.service, self.ctx, session, kind, params)

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
        return enrollment.confirm_enrollment(self.service, self.ctx, session, kind, factor_id, credential)

    def disable_factor(self, session: AuthSession, factor_id: str) -> bool:
        """Remove one of the session's user's factors (not the password). Needs a fresh
        authentication; the user's other sessions end and this session gets a new id.
        False when the user has no such factor."""
        return enrollment.disable_factor(self.service, self.ctx, session, factor_id)

    def user_factors(self, session: AuthSession) -> list[FactorConfig]:
        """The session's user's confirmed factors (for an account page); empty for a guest."""
        return enrollment.user_factors(self.service, session)

    def begin_passkey_login(self, tenant: str, session: AuthSession) -> Mapping[str, Any]:
        """Start a usernameless login with a passkey (a discoverable WebAuthn credential with
        user verification): the WebAuthn request options for ``navigator.credentials.get``.

        :raises PermissionDenied: passkey login is not enabled for ``tenant``
            (``AUTHFLOW_PASSKEY_LOGIN``). :raises FactorNotRegistered: WebAuthn is not configured.
        """
        return passkey.begin_passkey_login(self.service, tenant, session)

    def finish_passkey_login(self, credential: FactorCredential, session: AuthSession) -> FactorOutcome:
        """Finish a passkey login begun with :meth:`begin_passkey_login`: the credential names
        its user; the signature, the challenge (single use), the origin, the RP id, user
        verification and the signature counter are checked. Counted by the lockout policy
        like a password; audited with method ``passkey``."""
        return passkey.finish_passkey_login(self.service, self.ctx, credential, session)

    def logout(self, session: AuthSession) -> None:
        """Back to Guest: everything dropped, session id rotated."""
        logout.logout(self.service, self.ctx, session)

    def __repr__(self) -> str:
        return f"<AuthnRequest request_id={self.ctx.request_id}>"
