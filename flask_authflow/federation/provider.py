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
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from flask_authflow.clock import Clock, SystemClock
from flask_authflow.errors import (
    ConfigurationError,
    MissingExtraError,
    TokenCheck,
    TokenVerificationError,
    UnknownKeyId,
)
from flask_authflow.federation.ceremony import Ceremony
from flask_authflow.federation.client_auth import (
    TOKEN_AUTH_METHODS,
    ClientSecretJwt,
    PrivateKeyJwt,
    client_credentials,
    load_client_key,
)
from flask_authflow.federation.dpop import (
    ClientKeyStore,
    DpopNonces,
    DpopSigner,
    client_signing_key,
    wants_nonce,
)
from flask_authflow.federation.errors import (
    Discovery,
    EndSessionRefused,
    IdTokenValidation,
    LogoutTokenInvalid,
    OAuthError,
    ProviderUnreachable,
    TokenExchange,
    UnknownKid,
    UnknownProvider,
    UserInfo,
)
from flask_authflow.federation.fapi import check_fapi2_provider, check_sender_constraint
from flask_authflow.federation.http import HttpClient, HttpResponse, RequestsHttpClient, check_provider_url
from flask_authflow.federation.jwks_cache import ProviderKeyCache, cache_max_age
from flask_authflow.federation.mtls import MTLS_AUTH_METHODS, ClientCertificate, mtls_aliases
from flask_authflow.federation.oauth2 import OAuth2Provider, OAuth2ProviderConfig
from flask_authflow.federation.par import authorize_url_for, request_uri_of
from flask_authflow.federation.tenants import tenant_issuer_refusal
from flask_authflow.federation.tokens import (
    ID_TOKEN_ALGORITHMS,
    LogoutClaims,
    check_at_hash,
    check_id_token,
    check_logout_token,
    check_logout_token_size,
)
from flask_authflow.jose import VerifiedClaims

__all__ = [
    "PROVIDER_CONFIG_KEYS",
    "PROVIDER_NAME_RE",
    "OAuthProvider",
    "OAuthProviderConfig",
    "ProviderMetadata",
    "ProviderRegistry",
    "TokenSet",
]

log = logging.getLogger("flask_authflow.federation")

#: Provider names are slugs (they appear in URLs and, as ``oidc:<name>``, in audit rows).
PROVIDER_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,25}")
_DISCOVERY_SUFFIX: Final = "/.well-known/openid-configuration"
#: The longest a ceremony may be allowed to wait for its callback (1 hour).
MAX_CEREMONY_TIMEOUT: Final = timedelta(hours=1)
#: How long a discovery document is kept: its ``max-age`` within these bounds, else the default.
DISCOVERY_MIN_AGE: Final = timedelta(minutes=1)
DISCOVERY_MAX_AGE: Final = timedelta(days=1)
DISCOVERY_DEFAULT_AGE: Final = timedelta(hours=1)
#: The algorithm OpenID Connect Registration gives a client that names none.
DEFAULT_ID_TOKEN_ALG: Final = "RS256"  # noqa: S105 - an algorithm name, not a secret
#: Methods chosen, in order, when ``token_endpoint_auth_method`` is not set.
_AUTO_AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post")
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
#: The placeholder of a multi-tenant issuer (Microsoft's ``common`` and ``organizations``).
TENANT_PLACEHOLDER: Final = "{tenantid}"
#: The response modes a callback accepts (``form_post``: the provider POSTs code and state).
RESPONSE_MODES: Final = ("query", "form_post")


def check_provider_name(name: Any) -> str:
    """``name`` if it is a provider slug (lowercase letters, digits, ``-``, ``_``; up to 26)."""
    if not isinstance(name, str) or not PROVIDER_NAME_RE.fullmatch(name):
        raise ConfigurationError(
            f"provider name {name!r} is not a slug: use lowercase letters, digits, '-' and '_' (at most 26)"
        )
    return name


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
        :class:`~flask_authflow.issuer.LocalIdpKeyStore`, rotated with the issuer's tooling).
    :param client_key_store: the client's ``private_key_jwt`` keys, from a key store
        instead of ``client_private_key`` (its current key signs; its ``kid`` is sent).
    :param fapi2: the FAPI 2.0 Security Profile (the ``fapi2`` preset sets it): see
        :mod:`~flask_authflow.federation.fapi` for what it requires and refuses.
    :param client_certificate: ``(cert_path, key_path)``: a client certificate presented
        to the provider (mutual TLS, RFC 8705) on the pushed authorization, token,
        refresh, revocation and userinfo requests, at the ``mtls_endpoint_aliases`` when
        discovery names them; the tokens are bound to it. Read and checked here (see
        :mod:`~flask_authflow.federation.mtls`). Needed by ``tls_client_auth`` and
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


@dataclass(frozen=True)
class ProviderMetadata:
    """The parts of a discovery document we use, checked."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    end_session_endpoint: str | None
    id_token_algorithms: tuple[str, ...]
    token_endpoint_auth_methods: tuple[str, ...]
    iss_parameter_supported: bool
    backchannel_logout_supported: bool
    #: ``id_token_signing_alg_values_supported`` as the provider wrote it.
    advertised_algorithms: tuple[str, ...] = ()
    #: The RFC 7009 token revocation endpoint, when the provider has one.
    revocation_endpoint: str | None = None
    #: The RFC 9126 pushed authorization request endpoint, and whether the provider requires it.
    par_endpoint: str | None = None
    require_par: bool = False
    #: ``dpop_signing_alg_values_supported`` (RFC 9449), empty when not advertised.
    dpop_algorithms: tuple[str, ...] = ()
    #: The ``mtls_endpoint_aliases`` we use (RFC 8705 §5), as (endpoint name, https URL) pairs.
    mtls_aliases: tuple[tuple[str, str], ...] = ()
    #: Why ``mtls_endpoint_aliases`` is unusable (refused only for a client with a certificate).
    mtls_aliases_refused: str | None = None

    @classmethod
    def from_document(
        cls, document: Mapping[str, Any], expected_issuer: str | Iterable[str]
    ) -> ProviderMetadata:
        """Check ``document`` against what a login needs (``userinfo_endpoint`` is optional).

        :raises Discovery: naming what is wrong.
        """
        expected = (expected_issuer,) if isinstance(expected_issuer, str) else tuple(expected_issuer)
        issuer = document.get("issuer")
        if not isinstance(issuer, str) or issuer not in expected:
            raise Discovery(
                f"the discovery document names issuer {issuer!r}, expected exactly "
                + " or ".join(repr(e) for e in expected)
            )
        endpoints: dict[str, str] = {}
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = document.get(name)
            if not isinstance(value, str) or not value:
                raise Discovery(f"the discovery document has no {name}")
            endpoints[name] = check_provider_url(value, name)
        optional: dict[str, str | None] = {}
        for name in (
            "userinfo_endpoint",
            "end_session_endpoint",
            "revocation_endpoint",
            "pushed_authorization_request_endpoint",
        ):
            value = document.get(name)
            if value is not None and (not isinstance(value, str) or not value):
                raise Discovery(f"{name} is not a URL")
            optional[name] = None if value is None else check_provider_url(value, name)
        advertised, algorithms = _id_token_algorithms(document)
        methods = document.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
        if not isinstance(methods, list):
            raise Discovery("token_endpoint_auth_methods_supported is not a list")
        challenges = document.get("code_challenge_methods_supported")
        if isinstance(challenges, list) and "S256" not in challenges:
            raise Discovery("the provider does not support PKCE with S256")
        return cls(
            issuer=issuer,
            authorization_endpoint=endpoints["authorization_endpoint"],
            token_endpoint=endpoints["token_endpoint"],
            jwks_uri=endpoints["jwks_uri"],
            userinfo_endpoint=optional["userinfo_endpoint"],
            end_session_endpoint=optional["end_session_endpoint"],
            id_token_algorithms=algorithms,
            token_endpoint_auth_methods=tuple(m for m in methods if isinstance(m, str)),
            iss_parameter_supported=document.get("authorization_response_iss_parameter_supported") is True,
            backchannel_logout_supported=document.get("backchannel_logout_supported") is True,
            advertised_algorithms=advertised,
            revocation_endpoint=optional["revocation_endpoint"],
            par_endpoint=optional["pushed_authorization_request_endpoint"],
            require_par=document.get("require_pushed_authorization_requests") is True,
            dpop_algorithms=_strings_of(document.get("dpop_signing_alg_values_supported")),
            **_aliases_of(document),
        )


def _aliases_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """``mtls_aliases`` and ``mtls_aliases_refused`` of a discovery document: a malformed
    member is refused only when a client presents a certificate (clients without one never
    call the aliases, so they keep working)."""
    try:
        return {"mtls_aliases": tuple(mtls_aliases(document).items())}
    except Discovery as exc:
        return {"mtls_aliases_refused": exc.message}


def _strings_of(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _id_token_algorithms(document: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The advertised ID-token algorithms, and those of them we verify."""
    advertised = document.get("id_token_signing_alg_values_supported")
    if not isinstance(advertised, list) or not all(isinstance(a, str) for a in advertised):
        raise Discovery("the discovery document has no id_token_signing_alg_values_supported list")
    algorithms = tuple(a for a in advertised if a in ID_TOKEN_ALGORITHMS)
    if not algorithms:
        raise Discovery(
            f"the provider signs ID tokens only with {advertised!r}; "
            f"accepted: {sorted(ID_TOKEN_ALGORITHMS)!r}"
        )
    return tuple(advertised), algorithms


def pinned_algorithm(config: OAuthProviderConfig, metadata: ProviderMetadata) -> str:
    """The one algorithm this client's ID and logout tokens may use.

    ``id_token_signed_response_alg`` when set; else the provider's only advertised
    algorithm; else ``RS256``, the registration default.

    :raises Discovery: the provider does not advertise the algorithm chosen.
    """
    chosen = config.id_token_signed_response_alg
    if chosen is None:
        single = metadata.advertised_algorithms
        chosen = single[0] if len(single) == 1 else DEFAULT_ID_TOKEN_ALG
    if chosen not in metadata.id_token_algorithms:
        raise Discovery(
            f"ID tokens of this client are expected signed with {chosen}, which the provider does not "
            f"advertise ({list(metadata.advertised_algorithms)!r}): set id_token_signed_response_alg "
            "to the algorithm registered for the client"
        )
    return chosen


def _token_auth_method(config: OAuthProviderConfig, metadata: ProviderMetadata) -> str:
    """The configured ``token_endpoint_auth_method``, or the first usable of the defaults."""
    supported = metadata.token_endpoint_auth_methods
    method = config.token_endpoint_auth_method
    if method is None and config.client_private_key is not None:
        method = "private_key_jwt"
    if method is not None:
        if method not in supported:
            raise Discovery(
                f"token_endpoint_auth_method {method} is set, but the provider's token endpoint "
                f"accepts only {list(supported)!r}"
            )
        return method
    for candidate in _AUTO_AUTH_METHODS:
        if candidate in supported:
            return candidate
    raise Discovery(
        f"the token endpoint accepts only {list(supported)!r}; set token_endpoint_auth_method "
        f"(one of {', '.join(TOKEN_AUTH_METHODS)})"
    )


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


def _oauth2_session(**kwargs: Any) -> Any:
    try:
        from authlib.integrations.requests_client import OAuth2Session
    except ModuleNotFoundError as exc:  # pragma: no cover - a dependency; init_app checks it
        raise MissingExtraError("oidc", exc.name or "authlib") from exc
    return OAuth2Session(**kwargs)


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


def _client_endpoints(metadata: ProviderMetadata, tls: ClientCertificate | None) -> dict[str, str | None]:
    """The URL of each endpoint called as this client: with a client certificate, its
    ``mtls_endpoint_aliases`` entry when discovery names one (RFC 8705 §5), else the plain
    endpoint, which must then be https (the certificate is never left out in the clear).

    :raises Discovery: a client certificate is set and an endpoint would be plain http.
    """
    plain: dict[str, str | None] = {
        "token_endpoint": metadata.token_endpoint,
        "pushed_authorization_request_endpoint": metadata.par_endpoint,
        "revocation_endpoint": metadata.revocation_endpoint,
        "userinfo_endpoint": metadata.userinfo_endpoint,
    }
    if tls is None:
        return plain
    if metadata.mtls_aliases_refused is not None:
        raise Discovery(metadata.mtls_aliases_refused)
    aliases = dict(metadata.mtls_aliases)
    chosen = {name: aliases.get(name, url) for name, url in plain.items()}
    for name, url in chosen.items():
        if url is not None and not url.startswith("https://"):
            raise Discovery(
                f"client_certificate is set, but the provider's {name} is not https and discovery "
                "names no mtls_endpoint_aliases entry for it"
            )
    return chosen


def _uses_par(config: OAuthProviderConfig, metadata: ProviderMetadata) -> bool:
    """``use_par``: as set (``True`` needs the endpoint), else as the provider requires."""
    if config.use_par is True or config.fapi2:
        if metadata.par_endpoint is None:
            raise Discovery("use_par is set, but the provider has no pushed_authorization_request_endpoint")
        return True
    if config.use_par is False:
        return False
    return metadata.par_endpoint is not None and metadata.require_par


class OAuthProvider:
    """One OpenID provider as a relying party sees it (see the module docstring).

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
        self.token_auth_method: str = _token_auth_method(config, metadata)
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
        self.uses_par: bool = _uses_par(config, metadata)
        #: The DPoP proof signer (``None``: tokens are Bearer tokens).
        self.dpop: DpopSigner | None = (
            DpopSigner(config.dpop_key_store, clock, DpopNonces())
            if config.dpop and config.dpop_key_store is not None
            else None
        )
        if config.dpop_key_store is not None and self.dpop is not None:
            self.dpop.thumbprint(self.dpop.current_kid())  # refuses a key that cannot sign proofs
            dpop_alg = client_signing_key(config.dpop_key_store.load_all().current)[1]
            if metadata.dpop_algorithms and dpop_alg not in metadata.dpop_algorithms:
                raise Discovery(
                    f"the provider accepts DPoP proofs signed with {list(metadata.dpop_algorithms)!r} "
                    f"only; the DPoP key signs {dpop_alg}"
                )
        #: The client certificate presented on the client's calls (mutual TLS), else ``None``.
        self.tls: ClientCertificate | None = config.client_tls
        self._endpoints = _client_endpoints(metadata, self.tls)
        self._assertion, client_alg = self._client_assertion()
        if config.fapi2:
            check_fapi2_provider(metadata, id_token_alg=self.id_token_alg, client_alg=client_alg)

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
        started = used_clock.now()
        response = client.get(config.discovery_url, headers={"Accept": "application/json"})
        if response.status != 200:
            raise Discovery(f"the discovery document answered HTTP {response.status}")
        try:
            document = response.json_object()
        except ProviderUnreachable as exc:
            raise Discovery(f"the discovery document is unusable: {exc.message}") from None
        metadata = ProviderMetadata.from_document(document, config.expected_issuers)
        if previous is not None and previous.keys.jwks_uri == metadata.jwks_uri:
            keys = previous.keys
            keys.remove_fetch_listener(previous._key_fetch_ended)  # this provider replaces it
        else:
            keys = ProviderKeyCache(
                metadata.jwks_uri,
                client,
                clock=used_clock,
                debounce=config.jwks_debounce,
                require_alg=config.jwks_require_alg,
            )
        age = cache_max_age(response.headers.get("cache-control"))
        lifetime = (
            DISCOVERY_DEFAULT_AGE if age is None else min(max(age, DISCOVERY_MIN_AGE), DISCOVERY_MAX_AGE)
        )
        provider = cls(
            name, config, metadata, http=client, keys=keys, clock=used_clock, fresh_until=started + lifetime
        )
        keys.add_fetch_listener(provider._key_fetch_ended)
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
        return self._endpoints[name]

    # --- the code flow ----------------------------------------------------------------------

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
        audience = self.issuer if self.config.fapi2 else self.metadata.token_endpoint
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

    def authorization_url(
        self, ceremony: Ceremony, *, scopes: Iterable[str] | None = None, **extra: str
    ) -> str:
        """The authorize URL of ``ceremony``: code flow, PKCE S256, state and nonce (and
        ``dpop_jkt`` with DPoP); with PAR, the request is pushed first and the URL carries
        only ``client_id`` and ``request_uri``.

        :raises PushedRequestRefused, ProviderUnreachable: the push failed.
        """
        scope = " ".join(scopes if scopes is not None else self.config.scopes)
        if self.config.response_mode == "form_post":
            extra = {**extra, "response_mode": "form_post"}
        if self.dpop is not None and ceremony.dpop_kid is not None:
            extra = {**extra, "dpop_jkt": self.dpop.thumbprint(ceremony.dpop_kid)}
        if self.uses_par:
            return self._pushed_authorization_url(ceremony, scope, extra)
        oauth = _oauth2_session(
            client_id=self.config.client_id,
            redirect_uri=self.config.redirect_uri,
            code_challenge_method="S256",
            scope=scope,
        )
        try:
            url, _state = oauth.create_authorization_url(
                self.metadata.authorization_endpoint,
                state=ceremony.state,
                nonce=ceremony.nonce,
                code_verifier=ceremony.code_verifier,
                **extra,
            )
        finally:
            oauth.close()
        return str(url)

    def _pushed_authorization_url(self, ceremony: Ceremony, scope: str, extra: Mapping[str, str]) -> str:
        endpoint = self.endpoint("pushed_authorization_request_endpoint")
        if endpoint is None:  # pragma: no cover - uses_par is only set with an endpoint
            raise Discovery("the provider has no pushed_authorization_request_endpoint")
        fields = {
            **extra,
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.config.redirect_uri,
            "scope": scope,
            "state": ceremony.state,
            "nonce": ceremony.nonce,
            "code_challenge": ceremony.code_challenge,
            "code_challenge_method": "S256",
        }
        request_uri = request_uri_of(self.client_request(endpoint, fields))
        return authorize_url_for(self.metadata.authorization_endpoint, self.client_id, request_uri)

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
        """POST ``fields`` to one of the provider's endpoints (the token endpoint, the
        revocation endpoint), authenticated as this client with ``token_auth_method``,
        through the provider HTTP client. Non-2xx answers are returned.

        ``dpop_kid``: with a DPoP proof signed by that key; an answer asking for a DPoP nonce
        (``use_dpop_nonce``) is retried once with the nonce it gave (and a fresh assertion).
        With a client certificate (``tls``), it is presented in the handshake (mutual TLS);
        ``url`` is then the endpoint's mTLS alias (see :meth:`endpoint`).

        :raises ProviderUnreachable: the endpoint did not answer usably.
        """
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
        """GET one of the provider's resources (userinfo) with the access token: Bearer (with
        the client certificate it is bound to, under mutual TLS), or DPoP with a proof
        (``ath`` included) and the nonce dance of the resource server."""
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

    # --- token checks ----------------------------------------------------------------------------

    def _verify(self, token: str, error: type[IdTokenValidation | LogoutTokenInvalid]) -> VerifiedClaims:
        """Signature with the pinned algorithm, ``exp``, ``iss``, ``aud`` through the one
        verification path; an unknown ``kid`` refreshes the keys once (single-flight,
        floor and token bucket)."""
        self.keys.ensure_fresh()
        skew = self.config.clock_skew
        issuer = None if self.config.multi_tenant else self.issuer  # checked per tid below
        for attempt in (1, 2):
            verifier = self.keys.verifier((self.id_token_alg,))
            try:
                claims = verifier.verify(token, self.client_id, issuer=issuer, leeway=skew, clock=self.clock)
                if issuer is None:
                    refusal = tenant_issuer_refusal(
                        claims.claims, self.issuer, self.config.allowed_tenants, TENANT_PLACEHOLDER
                    )
                    if refusal is not None:
                        raise error(refusal[0], f"{error.__name__}: {refusal[1]}")
                return claims
            except UnknownKeyId as exc:
                if attempt == 2 or not self.keys.refresh_for_unknown_kid(exc.kid):
                    if error is IdTokenValidation:
                        raise UnknownKid(exc.kid) from None
                    raise error(
                        TokenCheck.UNKNOWN_KID, "logout token signed with an unknown key id"
                    ) from None
            except TokenVerificationError as exc:
                hint = ""
                if exc.reason == TokenCheck.ALGORITHM:
                    hint = f"; this client accepts {self.id_token_alg} only (id_token_signed_response_alg)"
                raise error(exc.reason, f"{error.__name__}: {exc.message}{hint}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def validate_id_token(self, id_token: str, nonce: str, access_token: str | None = None) -> VerifiedClaims:
        """The six ID-token checks plus algorithm pinning, ``crit``, ``sub`` and, when the
        token carries one and ``access_token`` is given, ``at_hash``.

        :raises IdTokenValidation: (or :class:`UnknownKid`) naming the failed check.
        """
        claims = self._verify(id_token, IdTokenValidation)
        if access_token is not None:
            check_at_hash(claims, access_token)
        check_id_token(
            claims,
            client_id=self.client_id,
            nonce=nonce,
            now=self.clock.now().timestamp(),
            iat_bound=self.config.iat_bound,
            clock_skew=self.config.clock_skew,
        )
        return claims

    def fetch_userinfo(
        self, access_token: str, subject: str, *, dpop_kid: str | None = None
    ) -> dict[str, Any]:
        """The userinfo claims; their ``sub`` must equal the ID token's.

        :raises UserInfo: a refusal (401: the scopes lack what userinfo needs), a
            non-JSON answer, or another ``sub``.
        """
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

    def verify_logout_jwt(self, token: Any) -> LogoutClaims:
        """Every check of a back-channel logout token (size first, then signature, ``iss``,
        ``aud``, ``azp``, ``exp``, ``iat``, ``events``, ``sub``/``sid``, no ``nonce``, ``jti``).

        The ``jti`` replay check needs the shared store: see
        :meth:`~flask_authflow.federation.login.FederationService.backchannel_logout`.

        :raises LogoutTokenInvalid: naming the failed check.
        """
        text = check_logout_token_size(token)
        claims = self._verify(text, LogoutTokenInvalid)
        return check_logout_token(
            claims,
            client_id=self.client_id,
            now=self.clock.now().timestamp(),
            iat_bound=timedelta(minutes=5),
            clock_skew=timedelta(seconds=60),
        )

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
        endpoint = self.metadata.end_session_endpoint
        if endpoint is None:
            raise EndSessionRefused("the provider has no end_session_endpoint")
        params: dict[str, str] = {"id_token_hint": id_token_hint, "client_id": self.client_id}
        if post_logout_redirect_uri is not None:
            allowed = (*self.config.allowed_post_logout_redirect_uris, *also_allowed)
            if post_logout_redirect_uri not in allowed:
                raise EndSessionRefused(
                    "post_logout_redirect_uri is not on allowed_post_logout_redirect_uris"
                )
            params["post_logout_redirect_uri"] = post_logout_redirect_uri
        if state is not None:
            params["state"] = state
        parts = urlsplit(endpoint)
        query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


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


def _error_body(response: HttpResponse) -> dict[str, Any] | None:
    """The JSON error object of a 4xx answer, or ``None``."""
    if response.status < 400 or response.status >= 500:
        return None
    try:
        return response.json_object()
    except ProviderUnreachable:
        return None
