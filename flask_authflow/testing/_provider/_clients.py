"""The clients (relying parties) the provider knows, registered by the test."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flask_authflow.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class RegisteredClient:
    """A client (relying party) the provider knows."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    post_logout_redirect_uris: tuple[str, ...] = ()
    backchannel_logout_uri: str | None = None
    #: The one method the token endpoint accepts from this client (``None``: basic or post).
    token_endpoint_auth_method: str | None = None
    #: The public keys of ``private_key_jwt`` assertions (JWKs).
    jwks: tuple[Mapping[str, Any], ...] = ()
    #: Authorize refuses requests that were not pushed first (RFC 9126).
    require_par: bool = False
    #: The token endpoint refuses requests without a DPoP proof (RFC 9449).
    dpop_bound: bool = False
    #: FAPI 2.0: client assertions must name the issuer as ``aud``, and nothing else.
    fapi2: bool = False


def checked_registration(
    client_id: str, client_secret: str, redirect_uris: Iterable[str], jwks: Iterable[Mapping[str, Any]]
) -> tuple[tuple[str, ...], tuple[Mapping[str, Any], ...]]:
    """The redirect URIs and keys of a registration, refused when the client could never
    authenticate or has no redirect URI (``redirect_uris`` given as one string is refused too)."""
    keys = tuple(dict(k) for k in jwks)
    if not client_id or (not client_secret and not keys):
        raise ConfigurationError("a client needs a client_id and a client_secret (or jwks)")
    uris = tuple(redirect_uris)
    if not uris or isinstance(redirect_uris, str):
        raise ConfigurationError("redirect_uris must be a non-empty list of URLs")
    return uris, keys


class ClientRegistry:
    """The registered clients by id; guarded by the provider's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._clients: dict[str, RegisteredClient] = {}

    def register(self, client: RegisteredClient) -> RegisteredClient:
        """Register ``client``, replacing one of the same id."""
        with self._lock:
            self._clients[client.client_id] = client
        return client

    def get(self, client_id: str) -> RegisteredClient | None:
        with self._lock:
            return self._clients.get(client_id)

    def named(self, client_id: str | None) -> RegisteredClient:
        """The client ``client_id``, or the only one when ``client_id`` is ``None``."""
        with self._lock:
            if client_id is None:
                if len(self._clients) != 1:
                    raise ConfigurationError("name the client_id: the provider has several (or no) clients")
                return next(iter(self._clients.values()))
            client = self._clients.get(client_id)
        if client is None:
            raise ConfigurationError(f"unknown client {client_id!r}")
        return client

    def auth_methods(self) -> list[str]:
        """The client authentication methods: ``private_key_jwt`` once a client has ``jwks``."""
        with self._lock:
            keyed = any(client.jwks for client in self._clients.values())
        return ["client_secret_basic", "client_secret_post", *(["private_key_jwt"] if keyed else [])]
