"""The exception hierarchy shared by every part of flask-authflow.

Each error carries a stable machine-readable ``code`` and the HTTP ``status`` the
views answer with; ``message`` is safe to show to the client (it never contains
secrets, key material or whether an account exists).
"""

from __future__ import annotations

import enum

from flask_authflow._i18n import N_

__all__ = [
    "AccountDisabled",
    "AuthFlowError",
    "AuthnError",
    "ConfigurationError",
    "EnrollmentError",
    "InvalidInput",
    "IssuanceError",
    "MailDeliveryError",
    "PermissionDenied",
    "RoleExists",
    "RoleInUse",
    "RoleNotFound",
    "SessionError",
    "StepUpNeeded",
    "StoreUnavailable",
    "Throttled",
    "TokenVerificationError",
    "Unauthenticated",
    "UserExists",
    "UserNotFound",
    "WeakPassword",
]


class AuthFlowError(Exception):
    """Base class of every error raised by flask-authflow."""

    code: str = "authflow_error"
    status: int = 400
    #: Seconds after which trying again may succeed (sent as ``Retry-After``), if known.
    retry_after: int | None = None

    def __init__(self, message: str | None = None) -> None:
        self.message = message if message is not None else self.default_message()
        super().__init__(self.message)

    @classmethod
    def default_message(cls) -> str:
        return (cls.__doc__ or cls.__name__).strip().splitlines()[0]

    def to_dict(self) -> dict[str, str]:
        """The JSON error body: ``{"error": code, "message": message}``."""
        return {"error": self.code, "message": self.message}


class ConfigurationError(AuthFlowError):
    """The configuration is unsafe or invalid."""

    code = "configuration_error"
    status = 500


class LoopbackOnly(AuthFlowError):
    """This development server only answers clients on this machine."""

    code = "loopback_only"
    status = 403


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the pip extra to install."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module!r} is not installed: install it with  pip install 'flask-authflow[{extra}]'"
        )
        self.extra = extra


class StoreUnavailable(AuthFlowError):
    """A store needed for a security decision could not be reached; the request is denied."""

    code = "store_unavailable"
    status = 503


class Throttled(AuthFlowError):
    """Too many requests from this address (or for this account or recipient); try again later."""

    code = "throttled"
    status = 429

    def __init__(self, message: str | None = None, *, retry_after: int = 1, scope: str = "") -> None:
        super().__init__(message)
        #: Whole seconds until the limit that refused the request lets one through again.
        self.retry_after = max(1, int(retry_after))
        #: The limit that refused it (``login.address``, ``mail.recipient``, ...), for the audit.
        self.scope = scope


class StoreBusy(StoreUnavailable):
    """Too many requests wait for the same account right now; try again in a moment."""

    code = "store_busy"
    retry_after = 1


class AuditWriteError(StoreUnavailable):
    """The audit row could not be written, so the operation was refused."""

    code = "audit_unavailable"


class SessionError(AuthFlowError):
    """The session could not be used."""

    code = "session_error"


class InvalidTransition(SessionError):
    """The requested state change is not allowed from the session's current state."""

    code = "invalid_transition"
    status = 409


class SessionDataTooLarge(SessionError):
    """Custom session data is over its size limit."""

    code = "session_data_too_large"
    status = 413

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"custom session data is {size} bytes; the limit is {limit} bytes")
        self.size = size
        self.limit = limit


class AuthnError(AuthFlowError):
    """A login operation could not be carried out."""

    code = "authn_error"
    status = 401


class InvalidInput(AuthnError):
    """The request's input is malformed."""

    code = "invalid_input"
    status = 400


class PasswordTooLong(InvalidInput):
    """The password is longer than allowed."""

    code = "password_too_long"


class WeakPassword(InvalidInput):
    """The new password does not meet the password policy; ``message`` says what to choose.

    ``reason`` is one of ``too_short``, ``too_long``, ``blocklisted`` (a common or
    predictable password, or a word of ``AUTHFLOW_PASSWORD_BLOCKLIST``), ``context`` (the
    username, the tenant or the site name), ``too_guessable`` (a low zxcvbn score) and
    ``breached`` (found in the Pwned Passwords corpus, when that check is on).
    Raised when a password is set, never at login.
    """

    code = "weak_password"
    status = 400

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Unauthenticated(AuthnError):
    """Authentication required."""

    code = "unauthenticated"
    status = 401


class StepUpNeeded(AuthnError):
    """This action needs a recent authentication: verify your password again."""

    code = "step_up_required"
    status = 401


class AccountDisabled(AuthnError):
    """The account is disabled: no session can be established for it."""

    code = "account_disabled"
    status = 403


class PermissionDenied(AuthnError):
    """You are signed in, but not allowed to do this."""

    code = "permission_denied"
    status = 403


class LoginNotStarted(AuthnError):
    """There is no login in progress on this session."""

    code = "login_not_started"


class IssuanceError(AuthFlowError):
    """A token could not be minted."""

    code = "issuance_error"


class KeyStoreError(AuthFlowError):
    """The issuer key store is unusable (missing, malformed or unsafe)."""

    code = "key_store_error"
    status = 500


class RotationRefused(KeyStoreError):
    """The key rotation step is refused in the store's current state (nothing was changed)."""

    code = "rotation_refused"
    status = 409


class TokenCheck(enum.StrEnum):
    """The check a JWT failed (``TokenVerificationError.reason``; federation reuses it)."""

    MALFORMED = "malformed"
    HEADER = "header"  # crit, zip, enc (a JWE), a bad kid member
    ALGORITHM = "algorithm"
    UNKNOWN_KID = "unknown_kid"
    SIGNATURE = "signature"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    ISSUED_AT = "issued_at"
    AUDIENCE = "audience"
    ISSUER = "issuer"
    SUBJECT = "subject"
    JWT_ID = "jwt_id"
    AZP = "azp"
    NONCE = "nonce"
    CLAIM = "claim"  # another claim has the wrong type


class TokenVerificationError(AuthFlowError):
    """A JWT failed verification: ``reason`` is the failed :class:`TokenCheck`, ``message`` the detail."""

    code = "invalid_token"
    status = 401

    def __init__(self, message: str, reason: TokenCheck = TokenCheck.MALFORMED) -> None:
        super().__init__(message)
        self.reason = reason


class UnknownKeyId(TokenVerificationError):
    """The token's ``kid`` names no key in the JWK set (a relying party may refresh once)."""

    code = "unknown_kid"

    def __init__(self, kid: str | None) -> None:
        super().__init__("unknown kid", TokenCheck.UNKNOWN_KID)
        self.kid = kid


class SigningKeyError(AuthFlowError):
    """A signing key is invalid or unsafe (weak size, bad key id, unsupported type)."""

    code = "signing_key_error"
    status = 500


class DuplicateKeyId(KeyStoreError):
    """The key store already holds a key with this ``kid``; rotation refused."""

    code = "duplicate_kid"

    def __init__(self, kid: str) -> None:
        super().__init__(f"the key store already holds a key with kid {kid!r}")
        self.kid = kid


class SessionDecryptError(SessionError):
    """A stored session record could not be decrypted (wrong key, tampered or moved)."""

    code = "session_decrypt_error"


class SessionRecordError(SessionError):
    """A stored session record could not be decoded (unknown schema or malformed data)."""

    code = "session_record_error"


class UserExists(AuthnError):
    """A user with this identifier already exists in the tenant."""

    code = "user_exists"
    status = 409


class UserNotFound(AuthnError):
    """No user with this identifier exists in the tenant (administrative operations only)."""

    code = "user_not_found"
    status = 404


class FactorSecretError(AuthFlowError):
    """A sealed factor secret could not be opened (tampered, moved to another factor, or
    sealed with a key that is no longer configured). The factor then refuses every
    credential (fail closed); set the old key in ``AUTHFLOW_PREVIOUS_FACTOR_ENCRYPTION_KEYS``."""

    code = "factor_secret_unreadable"
    status = 500


class FactorNotRegistered(AuthnError):
    """No factor of this kind is registered with the app (``authflow.register_factor``)."""

    code = "factor_not_registered"
    status = 400


class EnrollmentError(AuthnError):
    """An enrollment cannot go on: no such pending factor, it expired, or the proof was wrong."""

    code = "enrollment_failed"
    status = 400


class MailDeliveryError(AuthFlowError):
    """The e-mail could not be sent (the mail server was unreachable or refused it)."""

    code = "mail_delivery_failed"
    status = 503


class RoleNotFound(AuthnError):
    """No role of this name exists in the tenant."""

    code = "role_not_found"
    status = 404


class RoleExists(AuthnError):
    """A role of this name already exists in the tenant."""

    code = "role_exists"
    status = 409


class RoleInUse(AuthnError):
    """The role is held by users; deleting it needs ``force``."""

    code = "role_in_use"
    status = 409


#: The default messages (first docstring lines) of the errors people see on the pages and in
#: error responses, marked for the package's catalogues: they are translated where they are
#: shown (``flask_authflow._i18n.translate``). Federation errors are listed here too.
USER_FACING_DEFAULTS = (
    N_("Authentication required."),
    N_("This action needs a recent authentication: verify your password again."),
    N_("The account is disabled: no session can be established for it."),
    N_("You are signed in, but not allowed to do this."),
    N_("There is no login in progress on this session."),
    N_("The request's input is malformed."),
    N_("The password is longer than allowed."),
    N_("An enrollment cannot go on: no such pending factor, it expired, or the proof was wrong."),
    N_("A login operation could not be carried out."),
    N_("Too many requests wait for the same account right now; try again in a moment."),
    N_("This development server only answers clients on this machine."),
    N_("The session could not be used."),
    N_("A federated login, logout or provider operation failed."),
    N_("This provider account is already linked to another user."),
    N_("This is your last way to sign in: set a password or add a passkey first."),
    N_("This provider is not linked to your account."),
    N_("Your account could not be created: please try again later."),
    N_("A user with this identifier already exists in the tenant."),
    N_("Too many requests from this address (or for this account or recipient); try again later."),
    N_("This link or code is not valid."),
    N_("This link or code was already used, or a newer one was sent."),
    N_("This link or code has expired: ask for a new one."),
    N_("Confirm your e-mail address first: follow the link we sent, or ask for a new one."),
    N_("A username with an @ must be the address you sign up with, or have no @ at all."),
    N_("The user already has an API token of this name (names are how tokens are revoked)."),
    N_("Set up a second factor first: your sign-in completes once it is set up."),
)


# --- personal API tokens -----------------------------------------------------------------------


class ApiTokenNameTaken(AuthnError):
    """The user already has an API token of this name (names are how tokens are revoked)."""

    code = "token_name_taken"
    status = 409


class InsufficientApiScope(PermissionDenied):
    """The bearer token is valid but was not given a scope the view needs (RFC 6750 §3.1)."""

    code = "insufficient_scope"
    status = 403


# --- second factors required by policy ------------------------------------------------------------


class EnrollmentRequired(AuthnError):
    """Set up a second factor first: your sign-in completes once it is set up."""

    code = "enrollment_required"
    status = 401

    def __init__(self, kinds: tuple[str, ...] = (), message: str | None = None) -> None:
        super().__init__(message)
        #: The factor kinds the held sign-in may set up.
        self.kinds = kinds

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "kinds": ",".join(self.kinds)}
