"""Interop with a real, certified OpenID provider: panva's ``oidc-provider`` on 127.0.0.1.

The tests act as the relying party with plain ``requests`` (authorize with PKCE S256, the
provider's development login and consent pages, the token exchange) and check what comes back
with our own verifier (:class:`flask_authflow.jose.JwtVerifier`): RS256 and ES256 ID tokens, key
rotation between two logins, RP-initiated logout and the back-channel logout token it POSTs.
Then our own relying party (:class:`~flask_authflow.federation._provider.OAuthProvider`) logs
in against it: ES256, PS256 and RS256 ID tokens under a pinned algorithm, a client secret
with ``+%&=`` (client_secret_basic form-urlencodes it), client_secret_post, a key
rotation one second after a login, and stored tokens refreshed after the access token
expires (rotated refresh token, then revoked).
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from flask import Flask, request

from flask_authflow._clock import SystemClock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import TokenVerificationError, UnknownKeyId
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import IdTokenValidation, TokenExchange
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.jose import JwtVerifier, VerifiedClaims
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.jose._keys import parse_public_jwk
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._provider import BACKCHANNEL_LOGOUT_EVENT
from tests import oidc_parts
from tests.oidc_parts import (
    SPECIAL_SECRET,
    FinalRedirect,
    OidcProviderProcess,
    drive_login,
    drive_logout,
    serve_app,
    start_backchannel_receiver,
    start_oidc_provider,
)
from tests.provider_tokens_support import PROVIDER, keeper

pytestmark = [pytest.mark.http, pytest.mark.interop]

oidc_op = oidc_parts.oidc_op  # the marker check in front of the session-scoped provider
oidc_op_process = oidc_parts.oidc_op_process


def _pkce() -> tuple[str, str]:
    import hashlib

    verifier = secrets.token_urlsafe(48)
    return verifier, b64url_encode(hashlib.sha256(verifier.encode()).digest())


def _verifier(op: OidcProviderProcess) -> JwtVerifier:
    jwks = requests.get(op.discovery()["jwks_uri"], timeout=5).json()
    handle = JwksHandle()
    handle.replace_keys(parse_public_jwk(k) for k in jwks["keys"])
    return JwtVerifier(handle).with_algorithms(["RS256", "ES256"])


def _header(token: str) -> dict[str, Any]:
    head = token.split(".")[0]
    result: dict[str, Any] = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    return result


class Login:
    """One relying-party login against the real provider, done by hand."""

    def __init__(
        self, op: OidcProviderProcess, client_id: str, user: str, scope: str = "openid email"
    ) -> None:
        self.op = op
        self.client_id = client_id
        self.browser = requests.Session()
        self.state = secrets.token_urlsafe(16)
        self.nonce = secrets.token_urlsafe(16)
        self.verifier, challenge = _pkce()
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": op.redirect_uri,
            "scope": scope,
            "state": self.state,
            "nonce": self.nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        self.authorize_url = f"{op.discovery()['authorization_endpoint']}?{urlencode(params)}"
        self.callback: FinalRedirect = drive_login(self.authorize_url, user, self.browser, issuer=op.issuer)

    def exchange(self, verifier: str | None = None) -> requests.Response:
        return requests.post(
            self.op.discovery()["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": self.callback.code,
                "redirect_uri": self.op.redirect_uri,
                "code_verifier": verifier if verifier is not None else self.verifier,
            },
            auth=(self.client_id, self.op.client_secret),
            timeout=10,
        )

    def id_token(self) -> str:
        resp = self.exchange()
        assert resp.status_code == 200, resp.text
        token: str = resp.json()["id_token"]
        return token


def test_discovery_from_the_real_provider(oidc_op: OidcProviderProcess) -> None:
    doc = oidc_op.discovery()
    assert doc["issuer"] == oidc_op.issuer
    for name in (
        "authorization_endpoint",
        "token_endpoint",
        "jwks_uri",
        "userinfo_endpoint",
        "end_session_endpoint",
    ):
        assert doc[name].startswith(oidc_op.issuer + "/"), name
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["backchannel_logout_supported"] is True
    assert doc["authorization_response_iss_parameter_supported"] is True
    assert {"RS256", "ES256"} <= set(doc["id_token_signing_alg_values_supported"])
    keys = requests.get(doc["jwks_uri"], timeout=5).json()["keys"]
    assert {k["alg"] for k in keys} >= {"RS256", "ES256"}
    assert all("d" not in k for k in keys)


@pytest.mark.parametrize(("client", "alg"), [("reference-app", "RS256"), ("reference-app-es256", "ES256")])
def test_full_login_and_id_token_verification(oidc_op: OidcProviderProcess, client: str, alg: str) -> None:
    login = Login(oidc_op, client, "alice")
    assert login.callback.url.startswith(oidc_op.redirect_uri + "?")
    assert login.callback.state == login.state
    assert login.callback.iss == oidc_op.issuer  # RFC 9207
    token = login.id_token()
    claims: VerifiedClaims = _verifier(oidc_op).verify(token, client, issuer=oidc_op.issuer)
    assert claims.alg == alg
    assert claims.sub == "alice"
    assert claims.claims["nonce"] == login.nonce
    assert isinstance(claims.claims["sid"], str)
    with pytest.raises(TokenVerificationError, match="audience"):
        _verifier(oidc_op).verify(token, "another-client", issuer=oidc_op.issuer)


def test_the_provider_refuses_a_wrong_pkce_verifier_and_a_reused_code(oidc_op: OidcProviderProcess) -> None:
    login = Login(oidc_op, oidc_op.client_id, "bob")
    wrong, _ = _pkce()
    bad = login.exchange(wrong)
    assert bad.status_code == 400
    assert bad.json()["error"] == "invalid_grant"
    assert login.exchange().status_code == 200  # the right verifier still redeems it once
    again = login.exchange()
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"


def test_the_provider_requires_pkce(oidc_op: OidcProviderProcess) -> None:
    params = {
        "response_type": "code",
        "client_id": oidc_op.client_id,
        "redirect_uri": oidc_op.redirect_uri,
        "scope": "openid",
        "state": "s1",
        "nonce": "n1",
    }
    url = f"{oidc_op.discovery()['authorization_endpoint']}?{urlencode(params)}"
    resp = requests.get(url, allow_redirects=False, timeout=5)
    assert resp.is_redirect
    location = resp.headers["Location"]
    assert location.startswith(oidc_op.redirect_uri + "?")
    assert "error=invalid_request" in location
    assert "code=" not in location


def test_userinfo_with_the_access_token(oidc_op: OidcProviderProcess) -> None:
    login = Login(oidc_op, oidc_op.client_id, "carol")
    tokens = login.exchange().json()
    info = requests.get(
        oidc_op.discovery()["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {tokens['access_token']}"},
        timeout=5,
    )
    assert info.status_code == 200
    assert info.json()["sub"] == "carol"
    assert info.json()["email"] == "carol@example.com"  # scope claims come from userinfo


def test_key_rotation_between_two_logins(oidc_op: OidcProviderProcess) -> None:
    first = Login(oidc_op, oidc_op.client_id, "dave").id_token()
    first_kid = _header(first)["kid"]
    new_kids = oidc_op.rotate_keys(keep_old=True)
    second = Login(oidc_op, oidc_op.client_id, "dave").id_token()
    second_kid = _header(second)["kid"]
    assert second_kid != first_kid
    assert second_kid in new_kids
    verifier = _verifier(oidc_op)  # fetched after the rotation: old and new keys
    assert verifier.verify(first, oidc_op.client_id, issuer=oidc_op.issuer).sub == "dave"
    assert verifier.verify(second, oidc_op.client_id, issuer=oidc_op.issuer).sub == "dave"
    # A verifier that only knew the old JWKS meets an unknown kid (and must refresh).
    old_only = JwksHandle()
    old_only.replace_keys(
        parse_public_jwk(k)
        for k in requests.get(oidc_op.discovery()["jwks_uri"], timeout=5).json()["keys"]
        if k["kid"] not in new_kids
    )
    with pytest.raises(UnknownKeyId):
        JwtVerifier(old_only).with_algorithms(["RS256", "ES256"]).verify(second, oidc_op.client_id)
    # Dropping the old keys: the first token no longer verifies against the fresh JWKS.
    oidc_op.rotate_keys(keep_old=False)
    with pytest.raises(UnknownKeyId):
        _verifier(oidc_op).verify(first, oidc_op.client_id, issuer=oidc_op.issuer)


def test_rp_initiated_logout_and_the_backchannel_logout_token(oidc_op: OidcProviderProcess) -> None:
    assert oidc_op.receiver is not None
    before = len(oidc_op.receiver.tokens)
    login = Login(oidc_op, oidc_op.client_id, "erin")
    id_token = login.id_token()
    sid = _verifier(oidc_op).verify(id_token, oidc_op.client_id).claims["sid"]
    params = {
        "id_token_hint": id_token,
        "post_logout_redirect_uri": oidc_op.post_logout_redirect_uri,
        "state": "bye-123",
    }
    end_session = f"{oidc_op.discovery()['end_session_endpoint']}?{urlencode(params)}"
    page = login.browser.get(end_session, allow_redirects=False, timeout=5)
    assert page.status_code == 200  # the confirmation page: nothing is posted before "yes"
    assert oidc_op.receiver.wait_for(before + 1, timeout=0.3) == oidc_op.receiver.tokens[:before]
    back = drive_logout(end_session, login.browser, issuer=oidc_op.issuer)
    assert back.url.startswith(oidc_op.post_logout_redirect_uri)
    assert back.state == "bye-123"

    tokens = oidc_op.receiver.wait_for(before + 1)
    assert len(tokens) == before + 1
    logout_token = tokens[-1]
    assert _header(logout_token)["typ"] == "logout+jwt"
    claims = _verifier(oidc_op).verify(logout_token, oidc_op.client_id, issuer=oidc_op.issuer).claims
    assert claims["events"] == {BACKCHANNEL_LOGOUT_EVENT: {}}
    assert claims["sub"] == "erin"
    assert claims["sid"] == sid
    assert "nonce" not in claims
    assert isinstance(claims["jti"], str)


def test_end_session_refuses_an_unregistered_post_logout_redirect(oidc_op: OidcProviderProcess) -> None:
    login = Login(oidc_op, oidc_op.client_id, "frank")
    params = {
        "id_token_hint": login.id_token(),
        "post_logout_redirect_uri": "http://127.0.0.1:9/evil",
    }
    end_session = f"{oidc_op.discovery()['end_session_endpoint']}?{urlencode(params)}"
    resp = login.browser.get(end_session, allow_redirects=False, timeout=5)
    assert resp.status_code == 400
    assert "evil" not in resp.headers.get("Location", "")


def test_without_the_fetch_override_the_ssrf_guard_blocks_the_loopback_post() -> None:
    """Why op.mjs replaces ``fetch``: with oidc-provider's guard kept, no logout token reaches 127.0.0.1."""
    receiver = start_backchannel_receiver()
    rp = "http://127.0.0.1:9"
    op = start_oidc_provider([f"{rp}/cb"], [f"{rp}/out"], receiver.url, keep_ssrf_guard=True)
    try:
        login = Login(op, op.client_id, "grace")
        params = {
            "id_token_hint": login.id_token(),
            "post_logout_redirect_uri": op.post_logout_redirect_uri,
            "state": "s",
        }
        end_session = f"{op.discovery()['end_session_endpoint']}?{urlencode(params)}"
        back = drive_logout(end_session, login.browser, issuer=op.issuer)
        assert back.state == "s"  # the logout itself still completes
        assert receiver.wait_for(1, timeout=1.0) == []
        assert "backchannel logout to reference-app failed" in op.output()
        assert "special-use IP address" in op.output()
    finally:
        op.stop()
        receiver.stop()


def test_a_relying_party_on_loopback_is_signed_out_by_the_providers_post() -> None:
    """A minimal RP served on 127.0.0.1: login via its callback, then the provider's POST ends its session.

    The RP here is a stand-in written with plain ``requests``; it shows the harness (``serve_app``
    then ``start_oidc_provider`` with the app's URLs) that the reference app's end-to-end test uses.
    """
    sessions: dict[str, str] = {}  # sid at the provider -> sub, the RP's "signed-in" table
    rp = Flask("loopback-rp")
    config: dict[str, Any] = {}

    @rp.get("/auth/callback/op")
    def callback() -> tuple[str, int]:
        op: OidcProviderProcess = config["op"]
        if request.args.get("state") != config["state"] or request.args.get("iss") != op.issuer:
            return "bad state or iss", 400
        tokens = requests.post(
            op.discovery()["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": request.args["code"],
                "redirect_uri": op.redirect_uri,
                "code_verifier": config["verifier"],
            },
            auth=(op.client_id, op.client_secret),
            timeout=10,
        ).json()
        claims = _verifier(op).verify(tokens["id_token"], op.client_id, issuer=op.issuer).claims
        if claims.get("nonce") != config["nonce"]:
            return "bad nonce", 400
        sessions[claims["sid"]] = claims["sub"]
        return f"hello {claims['sub']}", 200

    @rp.post("/auth/backchannel-logout/op")
    def backchannel() -> tuple[str, int]:
        op: OidcProviderProcess = config["op"]
        try:
            claims = _verifier(op).verify(request.form["logout_token"], op.client_id, issuer=op.issuer).claims
        except TokenVerificationError:
            return "", 400
        if BACKCHANNEL_LOGOUT_EVENT not in claims.get("events", {}) or "nonce" in claims:
            return "", 400
        sessions.pop(claims["sid"], None)
        return "", 200

    served = serve_app(rp)
    op = start_oidc_provider(
        [f"{served.url}/auth/callback/op"],
        [f"{served.url}/signed-out"],
        f"{served.url}/auth/backchannel-logout/op",
    )
    try:
        config["op"] = op
        verifier, challenge = _pkce()
        config.update(verifier=verifier, state=secrets.token_urlsafe(8), nonce=secrets.token_urlsafe(8))
        params = {
            "response_type": "code",
            "client_id": op.client_id,
            "redirect_uri": op.redirect_uri,
            "scope": "openid",
            "state": config["state"],
            "nonce": config["nonce"],
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        browser = requests.Session()
        authorize = f"{op.discovery()['authorization_endpoint']}?{urlencode(params)}"
        back = drive_login(authorize, "heidi", browser, issuer=op.issuer)
        landed = browser.get(back.url, timeout=10)  # the browser follows to the RP's callback
        assert landed.status_code == 200
        assert landed.text == "hello heidi"
        assert list(sessions.values()) == ["heidi"]

        # Sign out at the provider (the RP's id_token_hint is not needed for this check).
        end_session = f"{op.discovery()['end_session_endpoint']}?" + urlencode(
            {"client_id": op.client_id, "post_logout_redirect_uri": op.post_logout_redirect_uri}
        )
        drive_logout(end_session, browser, issuer=op.issuer)
        assert sessions == {}
        assert "backchannel logout to reference-app sent" in op.output()
    finally:
        op.stop()
        served.stop()


# --- our relying party (OAuthProvider) against the real provider -----------------------------------


def _our_rp(op: OidcProviderProcess, client_id: str, secret: str, **options: Any) -> OAuthProvider:
    """Our relying party for ``client_id``, discovered from the real provider."""
    return OAuthProviderConfig.discover(op.discovery_url, client_id, secret, op.redirect_uri, **options)


def _our_login(op: OidcProviderProcess, rp: OAuthProvider, user: str) -> VerifiedClaims:
    """A login through our provider object: authorize URL, the provider's pages, our token
    request (its client authentication) and our ID-token checks (pinned algorithm, at_hash)."""
    ceremony = Ceremony.start(rp.name, rp.issuer, datetime.now(UTC))
    back = drive_login(rp.authorization_url(ceremony), user, requests.Session(), issuer=op.issuer)
    assert back.state == ceremony.state and back.iss == op.issuer
    tokens = rp.exchange_code(back.code, ceremony.code_verifier)
    claims = rp.validate_id_token(tokens.id_token, ceremony.nonce, tokens.access_token)
    assert claims.sub == user
    assert rp.fetch_userinfo(tokens.access_token, user)["email"] == f"{user}@example.com"
    return claims


@pytest.mark.parametrize(("suffix", "alg"), [("-es256", "ES256"), ("-ps256", "PS256"), ("", "RS256")])
def test_our_rp_verifies_es256_ps256_and_rs256_id_tokens(
    oidc_op: OidcProviderProcess, suffix: str, alg: str
) -> None:
    rp = _our_rp(oidc_op, oidc_op.client_id + suffix, oidc_op.client_secret, id_token_signed_response_alg=alg)
    assert _our_login(oidc_op, rp, "ivan").alg == alg
    other = "ES256" if alg != "ES256" else "RS256"
    pinned_elsewhere = _our_rp(
        oidc_op, oidc_op.client_id + suffix, oidc_op.client_secret, id_token_signed_response_alg=other
    )
    with pytest.raises(IdTokenValidation, match="algorithm"):
        _our_login(oidc_op, pinned_elsewhere, "ivan")


def test_our_rp_sends_a_secret_with_plus_percent_ampersand_equals(oidc_op: OidcProviderProcess) -> None:
    assert set("+%&=") <= set(SPECIAL_SECRET)
    rp = _our_rp(oidc_op, f"{oidc_op.client_id}-special", SPECIAL_SECRET)
    assert rp.token_auth_method == "client_secret_basic"
    assert _our_login(oidc_op, rp, "judy").sub == "judy"
    wrong = _our_rp(oidc_op, f"{oidc_op.client_id}-special", SPECIAL_SECRET.replace("+", " "))
    with pytest.raises(TokenExchange, match="invalid_client"):
        _our_login(oidc_op, wrong, "judy")


def test_our_rp_authenticates_with_client_secret_post(oidc_op: OidcProviderProcess) -> None:
    client_id = f"{oidc_op.client_id}-post"
    rp = _our_rp(oidc_op, client_id, oidc_op.client_secret, token_endpoint_auth_method="client_secret_post")
    assert rp.token_auth_method == "client_secret_post"
    assert _our_login(oidc_op, rp, "mallory").sub == "mallory"
    wrong = _our_rp(oidc_op, client_id, "not-the-secret", token_endpoint_auth_method="client_secret_post")
    with pytest.raises(TokenExchange, match="invalid_client"):
        _our_login(oidc_op, wrong, "mallory")


def test_our_rp_follows_a_rotation_one_second_after_a_login(oidc_op: OidcProviderProcess) -> None:
    rp = _our_rp(oidc_op, oidc_op.client_id, oidc_op.client_secret)
    first = _our_login(oidc_op, rp, "oscar")
    fetches = rp.keys.fetch_count
    new_kids = oidc_op.rotate_keys(keep_old=False)  # the old keys are gone at once
    time.sleep(1.05)  # the 1 s floor since the last key fetch
    second = _our_login(oidc_op, rp, "oscar")
    assert second.kid != first.kid and second.kid in new_kids
    assert rp.keys.fetch_count == fetches + 1


# --- stored provider tokens ------------------------------------------------------------------------


def test_stored_tokens_refreshed_after_access_token_expires(oidc_op: OidcProviderProcess) -> None:
    """``store_tokens`` with the real provider: the client ``-tokens`` gets access tokens of
    3 s and a new refresh token at every refresh; the revocation endpoint is on."""
    config = OAuthProviderConfig(
        oidc_op.discovery_url,
        f"{oidc_op.client_id}-tokens",
        oidc_op.client_secret,
        oidc_op.redirect_uri,
        store_tokens=True,
        scopes=("openid", "email", "offline_access"),
    )
    store = InMemoryBackend()
    kept = keeper(store, SystemClock(), RequestsHttpClient(), config)
    kept.tokens.skew = timedelta(0)  # the whole 3 s lifetime is used here
    rp = kept.tokens.registry.get(PROVIDER, "default")
    assert rp.metadata.revocation_endpoint is not None
    ceremony = Ceremony.start(rp.name, rp.issuer, datetime.now(UTC))
    url = rp.authorization_url(ceremony, scopes=config.scopes, prompt="consent")
    back = drive_login(url, "peggy", requests.Session(), issuer=oidc_op.issuer)
    tokens = rp.exchange_code(back.code, ceremony.code_verifier)
    assert tokens.refresh_token is not None and tokens.expires_in == 3
    assert kept.tokens.keep("default", "u-peggy", rp, tokens, config.scopes)

    first = kept.get("u-peggy")
    assert first == tokens.access_token
    assert rp.fetch_userinfo(first, "peggy")["email"] == "peggy@example.com"
    assert kept.get("u-peggy") == first  # still valid: no refresh
    assert kept.audit == [("provider_token_store", "success", None)]
    time.sleep(3.2)  # past the access token's expires_in
    second = kept.get("u-peggy")
    assert second != first
    assert rp.fetch_userinfo(second, "peggy")["email"] == "peggy@example.com"
    row = store.get_provider_tokens("default", "u-peggy", PROVIDER)
    assert row is not None
    rotated = json.loads(
        kept.tokens.sealer.open(f"provider-token\x00default\x00u-peggy\x00{PROVIDER}", row.sealed)
    )
    assert rotated["refresh_token"] not in (None, tokens.refresh_token)  # the provider rotated it
    assert kept.audit[-1] == ("provider_token_refresh", "success", "rotated")

    # Unlinking (here: forget) revokes the refresh token at the provider and deletes the row.
    assert kept.tokens.forget("default", "u-peggy", PROVIDER, reason="unlink")
    assert kept.audit[-1] == ("provider_token_revoke", "success", "unlink")
    assert store.get_provider_tokens("default", "u-peggy", PROVIDER) is None
    spent = rp.client_request(
        rp.metadata.token_endpoint, {"grant_type": "refresh_token", "refresh_token": rotated["refresh_token"]}
    )
    assert spent.status == 400 and spent.json_object()["error"] == "invalid_grant"
