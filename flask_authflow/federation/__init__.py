"""Federated login as an OpenID Connect relying party (code flow + PKCE), back-channel
and RP-initiated logout. See :doc:`/federation`.

The errors and the store protocol load with the package; the provider, the service and
the HTTP client (which import ``requests`` and ``authlib``) load on first use of their
names, so an app without federation never imports them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flask_authflow.federation.app_federation import Federation
from flask_authflow.federation.errors import (
    CsrfMismatch,
    Discovery,
    EndSessionRefused,
    Expired,
    IdTokenValidation,
    IssuerMismatch,
    LogoutTokenInvalid,
    OAuthError,
    ProviderUnreachable,
    TokenExchange,
    UnknownKid,
    UnknownProvider,
    UserInfo,
    UserNotLinked,
)
from flask_authflow.federation.links import FederationStore, IdentityLink

if TYPE_CHECKING:
    from flask_authflow.federation.dpop import DpopAuth, DpopKeyGone
    from flask_authflow.federation.http import HttpClient, RequestsHttpClient
    from flask_authflow.federation.login import (
        FederatedIdentity,
        FederatedLogin,
        FederationService,
        OAuthLoginOptions,
    )
    from flask_authflow.federation.mtls import CertificateChanged
    from flask_authflow.federation.par import PushedRequestRefused
    from flask_authflow.federation.provider import (
        OAuthProvider,
        OAuthProviderConfig,
        ProviderMetadata,
        ProviderRegistry,
    )
    from flask_authflow.federation.provider_tokens import (
        InsufficientScope,
        NoProviderToken,
        NoRefreshToken,
        ProviderToken,
        ProviderTokens,
        RefreshTokenExpired,
        TokenRefreshBusy,
    )

_LAZY = {
    "CertificateChanged": ".mtls",
    "DpopAuth": ".dpop",
    "DpopKeyGone": ".dpop",
    "PushedRequestRefused": ".par",
    "ProviderToken": ".provider_tokens",
    "HttpClient": ".http",
    "RequestsHttpClient": ".http",
    "FederatedIdentity": ".login",
    "FederatedLogin": ".login",
    "FederationService": ".login",
    "OAuthLoginOptions": ".login",
    "OAuthProvider": ".provider",
    "OAuthProviderConfig": ".provider",
    "ProviderMetadata": ".provider",
    "ProviderRegistry": ".provider",
    "InsufficientScope": ".provider_tokens",
    "NoProviderToken": ".provider_tokens",
    "NoRefreshToken": ".provider_tokens",
    "ProviderTokens": ".provider_tokens",
    "RefreshTokenExpired": ".provider_tokens",
    "TokenRefreshBusy": ".provider_tokens",
}

__all__ = [
    "CertificateChanged",
    "CsrfMismatch",
    "Discovery",
    "DpopAuth",
    "DpopKeyGone",
    "EndSessionRefused",
    "Expired",
    "FederatedIdentity",
    "FederatedLogin",
    "Federation",
    "FederationService",
    "FederationStore",
    "HttpClient",
    "IdTokenValidation",
    "IdentityLink",
    "InsufficientScope",
    "IssuerMismatch",
    "LogoutTokenInvalid",
    "NoProviderToken",
    "NoRefreshToken",
    "OAuthError",
    "OAuthLoginOptions",
    "OAuthProvider",
    "OAuthProviderConfig",
    "ProviderMetadata",
    "ProviderRegistry",
    "ProviderToken",
    "ProviderTokens",
    "ProviderUnreachable",
    "PushedRequestRefused",
    "RefreshTokenExpired",
    "RequestsHttpClient",
    "TokenExchange",
    "TokenRefreshBusy",
    "UnknownKid",
    "UnknownProvider",
    "UserInfo",
    "UserNotLinked",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
