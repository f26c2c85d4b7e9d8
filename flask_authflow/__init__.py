"""flask-authflow: the whole authentication layer of a Flask app, in one extension.

This module only re-exports the public API; each name lives in the module of its concept.
"""

from .audit.client_ip import TrustedProxies
from .audit.context import AuditContext, audit_context
from .authn.accounts import AccountAdmin
from .authn.factors.password import PasswordHasher
from .authn.lockout import LockoutPolicy
from .authn.outcomes import (
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
from .authn.password_policy import PasswordPolicy
from .authn.service import AuthnService
from .clock import Clock, MockClock, SystemClock
from .decorators import fresh_login_required, login_required, safe_next
from .errors import (
    AccountDisabled,
    AuditWriteError,
    AuthFlowError,
    AuthnError,
    ConfigurationError,
    DuplicateKeyId,
    EnrollmentError,
    FactorNotRegistered,
    FactorSecretError,
    InvalidInput,
    InvalidTransition,
    IssuanceError,
    KeyStoreError,
    LoginNotStarted,
    LoopbackOnly,
    MailDeliveryError,
    MissingExtraError,
    PasswordTooLong,
    PermissionDenied,
    RotationRefused,
    SessionDataTooLarge,
    SessionDecryptError,
    SessionError,
    SessionRecordError,
    SigningKeyError,
    StepUpNeeded,
    StoreBusy,
    StoreUnavailable,
    TokenCheck,
    TokenVerificationError,
    Unauthenticated,
    UnknownKeyId,
    UserExists,
    UserNotFound,
    WeakPassword,
)
from .extension import AuthFlow
from .issuer import (
    FileLocalIdpKeyStore,
    LoadedKeys,
    LocalIdp,
    LocalIdpKeyStore,
    LocalIdpSigningKey,
    MemoryLocalIdpKeyStore,
    MintClaims,
)
from .jose import JwksHandle, JwtVerifier, VerifiedClaims
from .mail import MailSender
from .session.crypto import SessionCrypto
from .session.interface import AuthFlowSessionInterface
from .session.model import AuthSession, AuthState
from .session.stores import MemorySessionStore, SessionStore
from .state import AuthBackend, AuthFlowState, current_session, get_state
from .stores.memory import InMemoryBackend
from .stores.sqlalchemy.backend import SqlAlchemyBackend
from .stores.sqlalchemy.keystore import SqlAlchemyLocalIdpKeyStore
from .stores.sqlalchemy.session_store import SqlAlchemySessionStore
from .users import AnonymousUser, UserMixin, current_user

__version__ = "0.7.0"

__all__ = [
    "AccountAdmin",
    "AccountDisabled",
    "AnonymousUser",
    "AuditContext",
    "AuditWriteError",
    "AuthBackend",
    "AuthFlow",
    "AuthFlowError",
    "AuthFlowSessionInterface",
    "AuthFlowState",
    "AuthSession",
    "AuthState",
    "Authenticated",
    "AuthnError",
    "AuthnService",
    "Clock",
    "ConfigurationError",
    "DuplicateKeyId",
    "EnrollmentError",
    "FactorCredential",
    "FactorKind",
    "FactorNotRegistered",
    "FactorOutcome",
    "FactorRequired",
    "FactorSecretError",
    "FileLocalIdpKeyStore",
    "InMemoryBackend",
    "InvalidCredential",
    "InvalidCredentials",
    "InvalidInput",
    "InvalidTransition",
    "IssuanceError",
    "JwksHandle",
    "JwtVerifier",
    "KeyStoreError",
    "LoadedKeys",
    "LocalIdp",
    "LocalIdpKeyStore",
    "LocalIdpSigningKey",
    "Locked",
    "LockoutPolicy",
    "LoginNotStarted",
    "LoginOutcome",
    "LoopbackOnly",
    "MailDeliveryError",
    "MailSender",
    "MemoryLocalIdpKeyStore",
    "MemorySessionStore",
    "MintClaims",
    "MissingExtraError",
    "MockClock",
    "PasswordHasher",
    "PasswordPolicy",
    "PasswordTooLong",
    "PermissionDenied",
    "RotationRefused",
    "SessionCrypto",
    "SessionDataTooLarge",
    "SessionDecryptError",
    "SessionError",
    "SessionRecordError",
    "SessionStore",
    "SigningKeyError",
    "SqlAlchemyBackend",
    "SqlAlchemyLocalIdpKeyStore",
    "SqlAlchemySessionStore",
    "StepUpNeeded",
    "StepUpRequired",
    "StoreBusy",
    "StoreUnavailable",
    "SystemClock",
    "TokenCheck",
    "TokenVerificationError",
    "TrustedProxies",
    "Unauthenticated",
    "UnknownKeyId",
    "UserExists",
    "UserMixin",
    "UserNotFound",
    "VerifiedClaims",
    "WeakPassword",
    "__version__",
    "audit_context",
    "current_session",
    "current_user",
    "fresh_login_required",
    "get_state",
    "login_required",
    "safe_next",
]
