"""DPoP (RFC 9449) key handling: the binding survives a rotation of the DPoP key store (the
issuer's tooling), a new login binds to the new key, a pruned key ends the binding with a
typed error, Ed25519 keys sign proofs, and an unbound answer is refused (fail closed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_authflow._clock import MockClock
from flask_authflow.federation._dpop import DpopNonces, DpopSigner, htu_of
from flask_authflow.federation._errors import Discovery, TokenExchange
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._presets import preset
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig, checked_token_type
from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import CLIENT_ID, REDIRECT_URI, FederatedApp
from tests.test_fapi import JSON, Keys, _callback, fapi_app


@pytest.fixture
def op(mock_clock: MockClock) -> TestOpenIDProvider:
    provider = TestOpenIDProvider(algorithm="ES256", clock=mock_clock)
    provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return provider


def _token_jkts(op: TestOpenIDProvider) -> list[str]:
    return [p["jkt"] for p in op.dpop_proofs if p["htu"] == "https://op.test/token" and p["error"] is None]


def test_rotation_keeps_the_binding_and_new_logins_take_the_new_key(
    op: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    keys = Keys()
    fed: FederatedApp = fapi_app(op, mock_clock, authflow_hasher, keys)
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    old = keys.dpop.load_all().current.kid
    keys.dpop.rotate(LocalIdpSigningKey.generate_es256())  # the issuer's tooling
    mock_clock.advance(timedelta(seconds=290))
    assert client.get("/resource").text == "DPoP alice-sub"  # refreshed with the old key
    first, refreshed = _token_jkts(op)
    assert refreshed == first
    op.login_as("bob-sub", email="bob@example.com", email_verified=True)
    other = fed.client()
    assert _callback(fed, other).status_code == 302
    assert _token_jkts(op)[-1] != first  # a new login binds to the new key
    keys.dpop.prune([old])  # the old key leaves the store: its tokens cannot be used any more
    gone = client.get("/resource", headers=JSON)
    assert gone.status_code == 401 and gone.json["error"] == "dpop_key_gone"


def test_ed25519_keys_sign_proofs(
    op: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any
) -> None:
    keys = Keys()
    keys.dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_ed25519())
    fed = fapi_app(op, mock_clock, authflow_hasher, keys)
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    assert client.get("/resource").text == "DPoP alice-sub"
    assert {p["error"] for p in op.dpop_proofs} == {None}


def test_a_dpop_key_the_provider_does_not_accept_is_refused_at_discovery(op: TestOpenIDProvider) -> None:
    keys = Keys()
    keys.dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_ed25519())
    op.discovery_overrides["dpop_signing_alg_values_supported"] = ["ES256"]
    op.register_client(CLIENT_ID, "", [REDIRECT_URI], jwks=keys.jwks())
    config = OAuthProviderConfig(
        **preset(
            "fapi2",
            discovery_url=op.discovery_url,
            client_id=CLIENT_ID,
            redirect_uri=REDIRECT_URI,
            client_key_store=keys.client,
            dpop_key_store=keys.dpop,
            id_token_signed_response_alg="ES256",
        )
    )
    with pytest.raises(Discovery, match="Ed25519"):
        OAuthProvider.from_config("op", config, http=RequestsHttpClient(adapters=op.http_adapters()))


def test_a_proof_names_the_request_and_the_token(mock_clock: MockClock) -> None:
    store = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())
    signer = DpopSigner(store, mock_clock, DpopNonces())
    kid = signer.current_kid()
    one = signer.proof(kid, "get", "https://api.example/x?page=2#top", access_token="at")
    two = signer.proof(kid, "get", "https://api.example/x?page=2#top", access_token="at")
    assert one != two  # a fresh jti each time
    assert htu_of("https://api.example/x?page=2#top") == "https://api.example/x"


def test_a_bearer_answer_to_a_dpop_request_is_refused() -> None:
    with pytest.raises(TokenExchange, match="DPoP-bound"):
        checked_token_type("Bearer", True)
    assert checked_token_type("dpop", True) == "DPoP"
    assert checked_token_type("bearer", False) == "bearer"


def test_a_provider_token_survives_pickling_with_its_type_and_auth() -> None:
    """A worker process hands its token back through a queue (tests/test_provider_tokens_store.py)."""
    import pickle

    from flask_authflow.federation._dpop import BearerAuth
    from flask_authflow.federation._provider_tokens import ProviderToken

    token = pickle.loads(pickle.dumps(ProviderToken("at-1", "Bearer", BearerAuth("at-1"))))
    assert token == "at-1" and token.token_type == "Bearer" and isinstance(token.auth, BearerAuth)
