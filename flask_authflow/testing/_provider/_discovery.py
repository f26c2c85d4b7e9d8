"""Discovery (OpenID Connect Discovery 1.0) and the JWKS: the documents a relying party reads
before its first request."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from flask import Response, jsonify

from flask_authflow.testing._provider._dpop import DPOP_ALGS
from flask_authflow.testing._provider._issuer import IssuerNames

Document = Callable[[], dict[str, Any]]


class DiscoveryScript(Protocol):
    """What a test may change (``discovery_cache_control``) and observe (``discovery_requests``)."""

    discovery_cache_control: str | None
    discovery_requests: int


def discovery_document(
    names: IssuerNames, auth_methods: list[str], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """The provider's metadata, ``overrides`` merged in (``None`` removes a member)."""
    document = {
        "issuer": names.iss,
        "authorization_endpoint": names.endpoint("authorize"),
        "token_endpoint": names.endpoint("token"),
        "jwks_uri": names.endpoint("jwks"),
        "userinfo_endpoint": names.endpoint("userinfo"),
        "end_session_endpoint": names.endpoint("end_session"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "token_endpoint_auth_methods_supported": auth_methods,
        "code_challenge_methods_supported": ["S256"],
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "sid", "email"],
        "backchannel_logout_supported": True,
        "backchannel_logout_session_supported": True,
        "frontchannel_logout_supported": False,
        "authorization_response_iss_parameter_supported": True,
        "pushed_authorization_request_endpoint": names.endpoint("par"),
        "require_pushed_authorization_requests": False,
        "dpop_signing_alg_values_supported": list(DPOP_ALGS),
    }
    for name, value in overrides.items():
        if value is None:
            document.pop(name, None)
        else:
            document[name] = value
    return document


class DiscoveryEndpoints:
    """``/.well-known/openid-configuration`` and ``/jwks``, serving what ``document`` and
    ``jwks`` return at the time of each request (a test may replace either)."""

    def __init__(
        self, document: Document, jwks: Document, lock: threading.Lock, script: DiscoveryScript
    ) -> None:
        self._document = document
        self._jwks = jwks
        self._lock = lock
        self._script = script

    def discovery(self) -> Response:
        with self._lock:
            self._script.discovery_requests += 1
        resp = jsonify(self._document())
        if self._script.discovery_cache_control is not None:
            resp.headers["Cache-Control"] = self._script.discovery_cache_control
        return resp

    def jwks(self) -> Response:
        resp = jsonify(self._jwks())
        resp.headers["Cache-Control"] = "max-age=0"
        return resp
