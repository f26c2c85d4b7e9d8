"""FAPI 2.0 against the in-process test provider: the ``fapi2`` preset (PAR + DPoP +
``private_key_jwt`` + PKCE S256 + RFC 9207 ``iss``), each refusal of the profile, and each
rejection path of the emulated FAPI 2.0 Security Profile RP test plan that runs here
(``fapi2-security-profile-final-client-test-*`` modules: the test names say which)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from flask import Flask

from flask_authflow.clock import MockClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation.dpop import DpopNonces, DpopSigner
from flask_authflow.federation.errors import Discovery
from flask_authflow.federation.presets import preset
from flask_authflow.federation.provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.testing.provider import TestOpenIDProvider
from tests.federation_support import CLIENT_ID, PROVIDER, REDIRECT_URI, FederatedApp, federated_app

JSON = {"Accept": "application/json"}
SCOPES = ("openid", "email", "offline_access")


class Keys:
    """The client's key stores: one for private_key_jwt, one for DPoP (both ES256)."""

    def __init__(self) -> None:
        self.client = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
        self.dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())

    def jwks(self) -> list[dict[str, Any]]:
        key = self.client.load_all().current
        return [{**key.public_jwk(), "kid": key.kid}]


@pytest.fixture
def op(mock_clock: MockClock) -> TestOpenIDProvider:
    provider = TestOpenIDProvider(algorithm="ES256", clock=mock_clock)
    provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return provider


def fapi_settings(op: TestOpenIDProvider, keys: Keys, **extra: Any) -> dict[str, Any]:
    return {
        "preset": "fapi2",
        "discovery_url": op.discovery_url,
        "client_id": CLIENT_ID,
        "redirect_uri": REDIRECT_URI,
        "client_key_store": keys.client,
        "dpop_key_store": keys.dpop,
        "id_token_signed_response_alg": "ES256",
        "store_tokens": True,
        "scopes": SCOPES,
        **extra,
    }


def fapi_app(
    op: TestOpenIDProvider, clock: MockClock, hasher: Any, keys: Keys, *, fapi2_client: bool = True, **extra: Any
) -> FederatedApp:
    settings = fapi_settings(op, keys, client_secret="", **extra)
    fed = federated_app(op, clock, hasher, **settings)
    op.register_client(
        CLIENT_ID,
        "",
        [REDIRECT_URI],
        token_endpoint_auth_method="private_key_jwt",
        jwks=keys.jwks(),
        require_par=True,
        dpop_bound=True,
        fapi2=fapi2_client,
    )
    add_resource_view(fed.app, fed)
    return fed


def add_resource_view(app: Flask, fed: FederatedApp) -> None:
    """``/resource``: the app calls the provider's userinfo with the stored token's auth object."""

    @app.get("/resource")
    def resource() -> tuple[str, int]:
        token = fed.authflow.provider_token(PROVIDER)
        session = fed.browser()
        answer = session.get("https://op.test/userinfo", auth=token.auth, timeout=5)
        return f"{token.token_type} {answer.json().get('sub', answer.status_code)}", answer.status_code


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def fed(op: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, keys: Keys) -> FederatedApp:
    return fapi_app(op, mock_clock, authflow_hasher, keys)


def test_happy_flow_par_dpop_private_key_jwt(fed: FederatedApp, op: TestOpenIDProvider, keys: Keys) -> None:
    """fapi2-security-profile-final-client-test (happy flow): a login, a resource call, a refresh."""
    client = fed.client()
    start = client.get(f"/auth/login/{PROVIDER}")
    assert start.status_code == 302
    query = parse_qs(urlsplit(start.location).query)
    assert set(query) == {"client_id", "request_uri"}  # RFC 9126 §4: nothing else in the browser
    pushed = op.par_requests[-1]
    dpop_key = keys.dpop.load_all().current
    signer = DpopSigner(keys.dpop, fed.clock, DpopNonces())
    assert pushed["dpop_jkt"] == signer.thumbprint(dpop_key.kid)
    assert pushed["code_challenge_method"] == "S256" and pushed["response_type"] == "code"
    answer = fed.browser().get(start.location, allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    assert client.get(f"{callback.path}?{callback.query}").status_code == 302
    assertions = op.client_assertions
    assert len(assertions) == 2  # the push and the token request, each its own assertion
    assert {a["aud"] for a in assertions} == {op.issuer}  # FAPI 2.0: aud is the issuer
    assert len({a["jti"] for a in assertions}) == 2
    assert all(a["exp"] - a["iat"] <= 60 for a in assertions)
    proof, userinfo = op.dpop_proofs  # the code exchange, then userinfo during the login
    assert (proof["htm"], proof["htu"], proof["error"]) == ("POST", "https://op.test/token", None)
    assert (userinfo["htm"], userinfo["htu"], userinfo["jkt"]) == ("GET", "https://op.test/userinfo", proof["jkt"])
    row = token_row(fed)
    assert row.token_type == "DPoP"

    used = client.get("/resource")
    assert (used.status_code, used.text) == (200, "DPoP alice-sub")
    resource_proof = op.dpop_proofs[-1]
    assert resource_proof["htm"] == "GET" and "ath" in resource_proof and resource_proof["jkt"] == proof["jkt"]

    fed.clock.advance(timedelta(seconds=290))  # the 300 s token is refreshed first
    refreshed = client.get("/resource")
    assert (refreshed.status_code, refreshed.text) == (200, "DPoP alice-sub")
    refresh_proof = [p for p in op.dpop_proofs if p["htu"] == "https://op.test/token"][-1]
    assert refresh_proof["jkt"] == proof["jkt"]  # the binding is kept: same key


def token_row(fed: FederatedApp) -> Any:
    user = fed.backend.find_user("default", f"{PROVIDER}:alice-sub")
    assert user is not None
    row = fed.backend.get_provider_tokens("default", user.user_id, PROVIDER)
    assert row is not None
    return row
