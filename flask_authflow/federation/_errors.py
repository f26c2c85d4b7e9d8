"""The errors of federated login (``OAuthError`` and its variants).

Each variant is a class, so applications match the kind (``except CsrfMismatch``) and log
the message, which names what failed (``IdTokenValidation(reason)``: the
reason is a :class:`~flask_authflow.errors.TokenCheck` or a short text). Messages never
carry tokens, codes or secrets.
"""

from __future__ import annotations

from flask_authflow.errors import AuthFlowError, TokenCheck

__all__ = [
    "CsrfMismatch",
    "Discovery",
    "EndSessionRefused",
    "Expired",
    "IdTokenValidation",
    "IssuerMismatch",
    "LogoutTokenInvalid",
    "OAuthError",
    "ProviderUnreachable",
    "TokenExchange",
    "UnknownKid",
    "UnknownProvider",
    "UserInfo",
    "UserNotLinked",
]


class OAuthError(AuthFlowError):
    """A federated login, logout or provider operation failed."""

    code = "oauth_error"
    status = 401


class UnknownProvider(OAuthError):
    """No provider is registered under this name."""

    code = "unknown_provider"
    status = 404


class Discovery(OAuthError):
    """The provider's discovery document is unusable (missing endpoint, wrong issuer, not https)."""

    code = "discovery_failed"
    status = 502


class ProviderUnreachable(OAuthError):
    """The provider did not answer usably (timeout, connection error, oversize or redirected response)."""

    code = "provider_unreachable"
    status = 502


class CsrfMismatch(OAuthError):
    """The callback's ``state`` does not match a ceremony of this session (forged, replayed or expired)."""

    code = "csrf_mismatch"


class Expired(CsrfMismatch):
    """The ceremony outlived its timeout: its state is no longer accepted (a :class:`CsrfMismatch`)."""

    code = "ceremony_expired"


class IssuerMismatch(OAuthError):
    """The callback's RFC 9207 ``iss`` parameter names another issuer (a mix-up attack)."""

    code = "issuer_mismatch"


class TokenExchange(OAuthError):
    """The token endpoint refused the code (``invalid_client``: check the client id, secret and type)."""

    code = "token_exchange_failed"

    def __init__(self, message: str | None = None, error: str | None = None) -> None:
        super().__init__(message)
        #: the OAuth ``error`` code the token endpoint answered (``invalid_client``, ``invalid_grant``).
        self.error = error


class IdTokenValidation(OAuthError):
    """The ID token failed a check; ``reason`` names it (signature, issuer, audience, azp, nonce, ...)."""

    code = "id_token_invalid"

    def __init__(self, reason: TokenCheck | str, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message or f"ID token refused: {reason}")


class UnknownKid(IdTokenValidation):
    """The token's ``kid`` is absent from the provider's keys even after a refresh: alert on this one."""

    code = "unknown_kid"

    def __init__(self, kid: str | None) -> None:
        super().__init__(TokenCheck.UNKNOWN_KID, f"ID token signed with unknown key id {kid!r}")
        self.kid = kid


class UserInfo(OAuthError):
    """The userinfo request failed (401: the scopes lack what userinfo needs) or its ``sub`` differs."""

    code = "userinfo_failed"


class UserNotLinked(OAuthError):
    """The claims mapper found no local user for this identity (and did not create one)."""

    code = "user_not_linked"
    status = 403


class LogoutTokenInvalid(OAuthError):
    """A back-channel logout token failed a check; ``reason`` names it."""

    code = "logout_token_invalid"
    status = 400

    def __init__(self, reason: TokenCheck | str, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message or f"logout token refused: {reason}")


class EndSessionRefused(OAuthError):
    """An RP-initiated logout URL was refused (redirect not allowed, or no end-session endpoint)."""

    code = "end_session_refused"
    status = 400
