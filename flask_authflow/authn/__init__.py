"""Password login with chained factors: the service, its outcomes, stores and lockout."""

from __future__ import annotations

from .factors.base import FactorVerifier
from .factors.password import MAX_PASSWORD_BYTES, PasswordHasher, PasswordVerifier
from .lockout import Lockout, LockoutPolicy
from .outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
    InvalidCredentials,
    Locked,
    LoginOutcome,
    StepUpRequired,
)
from .service import AuthnRequest, AuthnService, normalise_identifier
from .stores import (
    AttemptKey,
    AttemptStore,
    AuditSink,
    FactorConfig,
    FactorStore,
    FailureCount,
    IdentityStore,
    UserRecord,
)

__all__ = [
    "MAX_PASSWORD_BYTES",
    "AttemptKey",
    "AttemptStore",
    "AuditSink",
    "Authenticated",
    "AuthnRequest",
    "AuthnService",
    "FactorConfig",
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRequired",
    "FactorStore",
    "FactorVerifier",
    "FailureCount",
    "IdentityStore",
    "InvalidCredential",
    "InvalidCredentials",
    "Locked",
    "Lockout",
    "LockoutPolicy",
    "LoginOutcome",
    "PasswordHasher",
    "PasswordVerifier",
    "StepUpRequired",
    "UserRecord",
    "normalise_identifier",
]
