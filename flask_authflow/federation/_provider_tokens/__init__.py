"""The provider's tokens, kept to call its APIs: :class:`ProviderTokens`.

With ``store_tokens`` on a provider, the callback keeps the access token, the refresh
token, their expiry, the granted scopes and the token type per (tenant, user, provider),
sealed with the factor-secret key (the envelope of
:class:`~flask_authflow.mfa._sealing.FactorSealer`, bound to the row's key, so a sealed
value copied onto another row does not open).

:meth:`ProviderTokens.access_token` answers a valid access token. One that expires
within :data:`EXPIRY_SKEW` is refreshed first, single-flight: in this process one thread
per (tenant, user, provider) refreshes while the others wait for its result, and across
processes the store's refresh claim (one conditional write) lets exactly one process
spend the refresh token, so a rotated refresh token is never spent twice. A rotated
refresh token replaces the stored one; without one in the answer the old one stays.

Unlink, user deletion and back-channel logout call :meth:`ProviderTokens.forget`: the
tokens are revoked at the provider (RFC 7009, when discovery names a
``revocation_endpoint``) and the row is deleted, even when the revocation fails.
Every store, refresh, revocation and failure writes an audit row; no token is ever logged.
"""

from __future__ import annotations

from flask_authflow.federation._provider_tokens._errors import (
    InsufficientScope,
    NoProviderToken,
    NoRefreshToken,
    RefreshTokenExpired,
    TokenRefreshBusy,
)
from flask_authflow.federation._provider_tokens._sealed import Sealer
from flask_authflow.federation._provider_tokens._service import (
    CLAIM_TTL,
    EXPIRY_SKEW,
    ProviderTokens,
    TokenAudit,
)
from flask_authflow.federation._provider_tokens._token import ProviderToken

__all__ = [
    "CLAIM_TTL",
    "EXPIRY_SKEW",
    "InsufficientScope",
    "NoProviderToken",
    "NoRefreshToken",
    "ProviderToken",
    "ProviderTokens",
    "RefreshTokenExpired",
    "Sealer",
    "TokenAudit",
    "TokenRefreshBusy",
]
