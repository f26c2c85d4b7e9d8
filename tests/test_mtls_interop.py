"""Mutual TLS with the real ``oidc-provider`` (tests/interop/op.mjs with its https listener on,
``features.mTLS`` with certificate-bound access tokens and ``tls_client_auth``): the ``fapi2``
preset with a client certificate logs in with PAR at the provider's ``mtls_endpoint_aliases``,
the certificate authenticates the client, userinfo accepts the bound token with the certificate
and refuses it without (401), and a refresh keeps the binding; ``self_signed_tls_client_auth``
logs in with the certificate registered in the client's JWKS and is refused with another.

The provider runs in its own process for this module (its https part starts only with the
``OP_MTLS_*`` environment, so the other interop tests do not pay for it); the CA, the server
certificate and the client certificate are made here with ``cryptography``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from flask_authflow._clock import SystemClock
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._par import PushedRequestRefused
from flask_authflow.federation._presets import preset
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.storage._memory import InMemoryBackend
from tests.mtls_certs import CLIENT_SUBJECT, Certs, make_certs, make_self_signed
from tests.oidc_parts import CLIENT_ID, OidcProviderProcess, drive_login, start_oidc_provider
from tests.parts import free_port, wait_for_port
from tests.provider_tokens_support import PROVIDER, keeper

pytestmark = [pytest.mark.http, pytest.mark.interop]

SCOPES = ("openid", "email", "offline_access")
MTLS_CLIENT_ID = f"{CLIENT_ID}-mtls"


class MtlsOp:
    def __init__(
        self, op: OidcProviderProcess, certs: Certs, self_signed: tuple[str, str], base: str
    ) -> None:
        self.op, self.certs, self.self_signed, self.base = op, certs, self_signed, base


@pytest.fixture(scope="module")
def mtls_op(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MtlsOp]:
    folder = tmp_path_factory.mktemp("mtls")
    certs, self_signed = make_certs(folder), make_self_signed(folder)
    port = free_port()
    rp = f"http://127.0.0.1:{free_port()}"
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "OP_MTLS_PORT": str(port),
            "OP_MTLS_CA": str(certs.ca),
            "OP_MTLS_CERT": str(certs.server_cert),
            "OP_MTLS_KEY": str(certs.server_key),
            "OP_MTLS_SUBJECT": CLIENT_SUBJECT,
            "OP_MTLS_SELF_SIGNED": self_signed[0],
        }.items():
            env.setenv(name, value)
        op = start_oidc_provider([f"{rp}/auth/callback/op"], [f"{rp}/signed-out"])
    try:
        wait_for_port(port)
        yield MtlsOp(op, certs, self_signed, f"https://127.0.0.1:{port}")
    finally:
        op.stop()


def _config(mtls: MtlsOp) -> OAuthProviderConfig:
    return OAuthProviderConfig(
        **preset(
            "fapi2",
            discovery_url=mtls.op.discovery_url,
            client_id=MTLS_CLIENT_ID,
            redirect_uri=mtls.op.redirect_uri,
            client_certificate=mtls.certs.pair,
            mtls_ca_bundle=str(mtls.certs.ca),
            token_endpoint_auth_method="tls_client_auth",
            id_token_signed_response_alg="ES256",
            store_tokens=True,
            scopes=SCOPES,
        )
    )


def test_mtls_login_bound_userinfo_and_refresh(mtls_op: MtlsOp) -> None:
    kept = keeper(InMemoryBackend(), SystemClock(), RequestsHttpClient(), _config(mtls_op))
    rp = kept.tokens.registry.get(PROVIDER, "default")
    assert rp.uses_par and rp.dpop is None
    assert rp.endpoint("token_endpoint") == f"{mtls_op.base}/token"  # the alias (RFC 8705 §5)
    ceremony = Ceremony.start(rp.name, rp.issuer, datetime.now(UTC))
    url = rp.authorization_url(ceremony, scopes=SCOPES, prompt="consent")  # pushed with the certificate
    assert set(parse_qs(urlsplit(url).query)) == {"client_id", "request_uri"}
    back = drive_login(url, "mtls-user", requests.Session(), issuer=mtls_op.op.issuer)
    assert back.iss == mtls_op.op.issuer and back.state == ceremony.state
    tokens = rp.exchange_code(back.code, ceremony.code_verifier)  # tls_client_auth: no secret sent
    assert tokens.token_type == "Bearer" and tokens.x5t == mtls_op.certs.thumbprint
    assert rp.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token).sub == "mtls-user"
    assert rp.fetch_userinfo(tokens.access_token, "mtls-user")["email"] == "mtls-user@example.com"
    assert kept.tokens.keep("default", "u-mtls", rp, tokens, SCOPES)

    userinfo = rp.endpoint("userinfo_endpoint")
    assert userinfo == f"{mtls_op.base}/me"
    token = kept.get("u-mtls")
    assert token.cert == mtls_op.certs.pair and token.verify == str(mtls_op.certs.ca)
    call = requests.get(userinfo, auth=token.auth, cert=token.cert, verify=token.verify, timeout=5)
    assert call.status_code == 200 and call.json()["sub"] == "mtls-user"
    bare = requests.get(userinfo, auth=token.auth, verify=token.verify, timeout=5)
    assert bare.status_code == 401  # bound: useless without the certificate

    kept.tokens.skew = timedelta(days=1)  # every token counts as expiring: the next get refreshes
    refreshed = kept.get("u-mtls")
    assert refreshed != token and refreshed.cert == mtls_op.certs.pair
    assert kept.audit[-1][:2] == ("provider_token_refresh", "success")
    again = requests.get(
        userinfo, auth=refreshed.auth, cert=refreshed.cert, verify=refreshed.verify, timeout=5
    )
    assert again.status_code == 200 and again.json()["sub"] == "mtls-user"  # the binding is kept
    assert requests.get(userinfo, auth=refreshed.auth, verify=refreshed.verify, timeout=5).status_code == 401


def test_self_signed_tls_client_auth_login(mtls_op: MtlsOp) -> None:
    """``self_signed_tls_client_auth``: the provider knows the certificate from the client's
    JWKS (no CA); the token request carries no secret and the tokens are bound to it."""
    config = OAuthProviderConfig(
        **preset(
            "fapi2",
            discovery_url=mtls_op.op.discovery_url,
            client_id=f"{MTLS_CLIENT_ID}-self",
            redirect_uri=mtls_op.op.redirect_uri,
            client_certificate=mtls_op.self_signed,
            mtls_ca_bundle=str(mtls_op.certs.ca),  # the provider's server certificate is the test CA's
            token_endpoint_auth_method="self_signed_tls_client_auth",
            id_token_signed_response_alg="ES256",
            scopes=("openid", "email"),
        )
    )
    rp = kept_provider(config)
    ceremony = Ceremony.start(rp.name, rp.issuer, datetime.now(UTC))
    url = rp.authorization_url(ceremony, prompt="consent")
    back = drive_login(url, "self-user", requests.Session(), issuer=mtls_op.op.issuer)
    tokens = rp.exchange_code(back.code, ceremony.code_verifier)
    assert rp.fetch_userinfo(tokens.access_token, "self-user")["email"] == "self-user@example.com"
    userinfo = rp.endpoint("userinfo_endpoint")
    assert userinfo is not None
    bare = requests.get(
        userinfo,
        headers={"Authorization": f"Bearer {tokens.access_token}"},
        verify=str(mtls_op.certs.ca),
        timeout=5,
    )
    assert bare.status_code == 401  # bound to the self-signed certificate
    other = kept_provider(replace(config, client_certificate=mtls_op.certs.pair))  # not in the JWKS
    with pytest.raises(PushedRequestRefused) as refused:
        other.authorization_url(Ceremony.start(rp.name, rp.issuer, datetime.now(UTC)))
    assert refused.value.error == "invalid_client"


def kept_provider(config: OAuthProviderConfig) -> OAuthProvider:
    return keeper(InMemoryBackend(), SystemClock(), RequestsHttpClient(), config).tokens.registry.get(
        PROVIDER, "default"
    )
