"""FAPI 2.0 with the real ``oidc-provider`` (tests/interop/op.mjs, its ``fapi`` profile 2.0 for
the client ``reference-app-fapi``): our relying party logs in with PAR + DPoP +
``private_key_jwt`` (the provider demands aud = issuer, a DPoP nonce, pushed requests,
DPoP-bound tokens), calls userinfo as a resource with a DPoP proof, refreshes its stored
tokens keeping the binding, and is refused when it does not push."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from joserfc.jwk import ECKey

from flask_authflow._clock import SystemClock
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._presets import preset
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.storage._memory import InMemoryBackend
from tests import oidc_parts
from tests.oidc_parts import OidcProviderProcess, drive_login
from tests.provider_tokens_support import PROVIDER, keeper

pytestmark = [pytest.mark.http, pytest.mark.interop]

oidc_op = oidc_parts.oidc_op  # the marker check in front of the session-scoped provider
oidc_op_process = oidc_parts.oidc_op_process
SCOPES = ("openid", "email", "offline_access")


class FapiClient:
    """The FAPI client's key (registered at the provider) and a DPoP key of our own, in key stores."""

    def __init__(self, op: OidcProviderProcess) -> None:
        answer = requests.get(f"{op.issuer}/__admin/fapi-client", timeout=5).json()
        self.client_id: str = answer["client_id"]
        jwk = answer["jwk"]
        pem = ECKey.import_key(jwk).as_pem(private=True)
        self.keys = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.from_pem(pem, kid=jwk["kid"]))
        self.dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_es256())


@pytest.fixture
def fapi_client(oidc_op: OidcProviderProcess) -> FapiClient:
    return FapiClient(oidc_op)


def _config(op: OidcProviderProcess, client: FapiClient) -> OAuthProviderConfig:
    return OAuthProviderConfig(
        **preset(
            "fapi2",
            discovery_url=op.discovery_url,
            client_id=client.client_id,
            redirect_uri=op.redirect_uri,
            client_key_store=client.keys,
            dpop_key_store=client.dpop,
            id_token_signed_response_alg="ES256",
            store_tokens=True,
            scopes=SCOPES,
        )
    )


def test_fapi2_login_resource_call_and_refresh(oidc_op: OidcProviderProcess, fapi_client: FapiClient) -> None:
    config = _config(oidc_op, fapi_client)
    store = InMemoryBackend()
    kept = keeper(store, SystemClock(), RequestsHttpClient(), config)
    rp = kept.tokens.registry.get(PROVIDER, "default")
    assert rp.uses_par and rp.dpop is not None
    ceremony = replace(Ceremony.start(rp.name, rp.issuer, datetime.now(UTC)), dpop_kid=rp.dpop.current_kid())
    url = rp.authorization_url(ceremony, scopes=SCOPES, prompt="consent")
    assert set(parse_qs(urlsplit(url).query)) == {"client_id", "request_uri"}
    back = drive_login(url, "fapi-user", requests.Session(), issuer=oidc_op.issuer)
    assert back.iss == oidc_op.issuer and back.state == ceremony.state  # RFC 9207
    tokens = rp.exchange_code(back.code, ceremony.code_verifier, dpop_kid=ceremony.dpop_kid)
    assert tokens.token_type == "DPoP" and tokens.refresh_token is not None
    assert rp.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token).sub == "fapi-user"
    info = rp.fetch_userinfo(tokens.access_token, "fapi-user", dpop_kid=tokens.dpop_kid)
    assert info["email"] == "fapi-user@example.com"  # through the resource server's nonce
    assert kept.tokens.keep("default", "u-fapi", rp, tokens, SCOPES)

    userinfo = rp.metadata.userinfo_endpoint
    assert userinfo is not None
    token = kept.get("u-fapi")
    assert token == tokens.access_token and token.token_type == "DPoP"
    call = requests.get(userinfo, auth=token.auth, timeout=5)  # the app's own resource call
    assert call.status_code == 200 and call.json()["sub"] == "fapi-user"
    bearer = requests.get(userinfo, headers={"Authorization": f"Bearer {token}"}, timeout=5)
    assert bearer.status_code == 401  # bound: useless without a proof

    kept.tokens.skew = timedelta(days=1)  # every token counts as expiring: the next get refreshes
    refreshed = kept.get("u-fapi")
    assert refreshed != token and refreshed.token_type == "DPoP"
    assert kept.audit[-1][:2] == ("provider_token_refresh", "success")
    again = requests.get(userinfo, auth=refreshed.auth, timeout=5)
    assert again.status_code == 200 and again.json()["sub"] == "fapi-user"  # same key: binding kept


def test_a_provider_requiring_par_refuses_a_login_without_it(
    oidc_op: OidcProviderProcess, fapi_client: FapiClient
) -> None:
    config = OAuthProviderConfig(
        oidc_op.discovery_url,
        fapi_client.client_id,
        "",
        oidc_op.redirect_uri,
        token_endpoint_auth_method="private_key_jwt",
        client_key_store=fapi_client.keys,
        dpop=True,
        dpop_key_store=fapi_client.dpop,
        id_token_signed_response_alg="ES256",
        use_par=False,
    )
    rp = OAuthProvider.from_config(PROVIDER, config)
    assert not rp.uses_par
    url = rp.authorization_url(Ceremony.start(rp.name, rp.issuer, datetime.now(UTC)))
    answer = requests.get(url, allow_redirects=False, timeout=5)
    assert answer.is_redirect  # back to the client with an error, never with a code
    back = parse_qs(urlsplit(answer.headers["Location"]).query)
    assert back["error"] == ["invalid_request"] and "code" not in back
