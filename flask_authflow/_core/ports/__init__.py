"""What the login service needs from storage, as protocols.

The login service runs on one :class:`LoginStore`: identities, factors and attempt
counters in one store with one :class:`UnitOfWork` (``InMemoryBackend`` and
``SqlAlchemyBackend`` implement it, and every store takes the same path through the
service). Every method that a security decision depends on raises
:class:`~flask_authflow.errors.StoreUnavailable` when the store cannot answer, and the
service refuses the attempt (fail closed).

One module per aggregate (``users``, ``factors``, ``attempts``, ``login``, ``sessions``,
``roles``, ``tokens``, ``devices``, ``links``, ``backend``); every name is imported from
``flask_authflow._core.ports`` as before.
"""

from __future__ import annotations

from flask_authflow._core.audit import AuditRecord, AuditSink
from flask_authflow._core.ports.attempts import (
    PAIR_SEPARATOR,
    RESERVATION_TTL,
    AttemptKey,
    AttemptLevel,
    AttemptStore,
    FailureCount,
    HolderUnusable,
    Reservation,
    level_token,
)
from flask_authflow._core.ports.backend import BackendMaintenance, StorePorts
from flask_authflow._core.ports.devices import DeviceRecord, DeviceStore
from flask_authflow._core.ports.factors import FactorConfig, FactorRecordStore, FactorStore, KnownSecret
from flask_authflow._core.ports.links import FederationStore, IdentityLink
from flask_authflow._core.ports.login import (
    LoginFacts,
    LoginRecorder,
    LoginStore,
    UnitOfWork,
    one_unit,
    write_session_in_unit,
)
from flask_authflow._core.ports.roles import Role, RoleStore
from flask_authflow._core.ports.sessions import (
    MaintainedSessionStore,
    SessionHandoff,
    SessionMaintenance,
    SessionStore,
    SessionTouch,
    SessionWrite,
)
from flask_authflow._core.ports.tokens import (
    AccountToken,
    AccountTokenStore,
    ApiTokenRecord,
    ApiTokenStore,
    ProviderTokenStore,
    StoredProviderTokens,
)
from flask_authflow._core.ports.users import IdentityStore, UserRecord

__all__ = [
    "PAIR_SEPARATOR",
    "RESERVATION_TTL",
    "AccountToken",
    "AccountTokenStore",
    "ApiTokenRecord",
    "ApiTokenStore",
    "AttemptKey",
    "AttemptLevel",
    "AttemptStore",
    "AuditRecord",
    "AuditSink",
    "BackendMaintenance",
    "DeviceRecord",
    "DeviceStore",
    "FactorConfig",
    "FactorRecordStore",
    "FactorStore",
    "FailureCount",
    "FederationStore",
    "HolderUnusable",
    "IdentityLink",
    "IdentityStore",
    "KnownSecret",
    "LoginFacts",
    "LoginRecorder",
    "LoginStore",
    "MaintainedSessionStore",
    "ProviderTokenStore",
    "Reservation",
    "Role",
    "RoleStore",
    "SessionHandoff",
    "SessionMaintenance",
    "SessionStore",
    "SessionTouch",
    "SessionWrite",
    "StorePorts",
    "StoredProviderTokens",
    "UnitOfWork",
    "UserRecord",
    "level_token",
    "one_unit",
    "write_session_in_unit",
]
