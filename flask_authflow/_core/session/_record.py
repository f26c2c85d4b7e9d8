"""The session record and its transitions: what a store keeps of one session, and every change
of authentication state as a pure function from record to record (re-exported by
:mod:`flask_authflow._core.session`)."""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from flask_authflow.errors import InvalidTransition

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


class AuthState(enum.Enum):
    """Where a session is in the login state machine."""

    GUEST = "guest"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"
    PENDING_WORKFLOW = "pending_workflow"


#: Longest User-Agent kept as a session's ``device`` (the rest is cut).
DEVICE_MAX_LENGTH = 256


def clean_user_agent(user_agent: str | None) -> str | None:
    """``user_agent`` as a session keeps it: printable ASCII only, spaces collapsed, at most
    :data:`DEVICE_MAX_LENGTH` characters; ``None`` when nothing printable is left."""
    if not user_agent:
        return None
    text = "".join(ch if " " <= ch <= "~" else " " for ch in user_agent[: DEVICE_MAX_LENGTH * 4])
    text = " ".join(text.split())[:DEVICE_MAX_LENGTH]
    return text or None


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
        (:func:`flask_authflow.devices._labels.device_label` turns it into a short label).
        Display only: the binding check uses ``fingerprint``.
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
    record: SessionRecord,
    *,
    tenant: str,
    user_id: str,
    factors: Iterable[str],
    now: datetime,
    flow: Mapping[str, Any] | None = None,
) -> SessionRecord:
    """Guest (or a login in progress) → Authenticating, with ``factors`` (steps, see
    ``step_name``) to pass in order; the login's ``flow`` stored with it (as
    :func:`begin_flow` would store it after, in the same copy), any earlier one dropped."""
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
        flow=None if flow is None else dict(flow),
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
