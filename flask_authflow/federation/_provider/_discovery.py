"""Discovery: fetch the provider's discovery document, check it, and keep it for its
``Cache-Control`` ``max-age`` (between 1 minute and 1 day; 1 hour without one)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from flask_authflow._clock import Clock
from flask_authflow.federation._errors import Discovery, ProviderUnreachable
from flask_authflow.federation._http import HttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache, cache_max_age
from flask_authflow.federation._provider._metadata import ProviderMetadata

if TYPE_CHECKING:
    from flask_authflow.federation._provider._config import OAuthProviderConfig

__all__ = ["DISCOVERY_DEFAULT_AGE", "DISCOVERY_MAX_AGE", "DISCOVERY_MIN_AGE", "Discovered", "discover"]

#: How long a discovery document is kept: its ``max-age`` within these bounds, else the default.
DISCOVERY_MIN_AGE: Final = timedelta(minutes=1)
DISCOVERY_MAX_AGE: Final = timedelta(days=1)
DISCOVERY_DEFAULT_AGE: Final = timedelta(hours=1)


@dataclass(frozen=True)
class Discovered:
    """A checked discovery document, the key cache of its ``jwks_uri`` and when to fetch
    the document again."""

    metadata: ProviderMetadata
    keys: ProviderKeyCache
    fresh_until: datetime


def discover(
    config: OAuthProviderConfig,
    client: HttpClient,
    clock: Clock,
    previous_keys: ProviderKeyCache | None = None,
) -> Discovered:
    """Fetch and check ``config``'s discovery document and make its key cache.

    ``previous_keys`` (the key cache of the provider being replaced) is kept when the
    ``jwks_uri`` did not change, so the keys known stay known.

    :raises Discovery: the document is refused (see :meth:`ProviderMetadata.from_document`).
    :raises ProviderUnreachable: it could not be fetched.
    """
    started = clock.now()
    response = client.get(config.discovery_url, headers={"Accept": "application/json"})
    if response.status != 200:
        raise Discovery(f"the discovery document answered HTTP {response.status}")
    try:
        document = response.json_object()
    except ProviderUnreachable as exc:
        raise Discovery(f"the discovery document is unusable: {exc.message}") from None
    metadata = ProviderMetadata.from_document(document, config.expected_issuers)
    if previous_keys is not None and previous_keys.jwks_uri == metadata.jwks_uri:
        keys = previous_keys
    else:
        keys = ProviderKeyCache(
            metadata.jwks_uri,
            client,
            clock=clock,
            debounce=config.jwks_debounce,
            require_alg=config.jwks_require_alg,
        )
    age = cache_max_age(response.headers.get("cache-control"))
    lifetime = DISCOVERY_DEFAULT_AGE if age is None else min(max(age, DISCOVERY_MIN_AGE), DISCOVERY_MAX_AGE)
    return Discovered(metadata, keys, started + lifetime)
