"""The in-process OpenID provider for tests, exercised with plain ``requests`` through its adapter."""

from __future__ import annotations

import base64
import json
import secrets
import textwrap
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError, TokenVerificationError, UnknownKeyId
from flask_authflow.testing import TestOpenIDProvider
from flask_authflow.testing._provider import BACKCHANNEL_LOGOUT_EVENT, query_params

pytest_plugins = ["pytester"]

DOCS_TESTING = Path(__file__).resolve().parent.parent / "docs" / "testing.rst"
CLIENT = "app"
SECRET = "s3cret"
REDIRECT = "https://app.test/auth/callback/op"
POST_LOGOUT = "https://app.test/signed-out"
BACKCHANNEL = "https://app.test/auth/backchannel-logout/op"


def _pkce() -> tuple[str, str]:
    import hashlib

    verifier = secrets.token_urlsafe(48)
    challenge = b64url_encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge


@pytest.fixture
def provider() -> TestOpenIDProvider:
    op = TestOpenIDProvider()
    op.register_client(
        CLIENT,
        SECRET,
        [REDIRECT],
        post_logout_redirect_uris=[POST_LOGOUT],
        backchannel_logout_uri=BACKCHANNEL,
    )
    op.login_as("alice", email="alice@example.com", email_verified=True)
    return op


@pytest.fixture
def http(provider: TestOpenIDProvider) -> requests.Session:
    session = requests.Session()
    session.mount(provider.base_url, provider.requests_adapter())
    return session


def _authorize(
    http: requests.Session,
    provider: TestOpenIDProvider,
    challenge: str,
    **overrides: str,
) -> requests.Response:
    params = {
        "response_type": "code",
        "client_id": CLIENT,
        "redirect_uri": REDIRECT,
        "scope": "openid email",
        "state": "st-1",
        "nonce": "n-1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    params.update(overrides)
    return http.get(f"{provider.issuer}/authorize", params=params, allow_redirects=False)


def _code(http: requests.Session, provider: TestOpenIDProvider, challenge: str, **kw: str) -> str:
    resp = _authorize(http, provider, challenge, **kw)
    assert resp.status_code == 302
    return query_params(resp.headers["Location"])["code"]


def _exchange(
    http: requests.Session,
    provider: TestOpenIDProvider,
    code: str,
    verifier: str,
    *,
    secret: str = SECRET,
    redirect_uri: str = REDIRECT,
) -> requests.Response:
    return http.post(
        f"{provider.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        },
        auth=(CLIENT, secret),
    )


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    result: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return result


def _header(token: str) -> dict[str, Any]:
    head = token.split(".")[0]
    result: dict[str, Any] = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    return result


# -- discovery and JWKS ---------------------------------------------------------------------------


def test_discovery_document(provider: TestOpenIDProvider, http: requests.Session) -> None:
    doc = http.get(provider.discovery_url).json()
    assert doc["issuer"] == "https://op.test"
    for name, path in (
        ("authorization_endpoint", "/authorize"),
        ("token_endpoint", "/token"),
        ("jwks_uri", "/jwks"),
        ("userinfo_endpoint", "/userinfo"),
        ("end_session_endpoint", "/end_session"),
    ):
        assert doc[name] == "https://op.test" + path
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["backchannel_logout_supported"] is True
    assert set(doc["token_endpoint_auth_methods_supported"]) == {
        "client_secret_basic",
        "client_secret_post",
    }
    assert "RS256" in doc["id_token_signing_alg_values_supported"]
    assert "ES256" in doc["id_token_signing_alg_values_supported"]
    jwks = http.get(doc["jwks_uri"]).json()
    assert [k["kid"] for k in jwks["keys"]] == [provider.current_kid]
    assert all("d" not in k for k in jwks["keys"])


def test_issuer_with_path_serves_under_it() -> None:
    op = TestOpenIDProvider("https://idp.test/realms/acme")
    http = requests.Session()
    http.mount(op.base_url, op.requests_adapter())
    doc = http.get("https://idp.test/realms/acme/.well-known/openid-configuration").json()
    assert doc["issuer"] == "https://idp.test/realms/acme"
    assert http.get(doc["jwks_uri"]).status_code == 200


# -- the code flow --------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_full_code_flow_with_pkce(algorithm: str) -> None:
    provider = TestOpenIDProvider(algorithm=algorithm)
    provider.register_client(CLIENT, SECRET, [REDIRECT])
    provider.login_as("alice", email="alice@example.com", email_verified=True)
    http = requests.Session()
    http.mount(provider.base_url, provider.requests_adapter())
    verifier, challenge = _pkce()
    resp = _authorize(http, provider, challenge)
    assert resp.status_code == 302
    location = resp.headers["Location"]
    assert location.startswith(REDIRECT + "?")
    params = query_params(location)
    assert params["state"] == "st-1"
    assert params["iss"] == "https://op.test"  # RFC 9207
    tokens = _exchange(http, provider, params["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    assert tokens.headers["Cache-Control"] == "no-store"
    body = tokens.json()
    assert body["token_type"] == "Bearer"
    assert "refresh_token" not in body  # no offline_access asked
    verified = provider.verifier().verify(body["id_token"], CLIENT, issuer="https://op.test")
    assert verified.alg == algorithm
    assert verified.sub == "alice"
    assert verified.claims["nonce"] == "n-1"
    assert verified.claims["email"] == "alice@example.com"
    assert verified.claims["sid"] == provider.session_id


def test_id_token_verifies_against_the_served_jwks(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    from flask_authflow.jose import JwtVerifier
    from flask_authflow.jose._jwks import JwksHandle
    from flask_authflow.jose._keys import parse_public_jwk

    verifier, challenge = _pkce()
    token = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["id_token"]
    handle = JwksHandle()
    handle.replace_keys(parse_public_jwk(k) for k in http.get(f"{provider.issuer}/jwks").json()["keys"])
    claims = JwtVerifier(handle).with_algorithms(["RS256"]).verify(token, CLIENT, issuer=provider.issuer)
    assert claims.sub == "alice"


def test_client_secret_post_and_offline_access_refresh(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    verifier, challenge = _pkce()
    code = _code(http, provider, challenge, scope="openid offline_access")
    resp = http.post(
        f"{provider.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
            "client_id": CLIENT,
            "client_secret": SECRET,
        },
    )
    assert resp.status_code == 200, resp.text
    refresh = resp.json()["refresh_token"]
    again = http.post(
        f"{provider.issuer}/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh},
        auth=(CLIENT, SECRET),
    )
    assert again.status_code == 200
    assert provider.verifier().verify(again.json()["id_token"], CLIENT).sub == "alice"


def test_bad_pkce_verifier_is_refused(provider: TestOpenIDProvider, http: requests.Session) -> None:
    _, challenge = _pkce()
    other_verifier, _ = _pkce()
    resp = _exchange(http, provider, _code(http, provider, challenge), other_verifier)
    assert resp.status_code == 400
    assert resp.json()["error"] == "invalid_grant"


def test_code_is_single_use(provider: TestOpenIDProvider, http: requests.Session) -> None:
    verifier, challenge = _pkce()
    code = _code(http, provider, challenge)
    assert _exchange(http, provider, code, verifier).status_code == 200
    replay = _exchange(http, provider, code, verifier)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"


def test_token_redirect_uri_must_match_the_authorize_one(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    verifier, challenge = _pkce()
    code = _code(http, provider, challenge)
    resp = _exchange(http, provider, code, verifier, redirect_uri=REDIRECT + "/x")
    assert resp.status_code == 400
    assert resp.json()["error"] == "invalid_grant"


def test_wrong_client_secret_is_invalid_client(provider: TestOpenIDProvider, http: requests.Session) -> None:
    verifier, challenge = _pkce()
    code = _code(http, provider, challenge)
    resp = _exchange(http, provider, code, verifier, secret="wrong")
    assert resp.status_code == 401
    assert resp.json()["error"] == "invalid_client"
    assert "WWW-Authenticate" in resp.headers
    # The failed attempt did not burn the code for the real client.
    assert _exchange(http, provider, code, verifier).status_code == 200


@pytest.mark.parametrize(
    "authorization",
    ["Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode(), "Basic " + "\u00e9"],
)
def test_malformed_basic_auth_is_invalid_client(
    provider: TestOpenIDProvider, http: requests.Session, authorization: str
) -> None:
    resp = http.post(
        f"{provider.issuer}/token",
        data={"grant_type": "authorization_code", "code": "x"},
        headers={"Authorization": authorization.encode("utf-8").decode("latin-1")},
    )
    assert resp.status_code == 401
    assert resp.json()["error"] == "invalid_client"


def test_unregistered_redirect_uri_is_not_redirected_to(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    _, challenge = _pkce()
    for bad in (REDIRECT + "/", REDIRECT + "?x=1", "https://evil.test/cb", REDIRECT.upper()):
        resp = _authorize(http, provider, challenge, redirect_uri=bad)
        assert resp.status_code == 400, bad
        assert "Location" not in resp.headers


def test_unknown_client_is_refused(provider: TestOpenIDProvider, http: requests.Session) -> None:
    _, challenge = _pkce()
    resp = _authorize(http, provider, challenge, client_id="nobody")
    assert resp.status_code == 400
    assert resp.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge": ""}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "email"}, "invalid_scope"),
    ],
)
def test_authorize_errors_go_back_with_state_and_iss(
    provider: TestOpenIDProvider, http: requests.Session, overrides: dict[str, str], error: str
) -> None:
    _, challenge = _pkce()
    resp = _authorize(http, provider, challenge, **overrides)
    assert resp.status_code == 302
    params = query_params(resp.headers["Location"])
    assert params["error"] == error
    assert params["state"] == "st-1"
    assert params["iss"] == provider.issuer
    assert "code" not in params


def test_authorize_without_a_login_answers_login_required(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    provider.logout()
    _, challenge = _pkce()
    params = query_params(_authorize(http, provider, challenge).headers["Location"])
    assert params["error"] == "login_required"


def test_login_as_switches_subject_and_session(provider: TestOpenIDProvider, http: requests.Session) -> None:
    first_sid = provider.session_id
    provider.login_as("bob", name="Bob")
    assert provider.session_id != first_sid
    verifier, challenge = _pkce()
    token = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["id_token"]
    claims = provider.verifier().verify(token, CLIENT).claims
    assert claims["sub"] == "bob"
    assert claims["name"] == "Bob"
    assert claims["sid"] == provider.session_id


# -- userinfo -------------------------------------------------------------------------------------


def test_userinfo_with_the_access_token(provider: TestOpenIDProvider, http: requests.Session) -> None:
    verifier, challenge = _pkce()
    access = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["access_token"]
    info = http.get(f"{provider.issuer}/userinfo", headers={"Authorization": f"Bearer {access}"})
    assert info.status_code == 200
    assert info.json() == {"sub": "alice", "email": "alice@example.com", "email_verified": True}


@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Basic abc", "Bearer "])
def test_userinfo_refuses_a_bad_token(
    provider: TestOpenIDProvider, http: requests.Session, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    resp = http.get(f"{provider.issuer}/userinfo", headers=headers)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


# -- tampering ------------------------------------------------------------------------------------


def _tampered_id_token(provider: TestOpenIDProvider, http: requests.Session, *tamper: Any) -> str:
    provider.tamper_next(*tamper)
    verifier, challenge = _pkce()
    resp = _exchange(http, provider, _code(http, provider, challenge), verifier)
    token: str = resp.json()["id_token"]
    return token


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("wrong_iss", "issuer mismatch"),
        ("iss_trailing_slash", "issuer mismatch"),
        ("iss_case", "issuer mismatch"),
        ("wrong_aud", "audience mismatch"),
        ("expired", "token expired"),
        ("alg_none", "empty segment|algorithm not allowed"),
        ("hs256_public_key", "algorithm not allowed"),
        ("bad_signature", "bad signature"),
    ],
)
def test_tampered_id_tokens_fail_verification(
    provider: TestOpenIDProvider, http: requests.Session, tamper: str, reason: str
) -> None:
    token = _tampered_id_token(provider, http, tamper)
    if tamper == "alg_none":
        assert _header(token)["alg"] == "none"
        assert token.endswith(".")
    with pytest.raises(TokenVerificationError, match=reason):
        provider.verifier().verify(token, CLIENT, issuer=provider.issuer)


def test_tamper_applies_to_the_next_code_only(provider: TestOpenIDProvider, http: requests.Session) -> None:
    _tampered_id_token(provider, http, "wrong_iss")
    token = _tampered_id_token(provider, http)
    assert provider.verifier().verify(token, CLIENT, issuer=provider.issuer).sub == "alice"


def test_claim_tampers_shape_the_claims(provider: TestOpenIDProvider, http: requests.Session) -> None:
    no_azp = _claims(_tampered_id_token(provider, http, "aud_array_no_azp"))
    assert no_azp["aud"] == [CLIENT, "another-client"]
    assert "azp" not in no_azp
    assert _claims(_tampered_id_token(provider, http, "wrong_azp"))["azp"] == "another-client"
    assert _claims(_tampered_id_token(provider, http, "wrong_nonce"))["nonce"] != "n-1"
    assert "nonce" not in _claims(_tampered_id_token(provider, http, "no_nonce"))
    assert "sub" not in _claims(_tampered_id_token(provider, http, "no_sub"))
    old = _claims(_tampered_id_token(provider, http, "old_iat"))
    assert old["iat"] < old["exp"] - 86000
    assert "kid" not in _header(_tampered_id_token(provider, http, "missing_kid"))
    with pytest.raises(UnknownKeyId):
        provider.verifier().verify(_tampered_id_token(provider, http, "unknown_kid"), CLIENT)


def test_hs256_tamper_is_keyed_with_the_public_key(provider: TestOpenIDProvider) -> None:
    from cryptography.hazmat.primitives import hashes, hmac, serialization

    token = provider.id_token(CLIENT, "alice", tamper=["hs256_public_key"])
    head, payload, sig = token.split(".")
    assert _header(token)["alg"] == "HS256"
    pem = provider._key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    mac = hmac.HMAC(pem, hashes.SHA256())
    mac.update(f"{head}.{payload}".encode())
    mac.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))


def test_userinfo_wrong_sub_tamper(provider: TestOpenIDProvider, http: requests.Session) -> None:
    provider.tamper_next("userinfo_wrong_sub")
    verifier, challenge = _pkce()
    access = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["access_token"]
    info = http.get(f"{provider.issuer}/userinfo", headers={"Authorization": f"Bearer {access}"}).json()
    assert info["sub"] != "alice"


def test_unknown_tamper_is_a_configuration_error(provider: TestOpenIDProvider) -> None:
    with pytest.raises(ConfigurationError):
        provider.tamper_next("wrong_isss")  # type: ignore[arg-type]


# -- rotation -------------------------------------------------------------------------------------


def test_rotation_keeps_or_drops_the_old_key(provider: TestOpenIDProvider, http: requests.Session) -> None:
    old_kid = provider.current_kid
    verifier, challenge = _pkce()
    old_token = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["id_token"]
    new_kid = provider.rotate_key()
    assert new_kid != old_kid
    kids = [k["kid"] for k in http.get(f"{provider.issuer}/jwks").json()["keys"]]
    assert kids == [old_kid, new_kid]
    verifier, challenge = _pkce()
    new_token = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["id_token"]
    assert _header(new_token)["kid"] == new_kid
    assert provider.verifier().verify(old_token, CLIENT).sub == "alice"

    es_kid = provider.rotate_key("ES256", keep_old=False)
    jwks = http.get(f"{provider.issuer}/jwks").json()["keys"]
    assert [(k["kid"], k["alg"]) for k in jwks] == [(es_kid, "ES256")]
    with pytest.raises(UnknownKeyId):
        provider.verifier().verify(new_token, CLIENT)


# -- end session ----------------------------------------------------------------------------------


def _id_token(provider: TestOpenIDProvider, http: requests.Session) -> str:
    verifier, challenge = _pkce()
    token: str = _exchange(http, provider, _code(http, provider, challenge), verifier).json()["id_token"]
    return token


def test_end_session_redirects_to_the_registered_uri_with_state(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    hint = _id_token(provider, http)
    resp = http.get(
        f"{provider.issuer}/end_session",
        params={"id_token_hint": hint, "post_logout_redirect_uri": POST_LOGOUT, "state": "bye"},
        allow_redirects=False,
    )
    assert resp.status_code == 302
    assert resp.headers["Location"] == POST_LOGOUT + "?state=bye"
    assert provider.end_session_requests[-1]["id_token_hint"] == hint
    # The provider session ended: the next authorize needs a new login.
    _, challenge = _pkce()
    assert (
        query_params(_authorize(http, provider, challenge).headers["Location"])["error"] == "login_required"
    )


@pytest.mark.parametrize("bad", ["https://evil.test/", POST_LOGOUT + "/", POST_LOGOUT + "?next=x"])
def test_end_session_refuses_unregistered_redirects(
    provider: TestOpenIDProvider, http: requests.Session, bad: str
) -> None:
    hint = _id_token(provider, http)
    resp = http.get(
        f"{provider.issuer}/end_session",
        params={"id_token_hint": hint, "post_logout_redirect_uri": bad},
        allow_redirects=False,
    )
    assert resp.status_code == 400
    assert "Location" not in resp.headers


@pytest.mark.parametrize("hint", ["garbage", "a.b.c", "", "x" * 20000])
def test_end_session_refuses_a_bad_hint(
    provider: TestOpenIDProvider, http: requests.Session, hint: str
) -> None:
    params = {"post_logout_redirect_uri": POST_LOGOUT, "id_token_hint": hint}
    resp = http.get(f"{provider.issuer}/end_session", params=params, allow_redirects=False)
    assert resp.status_code == 400


def test_end_session_refuses_a_forged_hint(provider: TestOpenIDProvider, http: requests.Session) -> None:
    forged = provider.id_token(CLIENT, "alice", tamper=["bad_signature"])
    resp = http.get(
        f"{provider.issuer}/end_session",
        params={"id_token_hint": forged, "post_logout_redirect_uri": POST_LOGOUT},
        allow_redirects=False,
    )
    assert resp.status_code == 400


def test_end_session_without_redirect_shows_a_page(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    resp = http.get(f"{provider.issuer}/end_session", allow_redirects=False)
    assert resp.status_code == 200
    assert "signed out" in resp.text


# -- back-channel logout --------------------------------------------------------------------------


def _receiver() -> tuple[Flask, list[dict[str, Any]]]:
    app = Flask("receiver")
    received: list[dict[str, Any]] = []

    @app.post("/auth/backchannel-logout/op")
    def logout() -> tuple[str, int]:
        received.append({"form": dict(request.form), "content_type": request.content_type})
        return "", 200

    return app, received


def test_backchannel_logout_through_a_flask_test_client(provider: TestOpenIDProvider) -> None:
    app, received = _receiver()
    result = provider.send_backchannel_logout(app.test_client(), sub="alice", sid=provider.session_id)
    assert result.status_code == 200
    assert len(received) == 1
    assert received[0]["content_type"] == "application/x-www-form-urlencoded"
    token = received[0]["form"]["logout_token"]
    assert token == result.logout_token
    assert _header(token)["typ"] == "logout+jwt"
    claims = provider.verifier().verify(token, CLIENT, issuer=provider.issuer).claims
    assert claims["events"] == {BACKCHANNEL_LOGOUT_EVENT: {}}
    assert claims["sub"] == "alice"
    assert claims["sid"] == provider.session_id
    assert isinstance(claims["jti"], str)
    assert "nonce" not in claims
    second = provider.send_backchannel_logout(app.test_client(), sid=provider.session_id)
    assert _claims(second.logout_token)["jti"] != claims["jti"]
    assert "sub" not in _claims(second.logout_token)


def test_backchannel_logout_through_requests(provider: TestOpenIDProvider) -> None:
    app, received = _receiver()
    session = requests.Session()
    from flask_authflow.testing._provider import wsgi_adapter

    session.mount("https://app.test/", wsgi_adapter(app))
    result = provider.send_backchannel_logout(BACKCHANNEL, sub="alice", session=session)
    assert result.status_code == 200
    assert received[0]["form"]["logout_token"] == result.logout_token


@pytest.mark.parametrize(
    ("tamper", "check"),
    [
        ("logout_nonce", lambda c, h: "nonce" in c),
        ("logout_no_events", lambda c, h: "events" not in c),
        ("logout_wrong_event", lambda c, h: BACKCHANNEL_LOGOUT_EVENT not in c["events"]),
        ("logout_no_sub_sid", lambda c, h: "sub" not in c and "sid" not in c),
        ("logout_typ_jwt", lambda c, h: h["typ"] == "JWT"),
    ],
)
def test_logout_token_tampers(provider: TestOpenIDProvider, tamper: str, check: Any) -> None:
    token = provider.logout_token(CLIENT, sub="alice", tamper=[tamper])  # type: ignore[list-item]
    assert check(_claims(token), _header(token))


def test_oversize_logout_token(provider: TestOpenIDProvider) -> None:
    assert len(provider.logout_token(CLIENT, sub="alice", tamper=["logout_oversize"])) > 8192


def test_logout_token_needs_sub_or_sid(provider: TestOpenIDProvider) -> None:
    with pytest.raises(ConfigurationError):
        provider.logout_token(CLIENT)


def test_adapter_serves_no_other_host(provider: TestOpenIDProvider, http: requests.Session) -> None:
    resp = http.get("https://op.test/nothing-here")
    assert resp.status_code == 404


# -- the documented example, run as a user's suite ------------------------------------------------


def _docs_example() -> str:
    text = DOCS_TESTING.read_text()
    section = text.split("Testing federated login: the in-process OpenID provider", 1)[1]
    block = section.split(".. code-block:: python\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def test_documented_example_runs_with_the_plugin_fixture(pytester: pytest.Pytester) -> None:
    example = _docs_example()
    assert "def test_sign_in(oidc_provider)" in example
    pytester.makepyfile(test_docs_example=example)
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=3)


def test_plugin_fixture_is_a_fresh_provider_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fresh="""
from flask_authflow.testing import TestOpenIDProvider

seen = []

def test_one(oidc_provider, mock_clock):
    assert isinstance(oidc_provider, TestOpenIDProvider)
    assert oidc_provider.issuer == "https://op.test"
    assert oidc_provider.client().client_id == "test-client"
    assert oidc_provider.client().backchannel_logout_uri.endswith("/backchannel-logout/test-op")
    token = oidc_provider.id_token("test-client", "alice")
    assert oidc_provider.verifier().verify(token, "test-client").iat == int(mock_clock.now().timestamp())
    seen.append(oidc_provider.current_kid)

def test_two(oidc_provider):
    assert oidc_provider.current_kid not in seen
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=2)


# -- odd input never gives a 500 ------------------------------------------------------------------


def test_non_ascii_code_verifier_is_invalid_grant_not_500(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    _, challenge = _pkce()
    code = _code(http, provider, challenge)
    resp = _exchange(http, provider, code, "\u00e9" * 50)
    assert resp.status_code == 400
    assert resp.json()["error"] == "invalid_grant"


def test_non_ascii_code_challenge_is_refused_at_authorize(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    resp = _authorize(http, provider, "\u00e9" * 50)
    assert resp.status_code == 302
    assert query_params(resp.headers["Location"])["error"] == "invalid_request"


def test_end_session_hint_with_an_empty_audience_is_400(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    hint = provider.sign({"iss": provider.issuer, "sub": "alice", "aud": [""], "exp": 2**31})
    resp = http.get(
        f"{provider.issuer}/end_session",
        params={"id_token_hint": hint, "post_logout_redirect_uri": POST_LOGOUT},
        allow_redirects=False,
    )
    assert resp.status_code == 400


ODD = st.text(min_size=0, max_size=80)
HEADER_TEXT = st.text(
    st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=80
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(["/authorize", "/token", "/userinfo", "/end_session", "/jwks"]),
    method=st.sampled_from(["GET", "POST"]),
    params=st.dictionaries(
        st.sampled_from(
            [
                "client_id",
                "redirect_uri",
                "response_type",
                "scope",
                "code_challenge",
                "code_challenge_method",
                "grant_type",
                "code",
                "code_verifier",
                "refresh_token",
                "client_secret",
                "id_token_hint",
                "post_logout_redirect_uri",
                "state",
            ]
        ),
        ODD,
    ),
    authorization=st.one_of(
        st.none(), HEADER_TEXT.map(lambda t: "Basic " + t), HEADER_TEXT.map(lambda t: "Bearer " + t)
    ),
)
def test_odd_requests_never_get_a_500(
    provider: TestOpenIDProvider,
    path: str,
    method: str,
    params: dict[str, str],
    authorization: str | None,
) -> None:
    client = provider.app.test_client()
    headers = {} if authorization is None else {"Authorization": authorization}
    if method == "GET":
        resp = client.get(path, query_string=params, headers=headers)
    else:
        resp = client.post(path, data=params, headers=headers)
    assert resp.status_code < 500


def test_adapter_supports_streamed_reads_with_a_size_cap(
    provider: TestOpenIDProvider, http: requests.Session
) -> None:
    resp = http.get(provider.discovery_url, stream=True)
    first = resp.raw.read(10, decode_content=True)
    rest = b"".join(resp.raw.stream(64, decode_content=True))
    assert json.loads(first + rest)["issuer"] == provider.issuer
    streamed = http.get(provider.discovery_url, stream=True)
    assert json.loads(b"".join(streamed.iter_content(16)))["issuer"] == provider.issuer
    resp.close()
