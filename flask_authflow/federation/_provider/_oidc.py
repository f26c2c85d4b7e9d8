"""The provider object: :class:`OAuthProvider`, one OpenID provider as a relying party sees it.

It is composed of its parts, each in its own module: the checked configuration
(:mod:`._config`), the discovery document and what the client chooses from it
(:mod:`._metadata`, fetched by :mod:`._discovery`), the client's requests and the token
exchange (:class:`~._exchange.ProviderClient`), the authorization request
(:mod:`._authorize`), the token checks (:class:`~._verify.TokenChecks`) and the end-session
URL (:mod:`._end_session`). Its methods are the public face of those parts and delegate to
them: the callers (the login flows, provider tokens, Shared Signals, applications) hold one
provider object, as before the cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flask_authflow._clock import Clock, SystemClock
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._dpop import DpopNonces, DpopSigner, client_signing_key
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._fapi import check_fapi2_provider
from flask_authflow.federation._http import HttpClient, HttpResponse, RequestsHttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.federation._mtls import ClientCertificate
from flask_authflow.federation._provider._authorize import authorization_url
from flask_authflow.federation._provider._discovery import DISCOVERY_MIN_AGE, discover
from flask_authflow.federation._provider._end_session import end_session_url
from flask_authflow.federation._provider._exchange import ProviderClient, TokenSet
from flask_authflow.federation._provider._metadata import (
    ProviderMetadata,
    pinned_algorithm,
    token_auth_method,
    uses_par,
)
from flask_authflow.federation._provider._names import check_provider_name
from flask_authflow.federation._provider._verify import TokenChecks
from flask_authflow.federation._tokens import LogoutClaims
from flask_authflow.jose import VerifiedClaims

if TYPE_CHECKING:
    from flask_authflow.federation._provider._config import OAuthProviderConfig

__all__ = ["OAuthProvider"]


def _dpop_signer(config: OAuthProviderConfig, metadata: ProviderMetadata, clock: Clock) -> DpopSigner | None:
    """The DPoP proof signer of a client with ``dpop`` (``None``: Bearer tokens).

    :raises Discovery: the provider does not accept the key's algorithm."""
    if not config.dpop or config.dpop_key_store is None:
        return None
    signer = DpopSigner(config.dpop_key_store, clock, DpopNonces())
    signer.thumbprint(signer.current_kid())  # refuses a key that cannot sign proofs
    dpop_alg = client_signing_key(config.dpop_key_store.load_all().current)[1]
    if metadata.dpop_algorithms and dpop_alg not in metadata.dpop_algorithms:
        raise Discovery(
            f"the provider accepts DPoP proofs signed with {list(metadata.dpop_algorithms)!r} "
            f"only; the DPoP key signs {dpop_alg}"
        )
    return signer


class OAuthProvider:
    """One OpenID provider as a relying party sees it: the authorize URL, the token
    request (with the configured client authentication), ID-token and logout-token
    validation (with the client's one pinned algorithm), userinfo and the RP-initiated
    logout URL.

    Thread-safe: the only mutable parts are the key cache, which is, and the discovery
    freshness, read by the registry.
    """

    def __init__(
        self,
        name: str,
        config: OAuthProviderConfig,
        metadata: ProviderMetadata,
        *,
        http: HttpClient,
        keys: ProviderKeyCache,
        clock: Clock,
        fresh_until: datetime | None = None,
    ) -> None:
        self.name = check_provider_name(name)
        self.config = config
        self.metadata = metadata
        self.http = http
        self.keys = keys
        self.clock = clock
        self.token_auth_method: str = token_auth_method(config, metadata)
        #: The one algorithm ID tokens and logout tokens of this client may use.
        self.id_token_alg: str = pinned_algorithm(config, metadata)
        if config.fetch_userinfo and metadata.userinfo_endpoint is None:
            raise Discovery("fetch_userinfo is set, but the discovery document has no userinfo_endpoint")
        #: Whether a login fetches userinfo (see ``fetch_userinfo``).
        self.uses_userinfo: bool = (
            metadata.userinfo_endpoint is not None and set(config.scopes) != {"openid"}
            if config.fetch_userinfo is None
            else config.fetch_userinfo
        )
        #: When the discovery document should be fetched again (``None``: never).
        self.fresh_until = fresh_until
        #: Whether logins push their authorization request first (RFC 9126; see ``use_par``).
        self.uses_par: bool = uses_par(config, metadata)
        #: The DPoP proof signer (``None``: tokens are Bearer tokens).
        self.dpop: DpopSigner | None = _dpop_signer(config, metadata, clock)
        #: The client certificate presented on the client's calls (mutual TLS), else ``None``.
        self.tls: ClientCertificate | None = config.client_tls
        self._client = ProviderClient(
            config, metadata, http=http, clock=clock, token_auth_method=self.token_auth_method, dpop=self.dpop
        )
        self._checks = TokenChecks(config, metadata.issuer, keys, clock, self.id_token_alg)
        if config.fapi2:
            alg = self._client.assertion_alg
            check_fapi2_provider(metadata, id_token_alg=self.id_token_alg, client_alg=alg)

    @classmethod
    def from_config(
        cls,
        name: str,
        config: OAuthProviderConfig,
        *,
        http: HttpClient | None = None,
        clock: Clock | None = None,
        previous: OAuthProvider | None = None,
    ) -> OAuthProvider:
        """Fetch the discovery document, check it and build the key cache (see ``discover``).

        ``previous`` (the provider this one replaces) lends its key cache when the
        ``jwks_uri`` did not change, so the keys known stay known.
        """
        client = http if http is not None else RequestsHttpClient()
        used_clock = clock if clock is not None else SystemClock()
        found = discover(config, client, used_clock, previous.keys if previous is not None else None)
        if previous is not None and found.keys is previous.keys:
            found.keys.remove_fetch_listener(previous._key_fetch_ended)  # this provider replaces it
        provider = cls(
            name,
            config,
            found.metadata,
            http=client,
            keys=found.keys,
            clock=used_clock,
            fresh_until=found.fresh_until,
        )
        found.keys.add_fetch_listener(provider._key_fetch_ended)
        return provider

    def _key_fetch_ended(self, ok: bool) -> None:
        """A failed key fetch may mean the provider moved its ``jwks_uri``: discover again soon."""
        if not ok:
            retry = self.clock.now() + DISCOVERY_MIN_AGE
            if self.fresh_until is None or retry < self.fresh_until:
                self.fresh_until = retry

    def is_stale(self, now: datetime) -> bool:
        """Whether the discovery document should be fetched again."""
        return self.fresh_until is not None and now >= self.fresh_until

    @property
    def issuer(self) -> str:
        return self.metadata.issuer

    @property
    def client_id(self) -> str:
        return self.config.client_id

    def __repr__(self) -> str:
        return f"<OAuthProvider {self.name!r} issuer={self.issuer!r}>"

    def endpoint(self, name: str) -> str | None:
        """Where this client calls the provider's ``name`` (``token_endpoint``,
        ``pushed_authorization_request_endpoint``, ``revocation_endpoint``,
        ``userinfo_endpoint``): the mTLS alias with a client certificate, else the
        discovery document's endpoint; ``None`` when the provider has none."""
        return self._client.endpoint(name)

    # --- the code flow (._authorize, ._exchange) ------------------------------------------

    def authorization_url(
        self, ceremony: Ceremony, *, scopes: Iterable[str] | None = None, **extra: str
    ) -> str:
        """The authorize URL of ``ceremony``: code flow, PKCE S256, state and nonce (and
        ``dpop_jkt`` with DPoP); with PAR, the request is pushed first and the URL carries
        only ``client_id`` and ``request_uri``.

        :raises PushedRequestRefused, ProviderUnreachable: the push failed.
        """
        return authorization_url(self._client, ceremony, push=self.uses_par, scopes=scopes, extra=extra)

    def exchange_code(self, code: str, code_verifier: str, *, dpop_kid: str | None = None) -> TokenSet:
        """The token request, authenticated with ``token_auth_method``.

        :raises TokenExchange: an error answer (``error`` holds its code, e.g.
            ``invalid_client``) or an answer without an ID token or access token, or
            with a ``token_type`` other than Bearer.
        :raises ProviderUnreachable: the token endpoint did not answer usably (transport
            failure, redirect, oversize, 5xx, not a JSON object).

        ``dpop_kid`` (the ceremony's): send a DPoP proof signed by that key; the answer
        must then be a DPoP-bound token.
        """
        return self._client.exchange_code(code, code_verifier, dpop_kid=dpop_kid)

    def client_request(
        self, url: str, fields: Mapping[str, str], *, dpop_kid: str | None = None
    ) -> HttpResponse:
        """POST ``fields`` to one of the provider's endpoints (the token endpoint, the
        revocation endpoint), authenticated as this client with ``token_auth_method``,
        through the provider HTTP client. Non-2xx answers are returned.

        ``dpop_kid``: with a DPoP proof signed by that key; an answer asking for a DPoP nonce
        (``use_dpop_nonce``) is retried once with the nonce it gave (and a fresh assertion).
        With a client certificate (``tls``), it is presented in the handshake (mutual TLS);
        ``url`` is then the endpoint's mTLS alias (see :meth:`endpoint`).

        :raises ProviderUnreachable: the endpoint did not answer usably.
        """
        return self._client.client_request(url, fields, dpop_kid=dpop_kid)

    def resource_get(self, url: str, access_token: str, *, dpop_kid: str | None = None) -> HttpResponse:
        """GET one of the provider's resources (userinfo) with the access token: Bearer (with
        the client certificate it is bound to, under mutual TLS), or DPoP with a proof
        (``ath`` included) and the nonce dance of the resource server."""
        return self._client.resource_get(url, access_token, dpop_kid=dpop_kid)

    def fetch_userinfo(
        self, access_token: str, subject: str, *, dpop_kid: str | None = None
    ) -> dict[str, Any]:
        """The userinfo claims; their ``sub`` must equal the ID token's.

        :raises UserInfo: a refusal (401: the scopes lack what userinfo needs), a
            non-JSON answer, or another ``sub``.
        """
        return self._client.fetch_userinfo(access_token, subject, dpop_kid=dpop_kid)

    # --- token checks (._verify) ----------------------------------------------------------

    def validate_id_token(self, id_token: str, nonce: str, access_token: str | None = None) -> VerifiedClaims:
        """The six ID-token checks plus algorithm pinning, ``crit``, ``sub`` and, when the
        token carries one and ``access_token`` is given, ``at_hash``.

        :raises IdTokenValidation: (or :class:`UnknownKid`) naming the failed check.
        """
        return self._checks.validate_id_token(id_token, nonce, access_token)

    def verify_logout_jwt(self, token: Any) -> LogoutClaims:
        """Every check of a back-channel logout token (size first, then signature, ``iss``,
        ``aud``, ``azp``, ``exp``, ``iat``, ``events``, ``sub``/``sid``, no ``nonce``, ``jti``).

        The ``jti`` replay check needs the shared store: see
        :meth:`~flask_authflow.federation._login.FederationService.backchannel_logout`.

        :raises LogoutTokenInvalid: naming the failed check.
        """
        return self._checks.verify_logout_jwt(token)

    # --- RP-initiated logout (._end_session) ----------------------------------------------

    def build_end_session_url(
        self,
        id_token_hint: str,
        post_logout_redirect_uri: str | None = None,
        state: str | None = None,
        *,
        also_allowed: tuple[str, ...] = (),
    ) -> str:
        """The provider's end-session URL for RP-initiated logout.

        :param also_allowed: redirect URIs allowed besides the configured ones (the
            app's own logout-return URL, which the web layer derives).
        :raises EndSessionRefused: the provider has no end-session endpoint, or
            ``post_logout_redirect_uri`` is not on ``allowed_post_logout_redirect_uris``
            (an empty list allows none).
        """
        return end_session_url(
            self.metadata.end_session_endpoint,
            self.client_id,
            id_token_hint,
            post_logout_redirect_uri,
            state,
            (*self.config.allowed_post_logout_redirect_uris, *also_allowed),
        )
