"""Ready provider settings for the big OpenID providers.

A preset turns a few provider-specific values (a domain, a tenant id, a realm) into the
full settings of an :class:`~flask_authflow.federation._provider.OAuthProviderConfig`:
the discovery URL, the exact issuer, scopes and the options that provider needs. Use it
in the configuration::

    AUTHFLOW_OAUTH_PROVIDERS = {
        "google": {"preset": "google", "client_id": "...", "client_secret": "...",
                   "redirect_uri": "https://app.example/auth/callback/google"},
    }

or in code with :func:`preset` (``OAuthProviderConfig(**preset("google", ...))``).
``fapi2`` is not a provider but the FAPI 2.0 Security Profile for any provider (its
``discovery_url``, ``client_key_store`` and ``dpop_key_store`` are required; with a
``client_certificate``, mutual TLS binds the tokens instead of DPoP, and
``token_endpoint_auth_method`` may be ``tls_client_auth`` or ``self_signed_tls_client_auth``).
``github`` is a plain OAuth 2.0 provider (see :mod:`~flask_authflow.federation._oauth2`):
its settings make an ``OAuth2ProviderConfig``. Any
other provider setting (``link_by_email``, ``scopes``, ...) passes through and wins over
the preset's. A missing required value raises :class:`ConfigurationError` naming it, at
``init_app``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from flask_authflow._clock import Clock, SystemClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._oauth2 import GITHUB, OAuth2ProviderConfig
from flask_authflow.federation._provider import OAuthProviderConfig

__all__ = ["PRESETS", "AppleClientSecret", "preset", "provider_config"]

_DISCOVERY: Final = "/.well-known/openid-configuration"
_HOST_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?")
_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_GUID_RE: Final = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_REGION_RE: Final = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]")
APPLE_ISSUER: Final = "https://appleid.apple.com"
MICROSOFT_HOST: Final = "https://login.microsoftonline.com"
#: Microsoft's endpoints that serve many tenants (their issuer is a ``{tenantid}`` template).
MICROSOFT_MULTI_TENANT: Final = ("common", "organizations")
#: How long a minted Apple client secret lives, and how long before its expiry it is replaced.
APPLE_SECRET_LIFETIME: Final = timedelta(minutes=10)
APPLE_SECRET_MARGIN: Final = timedelta(minutes=2)


def _value(values: Mapping[str, Any], name: str, what: str, pattern: re.Pattern[str] | None = None) -> str:
    value = values.get(name)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what}: missing {name} (a non-empty string)")
    if pattern is not None and not pattern.fullmatch(value):
        raise ConfigurationError(f"{what}: {name} {value[:80]!r} is not valid")
    return value


def _oidc(issuer: str, *, discovery_base: str | None = None, **extra: Any) -> dict[str, Any]:
    base = (discovery_base if discovery_base is not None else issuer).rstrip("/")
    return {"discovery_url": base + _DISCOVERY, "issuer": issuer, **extra}


def _google(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    return _oidc("https://accounts.google.com", scopes=("openid", "email", "profile"))


def _microsoft(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    tenant = _value(values, "tenant_id", what)
    if tenant in MICROSOFT_MULTI_TENANT:
        return _oidc(
            MICROSOFT_HOST + "/{tenantid}/v2.0",
            discovery_base=f"{MICROSOFT_HOST}/{tenant}/v2.0",
            scopes=("openid", "email", "profile"),
            fetch_userinfo=False,  # the ID token carries the claims; userinfo lives on Graph
        )
    if not _GUID_RE.fullmatch(tenant):
        raise ConfigurationError(
            f"{what}: tenant_id must be the Directory (tenant) ID, a GUID, or one of "
            f"{', '.join(MICROSOFT_MULTI_TENANT)}"
        )
    return _oidc(
        f"{MICROSOFT_HOST}/{tenant.lower()}/v2.0", scopes=("openid", "email", "profile"), fetch_userinfo=False
    )


def _okta(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    domain = _value(values, "domain", what, _HOST_RE)
    server = values.get("authorization_server")
    if server is None:
        return _oidc(f"https://{domain}", scopes=("openid", "email", "profile"))
    if not isinstance(server, str) or not _SEGMENT_RE.fullmatch(server):
        raise ConfigurationError(f"{what}: authorization_server must be an id such as 'default'")
    return _oidc(f"https://{domain}/oauth2/{server}", scopes=("openid", "email", "profile"))


def _auth0(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    domain = _value(values, "domain", what, _HOST_RE)
    return _oidc(f"https://{domain}/", scopes=("openid", "email", "profile"))  # Auth0's issuer ends in /


def _keycloak(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    base = _value(values, "base_url", what).rstrip("/")
    realm = _value(values, "realm", what, _SEGMENT_RE)
    return _oidc(f"{base}/realms/{realm}", scopes=("openid", "email", "profile"))


def _gitlab(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    base = values.get("base_url", "https://gitlab.com")
    if not isinstance(base, str) or not base:
        raise ConfigurationError(f"{what}: base_url must be the GitLab instance's URL")
    return _oidc(base.rstrip("/"), scopes=("openid", "email", "profile"))


def _cognito(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    region = _value(values, "region", what, _REGION_RE)
    pool = _value(values, "user_pool_id", what, _SEGMENT_RE)
    return _oidc(f"https://cognito-idp.{region}.amazonaws.com/{pool}", scopes=("openid", "email", "profile"))


def _apple(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    secret = AppleClientSecret(
        team_id=_value(values, "team_id", what),
        key_id=_value(values, "key_id", what),
        private_key=_value(values, "private_key", what),
        client_id=_value(values, "client_id", what),
    )
    return _oidc(
        APPLE_ISSUER,
        scopes=("openid", "email", "name"),
        response_mode="form_post",  # Apple requires it when name or email is asked for
        fetch_userinfo=False,  # Apple has no userinfo endpoint
        client_secret="",
        client_secret_factory=secret,
        token_endpoint_auth_method="client_secret_post",  # noqa: S106 - a method name
    )


#: What the ``fapi2`` preset sets, and refuses to see changed.
FAPI2_SETTINGS: Final[Mapping[str, Any]] = {
    "fapi2": True,
    "use_par": True,
    "dpop": True,
    "token_endpoint_auth_method": "private_key_jwt",
    "client_secret": "",
}


#: What the ``fapi2`` preset sets with a ``client_certificate``: mTLS-bound tokens instead of DPoP.
FAPI2_MTLS_SETTINGS: Final[Mapping[str, Any]] = {
    "fapi2": True,
    "use_par": True,
    "dpop": False,
    "client_secret": "",
}
#: The methods the ``fapi2`` preset accepts with a client certificate (the default: private_key_jwt).
_FAPI2_MTLS_METHODS: Final = ("private_key_jwt", "tls_client_auth", "self_signed_tls_client_auth")


def _fapi2(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The FAPI 2.0 Security Profile (see :mod:`~flask_authflow.federation._fapi`): PAR, DPoP
    (or mTLS with a ``client_certificate``), PKCE S256, ``private_key_jwt`` (``aud`` the
    issuer; or an mTLS method), FAPI 2.0 ID-token algorithms and the RFC 9207 ``iss``
    required. Any provider: ``discovery_url`` names it."""
    _value(values, "discovery_url", what)
    if values.get("client_certificate") is not None:
        return _fapi2_mtls(values, what)
    for name in ("client_key_store", "dpop_key_store"):
        if values.get(name) is None:
            raise ConfigurationError(f"{what}: missing {name} (a key store: LocalIdpKeyStore)")
    return _locked(values, what, FAPI2_SETTINGS)


def _fapi2_mtls(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``fapi2`` with a client certificate: the tokens are bound to it (RFC 8705), no DPoP."""
    if values.get("dpop_key_store") is not None:
        raise ConfigurationError(
            f"{what}: client_certificate and dpop_key_store both constrain the tokens: choose one "
            "sender constraint (DPoP, or mutual TLS with the certificate)"
        )
    method = values.get("token_endpoint_auth_method", "private_key_jwt")
    if method not in _FAPI2_MTLS_METHODS:
        raise ConfigurationError(
            f"{what}: the fapi2 preset allows token_endpoint_auth_method "
            f"{', '.join(_FAPI2_MTLS_METHODS)} with a client certificate, not {method!r}"
        )
    if method == "private_key_jwt" and values.get("client_key_store") is None:
        raise ConfigurationError(f"{what}: missing client_key_store (a key store: LocalIdpKeyStore)")
    return {**_locked(values, what, FAPI2_MTLS_SETTINGS), "token_endpoint_auth_method": method}


def _locked(values: Mapping[str, Any], what: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    for name, locked in settings.items():
        if name in values and values[name] != locked:
            raise ConfigurationError(f"{what}: the fapi2 preset sets {name}={locked!r}; it cannot be changed")
    return dict(settings)


def _github(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    return dict(GITHUB)  # plain OAuth 2.0: identity from the user API, never an ID token


@dataclass(frozen=True)
class _Preset:
    build: Callable[[Mapping[str, Any], str], dict[str, Any]]
    #: Preset-only values (consumed here, not passed to the provider configuration).
    own: tuple[str, ...] = ()
    needs_secret: bool = True
    #: ``oidc`` (an OAuthProviderConfig) or ``oauth2`` (a plain OAuth2ProviderConfig).
    kind: str = "oidc"


#: The presets by name.
PRESETS: Final[Mapping[str, _Preset]] = {
    "google": _Preset(_google),
    "microsoft": _Preset(_microsoft, ("tenant_id",)),
    "okta": _Preset(_okta, ("domain", "authorization_server")),
    "auth0": _Preset(_auth0, ("domain",)),
    "keycloak": _Preset(_keycloak, ("base_url", "realm")),
    "apple": _Preset(_apple, ("team_id", "key_id", "private_key"), needs_secret=False),
    "gitlab": _Preset(_gitlab, ("base_url",)),
    "cognito": _Preset(_cognito, ("region", "user_pool_id")),
    "github": _Preset(_github, kind="oauth2"),
    "fapi2": _Preset(_fapi2, needs_secret=False),
}


def preset(name: str, *, what: str | None = None, **values: Any) -> dict[str, Any]:
    """The provider settings of preset ``name`` for ``values`` (``client_id``,
    ``client_secret``, ``redirect_uri`` and the preset's own values); other provider
    settings pass through and override the preset's.

    :raises ConfigurationError: an unknown preset, or a missing or malformed value (named).
    """
    label = what or f"preset {name!r}"
    chosen = PRESETS.get(name) if isinstance(name, str) else None
    if chosen is None:
        raise ConfigurationError(f"{label}: unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    required = (
        ("client_id", "redirect_uri", "client_secret")
        if chosen.needs_secret
        else ("client_id", "redirect_uri")
    )
    for key in required:
        _value(values, key, label)
    settings = chosen.build(values, label)
    settings.update({k: v for k, v in values.items() if k not in chosen.own})
    return settings


def provider_config(entry: Mapping[str, Any], what: str) -> OAuthProviderConfig | OAuth2ProviderConfig:
    """The configuration of an ``AUTHFLOW_OAUTH_PROVIDERS`` entry, its ``preset`` expanded:
    an OpenID provider, or a plain OAuth 2.0 one (``github``)."""
    if not isinstance(entry, Mapping) or "preset" not in entry:
        return OAuthProviderConfig.from_mapping(entry, what=what)
    values = {k: v for k, v in entry.items() if k != "preset"}
    settings = preset(entry["preset"], what=what, **values)
    if PRESETS[entry["preset"]].kind == "oauth2":
        return OAuth2ProviderConfig.from_mapping(settings, what=what)
    return OAuthProviderConfig.from_mapping(settings, what=what)


class AppleClientSecret:
    """Sign in with Apple's client secret: an ES256 JWT signed with the key made in Apple's
    developer console (``iss`` the team id, ``sub`` the services id, ``aud`` Apple), minted
    with joserfc, short-lived and minted again shortly before it expires.

    :raises ConfigurationError: the private key is not a PEM P-256 key.
    """

    def __init__(
        self, *, team_id: str, key_id: str, private_key: str, client_id: str, clock: Clock | None = None
    ) -> None:
        from joserfc.jwk import ECKey

        try:
            key = ECKey.import_key(private_key)
        except Exception as exc:  # joserfc raises several types for a bad PEM
            raise ConfigurationError("apple: private_key is not a PEM EC private key") from exc
        if key.curve_name != "P-256" or not key.is_private:
            raise ConfigurationError("apple: private_key must be a P-256 private key (ES256)")
        self._key = key
        self.team_id = team_id
        self.key_id = key_id
        self.client_id = client_id
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._cached: tuple[str, float] | None = None

    def __call__(self) -> str:
        now = self.clock.now().timestamp()
        with self._lock:
            if self._cached is not None and now < self._cached[1] - APPLE_SECRET_MARGIN.total_seconds():
                return self._cached[0]
            token = self._mint(int(now))
            self._cached = (token, int(now) + APPLE_SECRET_LIFETIME.total_seconds())
            return token

    def _mint(self, now: int) -> str:
        from joserfc import jwt

        claims = {
            "iss": self.team_id,
            "iat": now,
            "exp": now + int(APPLE_SECRET_LIFETIME.total_seconds()),
            "aud": APPLE_ISSUER,
            "sub": self.client_id,
        }
        return jwt.encode({"alg": "ES256", "kid": self.key_id}, claims, self._key, algorithms=["ES256"])

    def __repr__(self) -> str:
        return f"<AppleClientSecret team_id={self.team_id!r} key_id={self.key_id!r}>"
