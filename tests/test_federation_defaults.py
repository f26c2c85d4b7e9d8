"""Federation defaults that work with real providers: one regression test per fixed point.

Each test signs in through the in-process provider with the minimal configuration
(discovery URL, client id, client secret, redirect URI) unless it names an option, and
checks both the accepted and the refused side of the rule.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask import Response, request
from joserfc import jwt
from joserfc.errors import BadSignatureError
from joserfc.jwk import OctKey

from flask_authflow._clock import MockClock
from flask_authflow._web.state import get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._client_auth import ClientSecretJwt, basic_authorization, client_credentials
from flask_authflow.federation._errors import Discovery, IdTokenValidation, ProviderUnreachable, TokenExchange
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.federation._login import email_link_key
from flask_authflow.federation._provider import OAuthProviderConfig
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import (
    CLIENT_ID,
    PROVIDER,
    REDIRECT_URI,
    FederatedApp,
    ServedProvider,
    federated_app,
)


def audit(fed: FederatedApp, event: str = "oauth_login") -> list[tuple[str, str | None]]:
    return [(row.status, row.reason) for row in fed.backend.audit_rows if row.event == event]


def provider_of(fed: FederatedApp) -> Any:
    with fed.app.test_request_context():
        return fed.authflow.federation.provider(PROVIDER)


@pytest.fixture
def op(oidc_provider: TestOpenIDProvider) -> TestOpenIDProvider:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return oidc_provider


# --- issuer with a terminating / ----------------------------------------------------------------


def test_an_issuer_ending_in_a_slash_is_the_one_its_discovery_url_maps_to(
    mock_clock, authflow_hasher
) -> None:
    provider = TestOpenIDProvider("https://op.test/", trailing_slash=True, clock=mock_clock)
    provider.login_as("alice-sub")
    assert provider.issuer == "https://op.test/"
    assert provider.discovery_url == "https://op.test/.well-known/openid-configuration"
    fed = federated_app(provider, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    assert provider_of(fed).issuer == "https://op.test/"


def test_a_configured_issuer_is_compared_exactly(mock_clock, authflow_hasher) -> None:
    provider = TestOpenIDProvider("https://op.test/", trailing_slash=True, clock=mock_clock)
    provider.login_as("alice-sub")
    fed = federated_app(provider, mock_clock, authflow_hasher, issuer="https://op.test")
    response = fed.client().get(f"/auth/login/{PROVIDER}")
    assert response.status_code == 502 and "expected exactly 'https://op.test'" in response.text


def test_another_issuer_than_the_two_mapped_ones_is_refused(op, mock_clock, authflow_hasher) -> None:
    op.discovery_overrides["issuer"] = "https://op.test//"
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.client().get(f"/auth/login/{PROVIDER}").status_code == 502


# --- keys without alg ---------------------------------------------------------------------------


def test_keys_without_alg_sign_in_for_their_own_key_type(op, mock_clock, authflow_hasher) -> None:
    op.publish_alg = False
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302


def test_a_key_without_alg_does_not_verify_another_key_types_algorithm(mock_clock, authflow_hasher) -> None:
    provider = TestOpenIDProvider(algorithm="ES256", clock=mock_clock)
    provider.login_as("alice-sub")
    provider.publish_alg = False  # an EC key without alg; the client is pinned to RS256
    fed = federated_app(provider, mock_clock, authflow_hasher)
    response = fed.sign_in(fed.client())
    assert response.status_code == 401 and "algorithm" in response.text
    assert audit(fed) == [("failure", IdTokenValidation.code)]


# --- one algorithm per client -------------------------------------------------------------------


def test_an_id_token_with_another_advertised_algorithm_is_refused(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert provider_of(fed).id_token_alg == "RS256"  # RS256 and ES256 advertised: the default
    op.rotate_key("ES256")  # a valid provider key of another algorithm
    response = fed.sign_in(fed.client())
    assert response.status_code == 401 and "algorithm not allowed" in response.text
    assert "accepts RS256 only (id_token_signed_response_alg)" in response.text


def test_the_pinned_algorithm_is_the_one_configured(op, mock_clock, authflow_hasher) -> None:
    op.rotate_key("ES256")
    fed = federated_app(op, mock_clock, authflow_hasher, id_token_signed_response_alg="ES256")
    assert fed.sign_in(fed.client()).status_code == 302


def test_the_providers_single_advertised_algorithm_is_the_default(mock_clock, authflow_hasher) -> None:
    provider = TestOpenIDProvider(algorithm="ES256", clock=mock_clock)
    provider.login_as("alice-sub")
    provider.discovery_overrides["id_token_signing_alg_values_supported"] = ["ES256"]
    fed = federated_app(provider, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    assert provider_of(fed).id_token_alg == "ES256"


def test_a_pin_the_provider_does_not_advertise_is_a_discovery_error(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher, id_token_signed_response_alg="PS256")
    response = fed.client().get(f"/auth/login/{PROVIDER}")
    assert response.status_code == 502 and "id_token_signed_response_alg" in response.text


def test_an_unknown_pinned_algorithm_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="id_token_signed_response_alg"):
        OAuthProviderConfig(
            "https://op.test/.well-known/openid-configuration",
            "c",
            "s",
            REDIRECT_URI,
            id_token_signed_response_alg="HS256",
        )


def test_a_logout_token_with_another_algorithm_is_refused(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    refused = op.send_backchannel_logout(client, sub="alice-sub", tamper=["wrong_alg"])
    assert refused.status_code == 400 and "algorithm" in refused.body
    assert client.get("/dashboard").status_code == 200  # still signed in
    assert op.send_backchannel_logout(client, sub="alice-sub").status_code == 200
    assert client.get("/dashboard").status_code == 401


# --- unknown kid: 1 s floor and a token bucket ------------------------------------------------------


def test_a_rotation_one_second_after_a_fetch_is_followed_at_once(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    op.rotate_key(keep_old=False)
    mock_clock.advance(timedelta(seconds=1))
    assert fed.sign_in(fed.client()).status_code == 302


def test_a_flood_of_made_up_kids_causes_a_few_fetches_per_minute(op, mock_clock) -> None:
    http = RequestsHttpClient(adapters=op.http_adapters())
    cache = ProviderKeyCache(op.discovery_document()["jwks_uri"], http, clock=mock_clock)
    cache.load()
    for _ in range(120):  # two minutes, one made-up kid every second
        mock_clock.advance(timedelta(seconds=1))
        assert cache.refresh_for_unknown_kid(secrets.token_hex(8)) is False
    # 1 load + a burst of 3 + one per 20 s: 3 per minute once the burst is spent.
    assert cache.fetch_count <= 1 + 3 + 6
    op.rotate_key(keep_old=False)
    mock_clock.advance(timedelta(seconds=20))  # one token back in the bucket: followed at once
    assert cache.refresh_for_unknown_kid(op.current_kid) is True


# --- discovery: Cache-Control, refetched after a failure ---------------------------------------------


def test_discovery_is_fetched_again_after_its_max_age(op, mock_clock, authflow_hasher) -> None:
    op.discovery_cache_control = "max-age=120"
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    op.discovery_overrides["jwks_uri"] = f"{op.issuer}/jwks?moved=1"  # the provider moves its keys
    mock_clock.advance(timedelta(seconds=60))
    assert fed.sign_in(fed.client()).status_code == 302 and op.discovery_requests == 1
    mock_clock.advance(timedelta(seconds=61))
    assert fed.sign_in(fed.client()).status_code == 302 and op.discovery_requests == 2
    assert provider_of(fed).keys.jwks_uri.endswith("?moved=1")


def test_a_rediscovered_provider_keeps_its_key_cache_and_one_listener(
    op, mock_clock, authflow_hasher
) -> None:
    op.discovery_cache_control = "max-age=60"
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    first = provider_of(fed)
    for _ in range(3):
        mock_clock.advance(timedelta(seconds=61))
        assert fed.sign_in(fed.client()).status_code == 302
    latest = provider_of(fed)
    assert latest is not first and latest.keys is first.keys and op.discovery_requests == 4
    assert len(latest.keys._fetch_listeners) == 2  # the app's counters and the current provider


@pytest.mark.parametrize(
    ("header", "kept"), [("max-age=1", 60), ("no-store", 60), ("max-age=99999999", 86400)]
)
def test_discovery_max_age_is_bounded(op, mock_clock, authflow_hasher, header: str, kept: int) -> None:
    op.discovery_cache_control = header
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    mock_clock.advance(timedelta(seconds=kept - 1))
    assert fed.sign_in(fed.client()).status_code == 302 and op.discovery_requests == 1
    mock_clock.advance(timedelta(seconds=2))
    assert fed.sign_in(fed.client()).status_code == 302 and op.discovery_requests == 2


def test_a_failed_key_fetch_makes_discovery_run_again(op, mock_clock, authflow_hasher) -> None:
    op.discovery_overrides["jwks_uri"] = f"{op.issuer}/old-jwks"  # answers 404
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 502
    del op.discovery_overrides["jwks_uri"]  # the provider fixed its document
    mock_clock.advance(timedelta(seconds=61))
    assert fed.sign_in(fed.client()).status_code == 302
    assert op.discovery_requests == 2


def test_a_failed_rediscovery_keeps_the_known_provider(op, mock_clock, authflow_hasher) -> None:
    op.discovery_cache_control = "max-age=60"
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    op.discovery_overrides["issuer"] = "https://evil.test"
    mock_clock.advance(timedelta(seconds=61))
    assert fed.sign_in(fed.client()).status_code == 302  # the known document keeps serving
    assert op.discovery_requests == 2


# --- a total deadline per exchange ------------------------------------------------------------------


@pytest.fixture
def trickling_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering 2000 bytes at 40 bytes per 0.1 s (20 s in all)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n"
                )
                for _ in range(50):
                    if stop.wait(0.1):
                        break
                    try:
                        conn.sendall(b" " * 40)
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/jwks"
    stop.set()
    thread.join(timeout=5)
    listener.close()


@pytest.mark.http
def test_a_trickled_answer_is_cut_off_at_the_total_deadline(trickling_server: str) -> None:
    client = RequestsHttpClient(read_timeout=5, total_timeout=1)
    started = time.monotonic()
    with pytest.raises(ProviderUnreachable, match=r"total deadline|timed out"):
        client.get(trickling_server)
    assert time.monotonic() - started < 3


def test_the_total_deadline_is_checked() -> None:
    with pytest.raises(ValueError, match="total_timeout"):
        RequestsHttpClient(total_timeout=0)


# --- client authentication ------------------------------------------------------------------------


def test_client_secret_basic_form_urlencodes_the_secret(op, mock_clock, authflow_hasher) -> None:
    secret = "s+e%c&r=t é:"
    fed = federated_app(op, mock_clock, authflow_hasher, client_secret=secret)
    op.register_client(CLIENT_ID, secret, [REDIRECT_URI], token_endpoint_auth_method="client_secret_basic")
    assert fed.sign_in(fed.client()).status_code == 302
    assert op.token_requests == ["client_secret_basic"]
    assert (
        basic_authorization("a b", "+%") == "Basic " + __import__("base64").b64encode(b"a+b:%2B%25").decode()
    )


def test_client_secret_post_is_a_setting(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher, token_endpoint_auth_method="client_secret_post")
    op.register_client(
        CLIENT_ID, "test-secret", [REDIRECT_URI], token_endpoint_auth_method="client_secret_post"
    )
    assert fed.sign_in(fed.client()).status_code == 302
    assert op.token_requests == ["client_secret_post"]


def test_a_method_the_provider_does_not_list_is_a_discovery_error(op, mock_clock, authflow_hasher) -> None:
    op.discovery_overrides["token_endpoint_auth_methods_supported"] = ["client_secret_basic"]
    fed = federated_app(op, mock_clock, authflow_hasher, token_endpoint_auth_method="client_secret_post")
    response = fed.client().get(f"/auth/login/{PROVIDER}")
    assert response.status_code == 502 and "token_endpoint_auth_method client_secret_post" in response.text


def test_an_unknown_method_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="token_endpoint_auth_method"):
        OAuthProviderConfig(
            "https://op.test/.well-known/openid-configuration",
            "c",
            "s",
            REDIRECT_URI,
            token_endpoint_auth_method="tls_client_auth",
        )


def test_none_sends_only_the_client_id_and_needs_no_secret() -> None:
    config = OAuthProviderConfig(
        "https://op.test/.well-known/openid-configuration",
        "c",
        "",
        REDIRECT_URI,
        token_endpoint_auth_method="none",
    )
    assert config.client_secret == ""
    assert client_credentials("none", "c", "") == ({}, {"client_id": "c"})
    with pytest.raises(ConfigurationError, match="client_secret"):
        OAuthProviderConfig("https://op.test/.well-known/openid-configuration", "c", "", REDIRECT_URI)


def test_client_secret_jwt_is_signed_with_the_secret(mock_clock: MockClock) -> None:
    secret = "a-client-secret-long-enough-for-hs256"
    auth = ClientSecretJwt("c", "https://op.test/token", secret, clock=mock_clock)
    headers, form = client_credentials("client_secret_jwt", "c", secret, assertion=auth.assertion)
    assert headers == {} and form["client_assertion_type"].endswith(":jwt-bearer")
    token = jwt.decode(form["client_assertion"], OctKey.import_key(secret.encode()), algorithms=["HS256"])
    assert (
        token.claims["iss"] == token.claims["sub"] == "c" and token.claims["aud"] == "https://op.test/token"
    )
    with pytest.raises(BadSignatureError):  # joserfc's class, not the text of its message
        jwt.decode(
            form["client_assertion"],
            OctKey.import_key(b"another-secret-of-enough-length!"),
            algorithms=["HS256"],
        )


# --- userinfo -------------------------------------------------------------------------------------


def test_a_provider_without_userinfo_endpoint_signs_in(op, mock_clock, authflow_hasher) -> None:
    op.discovery_overrides["userinfo_endpoint"] = None
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    assert op.userinfo_requests == 0


def test_fetch_userinfo_true_needs_the_endpoint(op, mock_clock, authflow_hasher) -> None:
    op.discovery_overrides["userinfo_endpoint"] = None
    fed = federated_app(op, mock_clock, authflow_hasher, fetch_userinfo=True)
    response = fed.client().get(f"/auth/login/{PROVIDER}")
    assert response.status_code == 502 and "userinfo_endpoint" in response.text


def test_userinfo_is_fetched_by_default_and_its_sub_checked(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302 and op.userinfo_requests == 1
    op.tamper_next("userinfo_wrong_sub")
    assert fed.sign_in(fed.client()).status_code == 401
    assert audit(fed)[-1] == ("failure", "userinfo_failed")


def test_fetch_userinfo_false_never_fetches(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher, fetch_userinfo=False)
    op.tamper_next("userinfo_wrong_sub")
    assert fed.sign_in(fed.client()).status_code == 302 and op.userinfo_requests == 0


# --- algorithms -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alg",
    ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"],
)
def test_every_algorithm_signs_in(mock_clock, authflow_hasher, alg: str) -> None:
    provider = TestOpenIDProvider(algorithm=alg, clock=mock_clock)
    provider.login_as("alice-sub")
    provider.discovery_overrides["id_token_signing_alg_values_supported"] = [alg]
    fed = federated_app(provider, mock_clock, authflow_hasher)
    assert fed.sign_in(fed.client()).status_code == 302
    provider.tamper_next("bad_signature")
    assert fed.sign_in(fed.client()).status_code == 401


# --- at_hash --------------------------------------------------------------------------------------


def test_a_wrong_at_hash_is_refused(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    op.tamper_next("wrong_at_hash")
    response = fed.sign_in(fed.client())
    assert response.status_code == 401 and "at_hash" in response.text
    assert audit(fed) == [("failure", IdTokenValidation.code)]
    assert fed.sign_in(fed.client()).status_code == 302  # the right one passes


# --- e-mail linking compares the whole address in lower case, nothing else -----------------------------


@pytest.mark.parametrize(
    ("email", "links"),
    [
        ("alice@example.com", True),
        ("alice@EXAMPLE.com", True),  # the domain in another case
        ("Alice@example.com", True),  # the local part in another case: one address
        ("\uff41lice@example.com", False),  # fullwidth a: no Unicode folding
        ("alice@exam\u0440le.com", False),  # Cyrillic er in the domain: outside ASCII never links
    ],
)
def test_email_linking_compares_case_insensitively(
    op, mock_clock, authflow_hasher, email: str, links: bool
) -> None:
    op.login_as("provider-sub", email=email, email_verified=True)
    fed = federated_app(op, mock_clock, authflow_hasher, link_by_email=True)
    alice = fed.backend.create_user(
        "default", "alice", email="alice@example.com", email_verified_at=mock_clock.now()
    )
    assert fed.sign_in(fed.client()).status_code == 302
    link = fed.backend.find_link(op.issuer, "provider-sub")
    assert link is not None and (link.user_id == alice.user_id) is links


def test_email_link_key() -> None:
    assert email_link_key("A.b@Example.COM") == "a.b@example.com"
    for bad in ("no-at", "a@b@c", "@example.com", "a@", "a b@example.com", "\uff41@example.com"):
        assert email_link_key(bad) is None


# --- hostile key sets ------------------------------------------------------------------------------


def test_a_key_publishing_its_private_part_is_skipped_and_logged(
    op, mock_clock, authflow_hasher, monkeypatch, caplog
) -> None:
    original = op.jwks
    monkeypatch.setattr(op, "jwks", lambda: {"keys": [{**k, "d": "AAAA"} for k in original()["keys"]]})
    fed = federated_app(op, mock_clock, authflow_hasher)
    with caplog.at_level(logging.WARNING, logger="flask_authflow.federation"):
        assert fed.sign_in(fed.client()).status_code == 502
    assert "publishes private members" in caplog.text


def test_a_kid_shared_by_two_keys_is_refused(op, mock_clock, authflow_hasher, monkeypatch, caplog) -> None:
    other = TestOpenIDProvider(algorithm="ES256", clock=mock_clock).jwks()["keys"][0]
    original = op.jwks
    monkeypatch.setattr(op, "jwks", lambda: {"keys": [*original()["keys"], {**other, "kid": op.current_kid}]})
    fed = federated_app(op, mock_clock, authflow_hasher)
    with caplog.at_level(logging.WARNING, logger="flask_authflow.federation"):
        assert fed.sign_in(fed.client()).status_code == 502
    assert "shared by several keys" in caplog.text


# --- redirect settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["//evil.example", "/\\evil.example", "/\x00x"])
def test_post_login_redirect_obeys_the_rule_of_next(op, mock_clock, authflow_hasher, target: str) -> None:
    with pytest.raises(ConfigurationError, match="post_login_redirect"):
        federated_app(op, mock_clock, authflow_hasher, post_login_redirect=target)


def test_a_registered_provider_with_an_offsite_redirect_is_refused(op, mock_clock, authflow_hasher) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)
    config = OAuthProviderConfig(
        op.discovery_url, CLIENT_ID, "s", REDIRECT_URI, post_login_redirect="//evil.example"
    )
    with pytest.raises(ConfigurationError, match="post_login_redirect"):
        fed.authflow.register_provider("other", config)


# --- bad provider answers: a typed error, 4xx or 502, an audit row, never a 500 --------------------


def _token_answer(kind: str) -> Response:
    if kind == "not json":
        return Response("<html>oops</html>", status=200, mimetype="application/json")
    if kind == "wrong content type":
        return Response('{"id_token": "x", "access_token": "y"}', status=200, mimetype="text/html")
    if kind == "huge":
        return Response("[" + "1," * 600_000 + "1]", status=200, mimetype="application/json")
    if kind == "redirect":
        return Response("", status=302, headers={"Location": "https://op.test/elsewhere"})
    if kind == "5xx":
        return Response("busy", status=503, mimetype="text/plain")
    if kind == "invalid_grant":
        return Response('{"error": "invalid_grant"}', status=400, mimetype="application/json")
    return Response(
        '{"id_token": "a.b.c", "access_token": "y", "token_type": "MAC"}',
        status=200,
        mimetype="application/json",
    )


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("not json", 502, ProviderUnreachable.code),
        ("wrong content type", 502, ProviderUnreachable.code),
        ("huge", 502, ProviderUnreachable.code),
        ("redirect", 502, ProviderUnreachable.code),
        ("5xx", 502, ProviderUnreachable.code),
        ("invalid_grant", 401, TokenExchange.code),
        ("wrong token_type", 401, TokenExchange.code),
    ],
)
def test_a_bad_token_answer_is_a_typed_refusal(
    op, mock_clock, authflow_hasher, kind: str, status: int, code: str
) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)

    @op.app.before_request
    def scripted() -> Response | None:
        return _token_answer(kind) if request.path.endswith("/token") else None

    response = fed.sign_in(fed.client())
    assert response.status_code == status
    assert audit(fed) == [("failure", code)]
    assert fed.backend.find_link(op.issuer, "alice-sub") is None  # no half-made link


@pytest.mark.parametrize("kind", ["not json", "5xx", "redirect"])
def test_a_bad_discovery_answer_is_a_502(op, mock_clock, authflow_hasher, kind: str) -> None:
    fed = federated_app(op, mock_clock, authflow_hasher)

    @op.app.before_request
    def scripted() -> Response | None:
        return _token_answer(kind) if request.path.endswith("openid-configuration") else None

    response = fed.client().get(f"/auth/login/{PROVIDER}")
    assert response.status_code == 502
    assert isinstance(get_state(fed.app).federation, object)
    with fed.app.test_request_context(), pytest.raises((Discovery, ProviderUnreachable)):
        fed.authflow.federation.provider(PROVIDER)


@pytest.mark.http
def test_a_slow_token_endpoint_is_a_502_with_an_audit_row(mock_clock, authflow_hasher) -> None:
    served = ServedProvider()
    try:
        op = served.provider
        op.login_as("alice-sub")
        fed = federated_app(op, mock_clock, authflow_hasher)
        get_state(fed.app).federation.registry.http = RequestsHttpClient(total_timeout=1)

        @op.app.before_request
        def slow() -> None:
            if request.path.endswith("/token"):
                time.sleep(2)

        started = time.monotonic()
        response = fed.sign_in(fed.client())
        assert response.status_code == 502 and "timed out" in response.text
        assert time.monotonic() - started < 2
        assert audit(fed) == [("failure", ProviderUnreachable.code)]
    finally:
        served.stop()
