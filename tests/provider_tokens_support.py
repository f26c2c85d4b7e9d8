"""Shared set-up of the provider-token tests: the test provider with a scriptable token
endpoint (for refreshes) and a revocation endpoint, and a keeper of tokens over a store."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from flask import Response, request

from flask_authflow._clock import Clock
from flask_authflow._core.ports import ProviderTokenStore
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProviderConfig, ProviderRegistry, TokenSet
from flask_authflow.federation._provider_tokens import ProviderTokens
from flask_authflow.mfa._sealing import FactorSealer
from flask_authflow.testing._provider import TestOpenIDProvider

PROVIDER = "test-op"
CLIENT_ID = "test-client"
CLIENT_SECRET = "test-secret"
REDIRECT_URI = f"http://localhost/auth/callback/{PROVIDER}"
SEALING_KEY = bytes(range(32))


@dataclass
class Scripted:
    """The provider's token endpoint for ``refresh_token`` grants, and ``/revoke``.

    Refresh tokens are single use (each refresh rotates them) unless ``rotate`` is off:
    spending one twice answers ``invalid_grant``, as a provider enforcing rotation does.
    ``answers`` are served first (``(status, content type, body)``), one per refresh.
    With ``passthrough`` the provider's own token endpoint answers the other refreshes.
    """

    valid: set[str] = field(default_factory=set)
    rotate: bool = True
    delay: float = 0.0
    expires_in: int | None = 300
    answers: list[tuple[int, str, bytes]] = field(default_factory=list)
    refreshes: list[str] = field(default_factory=list)
    revoked: list[tuple[str, str]] = field(default_factory=list)
    revoke_status: int = 200
    issued: int = 0
    passthrough: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, provider: TestOpenIDProvider) -> None:
        """Put the script in front of ``provider`` (before its first request)."""
        provider.app.before_request(self._before)
        provider.app.add_url_rule("/revoke", "revoke", self._revoke, methods=["POST"])
        provider.discovery_overrides["revocation_endpoint"] = f"{provider.issuer.rstrip('/')}/revoke"

    def new_refresh_token(self) -> str:
        with self.lock:
            self.issued += 1
            token = f"refresh-{self.issued}"
            self.valid.add(token)
        return token

    def _before(self) -> Response | None:
        if request.path != "/token" or request.form.get("grant_type") != "refresh_token":
            return None
        spent = request.form.get("refresh_token", "")
        with self.lock:
            self.refreshes.append(spent)
            scripted = self.answers.pop(0) if self.answers else None
        time.sleep(self.delay)
        if scripted is not None:
            status, content_type, body = scripted
            return Response(body, status=status, content_type=content_type)
        return None if self.passthrough else self._refreshed(spent)

    def _refreshed(self, spent: str) -> Response:
        with self.lock:
            if spent not in self.valid:
                return Response(json.dumps({"error": "invalid_grant"}), 400, content_type="application/json")
            if self.rotate:
                self.valid.discard(spent)
            self.issued += 1
            answer: dict[str, Any] = {"access_token": f"access-{self.issued}", "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        if self.rotate:
            answer["refresh_token"] = self.new_refresh_token()
        return Response(json.dumps(answer), 200, content_type="application/json")

    def _revoke(self) -> Response:
        with self.lock:
            self.revoked.append((request.form.get("token_type_hint", ""), request.form.get("token", "")))
        return Response("", status=self.revoke_status)


def provider_config(provider: TestOpenIDProvider, **options: Any) -> OAuthProviderConfig:
    settings: dict[str, Any] = {"store_tokens": True, "scopes": ("openid", "email", "offline_access")}
    settings.update(options)
    return OAuthProviderConfig(provider.discovery_url, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, **settings)


@dataclass
class Keeper:
    """A :class:`ProviderTokens` over ``store``, with the audit rows it wrote."""

    tokens: ProviderTokens
    audit: list[tuple[str, str, str | None]]

    def keep(
        self, user_id: str, *, refresh: str | None, expires_in: int | None = 300, scope: str | None = None
    ) -> None:
        provider = self.tokens.registry.get(PROVIDER, "default")
        answer = TokenSet(
            id_token="",
            access_token="access-0",
            refresh_token=refresh,
            expires_in=expires_in,
            scope=scope,
        )
        assert self.tokens.keep("default", user_id, provider, answer, provider.config.scopes)

    def get(self, user_id: str, **options: Any) -> str:
        return self.tokens.access_token("default", user_id, PROVIDER, **options)


def keeper(
    store: ProviderTokenStore,
    clock: Clock,
    http: RequestsHttpClient,
    config: OAuthProviderConfig,
) -> Keeper:
    registry = ProviderRegistry(http=http, clock=clock)
    registry.register(PROVIDER, config)
    audit: list[tuple[str, str, str | None]] = []

    def write(event: str, status: str, tenant: str, user_id: str, provider: str, reason: str | None) -> None:
        assert (tenant, provider) == ("default", PROVIDER)
        audit.append((event, status, reason))

    sealer = FactorSealer.from_key(SEALING_KEY)
    return Keeper(ProviderTokens(store, registry, sealer, clock, write), audit)
