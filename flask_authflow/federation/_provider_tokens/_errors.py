"""The refusals of :class:`~flask_authflow.federation._provider_tokens._service.ProviderTokens`."""

from __future__ import annotations

from collections.abc import Iterable

from flask_authflow.federation._errors import OAuthError

__all__ = [
    "InsufficientScope",
    "NoProviderToken",
    "NoRefreshToken",
    "RefreshTokenExpired",
    "TokenRefreshBusy",
]


class NoProviderToken(OAuthError):
    """No token of this provider is kept for you: sign in with the provider again."""

    code = "no_provider_token"
    status = 404


class NoRefreshToken(OAuthError):
    """The provider's access token expired and no refresh token was kept: sign in with the provider again."""

    code = "no_refresh_token"
    status = 401


class RefreshTokenExpired(OAuthError):
    """The provider refused the refresh token (expired or revoked): sign in with the provider again."""

    code = "refresh_token_expired"
    status = 401


class InsufficientScope(OAuthError):
    """The provider did not grant the scopes asked for: sign in with the provider again, granting them."""

    code = "insufficient_scope"
    status = 403

    def __init__(self, missing: Iterable[str]) -> None:
        #: the scopes asked for and not granted.
        self.missing = tuple(sorted(missing))
        super().__init__(f"the provider did not grant the scope(s) {' '.join(self.missing)[:200]}")


class TokenRefreshBusy(OAuthError):
    """Another process is refreshing this token and did not finish in time: try again."""

    code = "token_refresh_busy"
    status = 503
