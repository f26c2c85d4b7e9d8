"""The login state machine and the session object views see.

A session is one :class:`SessionRecord` (immutable, what the store keeps) wrapped in an
:class:`AuthSession` (what ``flask.session`` / ``current_session`` is during a request).
Every change of authentication state is a pure function from record to record below;
:class:`AuthSession` applies them, rotates the session id and marks itself dirty.

The rule the whole library rests on: a record in :attr:`AuthState.AUTHENTICATED` has no
outstanding factor, so :attr:`AuthSession.is_authenticated` is never true while a
required factor is still to be verified (enforced in ``SessionRecord.__post_init__``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from flask.json.tag import TaggedJSONSerializer
from flask.sessions import SessionMixin
from werkzeug.datastructures import CallbackDict

from flask_authflow.errors import InvalidInput, InvalidTransition, SessionDataTooLarge
from flask_authflow.i18n import gettext

__all__ = [
    "CUSTOM_DATA_LIMIT",
    "DEVICE_MAX_LENGTH",
    "WORKFLOW_DATA_LIMIT",
    "WORKFLOW_EXPIRY",
    "AuthSession",
    "AuthState",
    "InvalidTransition",
    "SessionRecord",
    "SessionSnapshot",
    "WorkflowExpired",
    "WorkflowKind",
    "WorkflowNotPending",
    "WorkflowTokenInvalid",
    "abort_workflow",
    "begin_flow",
    "clean_user_agent",
    "clear_flow",
    "complete_login",
    "complete_workflow",
    "custom_serializer",
    "describe_device",
    "fail_login",
    "federation_key",
    "new_guest_record",
    "new_session_id",
    "pass_factor",
    "record_federation_key",
    "reset_to_guest",
    "sid_hash",
    "start_login",
    "start_workflow",
    "step_kinds",
    "step_name",
    "step_up",
    "workflow_token_hash",
]

#: Separates the kinds of one login step in ``factors_pending`` ("totp|webauthn|recovery_code":
#: any one of them passes the step).
STEP_SEPARATOR = "|"


def step_kinds(step: str) -> tuple[str, ...]:
    """The factor kinds that satisfy one login step (a step is stored as ``"a|b|c"``)."""
    return tuple(kind for kind in step.split(STEP_SEPARATOR) if kind)


def step_name(kinds: Iterable[str]) -> str:
    """The stored form of a step satisfied by any one of ``kinds`` (order kept, duplicates dropped)."""
    unique = list(dict.fromkeys(kinds))
    if not unique or any(not kind or STEP_SEPARATOR in kind for kind in unique):
        raise InvalidTransition("a login step needs at least one factor kind, without '|'")
    return STEP_SEPARATOR.join(unique)


#: Maximum size of ``SessionData.custom`` once serialised (64 KiB).
CUSTOM_DATA_LIMIT = 64 * 1024

#: Serialiser for custom data: Flask's own tagged JSON, so ``flask.session`` values
#: (tuples, bytes, Markup, datetimes, flashed messages) round-trip as they do in Flask.
custom_serializer = TaggedJSONSerializer()


class AuthState(enum.Enum):
    """Where a session is in the login state machine."""

    GUEST = "guest"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"
    PENDING_WORKFLOW = "pending_workflow"


#: Longest User-Agent kept as a session's ``device`` (the rest is cut).
DEVICE_MAX_LENGTH = 256

_BROWSERS = (
    ("Edg/", "Edge"),
    ("OPR/", "Opera"),
    ("Firefox/", "Firefox"),
    ("Chromium/", "Chromium"),
    ("Chrome/", "Chrome"),
    ("Safari/", "Safari"),
    ("curl/", "curl"),
)
_SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def clean_user_agent(user_agent: str | None) -> str | None:
    """``user_agent`` as a session keeps it: printable ASCII only, spaces collapsed, at most
    :data:`DEVICE_MAX_LENGTH` characters; ``None`` when nothing printable is left."""
    if not user_agent:
        return None
    text = "".join(ch if " " <= ch <= "~" else " " for ch in user_agent[: DEVICE_MAX_LENGTH * 4])
    text = " ".join(text.split())[:DEVICE_MAX_LENGTH]
    return text or None


def describe_device(device: str | None) -> str:
    """A short label for a session's ``device`` ("Firefox on Linux"), or ``"unknown device"``.

    A best-effort reading of the User-Agent for people, never a security signal.
    """
    if not device:
        return gettext("unknown device")
    browser = next((name for token, name in _BROWSERS if token in device), None)
    system = next((name for token, name in _SYSTEMS if token in device), None)
    if browser and system:
        return gettext("%(browser)s on %(system)s", browser=browser, system=system)
    if browser or system:
        return str(browser or system)
    return device.split(" ", 1)[0][:40]


def federation_key(issuer: str, provider_sid: str) -> str:
    """The index key of a provider session: SHA-256 of ``issuer`` and ``sid`` (hex).

    Stores keep it beside the record so a back-channel logout for (issuer, sid) finds
    the local sessions without reading every record.
    """
    return hashlib.sha256(f"{issuer}\n{provider_sid}".encode()).hexdigest()


def record_federation_key(record: SessionRecord) -> str | None:
    """:func:`federation_key` of a record established by a federated login with a ``sid``."""
    fed = record.federation
    if not fed or record.state is AuthState.GUEST:
        return None
    issuer, provider_sid = fed.get("issuer"), fed.get("sid")
    if not issuer or not provider_sid:
        return None
    return federation_key(issuer, provider_sid)


def new_session_id() -> str:
    """A fresh 256-bit session id from the OS CSPRNG (43 URL-safe characters)."""
    return secrets.token_urlsafe(32)


def sid_hash(sid: str) -> str:
    """Hex SHA-256 of a session id: what stores key rows by and audit rows record.

    Rows can be correlated with a session, but a leaked database or log cannot be
    replayed as a cookie.
    """
    return hashlib.sha256(sid.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """Everything the server keeps about one session.

    :param sid: the session id (the cookie carries it, signed).
    :param state: the login state.
    :param tenant, user_id: who is logging in / logged in (``None`` for a guest).
    :param factors_pending: the login steps still to pass, in order; each step is one kind
        (``"password"``) or alternatives any one of which passes it (``"totp|webauthn"``,
        see ``step_kinds``).
    :param factors_passed: factor kinds verified during this login (the kind that passed
        each step).
    :param fingerprint: HMAC of the User-Agent, bound at the first move out of Guest.
    :param device: the User-Agent seen at that same moment, cleaned and cut to
        :data:`DEVICE_MAX_LENGTH` characters, for "your sessions" pages and the CLI
        (:func:`describe_device` turns it into a short label). Display only: the binding
        check uses ``fingerprint``.
    :param flow: intermediate state of a longer ceremony (PKCE verifier, CSRF state,
        nonce of a federated login); cleared when the ceremony ends.
    :param custom: application data (``flask.session`` items), at most 64 KiB.
    :param workflow: the pending workflow of a session in PendingWorkflow (see
        :func:`start_workflow`): its ``kind``, the SHA-256 of its single-use ``token``, its
        ``data``, ``expires_at`` (ISO 8601) and the state it was started ``from``.
    :param federation: for a session established by a federated login: the provider
        name, its issuer, the user's ``sub``, the provider session ``sid`` (when the ID
        token has one) and the ID token (the hint for RP-initiated logout). Stores index
        (issuer, sid) so a back-channel logout finds the session (:func:`federation_key`).
    :param remember: the login asked to stay signed in ("remember me"): the session lives
        the longer ``AUTHFLOW_REMEMBER_ME_TTL`` (its idle timeout still applies unless
        ``AUTHFLOW_REMEMBER_ME_IDLE_TIMEOUT`` is off). A logout starts a new record without it.
    """

    sid: str
    state: AuthState
    created_at: datetime
    last_seen_at: datetime
    tenant: str | None = None
    user_id: str | None = None
    factors_pending: tuple[str, ...] = ()
    factors_passed: tuple[str, ...] = ()
    login_started_at: datetime | None = None
    authenticated_at: datetime | None = None
    auth_method: str | None = None
    fingerprint: str | None = None
    device: str | None = None
    federation: Mapping[str, str] | None = None
    flow: Mapping[str, Any] | None = None
    custom: Mapping[str, Any] = field(default_factory=dict)
    workflow: Mapping[str, Any] | None = None
    remember: bool = False

    def __post_init__(self) -> None:
        if self.state is AuthState.AUTHENTICATED and self.factors_pending:
            raise InvalidTransition("an authenticated session cannot have outstanding factors")
        if self.state is AuthState.GUEST and (self.user_id is not None or self.factors_pending):
            raise InvalidTransition("a guest session has no user and no pending factors")
        if self.workflow is not None and self.state is not AuthState.PENDING_WORKFLOW:
            raise InvalidTransition("only a session in pending_workflow carries a workflow")
        guest_workflow = self.workflow is not None and self.workflow.get("from") == AuthState.GUEST.value
        if self.state is not AuthState.GUEST and self.user_id is None and not guest_workflow:
            raise InvalidTransition(f"a session in state {self.state.value} needs a user")
        if self.state is AuthState.AUTHENTICATING and not self.factors_pending:
            raise InvalidTransition("an authenticating session needs a pending factor")

    @property
    def next_factor(self) -> str | None:
        """The next step as stored (``"password"``, ``"totp|recovery_code"``), or ``None``."""
        return self.factors_pending[0] if self.factors_pending else None

    @property
    def next_step(self) -> tuple[str, ...]:
        """The kinds that satisfy the next step (empty when none is pending)."""
        return step_kinds(self.factors_pending[0]) if self.factors_pending else ()

    @property
    def pending_step(self) -> tuple[str, ...]:
        """The kinds that pass the step this session waits for: the login's next step while
        Authenticating, a pending step-up's (``flow["step_up"]``) while Authenticated;
        empty when it waits for none."""
        if self.state is AuthState.AUTHENTICATING:
            return self.next_step
        step = self.flow.get("step_up") if self.state is AuthState.AUTHENTICATED and self.flow else None
        return step_kinds(step) if isinstance(step, str) else ()


def new_guest_record(now: datetime, sid: str | None = None) -> SessionRecord:
    """A fresh guest session."""
    return SessionRecord(sid=sid or new_session_id(), state=AuthState.GUEST, created_at=now, last_seen_at=now)


# --- transitions: pure functions from record to record -------------------------------------------


def start_login(
    record: SessionRecord, *, tenant: str, user_id: str, factors: Iterable[str], now: datetime
) -> SessionRecord:
    """Guest (or a login in progress) → Authenticating, with ``factors`` (steps, see
    ``step_name``) to pass in order."""
    pending = tuple(factors)
    if not pending:
        raise InvalidTransition("a login needs at least one factor")
    if record.state not in (AuthState.GUEST, AuthState.AUTHENTICATING):
        raise InvalidTransition(f"cannot begin a login from {record.state.value}; log out first")
    return replace(
        record,
        state=AuthState.AUTHENTICATING,
        tenant=tenant,
        user_id=user_id,
        factors_pending=pending,
        factors_passed=(),
        login_started_at=now,
        authenticated_at=None,
        auth_method=step_kinds(pending[0])[0],
        flow=None,
    )


def pass_factor(record: SessionRecord, factor: str, *, now: datetime) -> SessionRecord:
    """Authenticating → Authenticating (next factor) or Authenticated (none left).

    Only a kind of the step that is next in line can pass it: steps cannot be skipped or
    passed out of order, and a kind outside the step passes nothing.
    """
    if record.state is AuthState.AUTHENTICATED and factor in record.pending_step:
        return step_up(record, factor, now=now)
    if record.state is not AuthState.AUTHENTICATING:
        raise InvalidTransition(f"no factor is expected in state {record.state.value}")
    if factor not in record.next_step:
        raise InvalidTransition(f"factor {factor!r} does not pass the next step ({record.next_factor!r})")
    remaining = record.factors_pending[1:]
    passed = (*record.factors_passed, factor)
    if remaining:
        return replace(record, factors_pending=remaining, factors_passed=passed)
    return replace(
        record,
        state=AuthState.AUTHENTICATED,
        factors_pending=(),
        factors_passed=passed,
        authenticated_at=now,
    )


def fail_login(record: SessionRecord, *, now: datetime) -> SessionRecord:
    """A failed or locked attempt: the login in progress is abandoned, back to Guest.

    Custom data survives (a failed login is not a logout); the caller rotates the id.
    """
    if record.state is AuthState.AUTHENTICATED:
        return record  # a failed step-up leaves the existing login alone
    return replace(
        new_guest_record(now, sid=record.sid),
        created_at=record.created_at,
        fingerprint=record.fingerprint,
        device=record.device,
        custom=record.custom,
    )


def complete_login(
    record: SessionRecord,
    *,
    tenant: str,
    user_id: str,
    method: str,
    now: datetime,
    pending_workflow: bool = False,
    federation: Mapping[str, str] | None = None,
) -> SessionRecord:
    """A ceremony that authenticates in one step (federated login) → Authenticated or PendingWorkflow."""
    if record.state is AuthState.AUTHENTICATED:
        raise InvalidTransition("already authenticated; log out first")
    return replace(
        record,
        federation=dict(federation) if federation else None,
        state=AuthState.PENDING_WORKFLOW if pending_workflow else AuthState.AUTHENTICATED,
        tenant=tenant,
        user_id=user_id,
        factors_pending=(),
        factors_passed=(method,),
        login_started_at=record.login_started_at or now,
        authenticated_at=now,
        auth_method=method,
        flow=None,
        workflow=None,
    )


def begin_flow(record: SessionRecord, flow: Mapping[str, Any]) -> SessionRecord:
    """Store the intermediate state of a ceremony (replaces any earlier one)."""
    return replace(record, flow=dict(flow))


def clear_flow(record: SessionRecord) -> SessionRecord:
    """Drop the intermediate state (after use, failure or timeout: it is single-use)."""
    return replace(record, flow=None)


def step_up(record: SessionRecord, factor: str, *, now: datetime) -> SessionRecord:
    """Authenticated → Authenticated with a fresh ``authenticated_at`` (re-verification)."""
    if record.state is not AuthState.AUTHENTICATED:
        raise InvalidTransition("step-up needs an authenticated session")
    return replace(record, authenticated_at=now, factors_passed=(*record.factors_passed, factor), flow=None)


def reset_to_guest(record: SessionRecord, *, now: datetime) -> SessionRecord:
    """Any state → Guest: logout / clear. Everything is dropped, custom data too."""
    return new_guest_record(now, sid=record.sid)


# --- workflows: longer ceremonies (sign-up, e-mail verification, password reset) ----------------

#: The longest ``data`` a workflow carries, serialised as JSON (2 KiB).
WORKFLOW_DATA_LIMIT = 2048

_CUSTOM_WORKFLOW_RE = re.compile(r"custom:[a-z][a-z0-9_]{0,31}")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")


class WorkflowKind(str):
    """The kind of a workflow: ``signup``, ``email_verification``, ``password_reset``,
    ``required_enrollment`` (a login held until a factor is set up again, see
    ``flask_authflow.login.required_enrollment``), or an application's own
    ``custom:<name>`` (``name``: a-z, 0-9, ``_``, at most 32 characters).

    A kind is a string, but only a ``WorkflowKind`` is read as a kind by
    :func:`complete_workflow`: a plain string (what a request carries) is always a token.
    """

    __slots__ = ()

    SIGNUP: WorkflowKind
    EMAIL_VERIFICATION: WorkflowKind
    PASSWORD_RESET: WorkflowKind

    def __new__(cls, value: str) -> WorkflowKind:
        if isinstance(value, WorkflowKind):
            return value
        if not isinstance(value, str) or not (
            value in _BUILT_IN_KINDS or _CUSTOM_WORKFLOW_RE.fullmatch(value)
        ):
            raise InvalidInput(
                "a workflow kind is 'signup', 'email_verification', 'password_reset' or "
                "'custom:<name>' (name: a-z, 0-9, _, at most 32 characters)"
            )
        return str.__new__(cls, value)


_BUILT_IN_KINDS = frozenset({"signup", "email_verification", "password_reset", "required_enrollment"})
WorkflowKind.SIGNUP = WorkflowKind("signup")
WorkflowKind.EMAIL_VERIFICATION = WorkflowKind("email_verification")
WorkflowKind.PASSWORD_RESET = WorkflowKind("password_reset")

#: How long a workflow of each kind stays completable by default; ``custom:*`` kinds use
#: the entry ``"custom"``.
WORKFLOW_EXPIRY: Mapping[str, timedelta] = {
    "signup": timedelta(hours=24),
    "email_verification": timedelta(hours=24),
    "password_reset": timedelta(minutes=30),
    "required_enrollment": timedelta(minutes=30),
    "custom": timedelta(hours=1),
}


class WorkflowNotPending(InvalidTransition):
    """The session has no pending workflow (none was started, or it already ended)."""

    code = "workflow_not_pending"
    status = 409


class WorkflowExpired(InvalidTransition):
    """The workflow is past its expiry: it can no longer complete (it is ended)."""

    code = "workflow_expired"
    status = 410


class WorkflowTokenInvalid(InvalidTransition):
    """The token is not the pending workflow's."""

    code = "workflow_token_invalid"
    status = 401


def workflow_token_hash(token: str) -> str:
    """Hex SHA-256 of a workflow token: what the session record keeps of it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_workflow_data(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` as a workflow keeps it: a JSON object of at most :data:`WORKFLOW_DATA_LIMIT`
    bytes (string keys; strings, numbers, booleans, ``None``, lists and objects)."""
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise InvalidInput("workflow data is a mapping with string keys")
    try:
        text = json.dumps(dict(data), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        raise InvalidInput(
            "workflow data must be JSON: strings, numbers, booleans, None, lists, objects"
        ) from None
    if len(text.encode("utf-8")) > WORKFLOW_DATA_LIMIT:
        raise InvalidInput(f"workflow data is limited to {WORKFLOW_DATA_LIMIT} bytes of JSON")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def start_workflow(
    record: SessionRecord,
    *,
    kind: WorkflowKind,
    token: str,
    expires_at: datetime,
    now: datetime,
    data: Mapping[str, Any] | None = None,
) -> SessionRecord:
    """Guest or Authenticated → PendingWorkflow of ``kind``; the record keeps the hash of
    ``token`` only. Completing or aborting it returns to the state it came from."""
    if record.state not in (AuthState.GUEST, AuthState.AUTHENTICATED):
        raise InvalidTransition(f"cannot start a workflow from {record.state.value}")
    if expires_at <= now:
        raise InvalidTransition("a workflow must expire after it starts")
    workflow = {
        "kind": str(WorkflowKind(kind)),
        "token": workflow_token_hash(token),
        "data": check_workflow_data(data),
        "started_at": now.isoformat(),
        "expires_at": expires_at.isoformat(),
        "from": record.state.value,
    }
    return replace(record, state=AuthState.PENDING_WORKFLOW, workflow=workflow, flow=None)


def workflow_of(record: SessionRecord) -> Mapping[str, Any]:
    """The pending workflow of ``record``. :raises WorkflowNotPending: there is none."""
    if record.state is not AuthState.PENDING_WORKFLOW or record.workflow is None:
        raise WorkflowNotPending("no workflow is pending on this session")
    return record.workflow


def check_workflow_proof(workflow: Mapping[str, Any], proof: str) -> None:
    """``proof`` is the workflow's kind (a :class:`WorkflowKind`) or its token.

    :raises InvalidInput: a plain string that is not shaped like a token.
    :raises WorkflowTokenInvalid: another kind, or another token."""
    if isinstance(proof, WorkflowKind):
        if proof != workflow.get("kind"):
            raise WorkflowTokenInvalid(f"the pending workflow is not of kind {proof!r}")
        return
    if not isinstance(proof, str) or not _TOKEN_RE.fullmatch(proof):
        raise InvalidInput("a workflow token is 43 characters of A-Z, a-z, 0-9, '-' and '_'")
    if not hmac.compare_digest(workflow_token_hash(proof), str(workflow.get("token", ""))):
        raise WorkflowTokenInvalid("this token does not belong to the pending workflow")


def workflow_expired(workflow: Mapping[str, Any], now: datetime) -> bool:
    """Whether ``workflow`` is past its expiry at ``now``."""
    return now >= datetime.fromisoformat(str(workflow["expires_at"]))


def complete_workflow(record: SessionRecord, proof: str, *, now: datetime) -> SessionRecord:
    """PendingWorkflow → the state it was started from, once ``proof`` (see
    :func:`check_workflow_proof`) checked and before the expiry.

    :raises WorkflowNotPending, WorkflowTokenInvalid, WorkflowExpired, InvalidInput."""
    workflow = workflow_of(record)
    check_workflow_proof(workflow, proof)
    if workflow_expired(workflow, now):
        raise WorkflowExpired("this workflow has expired")
    return _leave_workflow(record, workflow)


def abort_workflow(record: SessionRecord) -> SessionRecord:
    """PendingWorkflow → the state it was started from, without completing it.

    :raises WorkflowNotPending: no workflow is pending."""
    return _leave_workflow(record, workflow_of(record))


def _leave_workflow(record: SessionRecord, workflow: Mapping[str, Any]) -> SessionRecord:
    if workflow.get("from") == AuthState.AUTHENTICATED.value and record.user_id is not None:
        return replace(record, state=AuthState.AUTHENTICATED, workflow=None)
    return replace(record, state=AuthState.GUEST, tenant=None, user_id=None, workflow=None)


# --- the request-time session object -------------------------------------------------------------


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
        """The current record, with the custom data as it is now."""
        return replace(self._record, custom=dict(self))

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
        if after.state is not AuthState.GUEST and before.state is AuthState.GUEST:
            after = replace(
                after, fingerprint=self.request_fingerprint, device=clean_user_agent(self.request_user_agent)
            )
        if _auth_identity(before) != _auth_identity(after):
            self.dead_sids.append(before.sid)
            after = replace(after, sid=self._sid_factory())
        self._record = replace(after, custom={})
        if dict(self) != dict(after.custom):
            dict.clear(self)
            dict.update(self, after.custom)
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


def _auth_identity(record: SessionRecord) -> tuple[Any, ...]:
    """What, when it changes, must rotate the id (state, who, progress, freshness)."""
    return (
        record.state,
        record.tenant,
        record.user_id,
        record.factors_passed,
        record.authenticated_at,
    )
