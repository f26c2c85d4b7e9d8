"""Federated login as an OpenID Connect relying party (code flow + PKCE), back-channel
and RP-initiated logout. See :doc:`/federation`.

The errors and the store protocol load with the package; the provider, the service and
the HTTP client (which import ``requests`` and ``authlib``) load on first use of their
names, so an app without federation never imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask_authflow._core.lazy import lazy_names

if TYPE_CHECKING:
    from flask_authflow.federation._app_federation import Federation
    from flask_authflow.federation._errors import OAuthError
    from flask_authflow.federation._http import RequestsHttpClient
    from flask_authflow.federation._login import FederatedIdentity
    from flask_authflow.federation._oauth2 import OAuth2ProviderConfig
    from flask_authflow.federation._presets import preset
    from flask_authflow.federation._provider import OAuthProviderConfig
    from flask_authflow.federation._provider_tokens import ProviderToken

#: Each name, and the private module it is loaded from on first use.
_LAZY = {
    "FederatedIdentity": "flask_authflow.federation._login",
    "Federation": "flask_authflow.federation._app_federation",
    "OAuth2ProviderConfig": "flask_authflow.federation._oauth2",
    "OAuthError": "flask_authflow.federation._errors",
    "OAuthProviderConfig": "flask_authflow.federation._provider",
    "ProviderToken": "flask_authflow.federation._provider_tokens",
    "RequestsHttpClient": "flask_authflow.federation._http",
    "preset": "flask_authflow.federation._presets",
}

__all__ = [
    "FederatedIdentity",
    "Federation",
    "OAuth2ProviderConfig",
    "OAuthError",
    "OAuthProviderConfig",
    "ProviderToken",
    "RequestsHttpClient",
    "preset",
]


__getattr__ = lazy_names(__name__, _LAZY)
