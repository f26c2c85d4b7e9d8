"""FAPI 2.0 against the in-process test provider: the ``fapi2`` preset (PAR + DPoP +
``private_key_jwt`` + PKCE S256 + RFC 9207 ``iss``), each refusal of the profile, and the
OpenID Foundation's ``fapi2-security-profile-final-client-test-plan`` emulated, one test per
module, named after it (``test_fapi2_security_profile_final_client_test_<module>``; the ID-token
modules are the parameters of ``..._id_token``).

Emulated: the plan's 22 modules for a plain-response, unsigned-request OpenID client
with private_key_jwt + DPoP: happy-path, happy-path-no-dpop-nonce, discovery-issuer-mismatch,
invalid-iss, invalid-aud, invalid-secondary-aud, invalid-null-alg, invalid-alternate-alg,
invalid-expired-exp, invalid-missing-exp, invalid-missing-aud, invalid-missing-iss,
valid-aud-as-array, invalid-nonce, invalid-missing-nonce, invalid-authorization-response-iss,
remove-authorization-response-iss, ensure-authorization-response-with-invalid-state-fails,
ensure-authorization-response-with-invalid-missing-state-fails,
token-endpoint-response-without-expires-in, token-type-case-insensitivity,
rs-dpop-auth-scheme-case-insensitivity. Outside this variant: the JARM (8),
grant-management (3) and Brazil refresh-token modules. Beyond the plan: a proof for another
``htu`` / ``htm``, a replayed proof, an invalid PAR response (3 answers) and an assertion
whose ``aud`` is not the issuer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask

from flask_authflow._clock import MockClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._dpop import DpopNonces, DpopSigner
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._presets import preset, provider_config
from flask_authflow.federation._provider import OAuthProvider, OAuthProviderConfig
from flask_authflow.issuer import LocalIdpSigningKey, MemoryLocalIdpKeyStore
from flask_authflow.testing._provider import TestOpenIDProvider
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
    op: TestOpenIDProvider,
    clock: MockClock,
    hasher: Any,
    keys: Keys,
    *,
    fapi2_client: bool = True,
    **extra: Any,
) -> FederatedApp:
    settings = fapi_settings(op, keys, client_secret="", **extra)
    if settings["preset"] is None:  # the same client without the profile
        settings = {k: v for k, v in settings.items() if k != "preset"}
        settings["token_endpoint_auth_method"] = "private_key_jwt"
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
        token = fed.authflow.federation.token(PROVIDER)
        session = fed.browser()
        answer = session.get("https://op.test/userinfo", auth=token.auth, timeout=5)
        return f"{token.token_type} {answer.json().get('sub', answer.status_code)}", answer.status_code


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def fed(op: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, keys: Keys) -> FederatedApp:
    return fapi_app(op, mock_clock, authflow_hasher, keys)


def test_fapi2_security_profile_final_client_test_happy_path_no_dpop_nonce(
    fed: FederatedApp, op: TestOpenIDProvider, keys: Keys
) -> None:
    """...-happy-path-no-dpop-nonce: a login (PAR, private_key_jwt, DPoP), a resource call, a refresh."""
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
    assert (userinfo["htm"], userinfo["htu"], userinfo["jkt"]) == (
        "GET",
        "https://op.test/userinfo",
        proof["jkt"],
    )
    row = token_row(fed)
    assert row.token_type == "DPoP"

    used = client.get("/resource")
    assert (used.status_code, used.text) == (200, "DPoP alice-sub")
    resource_proof = op.dpop_proofs[-1]
    assert (
        resource_proof["htm"] == "GET" and "ath" in resource_proof and resource_proof["jkt"] == proof["jkt"]
    )

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


def _callback(fed: FederatedApp, client: Any) -> Any:
    start = client.get(f"/auth/login/{PROVIDER}", headers=JSON)
    assert start.status_code == 302, start.text
    answer = fed.browser().get(start.location, allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}", headers=JSON)


def _failure_reasons(fed: FederatedApp) -> list[str | None]:
    return [r.reason for r in fed.backend.audit_rows if r.event == "oauth_login" and r.status == "failure"]


def test_fapi2_security_profile_final_client_test_happy_path(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    """...-happy-path: the token endpoint and the resource server ask for a DPoP nonce."""
    op.require_dpop_nonce = True
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    token_proofs = [p for p in op.dpop_proofs if p["htu"] == "https://op.test/token"]
    assert [p["error"] for p in token_proofs] == ["use_dpop_nonce", None]  # asked once, answered once
    assert "nonce" not in token_proofs[0] and token_proofs[1]["nonce"]
    assert len({a["jti"] for a in op.client_assertions}) == len(op.client_assertions)  # fresh each try
    op.rotate_dpop_nonce()  # the resource server moves on: the app's call dances once
    used = client.get("/resource")
    assert (used.status_code, used.text) == (200, "DPoP alice-sub")
    resource = [p for p in op.dpop_proofs if p["htm"] == "GET"][-2:]
    assert [p["error"] for p in resource] == ["use_dpop_nonce", None]


@pytest.mark.parametrize("bad", ["wrong_htu", "wrong_htm"])
def test_a_proof_for_another_request_is_refused(
    fed: FederatedApp, op: TestOpenIDProvider, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """Not a plan module: a proof for another ``htu`` or ``htm`` is refused; a typed 401."""
    real = DpopSigner.proof

    def spoiled(self: DpopSigner, kid: str, method: str, url: str, **kw: Any) -> str:
        if bad == "wrong_htu":
            return real(self, kid, method, url + "/elsewhere", **kw)
        return real(self, kid, "GET" if method == "POST" else "POST", url, **kw)

    monkeypatch.setattr(DpopSigner, "proof", spoiled)
    answer = _callback(fed, fed.client())
    assert answer.status_code == 401
    assert [p["error"] for p in op.dpop_proofs] == ["invalid_dpop_proof"]
    assert _failure_reasons(fed) == ["token_exchange_failed"]


def test_a_replayed_proof_is_refused(
    fed: FederatedApp, op: TestOpenIDProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a plan module: each call carries a fresh proof; a replayed one is refused."""
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    assert client.get("/resource").status_code == 200
    assert client.get("/resource").status_code == 200  # a fresh jti each time
    made: list[str] = []
    real = DpopSigner.proof

    def replaying(self: DpopSigner, kid: str, method: str, url: str, **kw: Any) -> str:
        made.append(made[0] if made else real(self, kid, method, url, **kw))
        return made[-1]

    monkeypatch.setattr(DpopSigner, "proof", replaying)
    assert client.get("/resource").status_code == 200  # the first use of the proof
    assert client.get("/resource").status_code == 401  # its replay
    assert op.dpop_proofs[-1]["error"] == "invalid_dpop_proof"
    assert op.dpop_proofs[-1]["jti"] == op.dpop_proofs[-2]["jti"]


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ((400, {"error": "invalid_request"}), 400),  # the provider refused the request
        ((201, {"expires_in": 60}), 502),  # no request_uri: an unusable answer
        ((503, {"error": "temporarily_unavailable"}), 502),
    ],
)
def test_invalid_par_response(
    fed: FederatedApp, op: TestOpenIDProvider, answer: tuple[int, dict[str, Any]], status: int
) -> None:
    """Not a plan module (the issue's case): a refused or unusable push answers a typed 400 /
    502, and the browser is not sent anywhere."""
    op.par_answer = answer
    start = fed.client().get(f"/auth/login/{PROVIDER}", headers=JSON)
    assert start.status_code == status
    assert "Location" not in start.headers


def _refused(fed: FederatedApp, op: TestOpenIDProvider, reason: str, *tamper: Any, **query: str) -> None:
    """The module's callback is refused: a typed 401 naming the check, no session, and
    (for a refused authorization response) no token request."""
    if tamper:
        op.tamper_next(*tamper)
    client = fed.client()
    if query:
        target = urlsplit(fed.authorize(client))
        params = {k: v[0] for k, v in parse_qs(target.query).items()}
        params.update(query)
        answer = client.get(target.path, query_string={k: v for k, v in params.items() if v}, headers=JSON)
    else:
        answer = _callback(fed, client)
    assert answer.status_code == 401
    assert _failure_reasons(fed) == [reason]
    assert client.get("/dashboard").status_code == 401
    if reason in ("issuer_mismatch", "csrf_mismatch"):
        assert op.dpop_proofs == []  # nothing was redeemed


def test_fapi2_security_profile_final_client_test_invalid_authorization_response_iss(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    _refused(fed, op, "issuer_mismatch", "wrong_iss_in_response")


def test_fapi2_security_profile_final_client_test_remove_authorization_response_iss(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    _refused(fed, op, "issuer_mismatch", "no_iss_in_response")


def test_fapi2_security_profile_final_client_test_ensure_authorization_response_with_invalid_state_fails(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    _refused(fed, op, "csrf_mismatch", state="not-the-state-we-sent")


def test_fapi2_security_profile_final_client_test_ensure_authorization_response_with_invalid_missing_state_fails(  # noqa: E501
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    _refused(fed, op, "csrf_mismatch", state="")  # left out of the callback


@pytest.mark.parametrize(
    ("module", "tamper"),
    [
        ("invalid_iss", "wrong_iss"),
        ("invalid_aud", "wrong_aud"),
        ("invalid_secondary_aud", "aud_array_no_azp"),
        ("invalid_null_alg", "alg_none"),
        ("invalid_alternate_alg", "wrong_alg"),  # RS256 where the client registered ES256
        ("invalid_expired_exp", "expired"),
        ("invalid_nonce", "wrong_nonce"),
        ("invalid_missing_nonce", "no_nonce"),
        ("invalid_missing_exp", "no_exp"),
        ("invalid_missing_aud", "no_aud"),
        ("invalid_missing_iss", "no_iss"),
    ],
)
def test_fapi2_security_profile_final_client_test_id_token(
    fed: FederatedApp, op: TestOpenIDProvider, module: str, tamper: Any
) -> None:
    """...-invalid-iss, -invalid-aud, -invalid-secondary-aud, -invalid-null-alg,
    -invalid-alternate-alg, -invalid-expired-exp, -invalid-nonce, -invalid-missing-nonce,
    -invalid-missing-exp, -invalid-missing-aud, -invalid-missing-iss: the ID token is refused."""
    _refused(fed, op, "id_token_invalid", tamper)


def test_fapi2_security_profile_final_client_test_valid_aud_as_array(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    op.tamper_next("aud_as_array")  # aud = [client_id]: valid
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    assert client.get("/dashboard").status_code == 200


def test_fapi2_security_profile_final_client_test_token_endpoint_response_without_expires_in(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    op.token_answer_overrides["expires_in"] = None
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    assert token_row(fed).expires_at is None  # kept without an expiry: used until refused
    assert client.get("/resource").text == "DPoP alice-sub"


def test_fapi2_security_profile_final_client_test_token_type_case_insensitivity(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    op.token_answer_overrides["token_type"] = "dpop"
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    assert token_row(fed).token_type == "DPoP"
    assert client.get("/resource").text == "DPoP alice-sub"


def test_fapi2_security_profile_final_client_test_rs_dpop_auth_scheme_case_insensitivity(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    op.require_dpop_nonce = True
    client = fed.client()
    assert _callback(fed, client).status_code == 302
    op.dpop_challenge_scheme = "dpop"  # the resource server's nonce challenge in another case
    op.rotate_dpop_nonce()
    assert client.get("/resource").text == "DPoP alice-sub"
    assert [p["error"] for p in op.dpop_proofs[-2:]] == ["use_dpop_nonce", None]


def test_fapi2_security_profile_final_client_test_discovery_issuer_mismatch(
    fed: FederatedApp, op: TestOpenIDProvider
) -> None:
    op.discovery_overrides["issuer"] = "https://another-op.test"
    start = fed.client().get(f"/auth/login/{PROVIDER}", headers=JSON)
    assert start.status_code == 502 and "Location" not in start.headers
    assert op.par_requests == []  # nothing was pushed to a provider that is not the one configured


def test_an_assertion_for_the_token_endpoint_is_refused_by_a_fapi2_provider(
    op: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, keys: Keys
) -> None:
    """client-test-invalid-client-assertion-aud: without the fapi2 profile our assertion names
    the token endpoint; a FAPI 2.0 provider refuses it at the push (a typed 400)."""
    fed = fapi_app(op, mock_clock, authflow_hasher, keys, preset=None, fapi2=False, use_par=True, dpop=True)
    start = fed.client().get(f"/auth/login/{PROVIDER}", headers=JSON)
    assert start.status_code == 400
    assert op.client_assertions[-1]["aud"] == "https://op.test/token"


# --- what the profile refuses ------------------------------------------------------------------


def _fapi_config(op: TestOpenIDProvider, keys: Keys, **overrides: Any) -> OAuthProviderConfig:
    settings = preset(
        "fapi2",
        discovery_url=op.discovery_url,
        client_id=CLIENT_ID,
        redirect_uri=REDIRECT_URI,
        client_key_store=keys.client,
        dpop_key_store=keys.dpop,
        id_token_signed_response_alg="ES256",
    )
    settings.update(overrides)
    return OAuthProviderConfig(**settings)


def _discover(op: TestOpenIDProvider, config: OAuthProviderConfig) -> OAuthProvider:
    op.register_client(CLIENT_ID, "", [REDIRECT_URI], jwks=Keys().jwks())  # private_key_jwt advertised
    return OAuthProvider.from_config(PROVIDER, config, http=RequestsHttpClient(adapters=op.http_adapters()))


@pytest.mark.parametrize(
    "changed",
    [
        {"token_endpoint_auth_method": "client_secret_basic"},
        {"client_secret": "a-shared-secret"},
        {"use_par": False},
        {"dpop": False},
        {"fapi2": False},
    ],
)
def test_the_preset_refuses_to_change_what_it_sets(
    op: TestOpenIDProvider, keys: Keys, changed: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError, match="fapi2 preset sets"):
        preset(
            "fapi2",
            discovery_url=op.discovery_url,
            client_id=CLIENT_ID,
            redirect_uri=REDIRECT_URI,
            client_key_store=keys.client,
            dpop_key_store=keys.dpop,
            **changed,
        )


@pytest.mark.parametrize(
    ("changed", "match"),
    [
        ({"token_endpoint_auth_method": "client_secret_post", "client_secret": "s"}, "forbids"),
        ({"client_secret": "a-shared-secret"}, "forbids client secrets"),
        ({"use_par": False}, "requires pushed authorization requests"),
        ({"dpop": False}, "sender-constrained"),
        ({"id_token_signed_response_alg": "RS256"}, "forbids ID tokens signed with RS256"),
    ],
)
def test_fapi2_refuses_what_the_profile_forbids(
    op: TestOpenIDProvider, keys: Keys, changed: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        _fapi_config(op, keys, **changed)


def test_fapi2_refuses_a_missing_key_store_and_an_implicit_or_hybrid_response_type(
    op: TestOpenIDProvider, keys: Keys
) -> None:
    with pytest.raises(ConfigurationError, match="missing dpop_key_store"):
        preset(
            "fapi2",
            discovery_url=op.discovery_url,
            client_id=CLIENT_ID,
            redirect_uri=REDIRECT_URI,
            client_key_store=keys.client,
        )
    entry = {**fapi_settings(op, keys), "response_type": "code id_token"}  # hybrid cannot be asked for
    with pytest.raises(ConfigurationError, match="unknown key"):
        provider_config(entry, "fapi")


@pytest.mark.parametrize(
    ("member", "error"),
    [
        ("authorization_response_iss_parameter_supported", Discovery),
        ("pushed_authorization_request_endpoint", Discovery),
    ],
)
def test_fapi2_refuses_a_provider_without_iss_or_par(
    op: TestOpenIDProvider, keys: Keys, member: str, error: type[Exception]
) -> None:
    """Checked when the discovery document is read (discovery is lazy: the first login)."""
    op.discovery_overrides[member] = None
    with pytest.raises(error, match=member.split("_supported")[0]):
        _discover(op, _fapi_config(op, keys))


def test_fapi2_refuses_rs256_where_ps256_es256_or_eddsa_is_required(
    op: TestOpenIDProvider, keys: Keys
) -> None:
    with pytest.raises(ConfigurationError, match="forbids ID tokens signed with RS256"):
        _discover(op, _fapi_config(op, keys, id_token_signed_response_alg=None))  # the RS256 default
    keys.client = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_rsa("RS256", 2048))
    with pytest.raises(ConfigurationError, match="client assertions signed with RS256"):
        _discover(op, _fapi_config(op, keys))
    keys.client = MemoryLocalIdpKeyStore.with_current(
        LocalIdpSigningKey.generate_rsa("RS256", 2048).with_algorithm("PS256")
    )
    assert _discover(op, _fapi_config(op, keys)).uses_par  # PS256 is FAPI 2.0's
    keys.dpop = MemoryLocalIdpKeyStore.with_current(LocalIdpSigningKey.generate_rsa("RS256", 2048))
    with pytest.raises(ConfigurationError, match="ES256 or Ed25519"):
        _discover(op, _fapi_config(op, keys))
