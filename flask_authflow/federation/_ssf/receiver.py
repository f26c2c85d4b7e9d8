"""The Shared Signals receiver: one SET in, its event handled once, in one commit.

:meth:`SignalsReceiver.receive` runs, for a SET of a configured transmitter:

1. the checks of :func:`~flask_authflow.federation._ssf.verify.verify_set` and the
   subject's resolution (reads only); a refusal writes a failure audit row
   (``ssf_refused``, reason the RFC 8935 error code);
2. the session part of the event, before anything is committed: the subject's sessions
   end (or are marked for a fresh login). The session store may be another service
   (Redis) that cannot join the unit of work; ending sessions first means a failure
   later leaves the user logged out and nothing else changed, and the transmitter's retry
   does the rest (the SET was not acknowledged). A store that is down refuses the SET
   (:class:`~flask_authflow.errors.StoreUnavailable`: the push endpoint answers 503);
3. ONE unit of work: the ``jti`` is used up in the shared one-time store (until the SET
   would be too old anyway: a replay, in this process or another, after a restart too,
   is refused and rolls the unit back), the account changes (disabled, device trust
   ended, stored provider tokens dropped), the audit row (its event is the handled
   event's, e.g. ``ssf_session_revoked``, reason what was done) and the
   ``security_event_received`` signal, sent after the commit;
4. for an event that disables the account, a second pass ends a session a login started
   meanwhile.

Before step 2, the ``jti`` is looked up in the one-time store (in a unit of work that is
rolled back): a SET received before is refused before anything happens. Copies pushed at
the same moment all pass the look-up and end the same sessions; step 3 lets one through.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from flask_authflow import signals
from flask_authflow._core.ports import (
    ApiTokenStore,
    DeviceStore,
    IdentityStore,
    LoginRecorder,
    ProviderTokenStore,
    SessionStore,
    UnitOfWork,
    UserRecord,
)
from flask_authflow._core.session import AuthSession, AuthState, SessionRecord
from flask_authflow.errors import StoreUnavailable
from flask_authflow.federation._http import HttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.federation._login import FederationService
from flask_authflow.federation._ssf.events import VERIFICATION_EVENT, Action, Handling, handling_of
from flask_authflow.federation._ssf.settings import Transmitter
from flask_authflow.federation._ssf.subjects import Subject, resolve_subject
from flask_authflow.federation._ssf.verify import SecurityEvent, SetRefused, verify_set

__all__ = ["AccountSwitch", "OneTimeStore", "Receipt", "SignalsReceiver", "UnknownTransmitter"]

log = logging.getLogger("flask_authflow.federation")

#: What a session marked for a fresh login says of its login time: long ago, so every
#: freshness check (``fresh_login_required``, step-up before a sensitive change) asks again.
STALE_LOGIN: Final = datetime(1970, 1, 1, tzinfo=UTC)


class UnknownTransmitter(SetRefused):
    """No transmitter is configured under this name."""

    code = "unknown_transmitter"
    status = 404

    def __init__(self) -> None:
        super().__init__("invalid_request", "no transmitter is configured under this name")


class OneTimeStore(Protocol):
    """The shared one-time store (the backend): a SET's ``jti`` is used up in it."""

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool: ...


class AccountSwitch(Protocol):
    """Disables an account (the backend)."""

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...


@dataclass(frozen=True, slots=True)
class Receipt:
    """What handling one SET did: its event, the account (``None``: unknown subject) and
    the audit reason (``sessions=2``, ``unknown_subject``, ...)."""

    event: SecurityEvent
    tenant: str | None
    user_id: str | None
    outcome: str


@dataclass(frozen=True, slots=True)
class ReceiverStores:
    """Where the receiver reads and writes (the app's backend and session store)."""

    one_time: OneTimeStore
    accounts: IdentityStore
    switch: AccountSwitch
    sessions: SessionStore
    #: when a session marked for a fresh login expires (the session interface's rule).
    session_expiry: Callable[[SessionRecord], datetime]
    devices: DeviceStore | None = None
    provider_tokens: ProviderTokenStore | None = None
    api_tokens: ApiTokenStore | None = None
    #: opens the unit of work the one-time store's calls join (for the replay pre-check).
    begin_unit: Callable[[], UnitOfWork] | None = None


def _scope(issuer: str) -> str:
    """The one-time store's scope of an issuer's SETs (a digest: an issuer URL may be longer
    than the store's column)."""
    return "ssf:" + hashlib.sha256(issuer.encode("utf-8")).hexdigest()[:40]


def _printable(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else ""
    return "".join(ch for ch in text if ch.isascii() and ch.isprintable())[:limit]


class SignalsReceiver:
    """Receives the SETs of ``transmitters`` (see the module's text)."""

    def __init__(
        self,
        transmitters: Mapping[str, Transmitter],
        *,
        federation: FederationService,
        stores: ReceiverStores,
        http: HttpClient,
        sender: object,
    ) -> None:
        self.transmitters = dict(transmitters)
        self.federation = federation
        self.stores = stores
        self.sender = sender
        #: fetches the transmitters' keys (and, for the poll client, their SETs).
        self.http = http
        self.clock = federation.clock
        self.keys = {
            name: ProviderKeyCache(t.jwks_uri, http, clock=self.clock)
            for name, t in self.transmitters.items()
        }
        #: the ``state`` of each transmitter's last verification event (this process).
        self.verified: dict[str, str] = {}

    def transmitter(self, name: str) -> Transmitter:
        """:raises UnknownTransmitter: no transmitter is configured under ``name``."""
        found = self.transmitters.get(name)
        if found is None:
            raise UnknownTransmitter()
        return found

    def receive(self, handle: LoginRecorder, session: AuthSession, name: str, token: Any) -> Receipt:
        """Verify ``token``, a SET of transmitter ``name``, and handle its event once.

        :raises SetRefused: the SET is refused (its ``error`` is the RFC 8935 code; a
            replay is ``invalid_request``), with a failure audit row.
        :raises StoreUnavailable: a store needed to decide or to act is down: nothing was
            acknowledged, the transmitter should send it again."""
        transmitter = self.transmitter(name)
        factor = f"ssf:{name}"[:32]
        try:
            event = verify_set(token, transmitter, self.keys[name], self.clock)
            subject = resolve_subject(
                event.subject, transmitter, links=self.federation.links, accounts=self.stores.accounts
            )
            handling = handling_of(event.event_type)
            if self._received_before(event, transmitter):
                raise SetRefused("invalid_request", "this SET was already received")
            sessions = self._session_step(handling, subject, transmitter)
            receipt = self._commit(handle, session, event, subject, handling, sessions)
        except SetRefused as exc:
            handle.record_event("ssf_refused", "failure", session, factor=factor, reason=exc.error)
            raise
        if handling.action & Action.DISABLE and subject.user is not None:
            self._end_late_sessions(subject.user)
        return receipt

    def _received_before(self, event: SecurityEvent, transmitter: Transmitter) -> bool:
        """Whether a receipt of this SET was committed already: the one-time store asked in a
        unit that is rolled back, so a replay is refused before its sessions step. (SETs
        pushed at the same moment all pass here; the unit's check decides between them.)"""
        begin = self.stores.begin_unit
        if begin is None:
            return False
        try:
            unit = begin()
        except RuntimeError:  # a unit of this context is open: the unit's own check decides
            return False
        try:
            return not self._use_jti(event, transmitter)
        finally:
            unit.rollback()

    def _use_jti(self, event: SecurityEvent, transmitter: Transmitter) -> bool:
        expires = datetime.fromtimestamp(event.iat, tz=UTC) + transmitter.max_age + 2 * transmitter.leeway
        return self.stores.one_time.use_once(_scope(event.issuer), event.jti, expires_at=expires)

    # --- the session step (before the unit) -------------------------------------------------

    def _session_step(self, handling: Handling, subject: Subject, transmitter: Transmitter) -> str | None:
        """End (or mark) the subject's sessions; the audit reason of it, or ``None``."""
        user, sessions = subject.user, self.stores.sessions
        if handling.action & (Action.END_SESSIONS | Action.DISABLE):
            ended = 0
            if subject.provider_sid is not None:
                ended += sessions.delete_federated_sessions(transmitter.issuer, subject.provider_sid)
            if user is not None:
                ended += sessions.delete_user_sessions(user.tenant, user.user_id)
            return f"sessions={min(ended, 9999)}"
        if handling.action & Action.ASK_FRESH_LOGIN and user is not None:
            return f"marked={self._mark_stale(user)}"
        return None

    def _mark_stale(self, user: UserRecord) -> int:
        """Mark the user's signed-in sessions for a fresh login; returns how many."""
        marked = 0
        for record in self.stores.sessions.list_user_sessions(user.tenant, user.user_id):
            if record.state is not AuthState.AUTHENTICATED or record.authenticated_at == STALE_LOGIN:
                continue
            stale = replace(record, authenticated_at=STALE_LOGIN)
            if self.stores.sessions.save(stale, self.stores.session_expiry(record), existing=True):
                marked += 1
        return min(marked, 9999)

    def _end_late_sessions(self, user: UserRecord) -> None:
        try:
            self.stores.sessions.delete_user_sessions(user.tenant, user.user_id)
        except StoreUnavailable:
            log.warning("sessions started while a disabling security event was handled could not be ended")

    # --- the unit -----------------------------------------------------------------------------

    def _commit(
        self,
        handle: LoginRecorder,
        session: AuthSession,
        event: SecurityEvent,
        subject: Subject,
        handling: Handling,
        sessions: str | None,
    ) -> Receipt:
        transmitter = self.transmitters[event.transmitter]
        user = subject.user
        with self.federation.one_commit(session):
            if not self._use_jti(event, transmitter):
                raise SetRefused("invalid_request", "this SET was already received")
            outcome = self._apply(handling, user, transmitter, sessions) if user is not None else sessions
            outcome = outcome or self._plain_outcome(event, user)
            tenant, user_id = (user.tenant, user.user_id) if user is not None else (None, None)
            handle.record_event(
                handling.audit_event,
                "success",
                session,
                tenant=tenant,
                user_id=user_id,
                factor=f"ssf:{transmitter.name}"[:32],
                reason=outcome[:64],
            )
            self._signal(event, tenant, user_id, outcome)
        if event.event_type == VERIFICATION_EVENT:
            self.verified[transmitter.name] = _printable(event.payload.get("state"), 256)
        return Receipt(event, tenant, user_id, outcome)

    def _plain_outcome(self, event: SecurityEvent, user: UserRecord | None) -> str:
        if event.event_type == VERIFICATION_EVENT:
            return f"state={_printable(event.payload.get('state'), 50)}"
        return "unknown_subject" if user is None else "ignored"

    def _apply(
        self, handling: Handling, user: UserRecord, transmitter: Transmitter, sessions: str | None
    ) -> str | None:
        """The account changes of ``handling`` in the open unit; the audit reason."""
        done = [sessions] if sessions else []
        if handling.action & Action.DISABLE:
            self.stores.switch.set_disabled(user.tenant, user.identifier, True)
            done.append("disabled")
        devices = self.stores.devices
        if handling.action & Action.END_DEVICE_TRUST and devices is not None:
            done.append(f"devices={min(devices.end_device_trust(user.tenant, user.user_id), 999)}")
        if handling.action & Action.DROP_PROVIDER_TOKENS:
            done.append(f"provider_tokens={self._drop_tokens(user, transmitter)}")
        api_tokens = self.stores.api_tokens
        if handling.action & Action.END_API_TOKENS and api_tokens is not None:
            done.append(
                f"api_tokens={min(api_tokens.delete_user_api_tokens(user.tenant, user.user_id), 999)}"
            )
        if handling.action & (Action.END_SESSIONS | Action.DISABLE):
            # A disabled account is revoked as an operator's "users disable" is (the
            # receivers of the signal then find nothing left to end).
            reason = "user_disabled" if handling.action & Action.DISABLE else handling.audit_event
            signals.send_after_commit(
                signals.session_revoked, self.sender, user_id=user.user_id, tenant=user.tenant, reason=reason
            )
        return " ".join(done) or None

    def _drop_tokens(self, user: UserRecord, transmitter: Transmitter) -> int:
        store = self.stores.provider_tokens
        if store is None:
            return 0
        dropped = 0
        for row in store.provider_tokens_of_user(user.tenant, user.user_id):
            if transmitter.provider is None or row.provider == transmitter.provider:
                dropped += store.delete_provider_tokens(user.tenant, user.user_id, row.provider)
        return min(dropped, 99)

    def _signal(self, event: SecurityEvent, tenant: str | None, user_id: str | None, outcome: str) -> None:
        signals.send_after_commit(
            signals.security_event_received,
            self.sender,
            transmitter=event.transmitter,
            event=event.event_type,
            action=outcome,
            tenant=tenant,
            user_id=user_id,
            jti=event.jti,
            payload=event.payload,
        )
