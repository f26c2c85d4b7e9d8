"""private_key_jwt at the token endpoint: the assertion is signed with the client's key and
checked by an independent verifier; the secret is never sent."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
import requests.adapters
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from flask_authflow._clock import MockClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._client_auth import ASSERTION_TYPE, PrivateKeyJwt, load_client_key
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProviderConfig
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.jose._keys import parse_public_jwk
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, federated_app


def _pem_and_jwk() -> tuple[str, dict[str, Any]]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    from joserfc.jwk import ECKey

    jwk = ECKey.import_key(key.public_key()).as_dict(private=False)
    return pem, {**jwk, "kid": "client-key-1", "alg": "ES256", "use": "sig"}


def _verifier(jwk: dict[str, Any], clock: MockClock) -> JwtVerifier:
    handle = JwksHandle()
    handle.replace_keys([parse_public_jwk(jwk)])
    return JwtVerifier(handle, clock=clock).with_algorithms(["ES256"])


def test_the_assertion_verifies_with_the_clients_public_key() -> None:
    pem, jwk = _pem_and_jwk()
    clock = MockClock()
    key, alg = load_client_key(pem)
    auth = PrivateKeyJwt("my-client", "https://op.test/token", key, alg, kid="client-key-1", clock=clock)
    uri, headers, body = auth(None, "POST", "https://op.test/token", {}, "grant_type=authorization_code")
    fields = {k: v[0] for k, v in parse_qs(body).items()}
    assert fields["grant_type"] == "authorization_code" and fields["client_assertion_type"] == ASSERTION_TYPE
    claims = _verifier(jwk, clock).verify(
        fields["client_assertion"], "https://op.test/token", issuer="my-client"
    )
    assert claims.sub == "my-client" and claims.jti and claims.exp - int(clock.now().timestamp()) == 60
    second = parse_qs(auth(None, "POST", uri, headers, "")[2])["client_assertion"][0]
    assert second != fields["client_assertion"]  # a fresh jti each time


@pytest.mark.parametrize(
    "bad", ["not a key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]
)
def test_a_bad_client_key_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="client_private_key"):
        load_client_key(bad)


class TokenEndpointGate(requests.adapters.BaseAdapter):
    """In front of the provider: the token request must carry a valid assertion and no secret;
    it then reaches the provider as client_secret_post (the test provider knows only secrets)."""

    def __init__(self, inner: requests.adapters.BaseAdapter, verifier: JwtVerifier, audience: str) -> None:
        super().__init__()
        self.inner = inner
        self.verifier = verifier
        self.audience = audience
        self.assertions: list[str] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if urlsplit(request.url or "").path.endswith("/token"):
            body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
            fields = {k: v[0] for k, v in parse_qs(body).items()}
            assert "client_secret" not in fields and "Authorization" not in request.headers
            assert fields.pop("client_assertion_type") == ASSERTION_TYPE
            assertion = fields.pop("client_assertion")
            self.verifier.verify(assertion, self.audience, issuer=CLIENT_ID)
            self.assertions.append(assertion)
            fields["client_secret"] = CLIENT_SECRET
            request.body = urlencode(fields)
            request.headers["Content-Length"] = str(len(request.body))
        return self.inner.send(request, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


def test_login_with_private_key_jwt(
    oidc_provider: TestOpenIDProvider, mock_clock, authflow_hasher, monkeypatch
) -> None:
    pem, jwk = _pem_and_jwk()
    document = oidc_provider.discovery_document()
    monkeypatch.setattr(
        oidc_provider,
        "discovery_document",
        lambda: {**document, "token_endpoint_auth_methods_supported": ["private_key_jwt"]},
    )
    oidc_provider.login_as("alice-sub")
    fed = federated_app(
        oidc_provider, mock_clock, authflow_hasher, client_private_key=pem, client_key_id="client-key-1"
    )
    gate = TokenEndpointGate(
        oidc_provider.requests_adapter(), _verifier(jwk, mock_clock), f"{oidc_provider.issuer}/token"
    )
    from flask_authflow import get_state

    get_state(fed.app).federation.registry.http = RequestsHttpClient(adapters={oidc_provider.base_url: gate})
    response = fed.sign_in(fed.client())
    assert response.status_code == 302, response.text
    assert len(gate.assertions) == 1
    with fed.app.test_request_context():
        assert fed.authflow.federation.provider(PROVIDER).token_auth_method == "private_key_jwt"


def test_private_key_jwt_needs_the_provider_to_accept_it(oidc_provider: TestOpenIDProvider) -> None:
    pem, _ = _pem_and_jwk()
    with pytest.raises(Discovery, match="private_key_jwt"):
        OAuthProviderConfig.discover(
            oidc_provider.discovery_url,
            CLIENT_ID,
            "unused",
            "http://localhost/cb",
            http=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
            client_private_key=pem,
        )


def test_secret_post_when_the_provider_only_accepts_it(
    oidc_provider: TestOpenIDProvider, monkeypatch
) -> None:
    document = oidc_provider.discovery_document()
    monkeypatch.setattr(
        oidc_provider,
        "discovery_document",
        lambda: {**document, "token_endpoint_auth_methods_supported": ["client_secret_post"]},
    )
    provider = OAuthProviderConfig.discover(
        oidc_provider.discovery_url,
        CLIENT_ID,
        "s",
        "http://localhost/cb",
        http=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
    )
    assert provider.token_auth_method == "client_secret_post"
    monkeypatch.setattr(
        oidc_provider,
        "discovery_document",
        lambda: {**document, "token_endpoint_auth_methods_supported": ["tls_client_auth"]},
    )
    with pytest.raises(Discovery, match="token endpoint accepts only"):
        OAuthProviderConfig.discover(
            oidc_provider.discovery_url,
            CLIENT_ID,
            "s",
            "http://localhost/cb",
            http=RequestsHttpClient(adapters=oidc_provider.http_adapters()),
        )
