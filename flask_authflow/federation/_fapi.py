"""The FAPI 2.0 Security Profile, as a relying party: what ``fapi2`` requires and refuses.

A provider configured with ``fapi2=True`` (the ``fapi2`` preset) must use:

* pushed authorization requests (``use_par`` on, never ``False``);
* sender-constrained tokens: DPoP (``dpop`` with a ``dpop_key_store``), or mutual TLS
  where the application supplies a client certificate (``client_certificate``: the tokens
  are bound to it, RFC 8705); never both;
* ``private_key_jwt`` client authentication (``aud`` = the issuer identifier, ``exp``
  within 60 s, a unique ``jti``) with a PS256, ES256 or EdDSA key, or, with a client
  certificate, ``tls_client_auth`` or ``self_signed_tls_client_auth``: no
  ``client_secret_*``, no ``none``, no RS256;
* the code flow with PKCE S256 (the only flow this library runs: implicit and hybrid
  cannot be configured);
* ID tokens signed with PS256, ES256 or EdDSA;
* the ``iss`` authorization response parameter (RFC 9207): the provider must advertise
  ``authorization_response_iss_parameter_supported``, and a callback without ``iss`` is
  refused with :class:`~flask_authflow.federation._errors.IssuerMismatch`.

The configuration is checked when the provider is configured (``init_app``); what the
provider offers is checked when its discovery document is read (discovery is lazy: the
first login, or ``authflow.federation.provider(name)``), and a refusal is a
:class:`~flask_authflow.errors.ConfigurationError` or a
:class:`~flask_authflow.federation._errors.Discovery` error naming the rule.
"""

from __future__ import annotations

from typing import Any, Final

from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import Discovery

__all__ = ["FAPI2_ALGORITHMS", "FAPI2_AUTH_METHODS", "check_fapi2_provider", "check_sender_constraint"]

#: The signing algorithms FAPI 2.0 allows (ID tokens, client assertions, DPoP proofs).
FAPI2_ALGORITHMS: Final = ("PS256", "ES256", "EdDSA", "Ed25519")
#: The client authentication methods FAPI 2.0 allows (§5.3.3.4 of the Security Profile).
FAPI2_AUTH_METHODS: Final = ("private_key_jwt", "tls_client_auth", "self_signed_tls_client_auth")


def check_sender_constraint(config: Any) -> None:
    """The PAR, DPoP and FAPI 2.0 settings of an ``OAuthProviderConfig``, checked alone.

    :raises ConfigurationError: naming the setting.
    """
    if config.use_par not in (None, True, False):
        raise ConfigurationError("use_par must be True, False or None (follow the provider)")
    if not isinstance(config.dpop, bool):
        raise ConfigurationError("dpop must be True or False")
    if config.dpop and config.dpop_key_store is None:
        raise ConfigurationError("dpop needs dpop_key_store (an ES256 or Ed25519 key store)")
    if config.dpop and config.client_certificate is not None:
        raise ConfigurationError(
            "dpop and client_certificate both constrain the tokens: choose one sender constraint "
            "(DPoP, or mutual TLS with the certificate)"
        )
    if config.fapi2 is not True:
        return
    method = config.token_endpoint_auth_method
    if method not in (None, *FAPI2_AUTH_METHODS):
        raise ConfigurationError(
            f"FAPI 2.0 forbids token_endpoint_auth_method {method}: use private_key_jwt "
            "(or tls_client_auth / self_signed_tls_client_auth with a client certificate)"
        )
    keyed = config.client_private_key is not None or config.client_key_store is not None
    if method in (None, "private_key_jwt") and not keyed:
        raise ConfigurationError("FAPI 2.0 needs private_key_jwt: set client_key_store")
    if config.client_secret or config.client_secret_factory is not None:
        raise ConfigurationError("FAPI 2.0 forbids client secrets: leave client_secret empty")
    if config.use_par is False:
        raise ConfigurationError("FAPI 2.0 requires pushed authorization requests: use_par cannot be False")
    if not config.dpop and config.client_certificate is None:
        raise ConfigurationError(
            "FAPI 2.0 requires sender-constrained tokens: set dpop=True, or client_certificate "
            "for mTLS-bound tokens"
        )
    alg = config.id_token_signed_response_alg
    if alg is not None and alg not in FAPI2_ALGORITHMS:
        raise ConfigurationError(f"FAPI 2.0 forbids ID tokens signed with {alg}: use PS256, ES256 or EdDSA")


def check_fapi2_provider(metadata: Any, *, id_token_alg: str, client_alg: str | None) -> None:
    """What a FAPI 2.0 client needs of the provider and of its own keys, at discovery.

    :raises Discovery: the provider lacks a FAPI 2.0 feature.
    :raises ConfigurationError: the client's keys or pinned algorithm are not FAPI 2.0's.
    """
    if not metadata.iss_parameter_supported:
        raise Discovery(
            "FAPI 2.0: the provider does not advertise authorization_response_iss_parameter_supported "
            "(RFC 9207)"
        )
    if metadata.par_endpoint is None:
        raise Discovery("FAPI 2.0: the provider has no pushed_authorization_request_endpoint")
    if id_token_alg not in FAPI2_ALGORITHMS:
        raise ConfigurationError(
            f"FAPI 2.0 forbids ID tokens signed with {id_token_alg}: set id_token_signed_response_alg "
            "to the PS256, ES256 or EdDSA algorithm registered for the client"
        )
    if client_alg is not None and client_alg not in FAPI2_ALGORITHMS:
        raise ConfigurationError(
            f"FAPI 2.0 forbids client assertions signed with {client_alg}: use a PS256, ES256 or EdDSA key"
        )
