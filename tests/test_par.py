"""Pushed authorization requests (RFC 9126) without the FAPI profile: ``use_par``'s default
follows the provider, ``True`` needs the endpoint, the push is authenticated as the token
request is, and a provider that requires PAR refuses a login that does not push."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from flask_authflow._clock import MockClock
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI, federated_app


def _provider(op: TestOpenIDProvider, **options: Any) -> OAuthProvider:
    config = OAuthProviderConfig(op.discovery_url, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, **options)
    return OAuthProvider.from_config(PROVIDER, config, http=RequestsHttpClient(adapters=op.http_adapters()))


@pytest.mark.parametrize(
    ("required", "use_par", "pushed"),
    [(True, None, True), (False, None, False), (False, True, True), (True, False, False)],
)
def test_use_par_follows_the_provider_unless_set(
    oidc_provider: TestOpenIDProvider,
    mock_clock: MockClock,
    required: bool,
    use_par: bool | None,
    pushed: bool,
) -> None:
    oidc_provider.discovery_overrides["require_pushed_authorization_requests"] = required
    provider = _provider(oidc_provider, use_par=use_par)
    assert provider.uses_par is pushed
    url = provider.authorization_url(Ceremony.start(PROVIDER, provider.issuer, mock_clock.now()))
    query = parse_qs(urlsplit(url).query)
    if pushed:
        assert set(query) == {"client_id", "request_uri"}
        assert oidc_provider.par_requests[-1]["code_challenge_method"] == "S256"
        assert oidc_provider.token_requests[-1] == "client_secret_basic"  # authenticated as at /token
    else:
        assert "request_uri" not in query and query["code_challenge_method"] == ["S256"]
        assert oidc_provider.par_requests == []


def test_use_par_true_refuses_a_provider_without_the_endpoint(oidc_provider: TestOpenIDProvider) -> None:
    oidc_provider.discovery_overrides["pushed_authorization_request_endpoint"] = None
    with pytest.raises(Discovery, match="pushed_authorization_request_endpoint"):
        _provider(oidc_provider, use_par=True)  # at discovery time: discovery is lazy
    assert _provider(oidc_provider).uses_par is False  # the default: no endpoint, no push


@pytest.mark.parametrize("use_par", [False, True])
def test_a_provider_requiring_par_refuses_a_login_that_does_not_push(
    oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, use_par: bool
) -> None:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, use_par=use_par)
    oidc_provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI], require_par=True)
    start = fed.client().get(f"/auth/login/{PROVIDER}")
    at_provider = fed.browser().get(start.location, allow_redirects=False, timeout=5)
    if not use_par:
        assert at_provider.status_code == 400 and at_provider.json()["error"] == "invalid_request"
        return
    assert at_provider.status_code == 302 and "code=" in at_provider.headers["Location"]
    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    assert client.get("/dashboard").status_code == 200
