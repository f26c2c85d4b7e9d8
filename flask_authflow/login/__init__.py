"""Password login with chained factors: the service, its flows (one module each, run in
the :class:`Operation` template), its outcomes, its store and lockout."""

from __future__ import annotations

from flask_authflow._core.factors import (
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
from flask_authflow._core.ports import (
    AttemptKey,
    AttemptStore,
    AuditSink,
    FactorConfig,
    FactorRecordStore,
    FactorStore,
    FailureCount,
    IdentityStore,
    LoginStore,
    UnitOfWork,
    UserRecord,
)
from flask_authflow._outcomes import (
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
from flask_authflow.login._account_service import Accounts
from flask_authflow.login._factor_service import Factors
from flask_authflow.login._lockout import Lockout, LockoutPolicy
from flask_authflow.login._operation import Operation
from flask_authflow.login._password import MAX_PASSWORD_BYTES, PasswordFactor, PasswordHasher
from flask_authflow.login._service import (
    AuthnRequest,
    AuthnService,
    LoginSteps,
    default_login_steps,
    normalise_identifier,
)
from flask_authflow.login._session_login import Login

__all__ = [
    "MAX_PASSWORD_BYTES",
    "Accepted",
    "Accounts",
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
    "Factors",
    "FailureCount",
    "IdentityStore",
    "InvalidCredential",
    "Locked",
    "Lockout",
    "LockoutPolicy",
    "Login",
    "LoginOutcome",
    "LoginSteps",
    "LoginStore",
    "Operation",
    "PasswordFactor",
    "PasswordHasher",
    "RejectReason",
    "Rejected",
    "StepUpRequired",
    "UnitOfWork",
    "UserRecord",
    "default_login_steps",
    "normalise_identifier",
]
