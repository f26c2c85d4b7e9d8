"""Federated login against the in-process test provider: the ceremony, every ID-token check,
identity links, back-channel and RP-initiated logout, and each error variant."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from flask_authflow import get_state
from flask_authflow._web.views import csrf_token
from flask_authflow.errors import TokenCheck
from flask_authflow.federation._errors import (
    CsrfMismatch,
    Discovery,
    EndSessionRefused,
    Expired,
    IdTokenValidation,
    IssuerMismatch,
    LogoutTokenInvalid,
    ProviderUnreachable,
    TokenExchange,
    UnknownKid,
    UnknownProvider,
    UserInfo,
)
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._login import FederatedIdentity
from flask_authflow.federation._provider import OAuthProviderConfig
from flask_authflow.testing._provider import BACKCHANNEL_LOGOUT_EVENT
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app
from tests.federation_support import (
    CLIENT_ID,
    LOGOUT_RETURN,
    PROVIDER,
    FederatedApp,
    federated_app,
)


@pytest.fixture
def fed(oidc_provider, mock_clock, authflow_hasher) -> FederatedApp:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return federated_app(oidc_provider, mock_clock, authflow_hasher)


def login_rows(fed: FederatedApp, event: str = "oauth_login") -> list[tuple[str, str | None]]:
    return [(row.status, row.reason) for row in fed.backend.audit_rows if row.event == event]


# --- the happy path --------------------------------------------------------------------------


def test_full_login_reaches_the_dashboard(fed: FederatedApp) -> None:
    client = fed.client()
    start = client.get(f"/auth/login/{PROVIDER}")
    assert start.status_code == 302
    query = parse_qs(urlsplit(start.location).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43 and query["response_type"] == ["code"]
    assert query["client_id"] == [CLIENT_ID] and query["state"] and query["nonce"]
    assert "openid" in query["scope"][0].split()
    response = fed.sign_in(fed.client())
    assert response.status_code == 302 and response.location == "/dashboard"


def test_login_establishes_an_audited_session_and_a_link(fed: FederatedApp) -> None:
    client = fed.client()
    client.get("/dashboard")  # a guest session first
    response = fed.sign_in(client)
    assert response.status_code == 302
    page = client.get("/dashboard")
    assert page.text == "dashboard of test-op:alice-sub via oidc:test-op"
    link = fed.backend.find_link(fed.provider.issuer, "alice-sub")
    assert link is not None
    rows = [row for row in fed.backend.audit_rows if row.event == "login"]
    assert [(row.status, row.factor, row.user_id) for row in rows] == [
        ("success", "oidc:test-op", link.user_id)
    ]
    with client.session_transaction(environ_base=client.environ_base) as session:
        federation = session.record.federation
        assert federation["issuer"] == fed.provider.issuer and federation["sub"] == "alice-sub"
        assert federation["sid"] == fed.provider.session_id and federation["id_token"].count(".") == 2


def test_a_second_login_uses_the_link(fed: FederatedApp) -> None:
    fed.sign_in(fed.client())
    fed.sign_in(fed.client())
    assert len(fed.backend.list_users("default")) == 1


def test_next_is_kept_and_only_same_site(fed: FederatedApp) -> None:
    client = fed.client()
    target = fed.authorize(client, f"/auth/login/{PROVIDER}?next=/dashboard%3Ftab%3D2")
    assert client.get(target).location == "/dashboard?tab=2"
    client = fed.client()
    target = fed.authorize(client, f"/auth/login/{PROVIDER}?next=//evil.example/x")
    assert client.get(target).location == "/dashboard"


def test_claims_mapper_decides_the_user(fed: FederatedApp) -> None:
    seen: list[FederatedIdentity] = []
    admin = fed.backend.create_user("default", "root")

    @fed.authflow.claims_mapper
    def mapper(identity: FederatedIdentity) -> str | None:
        seen.append(identity)
        return admin.user_id if identity.verified_email == "alice@example.com" else None

    client = fed.client()
    fed.sign_in(client)
    assert client.get("/dashboard").text.startswith("dashboard of root")
    assert seen[0].subject == "alice-sub" and seen[0].link is None and seen[0].provider == PROVIDER
    assert fed.backend.find_link(fed.provider.issuer, "alice-sub").user_id == admin.user_id  # type: ignore[union-attr]


def test_claims_mapper_refusal_is_user_not_linked(fed: FederatedApp) -> None:
    fed.authflow.claims_mapper(lambda identity: None)
    response = fed.sign_in(fed.client())
    assert response.status_code == 403 and "no local account" in response.text
    assert login_rows(fed) == [("failure", "user_not_linked")]


def test_never_links_by_an_unverified_email(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("mallory-sub", email="alice@example.com", email_verified=False)
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, link_by_email=True)
    alice = add_user(
        fed.backend,
        "default",
        "alice",
        "a long enough password here",
        email="alice@example.com",
        email_verified_at=mock_clock.now(),
    )
    client = fed.client()
    fed.sign_in(client)
    assert not client.get("/dashboard").text.startswith("dashboard of alice")
    assert fed.backend.find_link(oidc_provider.issuer, "mallory-sub").user_id != alice.user_id  # type: ignore[union-attr]


def test_links_by_a_verified_email_only_when_allowed(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, link_by_email=True)
    alice = add_user(
        fed.backend,
        "default",
        "alice",
        "a long enough password here",
        email="alice@example.com",
        email_verified_at=mock_clock.now(),
    )
    client = fed.client()
    fed.sign_in(client)
    assert client.get("/dashboard").text.startswith("dashboard of alice ")
    assert fed.backend.find_link(oidc_provider.issuer, "alice-sub").user_id == alice.user_id  # type: ignore[union-attr]


def test_disabled_user_cannot_sign_in(fed: FederatedApp) -> None:
    fed.sign_in(fed.client())
    link = fed.backend.find_link(fed.provider.issuer, "alice-sub")
    assert link is not None
    fed.backend.set_disabled("default", "test-op:alice-sub", True)
    response = fed.sign_in(fed.client())
    assert response.status_code == 401


# --- ID-token checks: one test per check ---------------------------------------------------------


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("bad_signature", TokenCheck.SIGNATURE),
        ("alg_none", TokenCheck.ALGORITHM),
        ("hs256_public_key", TokenCheck.ALGORITHM),
        ("wrong_iss", TokenCheck.ISSUER),
        ("iss_trailing_slash", TokenCheck.ISSUER),
        ("iss_case", TokenCheck.ISSUER),
        ("wrong_aud", TokenCheck.AUDIENCE),
        ("aud_array_no_azp", TokenCheck.AZP),
        ("wrong_azp", TokenCheck.AZP),
        ("wrong_nonce", TokenCheck.NONCE),
        ("no_nonce", TokenCheck.NONCE),
        ("expired", TokenCheck.EXPIRED),
        ("old_iat", TokenCheck.ISSUED_AT),
        ("no_sub", TokenCheck.SUBJECT),
    ],
)
def test_each_id_token_check_refuses_its_bad_token(
    fed: FederatedApp, tamper: str, reason: TokenCheck
) -> None:
    fed.provider.tamper_next(tamper)  # type: ignore[arg-type]
    client = fed.client()
    response = fed.sign_in(client)
    assert response.status_code == 401
    assert login_rows(fed) == [("failure", IdTokenValidation.code)]
    assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401
    # The reason reaches the error itself: check it through the service directly.
    error = _finish_error(fed, tamper)
    assert isinstance(error, IdTokenValidation) and error.reason == reason


def _finish_error(fed: FederatedApp, tamper: str) -> Exception:
    fed.provider.tamper_next(tamper)  # type: ignore[arg-type]
    client = fed.client()
    target = fed.authorize(client)
    query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
    with client.session_transaction(environ_base=client.environ_base) as session:
        with fed.app.test_request_context():
            try:
                fed.authflow.federation.finish(
                    PROVIDER, query["code"], query["state"], iss=query["iss"], session=session
                )
            except Exception as exc:  # noqa: BLE001 - the error is what the test checks
                return exc
    raise AssertionError("the login succeeded")


def test_unknown_kid_is_refused_after_one_refresh(fed: FederatedApp) -> None:
    error = _finish_error(fed, "unknown_kid")
    assert isinstance(error, UnknownKid)


def test_a_key_rotated_in_at_the_provider_is_fetched(fed: FederatedApp) -> None:
    assert fed.sign_in(fed.client()).status_code == 302
    fed.provider.rotate_key(keep_old=False)  # a kid the cache has never seen
    fed.clock.advance(timedelta(seconds=11))  # past the debounce window of the first fetch
    assert fed.sign_in(fed.client()).status_code == 302


def test_userinfo_with_another_sub_is_refused(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("alice-sub")
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, fetch_userinfo=True)
    assert fed.sign_in(fed.client()).status_code == 302  # the good case fetches userinfo too
    oidc_provider.tamper_next("userinfo_wrong_sub")
    response = fed.sign_in(fed.client())
    assert response.status_code == 401
    assert login_rows(fed)[-1] == ("failure", UserInfo.code)


def test_userinfo_401_is_a_userinfo_error(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("alice-sub")
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, fetch_userinfo=True)
    http = get_state(fed.app).federation.registry.http
    original_get = http.get

    def get(url: str, *, headers: Any = None) -> Any:
        if url.endswith("/userinfo"):
            headers = {**(headers or {}), "Authorization": "Bearer not-a-token"}
        return original_get(url, headers=headers)

    http.get = get
    response = fed.sign_in(fed.client())
    assert response.status_code == 401 and "userinfo answered 401" in response.text


# --- the ceremony: state, replay, timeout, iss parameter, token endpoint --------------------------


def test_state_mismatch_is_a_csrf_mismatch(fed: FederatedApp) -> None:
    response = fed.sign_in(fed.client(), state="forged")
    assert response.status_code == 401
    assert login_rows(fed) == [("failure", CsrfMismatch.code)]


def test_a_callback_without_a_ceremony_is_a_csrf_mismatch(fed: FederatedApp) -> None:
    response = fed.client().get(f"/auth/callback/{PROVIDER}?code=x&state=y&iss={fed.provider.issuer}")
    assert response.status_code == 401 and login_rows(fed) == [("failure", CsrfMismatch.code)]


def test_a_replayed_callback_is_refused(fed: FederatedApp) -> None:
    client = fed.client()
    target = fed.authorize(client)
    assert client.get(target).status_code == 302
    other = fed.client()
    other.get("/dashboard")
    assert client.get(target).status_code == 401  # the ceremony was single-use
    assert login_rows(fed)[-1] == ("failure", CsrfMismatch.code)


def test_ceremony_timeout_ends_in_csrf_mismatch(fed: FederatedApp) -> None:
    client = fed.client()
    target = fed.authorize(client)
    fed.clock.advance(timedelta(minutes=16))
    response = client.get(target)
    assert response.status_code == 401
    assert login_rows(fed) == [("failure", Expired.code)]
    assert issubclass(Expired, CsrfMismatch)


def test_iss_parameter_of_another_issuer_is_refused(fed: FederatedApp) -> None:
    response = fed.sign_in(fed.client(), iss="https://evil.test")
    assert response.status_code == 401 and login_rows(fed) == [("failure", IssuerMismatch.code)]


def test_a_missing_iss_parameter_is_refused_when_the_provider_sends_it(fed: FederatedApp) -> None:
    client = fed.client()
    target = fed.authorize(client)
    parts = urlsplit(target)
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if k != "iss"}
    response = client.get(parts.path, query_string=query)
    assert response.status_code == 401 and login_rows(fed) == [("failure", IssuerMismatch.code)]


def test_token_endpoint_invalid_client(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("alice-sub")
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, client_secret="wrong-secret")
    response = fed.sign_in(fed.client())
    assert response.status_code == 401 and "invalid_client" in response.text
    assert login_rows(fed) == [("failure", TokenExchange.code)]


def test_provider_error_answer_is_refused(fed: FederatedApp) -> None:
    response = fed.sign_in(fed.client(), error="access_denied")
    assert response.status_code == 401 and "access_denied" in response.text


def test_unknown_provider(fed: FederatedApp) -> None:
    assert fed.client().get("/auth/login/nobody").status_code == 404
    with fed.app.test_request_context(), pytest.raises(UnknownProvider):
        fed.authflow.federation.provider("nobody")


# --- discovery -------------------------------------------------------------------------------------


def _discover(provider: Any, **options: Any) -> Any:
    return OAuthProviderConfig.discover(
        provider.discovery_url,
        CLIENT_ID,
        "secret",
        "http://localhost/cb",
        http=RequestsHttpClient(adapters=provider.http_adapters()),
        **options,
    )


def test_discovery_issuer_must_match_exactly(oidc_provider) -> None:
    assert _discover(oidc_provider).issuer == oidc_provider.issuer
    with pytest.raises(Discovery, match="expected exactly"):
        _discover(oidc_provider, issuer=oidc_provider.issuer + "/")


def test_discovery_refusals(oidc_provider, monkeypatch) -> None:
    good = oidc_provider.discovery_document()
    cases = {  # the refusal's message names what is wrong
        "has no token_endpoint": {k: v for k, v in good.items() if k != "token_endpoint"},
        "must be an https URL": {**good, "jwks_uri": "http://op.test/jwks"},
        "signs ID tokens only with": {**good, "id_token_signing_alg_values_supported": ["HS256", "none"]},
        "does not support PKCE": {**good, "code_challenge_methods_supported": ["plain"]},
    }
    for message, document in cases.items():
        monkeypatch.setattr(oidc_provider, "discovery_document", lambda document=document: document)
        with pytest.raises(Discovery, match=message):
            _discover(oidc_provider)


def test_provider_config_refusals() -> None:
    base = {
        "discovery_url": "https://op.example/.well-known/openid-configuration",
        "client_id": "c",
        "client_secret": "s",
        "redirect_uri": "https://app.example/auth/callback/x",
    }
    from flask_authflow.errors import ConfigurationError

    for bad in (
        {"discovery_url": "http://op.example/.well-known/openid-configuration"},
        {"scopes": ["profile"]},
        {"ceremony_timeout": 7200},
        {"post_logout_redirect_uri": "https://app.example/elsewhere"},
        {"unknown_key": 1},
        {"post_login_redirect": "https://evil.example/"},
    ):
        with pytest.raises(ConfigurationError):
            OAuthProviderConfig.from_mapping({**base, **bad})
    config = OAuthProviderConfig.from_mapping(
        {**base, "allowed_post_logout_redirect_uris": ["https://app.example/bye"]}
    )
    assert config.post_logout_redirect_uri == "https://app.example/bye"
    assert config.expected_issuer == "https://op.example"


def test_oauth_providers_from_the_environment(monkeypatch, oidc_provider) -> None:
    import json

    from flask_authflow import AuthFlow

    monkeypatch.setenv(
        "FLASK_AUTHFLOW_OAUTH_PROVIDERS",
        json.dumps(
            {
                "corp": {
                    "discovery_url": oidc_provider.discovery_url,
                    "client_id": "test-client",
                    "client_secret": "test-secret",
                    "redirect_uri": "http://localhost/auth/callback/corp",
                    "ceremony_timeout": 600,
                }
            }
        ),
    )
    app = base_app(import_name="env_app", AUTHFLOW_SESSION_STORE="memory")
    app.config.from_prefixed_env()
    AuthFlow(
        app, http_client=RequestsHttpClient(adapters=oidc_provider.http_adapters()), backend=_memory_backend()
    )
    with app.test_request_context():
        provider = get_state(app).federation.registry.get("corp")
        assert provider.config.ceremony_timeout == timedelta(minutes=10)
    assert "authflow_oauth" in app.blueprints


def _memory_backend() -> Any:
    from flask_authflow.storage._memory import InMemoryBackend

    return InMemoryBackend()


# --- back-channel logout ---------------------------------------------------------------------------


def test_backchannel_logout_by_sid_ends_the_session(fed: FederatedApp) -> None:
    client = fed.client()
    fed.sign_in(client)
    assert client.get("/dashboard").status_code == 200
    result = fed.provider.send_backchannel_logout(fed.client(), sid=fed.provider.session_id)
    assert result.status_code == 200 and result.headers["Cache-Control"] == "no-store"
    assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401
    assert [r.status for r in fed.backend.audit_rows if r.event == "backchannel_logout"] == ["success"]


def test_backchannel_logout_by_sub_ends_the_linked_users_sessions(fed: FederatedApp) -> None:
    first, second = fed.client(), fed.client()
    fed.sign_in(first)
    fed.sign_in(second)
    result = fed.provider.send_backchannel_logout(fed.client(), sub="alice-sub")
    assert result.status_code == 200
    for client in (first, second):
        assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401


def test_backchannel_sub_is_never_a_local_user_id(fed: FederatedApp) -> None:
    victim = add_user(fed.backend, "default", "victim", "a long enough password here")
    from flask_authflow.testing import login_test_client

    victim_client = login_test_client(fed.app, "victim", password="a long enough password here")
    result = fed.provider.send_backchannel_logout(fed.client(), sub=victim.user_id)
    assert result.status_code == 200
    assert victim_client.get("/dashboard").status_code == 200


@pytest.mark.parametrize(
    "tamper",
    [
        "logout_nonce",
        "logout_no_events",
        "logout_wrong_event",
        "logout_no_sub_sid",
        "logout_oversize",
        "wrong_iss",
        "wrong_aud",
        "expired",
        "old_iat",
        "bad_signature",
        "alg_none",
        "hs256_public_key",
    ],
)
def test_each_logout_token_check(fed: FederatedApp, tamper: str) -> None:
    client = fed.client()
    fed.sign_in(client)
    result = fed.provider.send_backchannel_logout(
        fed.client(),
        sub="alice-sub",
        sid=fed.provider.session_id,
        tamper=[tamper],  # type: ignore[list-item]
    )
    assert result.status_code == 400, tamper
    assert result.headers["Cache-Control"] == "no-store"
    assert client.get("/dashboard").status_code == 200  # nothing was revoked
    assert login_rows(fed, "backchannel_logout") == [("failure", LogoutTokenInvalid.code)]


def test_logout_token_replay_is_refused(fed: FederatedApp) -> None:
    token = fed.provider.logout_token(CLIENT_ID, sub="alice-sub")
    assert fed.provider.send_backchannel_logout(fed.client(), logout_token=token).status_code == 200
    replay = fed.provider.send_backchannel_logout(fed.client(), logout_token=token)
    assert replay.status_code == 400 and "already used" in replay.body


def test_logout_token_with_the_wrong_algorithm_for_its_key(fed: FederatedApp) -> None:
    now = int(fed.clock.now().timestamp())
    claims = {
        "iss": fed.provider.issuer,
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 60,
        "jti": secrets.token_urlsafe(8),
        "sub": "alice-sub",
        "events": {BACKCHANNEL_LOGOUT_EVENT: {}},
    }
    token = fed.provider.sign(claims, typ="logout+jwt", header={"alg": "ES256"})  # the key is RSA
    result = fed.provider.send_backchannel_logout(fed.client(), logout_token=token)
    assert result.status_code == 400
    with fed.app.test_request_context(), pytest.raises(LogoutTokenInvalid) as caught:
        fed.authflow.federation.provider(PROVIDER).verify_logout_jwt(token)
    assert caught.value.reason == TokenCheck.ALGORITHM


def test_an_id_token_is_not_a_logout_token(fed: FederatedApp) -> None:
    id_token = fed.provider.id_token(CLIENT_ID, "alice-sub", nonce="n")
    result = fed.provider.send_backchannel_logout(fed.client(), logout_token=id_token)
    assert result.status_code == 400


# --- RP-initiated logout ---------------------------------------------------------------------------


def test_rp_initiated_logout_clears_locally_then_redirects_with_state(fed: FederatedApp) -> None:
    fed.app.add_url_rule("/token", "token", csrf_token)  # what the app's logout form carries
    client = fed.client()
    fed.sign_in(client)
    assert client.post("/auth/logout").status_code == 400  # a form without the CSRF token
    assert client.get("/dashboard").status_code == 200
    response = client.post("/auth/logout", data={"csrf_token": client.get("/token").text})
    assert response.status_code == 302
    assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401
    end = urlsplit(response.location)
    assert f"{end.scheme}://{end.netloc}{end.path}" == f"{fed.provider.issuer}/end_session"
    query = {k: v[0] for k, v in parse_qs(end.query).items()}
    assert query["post_logout_redirect_uri"] == LOGOUT_RETURN and query["id_token_hint"].count(".") == 2
    back = fed.browser().get(response.location, allow_redirects=False, timeout=5)
    assert back.status_code == 302
    returned = urlsplit(back.headers["Location"])
    assert client.get(f"{returned.path}?{returned.query}").status_code == 302
    forged = client.get(f"{returned.path}?state=forged")
    assert forged.status_code == 400


def test_logout_refuses_a_cross_site_request(fed: FederatedApp) -> None:
    client = fed.client()
    fed.sign_in(client)
    assert client.post("/auth/logout", json={}, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert client.get("/dashboard").status_code == 200


def test_a_json_logout_names_the_providers_end_session_url(fed: FederatedApp) -> None:
    client = fed.client()
    fed.sign_in(client)
    response = client.post("/auth/logout", json={})
    assert response.status_code == 200 and response.json["status"] == "logged_out"
    end = urlsplit(response.json["location"])
    assert f"{end.scheme}://{end.netloc}{end.path}" == f"{fed.provider.issuer}/end_session"
    assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401
    back = fed.browser().get(response.json["location"], allow_redirects=False, timeout=5)
    returned = urlsplit(back.headers["Location"])
    assert client.get(f"{returned.path}?{returned.query}").status_code == 302  # the state was kept


def test_federation_and_the_ready_views_share_the_one_logout_route(fed: FederatedApp) -> None:
    fed.authflow.views.register(fed.app)
    logouts = {
        rule.endpoint: rule.rule for rule in fed.app.url_map.iter_rules() if rule.endpoint.endswith(".logout")
    }
    assert logouts == {"authflow_logout.logout": "/auth/logout"}


def test_end_session_url_refuses_unlisted_redirects(fed: FederatedApp) -> None:
    with fed.app.test_request_context():
        provider = fed.authflow.federation.provider(PROVIDER)
        url = provider.build_end_session_url("hint", LOGOUT_RETURN, "s")
        assert "state=s" in url
        with pytest.raises(EndSessionRefused):
            provider.build_end_session_url("hint", "https://evil.example/")


def test_end_session_with_an_empty_allowlist_allows_no_redirect(
    oidc_provider, mock_clock, authflow_hasher
) -> None:
    oidc_provider.login_as("alice-sub")
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, allowed_post_logout_redirect_uris=[])
    with fed.app.test_request_context():
        provider = fed.authflow.federation.provider(PROVIDER)
        with pytest.raises(EndSessionRefused):
            provider.build_end_session_url("hint", LOGOUT_RETURN)
        assert "post_logout_redirect_uri" not in provider.build_end_session_url("hint")


def _keys_without_alg(provider: Any, monkeypatch: Any) -> None:
    original = provider.jwks

    def jwks() -> dict[str, Any]:
        return {"keys": [{k: v for k, v in key.items() if k != "alg"} for key in original()["keys"]]}

    monkeypatch.setattr(provider, "jwks", jwks)


def test_keys_without_alg_are_used_by_default(
    oidc_provider, mock_clock, authflow_hasher, monkeypatch
) -> None:
    oidc_provider.login_as("alice-sub")
    _keys_without_alg(oidc_provider, monkeypatch)
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302


def test_keys_without_alg_skipped_on_request_name_alg_and_the_option(
    oidc_provider, mock_clock, authflow_hasher, monkeypatch
) -> None:
    oidc_provider.login_as("alice-sub")
    _keys_without_alg(oidc_provider, monkeypatch)
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher, jwks_require_alg=True)
    response = fed.sign_in(fed.client())
    # No usable key at all: the key set counts as a failed fetch, and the login is refused.
    assert response.status_code == 502 and login_rows(fed) == [("failure", ProviderUnreachable.code)]
    assert "without alg" in response.text and "jwks_require_alg=False" in response.text


def test_a_per_tenant_factory_is_built_once_per_tenant(oidc_provider, mock_clock, authflow_hasher) -> None:
    oidc_provider.login_as("alice-sub")
    fed = federated_app(oidc_provider, mock_clock, authflow_hasher)
    calls: list[str] = []

    def factory(tenant: str) -> dict[str, Any]:
        calls.append(tenant)
        settings = {
            "discovery_url": oidc_provider.discovery_url,
            "client_id": CLIENT_ID,
            "client_secret": "test-secret",
            "redirect_uri": f"http://localhost/auth/callback/{PROVIDER}",
            "post_login_redirect": "/dashboard",
        }
        return settings

    fed.authflow.register_provider(PROVIDER, factory)
    acme = fed.client()
    target = fed.authorize(acme, f"/auth/login/{PROVIDER}?tenant=acme")
    assert acme.get(target).status_code == 302
    fed.sign_in(fed.client())  # no tenant: the default tenant
    fed.authorize(fed.client(), f"/auth/login/{PROVIDER}?tenant=acme")
    assert calls == ["acme", "default"]  # built once per tenant, then cached
    link = fed.backend.find_link(oidc_provider.issuer, "alice-sub")
    assert link is not None  # the latest login (default tenant) owns the link now
    assert fed.backend.find_user("acme", "test-op:alice-sub") is not None
    bad = fed.client().get(f"/auth/login/{PROVIDER}?tenant=%0a")
    assert bad.status_code == 400


DISCOVERY = "https://op.example/.well-known/openid-configuration"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ({"status_code": 503, "json": {}}, Discovery),
        (
            {
                "status_code": 200,
                "text": "<html>maintenance</html>",
                "headers": {"Content-Type": "text/html"},
            },
            Discovery,
        ),
        ({"status_code": 200, "json": ["not", "an", "object"]}, Discovery),
        ({"exc": requests.exceptions.ReadTimeout}, ProviderUnreachable),
        ({"exc": requests.exceptions.ConnectionError}, ProviderUnreachable),
        ({"status_code": 200, "content": b"{" + b" " * 2_000_000 + b"}"}, ProviderUnreachable),
        ({"status_code": 302, "headers": {"Location": "https://evil.example/config"}}, ProviderUnreachable),
    ],
)
def test_discovery_http_failures(answer: dict[str, Any], error: type[Exception]) -> None:
    import requests_mock

    adapter = requests_mock.Adapter()
    adapter.register_uri("GET", DISCOVERY, **answer)
    http = RequestsHttpClient(adapters={"https://op.example/": adapter})
    with pytest.raises(error):
        OAuthProviderConfig.discover(DISCOVERY, CLIENT_ID, "s", "https://app.example/cb", http=http)


def test_a_federated_step_of_a_longer_ceremony_ends_in_pending_workflow(fed: FederatedApp) -> None:
    from flask_authflow.federation._login import OAuthLoginOptions

    client = fed.client()
    with client.session_transaction(environ_base=client.environ_base) as session:
        with fed.app.test_request_context():
            url = fed.authflow.federation.begin(
                PROVIDER, OAuthLoginOptions(pending_workflow=True), session=session
            )
    answer = fed.browser().get(url, allow_redirects=False, timeout=5)
    query = {k: v[0] for k, v in parse_qs(urlsplit(answer.headers["Location"]).query).items()}
    with client.session_transaction(environ_base=client.environ_base) as session:
        with fed.app.test_request_context():
            result = fed.authflow.federation.finish(
                PROVIDER, query["code"], query["state"], iss=query["iss"], session=session
            )
        assert session.is_pending_workflow and not session.is_authenticated
    assert result.state.value == "pending_workflow"
    assert client.get("/dashboard", headers={"Accept": "application/json"}).status_code == 401
    rows = [(row.status, row.factor) for row in fed.backend.audit_rows if row.event == "login"]
    assert rows == [("pending_workflow", "oidc:test-op")]


#: What the installed package serves: a provider's login redirect, from a plain install.
FRESH_APP = """
import secrets, sys
from pathlib import Path
import flask_authflow
from flask import Flask
from flask_authflow import AuthFlow

assert "site-packages" in Path(flask_authflow.__file__).parts, flask_authflow.__file__
try:
    import webauthn
except ImportError:
    pass
else:
    raise SystemExit("an extra was installed: webauthn")
app = Flask("fresh", instance_path=sys.argv[2])
app.config.update(
    TESTING=True,
    AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
    AUTHFLOW_SESSION_STORE="memory",
    AUTHFLOW_OAUTH_PROVIDERS={
        "corp": {
            "discovery_url": sys.argv[1],
            "client_id": "fresh",
            "client_secret": "fresh-secret",
            "redirect_uri": "http://localhost/auth/callback/corp",
        }
    },
)
AuthFlow(app)
response = app.test_client().get("/auth/login/corp")
print(response.status_code, response.headers.get("Location"))
"""
