"""Everything the login service stores, in process memory (tests and development).

One lock guards all state, so every counter update is atomic across threads. A unit of
work (:meth:`InMemoryBackend.begin_unit`) holds that lock until it ends and journals every
change it makes, so its rollback puts the state back as it was: the same contract as the
SQL store's transaction. Nothing survives a restart: use
:class:`~flask_authflow.storage.sql.backend.SqlAlchemyBackend` for anything real.
"""

from __future__ import annotations

import copy
import itertools
import secrets
import threading
import uuid
from collections import deque
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, cast

from flask_authflow.audit.chain import AuditChain, ChainedRow, ChainHead, ChainSnapshot, Checkpoint, chain_of
from flask_authflow.audit.sinks import AuditRecord
from flask_authflow.clock import Clock, SystemClock, utc
from flask_authflow.core.devices import MAX_LABEL_LENGTH, MAX_PLACE_LENGTH, check_device_id, clean_text
from flask_authflow.core.factor_data import check_factor_config
from flask_authflow.core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow.core.ports import (
    PAIR_SEPARATOR,
    RESERVATION_TTL,
    AccountToken,
    ApiTokenRecord,
    AttemptKey,
    AttemptLevel,
    DeviceRecord,
    FactorConfig,
    FailureCount,
    KnownSecret,
    LoginFacts,
    Reservation,
    Role,
    StoredProviderTokens,
    StorePorts,
    UserRecord,
    level_token,
)
from flask_authflow.core.roles import check_description, check_name
from flask_authflow.errors import (
    ApiTokenNameTaken,
    AuditWriteError,
    RoleExists,
    RoleInUse,
    RoleNotFound,
    StoreUnavailable,
    UserExists,
    UserNotFound,
)
from flask_authflow.federation.links import IdentityLink
from flask_authflow.outcomes import FactorKind

__all__ = ["AttemptLogEntry", "InMemoryBackend", "LockState", "MemoryUnit", "count_failure"]


@dataclass(frozen=True, slots=True)
class AttemptLogEntry:
    """One authentication attempt, as kept in the attempt log."""

    at: datetime
    tenant: str
    subject: str
    factor: str
    success: bool
    client_ip: str | None = None


@dataclass(frozen=True, slots=True)
class LockState:
    """Failure counter of one (tenant, subject, factor)."""

    failures: int = 0
    window_start: datetime | None = None
    locked_until: datetime | None = None


def count_failure(
    state: LockState, *, now: datetime, window: timedelta, max_failures: int, lock_duration: timedelta
) -> tuple[LockState, FailureCount]:
    """The lockout arithmetic: count in the current window, lock (and restart counting) at the threshold."""
    if state.window_start is None or state.window_start <= now - window:
        failures, start = 1, now
    else:
        failures, start = state.failures + 1, state.window_start
    if failures >= max_failures:
        until = now + lock_duration
        return LockState(0, None, until), FailureCount(failures, until)
    return LockState(failures, start, state.locked_until), FailureCount(failures, None)


#: The journal's mark of a key that was absent before the change (and of no dropped row).
_ABSENT: Any = object()
#: The journal's key for a row appended to a log (undone by removing it again).
_APPENDED: Any = object()


class MemoryUnit:
    """A unit of work of :class:`InMemoryBackend` (see :meth:`InMemoryBackend.begin_unit`)."""

    __slots__ = ("_backend", "_open")

    def __init__(self, backend: InMemoryBackend) -> None:
        self._backend = backend
        self._open = True

    def commit(self) -> None:
        """Keep every change of the unit (a memory store cannot fail to keep them)."""
        self._end(keep=True)

    def rollback(self) -> None:
        """Put back every change of the unit, newest first."""
        self._end(keep=False)

    def write_audit_now(self) -> None:
        """Nothing to do: the memory store keeps each row as it is written."""

    def _end(self, *, keep: bool) -> None:
        if self._open:
            self._open = False
            self._backend._end_unit(keep=keep)


class InMemoryBackend:
    """Identity, factor, attempt and audit store in one object.

    It keeps password hashes, never hashes: :meth:`create_user` receives ``password_hash``
    (made in ``login/``; tests use :func:`flask_authflow.testing.add_user`).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        max_attempt_log: int = 100_000,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self._clock_given = clock is not None
        self._lock = threading.RLock()
        self._users: dict[tuple[str, str], UserRecord] = {}
        self._users_by_id: dict[str, UserRecord] = {}
        # Factors: user id -> factor id -> config (confirmed or pending); each factor's
        # enrollment sequence number (orders factors enrolled at the same instant), and the
        # owner of each factor id and each (kind, lookup), both unique across the store.
        self._factors: dict[str, dict[str, FactorConfig]] = {}
        self._factor_seq: dict[str, int] = {}
        self._factor_owner: dict[str, str] = {}
        self._lookups: dict[tuple[str, str], str] = {}
        self._sequence = itertools.count()
        self._locks: dict[AttemptKey, LockState] = {}
        # Attempts reserved and not yet settled: key -> {token: reserved at}.
        self._reservations: dict[AttemptKey, dict[str, datetime]] = {}
        self._attempts: deque[AttemptLogEntry] = deque(maxlen=max_attempt_log)
        # Audit rows with their ids; each chain's head and checkpoint (see audit/chain.py).
        self._audit: deque[ChainedRow] = deque()
        self._audit_ids = itertools.count(1)
        self._audit_chain: AuditChain | None = None
        self._chain_heads: dict[str, ChainHead] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        self._roles = _RoleState()
        self._api_tokens: dict[str, ApiTokenRecord] = {}  # token id -> record
        # Devices: (tenant, user id, device id) -> record.
        self._devices: dict[tuple[str, str, str], DeviceRecord] = {}
        self._links: dict[tuple[str, str], IdentityLink] = {}
        self._jtis: dict[tuple[str, str], datetime] = {}
        # Account tokens by digest (see the section "account tokens").
        self._account_tokens: dict[str, AccountToken] = {}
        # Provider tokens per (tenant, user id, provider), and each row's refresh claim.
        self._provider_tokens: dict[tuple[str, str, str], StoredProviderTokens] = {}
        self._token_claims: dict[tuple[str, str, str], tuple[str, datetime]] = {}
        self._fail_writes = 0
        # The open unit's undo journal: (container, key, value before) per change.
        self._journal: list[tuple[Any, Any, Any]] | None = None
        #: While true, the attempt store raises StoreUnavailable (tests of fail-closed).
        self.attempts_unavailable = False

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock unless one was given at construction (``AuthFlow.init_app``
        calls it, so a backend built at import time follows the app, and a test's
        ``mock_clock``)."""
        if not self._clock_given:
            self.clock = clock

    def store_ports(self) -> StorePorts:
        """Every aggregate: this backend keeps them all."""
        return StorePorts(login=self, account_tokens=self, identity_links=self, provider_tokens=self)

    def __repr__(self) -> str:
        return f"<InMemoryBackend users={len(self._users)} audit_rows={len(self._audit)}>"

    # --- unit of work ------------------------------------------------------------------------

    def begin_unit(self) -> MemoryUnit:
        """Open a unit of work: this thread holds the store's lock until the unit's
        ``commit()`` or ``rollback()`` (other threads wait, as behind SQLite's write lock),
        and every change it makes is journaled so that ``rollback()`` undoes it.

        :raises RuntimeError: this thread has a unit open already (units do not nest)."""
        self._lock.acquire()
        if self._journal is not None:
            self._lock.release()
            raise RuntimeError("a unit of work is already open in this context")
        self._journal = []
        return MemoryUnit(self)

    def _end_unit(self, *, keep: bool) -> None:
        journal, self._journal = self._journal, None
        try:
            if not keep and journal:
                for container, key, before in reversed(journal):
                    _undo(container, key, before)
        finally:
            self._lock.release()

    def _put(self, mapping: MutableMapping[Any, Any], key: Any, value: Any) -> None:
        """``mapping[key] = value``, journaled in an open unit (caller holds the lock)."""
        if self._journal is not None:
            self._journal.append((mapping, key, mapping.get(key, _ABSENT)))
        mapping[key] = value

    def _remove(self, mapping: MutableMapping[Any, Any], key: Any) -> Any:
        """``mapping.pop(key, None)``, journaled in an open unit (caller holds the lock)."""
        if key not in mapping:
            return None
        if self._journal is not None:
            self._journal.append((mapping, key, mapping[key]))
        return mapping.pop(key)

    def _append(self, log: deque[Any], row: Any) -> None:
        """Append ``row`` to a log, journaled in an open unit (caller holds the lock)."""
        if self._journal is not None:
            full = log.maxlen is not None and len(log) == log.maxlen
            self._journal.append((log, _APPENDED, log[0] if full else _ABSENT))
        log.append(row)

    # --- identities --------------------------------------------------------------------------

    def create_user(
        self,
        tenant: str,
        identifier: str,
        *,
        password_hash: str | None = None,
        email: str | None = None,
        email_verified_at: datetime | None = None,
    ) -> UserRecord:
        tenant = check_tenant(tenant)
        identifier = normalise_identifier(identifier)
        address = normalise_email(email) if email is not None else None
        now = self.clock.now()
        with self._lock:
            if (tenant, identifier) in self._users or self._email_owner(tenant, address) is not None:
                raise UserExists()
            user = UserRecord(uuid.uuid4().hex, tenant, identifier, now, False, address, email_verified_at)
            self._put(self._users, (tenant, identifier), user)
            self._put(self._users_by_id, user.user_id, user)
            self._put(self._factors, user.user_id, {})
            if password_hash is not None:
                self._store_factor(
                    FactorConfig(
                        user.user_id,
                        FactorKind.PASSWORD,
                        utc(now),
                        password_hash,
                        factor_id=secrets.token_urlsafe(16),
                    )
                )
            return user

    def _email_owner(self, tenant: str, address: str | None) -> UserRecord | None:
        """The user of ``tenant`` with this (normalised) address (caller holds the lock)."""
        if address is None:
            return None
        return next((u for u in self._users.values() if u.tenant == tenant and u.email == address), None)

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None:
        address = normalise_email(email)
        with self._lock:
            return self._email_owner(tenant, address)

    def set_email(
        self, tenant: str, user_id: str, email: str | None, *, verified_at: datetime | None
    ) -> UserRecord:
        address = normalise_email(email) if email is not None else None
        with self._lock:
            user = self._users_by_id.get(user_id)
            if user is None or user.tenant != tenant:
                raise UserNotFound()
            owner = self._email_owner(tenant, address)
            if owner is not None and owner.user_id != user_id:
                raise UserExists()
            updated = replace(user, email=address, email_verified_at=verified_at)
            self._put(self._users, (tenant, user.identifier), updated)
            self._put(self._users_by_id, user_id, updated)
            return updated

    def set_identifier(self, tenant: str, user_id: str, identifier: str) -> UserRecord:
        with self._lock:
            user = self._users_by_id.get(user_id)
            if user is None or user.tenant != tenant:
                raise UserNotFound()
            owner = self._users.get((tenant, identifier))
            if owner is not None and owner.user_id != user_id:
                raise UserExists()
            updated = replace(user, identifier=identifier)
            self._remove(self._users, (tenant, user.identifier))
            self._put(self._users, (tenant, identifier), updated)
            self._put(self._users_by_id, user_id, updated)
            return updated

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None:
        with self._lock:
            user = self._users.get((tenant, normalise_identifier(identifier)))
            if user is None:
                raise UserNotFound()
            updated = replace(user, disabled=disabled)
            self._put(self._users, (tenant, user.identifier), updated)
            self._put(self._users_by_id, user.user_id, updated)

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user, its factors, its lockout counters and reservations (audit rows stay)."""
        with self._lock:
            user: UserRecord | None = self._remove(self._users, (tenant, normalise_identifier(identifier)))
            if user is None:
                raise UserNotFound()
            self._remove(self._users_by_id, user.user_id)
            for config in list(self._factors.get(user.user_id, {}).values()):
                self._drop_factor(config)
            self._remove(self._factors, user.user_id)
            self._forget_attempts(tenant, user.identifier)
            for link_key in [k for k, link in self._links.items() if link.user_id == user.user_id]:
                self._remove(self._links, link_key)
            self._remove(self._roles.held, (tenant, user.user_id))
            self.void_account_tokens(tenant, user.user_id, None, self.clock.now())
            self._drop_api_tokens(tenant, user.user_id)
            for token_key in [k for k in self._provider_tokens if k[:2] == (tenant, user.user_id)]:
                self._remove(self._provider_tokens, token_key)
                self._remove(self._token_claims, token_key)
            for device_key in [k for k in self._devices if k[:2] == (tenant, user.user_id)]:
                self._remove(self._devices, device_key)
            return user

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None:
        with self._lock:
            return self._users.get((tenant, identifier))

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None:
        with self._lock:
            user = self._users_by_id.get(user_id)
        return user if user is not None and user.tenant == tenant else None

    def list_users(self, tenant: str | None = None) -> list[UserRecord]:
        with self._lock:
            users = list(self._users.values())
        return sorted(
            (u for u in users if tenant is None or u.tenant == tenant), key=lambda u: (u.tenant, u.identifier)
        )

    # --- factors -----------------------------------------------------------------------------
    #
    # Every factor of every user, with the indexes the SQL store has as constraints (factor
    # id, (kind, lookup), one password per user). The lock is held for each whole step, so
    # each change is atomic across threads; reads hand out copies of the mutable ``data``.

    def _owned(self, tenant: str, user_id: str) -> dict[str, FactorConfig] | None:
        """The factors of ``user_id`` if the user belongs to ``tenant`` (caller holds the lock)."""
        user = self._users_by_id.get(user_id)
        if user is None or user.tenant != tenant:
            return None
        factors = self._factors.get(user_id)
        if factors is None:
            factors = {}
            self._put(self._factors, user_id, factors)
        return factors

    def _ordered(self, configs: list[FactorConfig]) -> list[FactorConfig]:
        """Oldest first; factors enrolled at the same instant in enrollment order (caller holds the lock)."""
        ordered = sorted(configs, key=lambda c: (c.created_at, self._factor_seq[c.factor_id]))
        return [replace(c, data=copy.deepcopy(c.data)) for c in ordered]

    def _store_factor(self, config: FactorConfig) -> None:
        """Insert ``config`` in every index (caller holds the lock and made the checks)."""
        factors = self._factors.get(config.user_id)
        if factors is None:
            factors = {}
            self._put(self._factors, config.user_id, factors)
        self._put(factors, config.factor_id, config)
        self._put(self._factor_seq, config.factor_id, next(self._sequence))
        self._put(self._factor_owner, config.factor_id, config.user_id)
        if config.lookup is not None:
            self._put(self._lookups, (config.kind.value, config.lookup), config.factor_id)

    def _drop_factor(self, config: FactorConfig) -> None:
        """Remove ``config`` from every index (caller holds the lock)."""
        self._remove(self._factors.get(config.user_id, {}), config.factor_id)
        self._remove(self._factor_seq, config.factor_id)
        self._remove(self._factor_owner, config.factor_id)
        if config.lookup is not None:
            self._remove(self._lookups, (config.kind.value, config.lookup))

    def _password(self, factors: dict[str, FactorConfig]) -> FactorConfig | None:
        return next((c for c in factors.values() if c.kind is FactorKind.PASSWORD), None)

    def get_password_hash(self, tenant: str, user_id: str) -> str | None:
        with self._lock:
            config = self._password(self._owned(tenant, user_id) or {})
            return config.secret if config is not None and config.confirmed else None

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None:
        """Set or replace the password (the factor keeps its id and enrollment time)."""
        now = utc(self.clock.now())
        with self._lock:
            factors = self._owned(tenant, user_id)
            if factors is None:
                raise UserNotFound()
            existing = self._password(factors)
            if existing is not None:
                self._put(
                    factors, existing.factor_id, replace(existing, secret=password_hash, confirmed=True)
                )
                return
            self._store_factor(
                FactorConfig(
                    user_id, FactorKind.PASSWORD, now, password_hash, factor_id=secrets.token_urlsafe(16)
                )
            )

    def enroll_factor(self, tenant: str, user_id: str, kind: FactorKind, secret: str) -> None:
        """Enroll a confirmed factor of ``kind`` with ``secret``, replacing the user's
        confirmed factors of that kind (it keeps the enrollment time of the first of them);
        pending enrollments are left alone. The password goes to :meth:`set_password_hash`."""
        kind = FactorKind(kind)
        if kind is FactorKind.PASSWORD:
            self.set_password_hash(tenant, user_id, secret)
            return
        now = utc(self.clock.now())
        with self._lock:
            factors = self._owned(tenant, user_id)
            if factors is None:
                raise UserNotFound()
            replaced = [c for c in factors.values() if c.kind is kind and c.confirmed]
            created = min((c.created_at for c in replaced), default=now)
            for config in replaced:
                self._drop_factor(config)
            self._store_factor(
                FactorConfig(user_id, kind, created, secret, factor_id=secrets.token_urlsafe(16))
            )

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        kinds: list[FactorKind] = []
        for config in self.list_factors(tenant, user_id):
            if config.kind not in kinds:
                kinds.append(config.kind)
        if FactorKind.PASSWORD in kinds:
            kinds.remove(FactorKind.PASSWORD)
            kinds.insert(0, FactorKind.PASSWORD)
        return kinds

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        return self.list_user_factors(tenant, user_id)

    def login_facts(
        self,
        tenant: str,
        identifier: str,
        now: datetime,
        *,
        pairs: Sequence[str] = (),
        token_kind: str | None = None,
    ) -> LoginFacts:
        """``find_user``, ``required_factors`` of that user and the latest lock on the
        identifier or its ``pairs``, read under one hold of the lock."""
        with self._lock:
            self._check_available()
            user = self._users.get((tenant, identifier))
            kinds = self.required_factors(tenant, user.user_id) if user is not None else []
            ends = [self._active_lock(tenant, subject, now) for subject in (identifier, *pairs)]
            locked = [end for end in ends if end is not None]
            token = None
            if user is not None and token_kind is not None:
                token = self.live_account_token(tenant, user.user_id, token_kind, now)
            payload = token.payload if token is not None else None
            password = self.get_password_hash(tenant, user.user_id) if user is not None else None
            return LoginFacts(user, kinds, max(locked) if locked else None, payload, KnownSecret(password))

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        data = check_factor_config(config)
        kind = FactorKind(config.kind)
        with self._lock:
            factors = self._owned(tenant, config.user_id)
            if factors is None:
                raise UserNotFound()
            if config.factor_id in self._factor_owner:
                raise ValueError("this factor id is already used")
            if config.lookup is not None and (kind.value, config.lookup) in self._lookups:
                raise ValueError(f"a {kind.value} factor with this lookup is already enrolled")
            if kind is FactorKind.PASSWORD and self._password(factors) is not None:
                raise ValueError("the user has a password already")
            if not config.confirmed:  # one pending enrollment per kind: the new one replaces it
                for stale in [c for c in factors.values() if c.kind is kind and not c.confirmed]:
                    self._drop_factor(stale)
            self._store_factor(
                replace(
                    config,
                    kind=kind,
                    data=data,
                    created_at=utc(config.created_at),
                    last_used_at=None if config.last_used_at is None else utc(config.last_used_at),
                )
            )

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        with self._lock:
            config = (self._owned(tenant, user_id) or {}).get(factor_id)
            return None if config is None else self._ordered([config])[0]

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        with self._lock:
            return self._ordered(
                [
                    c
                    for c in (self._owned(tenant, user_id) or {}).values()
                    if (include_pending or c.confirmed) and (kind is None or c.kind == kind)
                ]
            )

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        with self._lock:
            factor_id = self._lookups.get((str(kind), lookup))
            owner = self._factor_owner.get(factor_id) if factor_id is not None else None
            if factor_id is None or owner is None:
                return None
            config = (self._owned(tenant, owner) or {}).get(factor_id)
            return None if config is None or not config.confirmed else self._ordered([config])[0]

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or config.confirmed:
                return False
            if replace_kind:
                for other in [c for c in factors.values() if c.kind is config.kind and c is not config]:
                    self._drop_factor(other)
            self._put(factors, factor_id, replace(config, confirmed=True))
            return True

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        with self._lock:
            config = (self._owned(tenant, user_id) or {}).get(factor_id)
            if config is None:
                return False
            if config.kind is FactorKind.PASSWORD:
                raise ValueError("the password is not deleted as a factor: set another one instead")
            self._drop_factor(config)
            return True

    def lock_user(self, tenant: str, user_id: str) -> bool:
        """The unit of work holds the store's lock already: only whether the user exists."""
        with self._lock:
            user = self._users_by_id.get(user_id)
            return user is not None and user.tenant == tenant

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or not config.confirmed or config.counter >= new_counter:
                return False
            self._put(factors, factor_id, replace(config, counter=new_counter, last_used_at=utc(now)))
            return True

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
        with self._lock:
            factors = self._owned(tenant, user_id) or {}
            config = factors.get(factor_id)
            if config is None or not config.confirmed or config.counter != expected_counter:
                return False
            self._put(
                factors,
                factor_id,
                replace(config, secret=secret, counter=expected_counter + 1, last_used_at=utc(now)),
            )
            return True

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        return self.remember_jti(f"one-time:{scope}", token, expires_at)

    # --- attempts and lockout ----------------------------------------------------------------

    def _check_available(self) -> None:
        if self.attempts_unavailable:
            raise StoreUnavailable("the attempt store is unavailable")

    def locked_until(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        with self._lock:
            self._check_available()
            return self._active_lock(tenant, subject, now)

    def locked_until_any(self, tenant: str, subjects: Sequence[str], now: datetime) -> datetime | None:
        with self._lock:
            self._check_available()
            ends = [self._active_lock(tenant, subject, now) for subject in subjects]
            return max((end for end in ends if end is not None), default=None)

    def _active_lock(self, tenant: str, subject: str, now: datetime) -> datetime | None:
        # Caller holds the lock.
        ends = [
            state.locked_until
            for key, state in self._locks.items()
            if key.tenant == tenant
            and key.subject == subject
            and state.locked_until is not None
            and state.locked_until > now
        ]
        return max(ends) if ends else None

    def reserve_attempt(
        self,
        key: AttemptKey,
        *,
        now: datetime,
        window: timedelta,
        max_failures: int,
        lock_duration: timedelta,
    ) -> Reservation:
        with self._lock:
            self._check_available()
            refused = self._refusal(key, now, window, max_failures, lock_duration)
            if refused is not None:
                return refused
            token = uuid.uuid4().hex
            self._hold(key, token, now)
            return Reservation(token)

    def reserve_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> Reservation:
        with self._lock:
            self._check_available()
            for level in levels:
                refused = self._refusal(level.key, now, window, level.max_failures, lock_duration)
                if refused is not None:
                    return refused
            token = uuid.uuid4().hex[:31]
            for index, level in enumerate(levels):
                self._hold(level.key, level_token(token, index), now)
            return Reservation(token)

    def admit_attempts(
        self, levels: Sequence[AttemptLevel], *, now: datetime, window: timedelta, lock_duration: timedelta
    ) -> datetime | None:
        """Decided as :meth:`reserve_attempts` decides, nothing held; the open unit of work
        holds the store's lock to its end, so the failure counted next in it is atomic."""
        with self._lock:
            self._check_available()
            for level in levels:
                refused = self._refusal(level.key, now, window, level.max_failures, lock_duration)
                if refused is not None:
                    return refused.locked_until
            return None

    def _refusal(
        self, key: AttemptKey, now: datetime, window: timedelta, max_failures: int, lock_duration: timedelta
    ) -> Reservation | None:
        """Why ``key`` has no room for one more check, or ``None`` (caller holds the lock)."""
        until = self._active_lock(key.tenant, key.subject, now)
        if until is not None:
            return Reservation(None, until)
        live = [at for at in self._reservations.get(key, {}).values() if at > now - RESERVATION_TTL]
        state = self._locks.get(key, LockState())
        opened = state.window_start
        in_window = state.failures if opened is not None and opened > now - window else 0
        if in_window + len(live) >= max_failures:
            return Reservation(None, now + lock_duration)
        return None

    def _hold(self, key: AttemptKey, token: str, now: datetime) -> None:
        """Add a reservation of ``key``, dropping its stale ones (caller holds the lock)."""
        live = {t: at for t, at in self._reservations.get(key, {}).items() if at > now - RESERVATION_TTL}
        live[token] = now
        self._put(self._reservations, key, live)

    def release_attempts(self, keys: Sequence[AttemptKey], token: str) -> None:
        with self._lock:
            self._check_available()
            for index, key in enumerate(keys):
                self._settle(key, level_token(token, index))

    def settle_success(
        self,
        keys: Sequence[AttemptKey],
        *,
        now: datetime,
        client_ip: str | None = None,
        reservation: str | None = None,
    ) -> datetime | None:
        with self._lock:
            self._check_available()
            ends = [self._active_lock(key.tenant, key.subject, now) for key in keys]
            until = max((end for end in ends if end is not None), default=None)
            for index, key in enumerate(keys):
                token = level_token(reservation, index) if reservation is not None else None
                if until is not None:
                    self._settle(key, token)
                else:
                    self.register_success(key, now=now, client_ip=client_ip, reservation=token)
            return until

    def _settle(self, key: AttemptKey, token: str | None) -> None:
        # Caller holds the lock.
        if token is not None:
            pending = self._reservations.get(key)
            if pending is not None:
                self._remove(pending, token)
                if not pending:
                    self._remove(self._reservations, key)

    def release_attempt(self, key: AttemptKey, token: str) -> None:
        with self._lock:
            self._check_available()
            self._settle(key, token)

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
        with self._lock:
            self._check_available()
            self._settle(key, reservation)
            state, result = count_failure(
                self._locks.get(key, LockState()),
                now=now,
                window=window,
                max_failures=max_failures,
                lock_duration=lock_duration,
            )
            self._put(self._locks, key, state)
            self._append(
                self._attempts, AttemptLogEntry(now, key.tenant, key.subject, key.factor, False, client_ip)
            )
            return result

    def register_success(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> None:
        with self._lock:
            self._check_available()
            self._settle(key, reservation)
            state = self._locks.get(key)
            if state is not None:
                self._put(self._locks, key, LockState(0, None, state.locked_until))
            self._append(
                self._attempts, AttemptLogEntry(now, key.tenant, key.subject, key.factor, True, client_ip)
            )

    def register_success_unless_locked(
        self, key: AttemptKey, *, now: datetime, client_ip: str | None = None, reservation: str | None = None
    ) -> datetime | None:
        with self._lock:
            self._check_available()
            until = self._active_lock(key.tenant, key.subject, now)
            if until is not None:
                self._settle(key, reservation)
                return until
            self.register_success(key, now=now, client_ip=client_ip, reservation=reservation)
            return None

    def set_lock(self, key: AttemptKey, until: datetime) -> None:
        with self._lock:
            self._check_available()
            self._put(self._locks, key, replace(self._locks.get(key, LockState()), locked_until=until))

    def clear_lock(self, tenant: str, subject: str) -> None:
        with self._lock:
            self._check_available()
            self._forget_attempts(tenant, subject)

    def _forget_attempts(self, tenant: str, subject: str) -> None:
        """Drop the counters and reservations of ``subject`` and of its (subject, address)
        pairs (caller holds the lock)."""
        pairs = subject + PAIR_SEPARATOR

        def of_subject(key: AttemptKey) -> bool:
            return key.tenant == tenant and (key.subject == subject or key.subject.startswith(pairs))

        for key in [k for k in self._locks if of_subject(k)]:
            self._remove(self._locks, key)
        for key in [k for k in self._reservations if of_subject(k)]:
            self._remove(self._reservations, key)

    def failure_count(self, key: AttemptKey) -> int:
        """Failures counted in the current window (for tests and operators)."""
        with self._lock:
            self._check_available()
            return self._locks.get(key, LockState()).failures

    def failures_since_success(self, key: AttemptKey, *, since: datetime) -> int:
        """Walks the attempt log back from the newest row (bounded by ``max_attempt_log``)."""
        with self._lock:
            self._check_available()
            failures = 0
            for row in reversed(self._attempts):
                if row.at <= since:
                    break
                if (row.tenant, row.subject, row.factor) != (key.tenant, key.subject, key.factor):
                    continue
                if row.success:
                    break
                failures += 1
            return failures

    @property
    def attempt_log(self) -> list[AttemptLogEntry]:
        with self._lock:
            return list(self._attempts)

    # --- audit -------------------------------------------------------------------------------

    # --- federation: identity links and the logout replay cache -----------------------------

    def link_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        link = IdentityLink(issuer, subject, tenant, user_id, self.clock.now())
        with self._lock:
            self._put(self._links, (issuer, subject), link)
        return link

    def claim_identity(self, issuer: str, subject: str, tenant: str, user_id: str) -> IdentityLink:
        """Link the identity unless it is linked already; the link in force (never replaced)."""
        with self._lock:
            found = self._links.get((issuer, subject))
            if found is None:
                found = IdentityLink(issuer, subject, tenant, user_id, self.clock.now())
                self._put(self._links, (issuer, subject), found)
            return found

    def find_link(self, issuer: str, subject: str) -> IdentityLink | None:
        with self._lock:
            return self._links.get((issuer, subject))

    def links_of_user(self, tenant: str, user_id: str) -> list[IdentityLink]:
        with self._lock:
            found = [
                link for link in self._links.values() if (link.tenant, link.user_id) == (tenant, user_id)
            ]
        return sorted(found, key=lambda link: (link.issuer, link.subject))

    def unlink_identity(self, issuer: str, subject: str) -> bool:
        with self._lock:
            return self._remove(self._links, (issuer, subject)) is not None

    def remember_jti(self, issuer: str, jti: str, expires_at: datetime) -> bool:
        now = self.clock.now()
        with self._lock:
            for key in [k for k, until in self._jtis.items() if until <= now]:
                self._remove(self._jtis, key)
            if (issuer, jti) in self._jtis:
                return False
            self._put(self._jtis, (issuer, jti), expires_at)
            return True

    def fail_next_write(self, count: int = 1) -> None:
        """Make the next ``count`` audit writes fail with AuditWriteError."""
        with self._lock:
            self._fail_writes = count

    def write(self, record: AuditRecord) -> None:
        with self._lock:
            if self._fail_writes > 0:
                self._fail_writes -= 1
                raise AuditWriteError()
            chain = self._audit_chain
            if chain is not None:  # numbered and MACed after its chain's head, which moves
                name = chain_of(record.tenant)
                sealed, head = chain.seal(self._chain_heads.get(name, ChainHead()), [record])
                self._put(self._chain_heads, name, head)
                record = sealed[0]
            self._append(self._audit, ChainedRow(next(self._audit_ids), record))

    @property
    def audit_rows(self) -> list[AuditRecord]:
        with self._lock:
            return [row.record for row in self._audit]

    def use_audit_chain(self, chain: AuditChain | None) -> None:
        """MAC every row written from now on under ``chain`` (``None``: write rows unchained)."""
        with self._lock:
            self._audit_chain = chain

    def audit_chains(self) -> list[str]:
        with self._lock:
            names = {chain_of(row.record.tenant) for row in self._audit} | set(self._chain_heads)
        return sorted(names)

    def read_audit_chain(self, chain: str) -> ChainSnapshot:
        with self._lock:
            rows = [row for row in self._audit if chain_of(row.record.tenant) == chain]
            return ChainSnapshot(chain, rows, self._chain_heads.get(chain), self._checkpoints.get(chain))

    def drop_audit_prefix(self, checkpoint: Checkpoint) -> int:
        def dropped(row: ChainedRow) -> bool:
            seq = row.record.seq
            return (
                chain_of(row.record.tenant) == checkpoint.chain and seq is not None and seq <= checkpoint.seq
            )

        return self._drop_audit(dropped, checkpoint)

    # --- provider tokens (ProviderTokenStore) -------------------------------------------------

    def save_provider_tokens(self, tokens: StoredProviderTokens) -> None:
        key = (tokens.tenant, tokens.user_id, tokens.provider)
        with self._lock:
            self._put(self._provider_tokens, key, tokens)
            self._remove(self._token_claims, key)

    def get_provider_tokens(self, tenant: str, user_id: str, provider: str) -> StoredProviderTokens | None:
        with self._lock:
            return self._provider_tokens.get((tenant, user_id, provider))

    def provider_tokens_of_user(self, tenant: str, user_id: str) -> list[StoredProviderTokens]:
        with self._lock:
            found = [row for key, row in self._provider_tokens.items() if key[:2] == (tenant, user_id)]
        return sorted(found, key=lambda row: row.provider)

    def delete_provider_tokens(self, tenant: str, user_id: str, provider: str) -> bool:
        key = (tenant, user_id, provider)
        with self._lock:
            self._remove(self._token_claims, key)
            return self._remove(self._provider_tokens, key) is not None

    def claim_provider_tokens(
        self, tenant: str, user_id: str, provider: str, claim: str, *, now: datetime, until: datetime
    ) -> bool:
        key = (tenant, user_id, provider)
        with self._lock:
            held = self._token_claims.get(key)
            if key not in self._provider_tokens or (held is not None and held[1] > now):
                return False
            self._put(self._token_claims, key, (claim, until))
            return True

    def replace_claimed_provider_tokens(self, tokens: StoredProviderTokens, claim: str) -> bool:
        key = (tokens.tenant, tokens.user_id, tokens.provider)
        with self._lock:
            held = self._token_claims.get(key)
            if held is None or held[0] != claim or key not in self._provider_tokens:
                return False
            self._put(self._provider_tokens, key, tokens)
            self._remove(self._token_claims, key)
            return True

    def release_provider_tokens(self, tenant: str, user_id: str, provider: str, claim: str) -> None:
        key = (tenant, user_id, provider)
        with self._lock:
            held = self._token_claims.get(key)
            if held is not None and held[0] == claim:
                self._remove(self._token_claims, key)

    # --- maintenance (BackendMaintenance) ----------------------------------------------------

    def bind_app(self, app: object) -> InMemoryBackend:
        """``self``: the memory store serves any app as it is."""
        return self

    def database_engine(self) -> None:
        """``None``: nothing of this store is in a database."""
        return None

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Drop the audit rows written before ``before`` (with ``unchained_only``, only
        those without a ``seq``); returns how many went."""

        def dropped(row: ChainedRow) -> bool:
            return utc(row.record.time) < utc(before) and not (unchained_only and row.record.seq is not None)

        return self._drop_audit(dropped, None)

    def _drop_audit(self, dropped: Any, checkpoint: Checkpoint | None) -> int:
        with self._lock:
            kept = [row for row in self._audit if not dropped(row)]
            purged = len(self._audit) - len(kept)
            self._audit.clear()  # in place: a unit's journal refers to this deque
            self._audit.extend(kept)
            if checkpoint is not None:
                self._checkpoints[checkpoint.chain] = checkpoint
        return purged

    # --- account tokens (AccountTokenStore) --------------------------------------------------
    #
    # Mailed single-use tokens by digest. Each change holds the lock for the whole step and
    # goes through the unit's journal, so a rolled-back step leaves its token unused.

    def issue_account_token(self, token: AccountToken) -> None:
        with self._lock:
            self.void_account_tokens(token.tenant, token.user_id, token.kind, token.created_at)
            self._put(self._account_tokens, token.token_hash, replace(token, payload=dict(token.payload)))

    def find_account_token(self, token_hash: str) -> AccountToken | None:
        with self._lock:
            return self._account_tokens.get(token_hash)

    def _live_token(self, token_hash: str, now: datetime) -> AccountToken | None:
        found = self._account_tokens.get(token_hash)
        return found if found is not None and found.used_at is None and found.expires_at > now else None

    def use_account_token(self, token_hash: str, kind: str, now: datetime) -> AccountToken | None:
        with self._lock:
            live = self._live_token(token_hash, now)
            if live is None or live.kind != kind:
                return None
            used = replace(live, used_at=now)
            self._put(self._account_tokens, token_hash, used)
            return used

    def live_account_token(self, tenant: str, user_id: str, kind: str, now: datetime) -> AccountToken | None:
        with self._lock:
            for token in self._account_tokens.values():
                if (token.tenant, token.user_id, token.kind) == (tenant, user_id, kind):
                    if self._live_token(token.token_hash, now) is not None:
                        return token
        return None

    def use_account_code(
        self, token_hash: str, code_hash: str, now: datetime, *, max_attempts: int
    ) -> AccountToken | None:
        with self._lock:
            live = self._live_token(token_hash, now)
            if live is None or live.code_attempts >= max_attempts:
                return None
            if live.code_hash == code_hash:
                used = replace(live, used_at=now)
                self._put(self._account_tokens, token_hash, used)
                return used
            tried = live.code_attempts + 1
            voided = now if tried >= max_attempts else None
            self._put(self._account_tokens, token_hash, replace(live, code_attempts=tried, used_at=voided))
            return None

    def has_account_token(self, tenant: str, user_id: str, kind: str) -> bool:
        with self._lock:
            return any(
                (token.tenant, token.user_id, token.kind) == (tenant, user_id, kind)
                for token in self._account_tokens.values()
            )

    def void_account_tokens(self, tenant: str, user_id: str, kind: str | None, now: datetime) -> int:
        with self._lock:
            voided = [
                token
                for token in self._account_tokens.values()
                if (token.tenant, token.user_id) == (tenant, user_id)
                and (kind is None or token.kind == kind)
                and token.used_at is None
            ]
            for token in voided:
                self._put(self._account_tokens, token.token_hash, replace(token, used_at=now))
            return len(voided)

    # --- roles (RoleStore) -------------------------------------------------------------------

    def _known_role(self, tenant: str, name: str) -> _RoleState:
        state = self._roles
        if (check_tenant(tenant), check_name(name)) not in state.roles:
            raise RoleNotFound()
        return state

    def create_role(self, tenant: str, name: str, description: str = "") -> Role:
        role = Role(check_tenant(tenant), check_name(name), check_description(description))
        with self._lock:
            state = self._roles
            if (role.tenant, role.name) in state.roles:
                raise RoleExists()
            state.roles[(role.tenant, role.name)] = description
        return role

    def delete_role(self, tenant: str, name: str, *, force: bool = False) -> None:
        with self._lock:
            state = self._known_role(tenant, name)
            holders = [key for key, roles in state.held.items() if key[0] == tenant and name in roles]
            if holders and not force:
                raise RoleInUse()
            for key in holders:
                state.held[key].discard(name)
            state.grants.pop((tenant, name), None)
            del state.roles[(tenant, name)]

    def list_roles(self, tenant: str) -> list[Role]:
        with self._lock:
            state = self._roles
            return [
                Role(t, name, description, tuple(sorted(state.grants.get((t, name), ()))))
                for (t, name), description in sorted(state.roles.items())
                if t == tenant
            ]

    def grant_permission(self, tenant: str, role: str, permission: str) -> bool:
        permission = check_name(permission, "permission")
        with self._lock:
            grants = self._known_role(tenant, role).grants.setdefault((tenant, role), set())
            new = permission not in grants
            grants.add(permission)
            return new

    def revoke_permission(self, tenant: str, role: str, permission: str) -> bool:
        permission = check_name(permission, "permission")
        with self._lock:
            grants = self._known_role(tenant, role).grants.get((tenant, role), set())
            had = permission in grants
            grants.discard(permission)
            return had

    def add_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        with self._lock:
            if self.get_user(check_tenant(tenant), user_id) is None:
                raise UserNotFound()
            held = self._known_role(tenant, role).held.setdefault((tenant, user_id), set())
            new = role not in held
            held.add(role)
            return new

    def remove_user_role(self, tenant: str, user_id: str, role: str) -> bool:
        with self._lock:
            held = self._known_role(tenant, role).held.get((tenant, user_id), set())
            had = role in held
            held.discard(role)
            return had

    def roles_of(self, tenant: str, user_id: str) -> list[str]:
        with self._lock:
            return sorted(self._roles.held.get((tenant, user_id), ()))

    def permissions_of(self, tenant: str, user_id: str) -> list[str]:
        with self._lock:
            state = self._roles
            roles = state.held.get((tenant, user_id), ())
            return sorted({p for role in roles for p in state.grants.get((tenant, role), ())})

    # --- personal API tokens (ApiTokenStore) --------------------------------------------------
    #
    # One dict, token id -> record; a user's tokens are found by a scan (a memory store
    # holds few), names are unique per user as the SQL store's constraint has them.

    def _user_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        return sorted(
            (r for r in self._api_tokens.values() if r.tenant == tenant and r.user_id == user_id),
            key=lambda r: r.name,
        )

    def _drop_api_tokens(self, tenant: str, user_id: str) -> int:
        doomed = [r.token_id for r in self._user_tokens(tenant, user_id)]
        for token_id in doomed:
            self._remove(self._api_tokens, token_id)
        return len(doomed)

    def add_api_token(self, record: ApiTokenRecord) -> None:
        with self._lock:
            if self.get_user(record.tenant, record.user_id) is None:
                raise UserNotFound()
            if record.token_id in self._api_tokens or any(
                r.name == record.name for r in self._user_tokens(record.tenant, record.user_id)
            ):
                raise ApiTokenNameTaken()
            self._put(self._api_tokens, record.token_id, record)

    def get_api_token(self, token_id: str) -> ApiTokenRecord | None:
        with self._lock:
            return self._api_tokens.get(token_id)

    def list_api_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        with self._lock:
            return self._user_tokens(tenant, user_id)

    def delete_api_token(self, tenant: str, user_id: str, name: str) -> ApiTokenRecord | None:
        with self._lock:
            for record in self._user_tokens(tenant, user_id):
                if record.name == name:
                    return cast(ApiTokenRecord, self._remove(self._api_tokens, record.token_id))
            return None

    def delete_user_api_tokens(self, tenant: str, user_id: str) -> int:
        with self._lock:
            return self._drop_api_tokens(tenant, user_id)

    def touch_api_token(self, token_id: str, at: datetime, *, unless_since: datetime) -> bool:
        with self._lock:
            record = self._api_tokens.get(token_id)
            if record is None or (record.last_used_at is not None and record.last_used_at >= unless_since):
                return False
            self._put(self._api_tokens, token_id, replace(record, last_used_at=at))
            return True

    # --- devices (DeviceStore) ---------------------------------------------------------------

    def _device_key(self, tenant: str, user_id: str, device_id: str) -> tuple[str, str, str]:
        return (check_tenant(tenant), user_id, check_device_id(device_id))

    def touch_device(
        self, tenant: str, user_id: str, device_id: str, *, label: str, place: str | None, now: datetime
    ) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        label = clean_text(label, MAX_LABEL_LENGTH)
        place = clean_text(place, MAX_PLACE_LENGTH) if place is not None else None
        with self._lock:
            if self.get_user(key[0], user_id) is None:
                raise UserNotFound()
            known = self._devices.get(key)
            if known is None:
                self._put(self._devices, key, DeviceRecord(*key, label, utc(now), utc(now), place))
                return True
            self._put(self._devices, key, replace(known, label=label, place=place, last_seen_at=utc(now)))
            return False

    def get_device(self, tenant: str, user_id: str, device_id: str) -> DeviceRecord | None:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            return self._devices.get(key)

    def list_devices(self, tenant: str, user_id: str) -> list[DeviceRecord]:
        with self._lock:
            mine = [r for k, r in self._devices.items() if k[:2] == (tenant, user_id)]
        return sorted(mine, key=lambda r: (r.last_seen_at, r.device_id), reverse=True)

    def forget_device(self, tenant: str, user_id: str, device_id: str) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            return self._remove(self._devices, key) is not None

    def trust_device(self, tenant: str, user_id: str, device_id: str, until: datetime) -> bool:
        key = self._device_key(tenant, user_id, device_id)
        with self._lock:
            known = self._devices.get(key)
            if known is None:
                return False
            self._put(self._devices, key, replace(known, trusted_until=utc(until)))
            return True

    def end_device_trust(self, tenant: str, user_id: str, device_id: str | None = None) -> int:
        wanted = check_device_id(device_id) if device_id is not None else None
        with self._lock:
            keys = [
                k
                for k, r in self._devices.items()
                if k[:2] == (tenant, user_id) and r.trusted_until is not None and wanted in (None, k[2])
            ]
            for key in keys:
                self._put(self._devices, key, replace(self._devices[key], trusted_until=None))
            return len(keys)


def _undo(container: Any, key: Any, before: Any) -> None:
    """Put one journaled change of a unit back."""
    if key is _APPENDED:
        container.pop()
        if before is not _ABSENT:
            container.appendleft(before)  # the row the append pushed out of a full log
    elif before is _ABSENT:
        container.pop(key, None)
    else:
        container[key] = before


@dataclass(slots=True)
class _RoleState:
    """The memory store's roles: (tenant, name) -> description, grants and assignments."""

    roles: dict[tuple[str, str], str] = field(default_factory=dict)
    grants: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    held: dict[tuple[str, str], set[str]] = field(default_factory=dict)
