"""OpenID providers: configuration, discovery, the provider object and the per-app registry.

``OAuthProviderConfig.discover(discovery_url, client_id, client_secret, redirect_uri,
**options)`` fetches and checks the discovery document and returns an
:class:`OAuthProvider`: the authorize URL (through Authlib's OAuth 2 client), the token
request (through the provider HTTP client, with the configured client authentication),
ID-token and logout-token validation (through our one JWT verification path,
:class:`~flask_authflow.jose.JwtVerifier`, on the provider's key cache, with the
client's one pinned algorithm), userinfo, and the RP-initiated logout URL.

The discovery document is kept for the ``max-age`` of its ``Cache-Control`` (between 1
minute and 1 day; 1 hour without one) and fetched again when a key fetch fails: the
:class:`ProviderRegistry` rebuilds a stale provider on its next use.

One module per concept (all private; the names are imported from here):

* ``_config``: :class:`OAuthProviderConfig` and its checks (``_names``: the provider slug);
* ``_metadata``: :class:`ProviderMetadata`, algorithm pinning, the client authentication
  and endpoints chosen; ``_discovery``: fetching the document and its lifetime;
* ``_exchange``: :class:`TokenSet`, the token exchange and the client's requests (DPoP,
  mutual TLS, userinfo); ``_authorize``: the authorize URL and PAR;
* ``_verify``: ID-token and logout-token checks; ``_end_session``: the end-session URL;
* ``_oidc``: :class:`OAuthProvider`, composed of the above; ``_registry``: :class:`ProviderRegistry`.
"""

from __future__ import annotations

from flask_authflow.federation._provider._config import PROVIDER_CONFIG_KEYS, OAuthProviderConfig
from flask_authflow.federation._provider._exchange import TokenSet, checked_token_type
from flask_authflow.federation._provider._metadata import ProviderMetadata
from flask_authflow.federation._provider._names import PROVIDER_NAME_RE, check_provider_name
from flask_authflow.federation._provider._oidc import OAuthProvider
from flask_authflow.federation._provider._registry import ProviderRegistry

__all__ = [
    "PROVIDER_CONFIG_KEYS",
    "PROVIDER_NAME_RE",
    "OAuthProvider",
    "OAuthProviderConfig",
    "ProviderMetadata",
    "ProviderRegistry",
    "TokenSet",
    "check_provider_name",
    "checked_token_type",
]
