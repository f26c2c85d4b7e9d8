"""The provider configuration: :class:`OAuthProviderConfig` and its checks.

Everything here is checked when the config is made (``init_app`` or ``register_provider``),
before any network call; what depends on the provider's discovery document is checked at
discovery (:mod:`._metadata`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from flask_authflow._clock import Clock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._client_auth import TOKEN_AUTH_METHODS
from flask_authflow.federation._dpop import ClientKeyStore
from flask_authflow.federation._fapi import check_sender_constraint
from flask_authflow.federation._http import HttpClient, check_provider_url
from flask_authflow.federation._mtls import MTLS_AUTH_METHODS, ClientCertificate
from flask_authflow.federation._provider._names import TENANT_PLACEHOLDER, check_provider_name
from flask_authflow.federation._provider._oidc import OAuthProvider
from flask_authflow.federation._tokens import ID_TOKEN_ALGORITHMS

__all__ = ["MAX_CEREMONY_TIMEOUT", "PROVIDER_CONFIG_KEYS", "RESPONSE_MODES", "OAuthProviderConfig"]

_DISCOVERY_SUFFIX: Final = "/.well-known/openid-configuration"
#: The longest a ceremony may be allowed to wait for its callback (1 hour).
MAX_CEREMONY_TIMEOUT: Final = timedelta(hours=1)
#: The keys accepted in ``AUTHFLOW_OAUTH_PROVIDERS`` entries (and by ``OAuthProviderConfig.from_mapping``).
PROVIDER_CONFIG_KEYS: Final = (
    "discovery_url",
    "client_id",
    "client_secret",
    "redirect_uri",
    "scopes",
    "ceremony_timeout",
    "allowed_post_logout_redirect_uris",
    "post_logout_redirect_uri",
    "post_login_redirect",
    "issuer",
    "iat_bound",
    "clock_skew",
    "fetch_userinfo",
    "link_by_email",
    "tenant",
    "jwks_debounce",
    "jwks_require_alg",
    "client_private_key",
    "client_key_id",
    "id_token_signed_response_alg",
    "token_endpoint_auth_method",
    "allowed_tenants",
    "response_mode",
    "client_secret_factory",
    "store_tokens",
    "use_par",
    "dpop",
    "dpop_key_store",
    "client_key_store",
    "fapi2",
    "client_certificate",
    "mtls_ca_bundle",
)
#: The response modes a callback accepts (``form_post``: the provider POSTs code and state).
RESPONSE_MODES: Final = ("query", "form_post")


def _duration(value: Any, what: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    raise ConfigurationError(f"{what} must be a timedelta or a number of seconds, got {value!r}")


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{what} must be a list of strings")
    items = tuple(value)
    if not all(isinstance(item, str) and item for item in items):
        raise ConfigurationError(f"{what} must be a list of non-empty strings")
    return items


@dataclass(frozen=True)
class OAuthProviderConfig:
    """What the application provisioned at the provider, plus our options.

    :param discovery_url: ``{issuer}/.well-known/openid-configuration``.
    :param issuer: the issuer the discovery document must name exactly (default: the
        issuer OpenID Connect Discovery maps to the discovery URL: the URL without
        ``/.well-known/openid-configuration``, with or without a terminating ``/``).
    :param scopes: at least ``openid``; default ``openid profile email``.
    :param ceremony_timeout: how long a login may wait for its callback (default 15
        minutes, at most 1 hour).
    :param allowed_post_logout_redirect_uris: where RP-initiated logout may send the
        browser back to (registered at the provider); empty allows none.
    :param post_logout_redirect_uri: the one used by ``POST /auth/logout`` (default: the
        first allowed one).
    :param post_login_redirect: where the callback sends the browser after a login
        without a ``next`` (default ``/``); a same-site path, checked like ``next``.
    :param iat_bound, clock_skew: ID and logout token time checks (5 minutes, 60 s).
    :param fetch_userinfo: fetch userinfo after the token exchange (its ``sub`` must
        equal the ID token's). Default ``None``: when the provider has a
        ``userinfo_endpoint`` and the scopes ask for more than ``openid``; ``True``
        requires the endpoint; ``False`` never fetches.
    :param link_by_email: let the default claims mapper link a provider identity to the
        existing local account whose own **verified** e-mail address is the token's
        e-mail (compared in lower case; never an account's identifier, never an
        unverified address; an address outside ASCII never links), only when
        ``email_verified`` is true (default ``False``: never link by e-mail).
    :param tenant: the local tenant of users signing in with this provider (default
        ``AUTHFLOW_DEFAULT_TENANT``).
    :param jwks_debounce: the least time between two key fetches (default and minimum
        1 s); unknown-``kid`` refreshes are further limited by a token bucket (3 in a
        row, then one per 20 s).
    :param client_private_key, client_key_id: a PEM private key (and its ``kid`` at the
        provider) to authenticate at the token endpoint with ``private_key_jwt``;
        ``client_secret`` is then not sent.
    :param jwks_require_alg: skip provider keys without an ``alg`` member (default
        ``False``: such keys verify only the allowed algorithm of their own key type).
    :param id_token_signed_response_alg: the one algorithm ID tokens and logout tokens
        of this client may use (default: the provider's only advertised algorithm, else
        ``RS256``).
    :param token_endpoint_auth_method: ``client_secret_basic``, ``client_secret_post``,
        ``private_key_jwt``, ``client_secret_jwt`` or ``none`` (a public client with
        PKCE). Default: ``private_key_jwt`` with ``client_private_key``, else
        ``client_secret_basic`` or, when the provider lists only that, ``client_secret_post``.
    :param allowed_tenants: for a multi-tenant issuer (``issuer`` containing
        ``{tenantid}``): the tenant ids (``tid``) whose users may sign in; empty allows
        every tenant. Each token's ``iss`` must be the issuer with its own ``tid`` filled in.
    :param response_mode: ``query`` (default) or ``form_post`` (the provider POSTs the
        code and state to the callback).
    :param client_secret_factory: called for the client secret at each token request
        instead of ``client_secret`` (a secret the provider wants freshly minted).
    :param store_tokens: keep the user's access and refresh tokens of this provider,
        sealed, for ``authflow.federation.token`` (default ``False``: they are thrown away).
    :param use_par: send the authorization request to the provider's pushed authorization
        request endpoint (RFC 9126) first; the browser then carries only ``client_id`` and
        ``request_uri``. Default ``None``: on when discovery advertises the endpoint and
        ``require_pushed_authorization_requests``; ``True`` refuses, at discovery, a
        provider without the endpoint.
    :param dpop: bind the provider's tokens to a key of ``dpop_key_store`` with DPoP
        (RFC 9449; see :doc:`/federation`, "FAPI 2.0").
    :param dpop_key_store: the client's DPoP keys (an ES256 or Ed25519 key; a
        :class:`~flask_authflow.issuer._keystores.LocalIdpKeyStore`, rotated with the issuer's tooling).
    :param client_key_store: the client's ``private_key_jwt`` keys, from a key store
        instead of ``client_private_key`` (its current key signs; its ``kid`` is sent).
    :param fapi2: the FAPI 2.0 Security Profile (the ``fapi2`` preset sets it): see
        :mod:`~flask_authflow.federation._fapi` for what it requires and refuses.
    :param client_certificate: ``(cert_path, key_path)``: a client certificate presented
        to the provider (mutual TLS, RFC 8705) on the pushed authorization, token,
        refresh, revocation and userinfo requests, at the ``mtls_endpoint_aliases`` when
        discovery names them; the tokens are bound to it. Read and checked here (see
        :mod:`~flask_authflow.federation._mtls`). Needed by ``tls_client_auth`` and
        ``self_signed_tls_client_auth``; not with ``dpop`` (one sender constraint).
    :param mtls_ca_bundle: the CA bundle that verifies the provider's mTLS server
        certificate (default: the system's CAs).
    """

    discovery_url: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uri: str
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    ceremony_timeout: timedelta = timedelta(minutes=15)
    allowed_post_logout_redirect_uris: tuple[str, ...] = ()
    post_logout_redirect_uri: str | None = None
    post_login_redirect: str = "/"
    issuer: str | None = None
    iat_bound: timedelta = timedelta(minutes=5)
    clock_skew: timedelta = timedelta(seconds=60)
    fetch_userinfo: bool | None = None
    link_by_email: bool = False
    tenant: str | None = None
    jwks_debounce: timedelta = timedelta(seconds=1)
    jwks_require_alg: bool = False
    client_private_key: str | None = field(default=None, repr=False)
    client_key_id: str | None = None
    id_token_signed_response_alg: str | None = None
    token_endpoint_auth_method: str | None = None
    allowed_tenants: tuple[str, ...] = ()
    response_mode: str | None = None
    client_secret_factory: Callable[[], str] | None = field(default=None, repr=False)
    store_tokens: bool = False
    use_par: bool | None = None
    dpop: bool = False
    dpop_key_store: ClientKeyStore | None = field(default=None, repr=False)
    client_key_store: ClientKeyStore | None = field(default=None, repr=False)
    fapi2: bool = False
    client_certificate: tuple[str, str] | None = None
    mtls_ca_bundle: str | None = None
    #: The checked ``client_certificate`` (``None`` without one).
    client_tls: ClientCertificate | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.client_certificate is not None:
            tls = ClientCertificate.load(self.client_certificate, self.mtls_ca_bundle)
            object.__setattr__(self, "client_certificate", tls.cert)
            object.__setattr__(self, "client_tls", tls)
        elif self.mtls_ca_bundle is not None:
            raise ConfigurationError("mtls_ca_bundle is set without client_certificate")
        self._check_credentials()
        check_sender_constraint(self)
        self._check_tenancy()
        check_provider_url(self.discovery_url, "discovery_url", error=ConfigurationError)
        check_provider_url(self.redirect_uri, "redirect_uri", error=ConfigurationError)
        object.__setattr__(self, "scopes", _strings(self.scopes, "scopes"))
        if "openid" not in self.scopes:
            raise ConfigurationError("OAuth provider scopes must include 'openid'")
        self._check_logout_redirects()
        for name in ("ceremony_timeout", "iat_bound", "clock_skew", "jwks_debounce"):
            object.__setattr__(self, name, _duration(getattr(self, name), name))
        if self.jwks_debounce < timedelta(seconds=1):
            raise ConfigurationError("jwks_debounce below 1 second would let tokens drive key fetches")
        if self.ceremony_timeout > MAX_CEREMONY_TIMEOUT:
            raise ConfigurationError("ceremony_timeout is capped at 1 hour: set a shorter one (15 minutes)")
        if not isinstance(self.post_login_redirect, str) or not self.post_login_redirect.startswith("/"):
            raise ConfigurationError("post_login_redirect must be a path of this site, such as '/dashboard'")
        alg = self.id_token_signed_response_alg
        if alg is not None and alg not in ID_TOKEN_ALGORITHMS:
            raise ConfigurationError(
                f"id_token_signed_response_alg {alg!r} is not one of {sorted(ID_TOKEN_ALGORITHMS)!r}"
            )
        if self.issuer is None and not self.discovery_url.endswith(_DISCOVERY_SUFFIX):
            raise ConfigurationError(
                f"discovery_url does not end with {_DISCOVERY_SUFFIX}: set issuer= to the expected issuer"
            )

    def _check_credentials(self) -> None:
        method = self.token_endpoint_auth_method
        if method is not None and method not in TOKEN_AUTH_METHODS:
            raise ConfigurationError(
                f"token_endpoint_auth_method {method!r} is not one of {', '.join(TOKEN_AUTH_METHODS)}"
            )
        keyed = self.client_private_key is not None or self.client_key_store is not None
        if method in MTLS_AUTH_METHODS and self.client_certificate is None:
            raise ConfigurationError(
                f"token_endpoint_auth_method {method} needs client_certificate=(cert_path, key_path)"
            )
        if method == "private_key_jwt" and not keyed:
            raise ConfigurationError(
                "token_endpoint_auth_method private_key_jwt needs client_private_key or client_key_store"
            )
        secretless = (
            method in ("none", "private_key_jwt", *MTLS_AUTH_METHODS)
            or (method is None and keyed)
            or self.client_secret_factory is not None
        )
        for name in ("discovery_url", "client_id", "client_secret", "redirect_uri"):
            value = getattr(self, name)
            if not isinstance(value, str) or (not value and not (name == "client_secret" and secretless)):
                raise ConfigurationError(f"OAuth provider {name} must be a non-empty string")

    def _check_tenancy(self) -> None:
        if self.response_mode is not None and self.response_mode not in RESPONSE_MODES:
            raise ConfigurationError(f"response_mode must be one of {', '.join(RESPONSE_MODES)}")
        if self.client_secret_factory is not None and not callable(self.client_secret_factory):
            raise ConfigurationError("client_secret_factory must be callable")
        tenants = _strings(self.allowed_tenants, "allowed_tenants")
        object.__setattr__(self, "allowed_tenants", tenants)
        if tenants and not self.multi_tenant:
            raise ConfigurationError(
                f"allowed_tenants needs a multi-tenant issuer (one containing {TENANT_PLACEHOLDER})"
            )

    @property
    def multi_tenant(self) -> bool:
        """Whether the issuer is a template filled with each token's ``tid``."""
        return self.issuer is not None and TENANT_PLACEHOLDER in self.issuer

    def _check_logout_redirects(self) -> None:
        allowed = _strings(self.allowed_post_logout_redirect_uris, "allowed_post_logout_redirect_uris")
        object.__setattr__(self, "allowed_post_logout_redirect_uris", allowed)
        for uri in allowed:
            check_provider_url(uri, "allowed_post_logout_redirect_uris", error=ConfigurationError)
        if self.post_logout_redirect_uri is None and allowed:
            object.__setattr__(self, "post_logout_redirect_uri", allowed[0])
        if self.post_logout_redirect_uri is not None and self.post_logout_redirect_uri not in allowed:
            raise ConfigurationError(
                "post_logout_redirect_uri must be one of allowed_post_logout_redirect_uris"
            )

    @property
    def expected_issuer(self) -> str:
        """The issuer set, or the one derived from the discovery URL (without a final ``/``)."""
        if self.issuer is not None:
            return self.issuer
        return self.discovery_url[: -len(_DISCOVERY_SUFFIX)]

    @property
    def expected_issuers(self) -> tuple[str, ...]:
        """Every issuer the discovery document may name: the one set, or the two that
        OpenID Connect Discovery §4 maps to the discovery URL (a terminating ``/`` is
        removed before ``/.well-known/openid-configuration`` is appended)."""
        if self.issuer is not None:
            return (self.issuer,)
        base = self.expected_issuer
        return (base,) if base.endswith("/") else (base, base + "/")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, what: str = "provider") -> OAuthProviderConfig:
        """A config from a dict (``AUTHFLOW_OAUTH_PROVIDERS`` entries); unknown keys are refused."""
        if not isinstance(values, Mapping):
            raise ConfigurationError(f"{what} must be a dict of settings")
        unknown = sorted(set(values) - set(PROVIDER_CONFIG_KEYS))
        if unknown:
            raise ConfigurationError(
                f"{what}: unknown key(s) {', '.join(unknown)}; known: {', '.join(PROVIDER_CONFIG_KEYS)}"
            )
        missing = [
            k for k in ("discovery_url", "client_id", "client_secret", "redirect_uri") if k not in values
        ]
        if missing:
            raise ConfigurationError(f"{what}: missing {', '.join(missing)}")
        return cls(**dict(values))

    @classmethod
    def discover(
        cls,
        discovery_url: str,
        client_id: str,
        client_secret: str,
        redirect_uri: str,
        *,
        name: str = "default",
        http: HttpClient | None = None,
        clock: Clock | None = None,
        **options: Any,
    ) -> OAuthProvider:
        """Fetch and check the discovery document, build the key cache: the provider.

        :raises Discovery: missing endpoint, issuer not exactly the expected one, an
            endpoint that is not https (http only on loopback), no usable ID-token algorithm.
        :raises ProviderUnreachable: the document could not be fetched.
        """
        config = cls(discovery_url, client_id, client_secret, redirect_uri, **options)
        return OAuthProvider.from_config(check_provider_name(name), config, http=http, clock=clock)
