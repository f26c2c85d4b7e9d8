"""The registry: :class:`ProviderRegistry`, the providers of one app by name (and tenant),
built on first use (single-flight), rebuilt when their discovery document is stale."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from flask_authflow._clock import Clock, SystemClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import OAuthError, UnknownProvider
from flask_authflow.federation._http import HttpClient
from flask_authflow.federation._oauth2 import OAuth2Provider, OAuth2ProviderConfig
from flask_authflow.federation._provider._config import OAuthProviderConfig
from flask_authflow.federation._provider._discovery import DISCOVERY_MIN_AGE
from flask_authflow.federation._provider._names import PROVIDER_NAME_RE, check_provider_name
from flask_authflow.federation._provider._oidc import OAuthProvider

__all__ = ["ProviderFactory", "ProviderRegistry"]

log = logging.getLogger("flask_authflow.federation")


ProviderFactory = Callable[[str], "OAuthProviderConfig | OAuthProvider"]


class ProviderRegistry:
    """The providers of one app, by name (and tenant), built once and cached.

    A definition is an :class:`OAuthProviderConfig`, a ready :class:`OAuthProvider`, or a
    factory called with the tenant (per-tenant federation). Building (discovery) happens
    on first use, once even when many requests ask at the same time (single-flight); a
    failed build is not cached, so the next request tries again. A provider whose
    discovery document is stale (its ``Cache-Control``, or a failed key fetch) is built
    again on its next use; while that fails, the one known keeps serving.

    ``redirect_rule`` is the application's check of ``next`` targets (the value, or
    ``None`` when refused): every provider's ``post_login_redirect`` must pass it.
    """

    def __init__(
        self,
        *,
        http: HttpClient | None = None,
        clock: Clock | None = None,
        on_key_fetch: Callable[[bool], None] | None = None,
        redirect_rule: Callable[[str], str | None] | None = None,
    ) -> None:
        #: Told of every JWKS fetch of the providers handed out (the app's counters).
        self.on_key_fetch = on_key_fetch
        self._definitions: dict[str, OAuthProviderConfig | OAuthProvider | ProviderFactory] = {}
        #: Plain OAuth 2.0 providers (no OpenID Connect), built at registration.
        self._plain: dict[str, OAuth2Provider] = {}
        self._built: dict[tuple[str, str | None], OAuthProvider] = {}
        self._building: dict[tuple[str, str | None], threading.Lock] = {}
        self._lock = threading.Lock()
        self.http = http
        self.clock = clock
        self.redirect_rule = redirect_rule

    def _check_redirects(self, name: str, config: OAuthProviderConfig) -> None:
        if self.redirect_rule is not None and self.redirect_rule(config.post_login_redirect) is None:
            raise ConfigurationError(
                f"provider {name!r}: post_login_redirect {config.post_login_redirect[:80]!r} is not a "
                "same-site path (it is checked like next: no //host, no backslash, no scheme)"
            )

    def register(
        self,
        name: str,
        definition: OAuthProviderConfig | OAuthProvider | ProviderFactory | OAuth2ProviderConfig,
    ) -> None:
        """Register (or replace) a provider under ``name`` (a slug)."""
        check_provider_name(name)
        if isinstance(definition, OAuth2ProviderConfig):
            if self.redirect_rule is not None and self.redirect_rule(definition.post_login_redirect) is None:
                raise ConfigurationError(f"provider {name!r}: post_login_redirect is not a same-site path")
            with self._lock:
                self._definitions.pop(name, None)
                self._plain[name] = OAuth2Provider(name, definition, http=self.http, clock=self.clock)
            return
        if not isinstance(definition, OAuthProviderConfig | OAuthProvider) and not callable(definition):
            raise ConfigurationError(
                f"provider {name!r}: expected an OAuthProviderConfig, an OAuthProvider or a factory"
            )
        if isinstance(definition, OAuthProviderConfig):
            self._check_redirects(name, definition)
        elif isinstance(definition, OAuthProvider):
            self._check_redirects(name, definition.config)
        with self._lock:
            self._definitions[name] = definition
            self._plain.pop(name, None)
            for key in [k for k in self._built if k[0] == name]:
                del self._built[key]

    def names(self) -> list[str]:
        with self._lock:
            return sorted([*self._definitions, *self._plain])

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._definitions or name in self._plain

    def get_any(self, name: str, tenant: str | None = None) -> OAuthProvider | OAuth2Provider:
        """The provider ``name`` of either kind: OpenID Connect or plain OAuth 2.0 (for login)."""
        with self._lock:
            plain = self._plain.get(name) if isinstance(name, str) else None
        return plain if plain is not None else self.get(name, tenant)

    def get(self, name: str, tenant: str | None = None) -> OAuthProvider:
        """The provider ``name`` (for ``tenant`` when its definition is a factory).

        :raises UnknownProvider: no such provider. :raises Discovery, ProviderUnreachable:
            building it failed (not cached).
        """
        if not isinstance(name, str) or not PROVIDER_NAME_RE.fullmatch(name):
            raise UnknownProvider(f"no provider named {name!r}")
        with self._lock:
            if name in self._plain:
                raise UnknownProvider(f"provider {name!r} is plain OAuth 2.0, not an OpenID provider")
            definition = self._definitions.get(name)
            if definition is None:
                raise UnknownProvider(f"no provider named {name!r}")
            key = (
                name,
                tenant if callable(definition) and not isinstance(definition, OAuthProvider) else None,
            )
            built = self._built.get(key)
            if built is not None and not built.is_stale(self._now()):
                return built
            building = self._building.setdefault(key, threading.Lock())
        with building:  # single-flight: one thread discovers, the others wait and reuse
            with self._lock:
                built = self._built.get(key)
            if built is not None and not built.is_stale(self._now()):
                return built
            provider = self._rebuild(name, definition, tenant, built)
            with self._lock:
                if self._definitions.get(name) is definition:
                    self._built[key] = provider
            return provider

    def _now(self) -> datetime:
        return (self.clock or SystemClock()).now()

    def _rebuild(
        self,
        name: str,
        definition: OAuthProviderConfig | OAuthProvider | ProviderFactory,
        tenant: str | None,
        previous: OAuthProvider | None,
    ) -> OAuthProvider:
        """A fresh build; when it fails and an earlier one exists, the earlier one (retried later)."""
        try:
            provider = self._build(name, definition, tenant, previous)
        except OAuthError as exc:
            if previous is None:
                raise
            log.warning(
                "discovery of provider %r failed again (%s); keeping the known one", name, exc.message
            )
            previous.fresh_until = self._now() + DISCOVERY_MIN_AGE
            return previous
        if self.on_key_fetch is not None:
            provider.keys.add_fetch_listener(self.on_key_fetch)
        return provider

    def _build(
        self,
        name: str,
        definition: OAuthProviderConfig | OAuthProvider | ProviderFactory,
        tenant: str | None,
        previous: OAuthProvider | None = None,
    ) -> OAuthProvider:
        if isinstance(definition, OAuthProvider):
            definition.fresh_until = None  # built by the application: it refreshes it
            return definition
        made: Any = definition if isinstance(definition, OAuthProviderConfig) else definition(tenant or "")
        if isinstance(made, OAuthProvider):
            return made
        if isinstance(made, Mapping):
            made = OAuthProviderConfig.from_mapping(made, what=f"provider {name!r}")
        if not isinstance(made, OAuthProviderConfig):
            raise ConfigurationError(f"the factory of provider {name!r} returned {type(made).__name__}")
        if tenant is not None and made.tenant is None:
            made = replace(made, tenant=tenant)
        self._check_redirects(name, made)
        return OAuthProvider.from_config(name, made, http=self.http, clock=self.clock, previous=previous)
