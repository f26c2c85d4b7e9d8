"""Metadata: the discovery document checked (:class:`ProviderMetadata`), and what a client
chooses from it: the pinned ID-token algorithm, the token endpoint's client authentication,
the endpoints called (their mTLS aliases with a client certificate) and whether to push the
authorization request (PAR)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from flask_authflow.federation._client_auth import TOKEN_AUTH_METHODS
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._http import check_provider_url
from flask_authflow.federation._mtls import ClientCertificate, mtls_aliases
from flask_authflow.federation._tokens import ID_TOKEN_ALGORITHMS

if TYPE_CHECKING:
    from flask_authflow.federation._provider._config import OAuthProviderConfig

__all__ = [
    "DEFAULT_ID_TOKEN_ALG",
    "ProviderMetadata",
    "client_endpoints",
    "pinned_algorithm",
    "token_auth_method",
    "uses_par",
]

#: The algorithm OpenID Connect Registration gives a client that names none.
DEFAULT_ID_TOKEN_ALG: Final = "RS256"  # noqa: S105 - an algorithm name, not a secret
#: Methods chosen, in order, when ``token_endpoint_auth_method`` is not set.
_AUTO_AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post")


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


def token_auth_method(config: OAuthProviderConfig, metadata: ProviderMetadata) -> str:
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


def client_endpoints(metadata: ProviderMetadata, tls: ClientCertificate | None) -> dict[str, str | None]:
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


def uses_par(config: OAuthProviderConfig, metadata: ProviderMetadata) -> bool:
    """``use_par``: as set (``True`` needs the endpoint), else as the provider requires."""
    if config.use_par is True or config.fapi2:
        if metadata.par_endpoint is None:
            raise Discovery("use_par is set, but the provider has no pushed_authorization_request_endpoint")
        return True
    if config.use_par is False:
        return False
    return metadata.par_endpoint is not None and metadata.require_par
