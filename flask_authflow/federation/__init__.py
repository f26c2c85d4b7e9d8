"""Federated login as an OpenID Connect relying party (code flow + PKCE), back-channel
and RP-initiated logout. See :doc:`/federation`.

The errors and the store protocol load with the package; the provider, the service and
the HTTP client (which import ``requests`` and ``authlib``) load on first use of their
names, so an app without federation never imports them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flask_authflow.federation._app_federation import Federation
from flask_authflow.federation._errors import (
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
from flask_authflow.federation._links import FederationStore, IdentityLink

if TYPE_CHECKING:
    from flask_authflow.federation._dpop import DpopAuth, DpopKeyGone
    from flask_authflow.federation._http import HttpClient, RequestsHttpClient
    from flask_authflow.federation._login import (
        FederatedIdentity,
        FederatedLogin,
        FederationService,
        OAuthLoginOptions,
    )
    from flask_authflow.federation._mtls import CertificateChanged
    from flask_authflow.federation._par import PushedRequestRefused
    from flask_authflow.federation._provider import (
        OAuthProvider,
        OAuthProviderConfig,
        ProviderMetadata,
        ProviderRegistry,
    )
    from flask_authflow.federation._provider_tokens import (
        InsufficientScope,
        NoProviderToken,
        NoRefreshToken,
        ProviderToken,
        ProviderTokens,
        RefreshTokenExpired,
        TokenRefreshBusy,
    )

_LAZY = {
    "CertificateChanged": "._mtls",
    "DpopAuth": "._dpop",
    "DpopKeyGone": "._dpop",
    "PushedRequestRefused": "._par",
    "ProviderToken": "._provider_tokens",
    "HttpClient": "._http",
    "RequestsHttpClient": "._http",
    "FederatedIdentity": "._login",
    "FederatedLogin": "._login",
    "FederationService": "._login",
    "OAuthLoginOptions": "._login",
    "OAuthProvider": "._provider",
    "OAuthProviderConfig": "._provider",
    "ProviderMetadata": "._provider",
    "ProviderRegistry": "._provider",
    "InsufficientScope": "._provider_tokens",
    "NoProviderToken": "._provider_tokens",
    "NoRefreshToken": "._provider_tokens",
    "ProviderTokens": "._provider_tokens",
    "RefreshTokenExpired": "._provider_tokens",
    "TokenRefreshBusy": "._provider_tokens",
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
