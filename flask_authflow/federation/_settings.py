"""The federation settings: the OpenID providers of the configuration and where their routes live."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flask_authflow._settings import Settings, setting

__all__ = ["FederationSettings"]


@dataclass(frozen=True, slots=True)
class FederationSettings(Settings):
    """``AUTHFLOW_OAUTH_PROVIDERS``, ``AUTHFLOW_OAUTH_URL_PREFIX`` and the tenant a federated
    login lands in unless its provider names one (``AUTHFLOW_DEFAULT_TENANT``)."""

    #: Provider name -> its settings (checked when the provider is built).
    providers: Mapping[str, Mapping[str, Any]] = field(metadata=setting("AUTHFLOW_OAUTH_PROVIDERS"))
    url_prefix: str = field(metadata=setting("AUTHFLOW_OAUTH_URL_PREFIX"))
    default_tenant: str = field(metadata=setting("AUTHFLOW_DEFAULT_TENANT"))
    #: Shared Signals transmitter name -> its settings (checked when the receiver is built).
    ssf_transmitters: Mapping[str, Mapping[str, Any]] = field(metadata=setting("AUTHFLOW_SSF_TRANSMITTERS"))
