"""The token exchange and the client's requests: :class:`ProviderClient`.

Every call to the provider's token, pushed authorization, revocation and userinfo
endpoints goes through :meth:`ProviderClient.client_request` or
:meth:`ProviderClient.resource_get`: authenticated as the client with its
``token_endpoint_auth_method``, with a DPoP proof (and the nonce dance) when the tokens are
DPoP-bound, with the client certificate under mutual TLS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask_authflow._clock import Clock
from flask_authflow.federation._client_auth import (
    ClientSecretJwt,
    PrivateKeyJwt,
    client_credentials,
    load_client_key,
)
from flask_authflow.federation._dpop import DpopSigner, wants_nonce
from flask_authflow.federation._errors import ProviderUnreachable, TokenExchange, UserInfo
from flask_authflow.federation._http import HttpClient, HttpResponse
from flask_authflow.federation._mtls import ClientCertificate
from flask_authflow.federation._provider._metadata import ProviderMetadata, client_endpoints

if TYPE_CHECKING:
    from flask_authflow.federation._provider._config import OAuthProviderConfig

__all__ = ["ProviderClient", "TokenSet", "checked_token_type"]


@dataclass(frozen=True)
class TokenSet:
    """What the token endpoint answered (tokens are kept out of ``repr``)."""

    id_token: str = field(repr=False)
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    token_type: str = "Bearer"  # noqa: S105 - the OAuth token type, not a secret
    expires_in: int | None = None
    #: The ``scope`` the token endpoint answered (``None``: the scopes requested were granted).
    scope: str | None = None
    #: The ``kid`` of the DPoP key the tokens are bound to (``token_type`` DPoP), else ``None``.
    dpop_kid: str | None = None
    #: The thumbprint (``x5t#S256``) of the client certificate the tokens were obtained with
    #: (mutual TLS: the provider binds them to it), else ``None``.
    x5t: str | None = None


def _token_set(token: Mapping[str, Any], dpop_kid: str | None = None, x5t: str | None = None) -> TokenSet:
    """The checked parts of a successful token answer (a DPoP-bound one when ``dpop_kid``)."""
    id_token = token.get("id_token")
    access_token = token.get("access_token")
    if not isinstance(id_token, str) or not id_token:
        raise TokenExchange("the token endpoint answered without an id_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenExchange("the token endpoint answered without an access_token")
    token_type = checked_token_type(token.get("token_type", "Bearer"), dpop_kid is not None)
    refresh = token.get("refresh_token")
    expires_in = token.get("expires_in")
    scope = token.get("scope")
    return TokenSet(
        id_token=id_token,
        access_token=access_token,
        refresh_token=refresh if isinstance(refresh, str) else None,
        token_type=token_type,
        expires_in=expires_in if isinstance(expires_in, int) and not isinstance(expires_in, bool) else None,
        scope=scope if isinstance(scope, str) else None,
        dpop_kid=dpop_kid,
        x5t=x5t,
    )


def checked_token_type(token_type: Any, dpop: bool) -> str:
    """``Bearer``, or ``DPoP`` when the request carried a proof (a DPoP client refuses an
    unbound Bearer token: the provider did not bind it, fail closed).

    :raises TokenExchange: another type, or a Bearer token where DPoP was asked for.
    """
    expected = "dpop" if dpop else "bearer"
    if not isinstance(token_type, str) or token_type.lower() != expected:
        raise TokenExchange(
            f"unsupported token_type {str(token_type)[:32]!r}"
            + ("; this client asked for DPoP-bound tokens" if dpop else "")
        )
    return "DPoP" if dpop else token_type


class ProviderClient:
    """One client's calls to its provider (the provider object composes it)."""

    def __init__(
        self,
        config: OAuthProviderConfig,
        metadata: ProviderMetadata,
        *,
        http: HttpClient,
        clock: Clock,
        token_auth_method: str,
        dpop: DpopSigner | None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.http = http
        self.clock = clock
        self.client_id = config.client_id
        self.token_auth_method = token_auth_method
        self.dpop = dpop
        self.tls: ClientCertificate | None = config.client_tls
        self._endpoints = client_endpoints(metadata, self.tls)
        #: The client assertion maker (``None``: no assertion) and its algorithm.
        self._assertion, self.assertion_alg = self._client_assertion()

    def endpoint(self, name: str) -> str | None:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.endpoint`."""
        return self._endpoints[name]

    def _client_assertion(self) -> tuple[Callable[[], str] | None, str | None]:
        """The client assertion maker and its algorithm (``aud``: the issuer identifier
        under FAPI 2.0, else the token endpoint)."""
        method = self.token_auth_method
        if method == "client_secret_jwt":
            secret_jwt = ClientSecretJwt(
                self.client_id, self.metadata.token_endpoint, self.config.client_secret, clock=self.clock
            )
            return secret_jwt.assertion, "HS256"
        if method != "private_key_jwt":
            return None, None
        audience = self.metadata.issuer if self.config.fapi2 else self.metadata.token_endpoint
        if self.config.client_key_store is not None:
            auth = PrivateKeyJwt.from_store(
                self.client_id, audience, self.config.client_key_store, clock=self.clock
            )
        else:
            key, algorithm = load_client_key(self.config.client_private_key or "")
            auth = PrivateKeyJwt(
                self.client_id, audience, key, algorithm, kid=self.config.client_key_id, clock=self.clock
            )
        return auth.assertion, auth.algorithm

    def exchange_code(self, code: str, code_verifier: str, *, dpop_kid: str | None = None) -> TokenSet:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.exchange_code`."""
        response = self.client_request(
            self.endpoint("token_endpoint") or self.metadata.token_endpoint,
            {
                "grant_type": "authorization_code",
                "code": code,
                "code_verifier": code_verifier,
                "redirect_uri": self.config.redirect_uri,
            },
            dpop_kid=dpop_kid,
        )
        if response.status >= 500:
            raise ProviderUnreachable(f"the token endpoint answered HTTP {response.status}")
        token = response.json_object()
        if response.status != 200:
            error = token.get("error")
            if isinstance(error, str) and error and error.isascii() and len(error) <= 64:
                raise TokenExchange(f"the token endpoint answered {error}", error=error)
            raise TokenExchange(f"the token endpoint answered HTTP {response.status}")
        return _token_set(token, dpop_kid, self.tls.thumbprint if self.tls is not None else None)

    def client_request(
        self, url: str, fields: Mapping[str, str], *, dpop_kid: str | None = None
    ) -> HttpResponse:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.client_request`."""
        dpop = self.dpop if dpop_kid is not None else None
        for attempt in (1, 2):
            factory = self.config.client_secret_factory
            secret = factory() if factory is not None else self.config.client_secret
            headers, form = client_credentials(
                self.token_auth_method, self.client_id, secret, assertion=self._assertion
            )
            form.update(fields)
            headers["Accept"] = "application/json"
            if dpop is not None and dpop_kid is not None:
                headers["DPoP"] = dpop.proof(dpop_kid, "POST", url)
            if self.tls is None:
                response = self.http.post_form(url, form, headers=headers)
            else:  # passed only when configured: an application's own HttpClient may predate it
                response = self.http.post_form(url, form, headers=headers, tls=self.tls)
            if dpop is None or dpop.nonces.remember(url, response.headers) is None or attempt == 2:
                return response
            if not wants_nonce(response.status, response.headers, _error_body(response)):
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    def resource_get(self, url: str, access_token: str, *, dpop_kid: str | None = None) -> HttpResponse:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.resource_get`."""
        if dpop_kid is None or self.dpop is None:
            headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
            if self.tls is None:
                return self.http.get(url, headers=headers)
            return self.http.get(url, headers=headers, tls=self.tls)  # the token is bound to it
        for attempt in (1, 2):
            headers = {
                "Authorization": f"DPoP {access_token}",
                "DPoP": self.dpop.proof(dpop_kid, "GET", url, access_token=access_token),
                "Accept": "application/json",
            }
            response = self.http.get(url, headers=headers)
            fresh = self.dpop.nonces.remember(url, response.headers)
            if fresh is None or attempt == 2 or not wants_nonce(response.status, response.headers, None):
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    def fetch_userinfo(
        self, access_token: str, subject: str, *, dpop_kid: str | None = None
    ) -> dict[str, Any]:
        """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.fetch_userinfo`."""
        endpoint = self.endpoint("userinfo_endpoint")
        if endpoint is None:
            raise UserInfo("the provider has no userinfo_endpoint")
        response = self.resource_get(endpoint, access_token, dpop_kid=dpop_kid)
        if response.status == 401:
            raise UserInfo("userinfo answered 401: the scopes may lack what userinfo needs (profile, email)")
        if response.status != 200:
            raise UserInfo(f"userinfo answered HTTP {response.status}")
        try:
            claims = response.json_object()
        except ProviderUnreachable:
            raise UserInfo(
                "userinfo did not answer a JSON object (signed userinfo is not supported)"
            ) from None
        if claims.get("sub") != subject:
            raise UserInfo("userinfo describes another subject than the ID token")
        return claims


def _error_body(response: HttpResponse) -> dict[str, Any] | None:
    """The JSON error object of a 4xx answer, or ``None``."""
    if response.status < 400 or response.status >= 500:
        return None
    try:
        return response.json_object()
    except ProviderUnreachable:
        return None
