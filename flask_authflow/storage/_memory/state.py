"""The shared state of the memory adapter: one lock, the dicts of every aggregate, the undo journal.

Every aggregate module of :mod:`flask_authflow.storage._memory` is a mixin over
:class:`MemoryState`; :class:`~flask_authflow.storage._memory.InMemoryBackend` combines them,
as :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` combines the SQL ones. One
lock guards all state, so every counter update is atomic across threads, and every change
goes through the journal, so a unit of work's rollback puts the state back as it was.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.ports import (
    AccountToken,
    ApiTokenRecord,
    AttemptKey,
    DeviceRecord,
    FactorConfig,
    StoredProviderTokens,
    UserRecord,
)
from flask_authflow.audit._chain import AuditChain, ChainedRow, ChainHead, Checkpoint
from flask_authflow.federation._links import IdentityLink

__all__ = ["AttemptLogEntry", "LockState", "MemoryState", "RoleState", "undo"]


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


@dataclass(slots=True)
class RoleState:
    """The memory store's roles: (tenant, name) -> description, grants and assignments."""

    roles: dict[tuple[str, str], str] = field(default_factory=dict)
    grants: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    held: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)


#: The journal's mark of a key that was absent before the change (and of no dropped row).
_ABSENT: Any = object()
#: The journal's key for a row appended to a log (undone by removing it again).
_APPENDED: Any = object()


class MemoryState:
    """The state every aggregate of :class:`~flask_authflow.storage._memory.InMemoryBackend`
    works on: its dicts, logs and counters, the one lock that guards them all, and the open
    unit's undo journal, written through :meth:`_put`, :meth:`_remove` and :meth:`_append`."""

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
        self._roles = RoleState()
        self._api_tokens: dict[str, ApiTokenRecord] = {}  # token id -> record
        # Devices: (tenant, user id, device id) -> record.
        self._devices: dict[tuple[str, str, str], DeviceRecord] = {}
        self._links: dict[tuple[str, str], IdentityLink] = {}
        self._jtis: dict[tuple[str, str], datetime] = {}
        # Account tokens by digest (see account_tokens.py).
        self._account_tokens: dict[str, AccountToken] = {}
        # Provider tokens per (tenant, user id, provider), and each row's refresh claim.
        self._provider_tokens: dict[tuple[str, str, str], StoredProviderTokens] = {}
        self._token_claims: dict[tuple[str, str, str], tuple[str, datetime]] = {}
        self._fail_writes = 0
        # The open unit's undo journal: (container, key, value before) per change.
        self._journal: list[tuple[Any, Any, Any]] | None = None
        #: While true, the attempt store raises StoreUnavailable (tests of fail-closed).
        self.attempts_unavailable = False

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

    def _user_of(self, tenant: str, user_id: str) -> UserRecord | None:
        """The user ``user_id`` of ``tenant``, or ``None``: the one read of the users that other
        aggregates make, before they keep a row that points at a user (caller holds the lock)."""
        user = self._users_by_id.get(user_id)
        return user if user is not None and user.tenant == tenant else None


def undo(container: Any, key: Any, before: Any) -> None:
    """Put one journaled change of a unit back."""
    if key is _APPENDED:
        container.pop()
        if before is not _ABSENT:
            container.appendleft(before)  # the row the append pushed out of a full log
    elif before is _ABSENT:
        container.pop(key, None)
    else:
        container[key] = before
