"""Password login with chained factors: the service, its outcomes, stores and lockout."""

from __future__ import annotations

from .factors.base import (
    Accepted,
    EnrollContext,
    Enrollment,
    EnrollmentStart,
    Factor,
    FactorCheck,
    FactorContext,
    Rejected,
    RejectReason,
)
from .factors.password import MAX_PASSWORD_BYTES, PasswordFactor, PasswordHasher
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
from .service import AuthnRequest, AuthnService, LoginSteps, default_login_steps, normalise_identifier
from .stores import (
    AttemptKey,
    AttemptStore,
    AuditSink,
    FactorConfig,
    FactorRecordStore,
    FactorStore,
    FailureCount,
    IdentityStore,
    UserRecord,
)

__all__ = [
    "MAX_PASSWORD_BYTES",
    "Accepted",
    "AttemptKey",
    "AttemptStore",
    "AuditSink",
    "Authenticated",
    "AuthnRequest",
    "AuthnService",
    "EnrollContext",
    "Enrollment",
    "EnrollmentStart",
    "Factor",
    "FactorCheck",
    "FactorConfig",
    "FactorContext",
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRecordStore",
    "FactorRequired",
    "FactorStore",
    "FailureCount",
    "IdentityStore",
    "InvalidCredential",
    "InvalidCredentials",
    "Locked",
    "Lockout",
    "LockoutPolicy",
    "LoginOutcome",
    "LoginSteps",
    "PasswordFactor",
    "PasswordHasher",
    "RejectReason",
    "Rejected",
    "StepUpRequired",
    "UserRecord",
    "default_login_steps",
    "normalise_identifier",
]
