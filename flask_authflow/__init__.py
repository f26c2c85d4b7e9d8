"""flask-authflow: the whole authentication layer of a Flask app, in one extension.

This module only re-exports the public API; each name lives in the module of its concept.
"""

from .audit.client_ip import TrustedProxies
from .audit.context import AuditContext, audit_context
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
from .authn.service import AuthnService
from .clock import Clock, MockClock, SystemClock
from .decorators import fresh_login_required, login_required, safe_next
from .errors import (
    AccountLocked,
    AuditWriteError,
    AuthFlowError,
    AuthnError,
    ConfigurationError,
    InvalidInput,
    IssuanceError,
    KeyStoreError,
    PasswordTooLong,
    SessionDataTooLarge,
    SessionError,
    StoreUnavailable,
    TokenVerificationError,
)
from .extension import AuthFlow, AuthFlowState, current_session, get_state
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
from .session.crypto import SessionCrypto
from .session.interface import AuthFlowSessionInterface
from .session.model import AuthSession, AuthState
from .session.stores import MemorySessionStore, SessionStore
from .stores.memory import InMemoryBackend
from .stores.sqlalchemy.backend import SqlAlchemyBackend
from .stores.sqlalchemy.keystore import SqlAlchemyLocalIdpKeyStore
from .stores.sqlalchemy.session_store import SqlAlchemySessionStore

__version__ = "0.7.0"

__all__ = [
    "AccountLocked",
    "AuditContext",
    "AuditWriteError",
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
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRequired",
    "FileLocalIdpKeyStore",
    "InMemoryBackend",
    "InvalidCredential",
    "InvalidCredentials",
    "InvalidInput",
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
    "LoginOutcome",
    "MemoryLocalIdpKeyStore",
    "MemorySessionStore",
    "MintClaims",
    "MockClock",
    "PasswordHasher",
    "PasswordTooLong",
    "SessionCrypto",
    "SessionDataTooLarge",
    "SessionError",
    "SessionStore",
    "SqlAlchemyBackend",
    "SqlAlchemyLocalIdpKeyStore",
    "SqlAlchemySessionStore",
    "StepUpRequired",
    "StoreUnavailable",
    "SystemClock",
    "TokenVerificationError",
    "TrustedProxies",
    "VerifiedClaims",
    "__version__",
    "audit_context",
    "current_session",
    "fresh_login_required",
    "get_state",
    "login_required",
    "safe_next",
]
