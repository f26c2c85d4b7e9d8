"""Provider presets: each signs in against an emulation of its provider's published
discovery document, key set and ID-token claims, through the whole login of a small app.

The emulations keep the in-process provider's endpoints but take each provider's issuer,
the members its discovery document has or lacks, its key shapes (Microsoft publishes
keys without ``alg``, Apple RS256 next to ES256) and the claims its ID tokens carry.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask, Response, jsonify, request
from flask.testing import FlaskClient
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey

from flask_authflow import AuthFlow, current_session, current_user, login_required
from flask_authflow._clock import MockClock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._ceremony import pkce_challenge
from flask_authflow.federation._errors import UnknownProvider
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._presets import APPLE_ISSUER, AppleClientSecret, preset, provider_config
from flask_authflow.federation._provider import OAuthProviderConfig
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._provider import RegisteredClient, TestOpenIDProvider, wsgi_adapter
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT

CLIENT_ID = "preset-client"
CLIENT_SECRET = "preset-secret"
TENANT = "9f3c2d1e-5b6a-4c7d-8e9f-0a1b2c3d4e5f"
OTHER_TENANT = "11111111-2222-4333-8444-555555555555"
MS_TEMPLATE = "https://login.microsoftonline.com/{tenantid}/v2.0"


def redirect_uri(name: str) -> str:
    return f"http://localhost/auth/callback/{name}"


class PresetApp:
    def __init__(
        self, name: str, entry: dict[str, Any], op: TestOpenIDProvider, clock: MockClock, hasher: Any
    ):
        self.name = name
        self.op = op
        self.app = Flask(f"preset_{name}")
        self.app.config.update(
            TESTING=True,
            AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
            AUTHFLOW_OAUTH_PROVIDERS={name: entry},
        )
        self.backend = InMemoryBackend(clock=clock)
        self.authflow = AuthFlow(
            self.app,
            backend=self.backend,
            session_store=MemorySessionStore(clock=clock),
            clock=clock,
            hasher=hasher,
            http_client=RequestsHttpClient(adapters=op.http_adapters()),
        )

        @self.app.get("/whoami")
        @login_required
        def whoami() -> str:
            return f"{current_user.identifier} via {current_session.record.auth_method}"

    def client(self) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
        return client

    def authorize(self, client: FlaskClient, *, drop_iss: bool = False) -> tuple[str, dict[str, str]]:
        """Follow the login to the provider: the authorize query and the callback's parameters."""
        start = client.get(f"/auth/login/{self.name}")
        assert start.status_code == 302, start.text
        browser = requests.Session()
        for prefix, adapter in self.op.http_adapters().items():
            browser.mount(prefix, adapter)
        answer = browser.get(start.location, allow_redirects=False, timeout=5)
        assert answer.status_code == 302, answer.text
        params = dict(parse_qsl(urlsplit(answer.headers["Location"]).query))
        if drop_iss:  # Microsoft and Apple send no iss parameter
            params.pop("iss", None)
        return urlsplit(start.location).query, params

    def sign_in(self, client: FlaskClient, *, drop_iss: bool = False) -> Any:
        _query, params = self.authorize(client, drop_iss=drop_iss)
        return client.get(f"/auth/callback/{self.name}", query_string=params)

    def audit(self) -> list[tuple[str, str | None]]:
        return [(r.status, r.reason) for r in self.backend.audit_rows if r.event == "oauth_login"]


def emulate(op: TestOpenIDProvider, name: str, *, secret: str = CLIENT_SECRET, **overrides: Any) -> None:
    op.register_client(CLIENT_ID, secret, [redirect_uri(name)])
    op.discovery_overrides = {
        "end_session_endpoint": None,
        "backchannel_logout_supported": None,
        "backchannel_logout_session_supported": None,
        "frontchannel_logout_supported": None,
        "authorization_response_iss_parameter_supported": None,
        **overrides,
    }


def settings(name: str, **values: Any) -> dict[str, Any]:
    return {
        "preset": name,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uri": redirect_uri(name),
        **values,
    }


def signed_in_as(fed: PresetApp, client: FlaskClient, identifier: str) -> None:
    page = client.get("/whoami")
    assert page.status_code == 200, page.text
    # The account named after the provider identity keeps the sub's case, as the link does.
    assert page.text == f"{identifier} via oidc:{fed.name}"


# --- google -------------------------------------------------------------------------------------


def test_google_signs_in_with_its_published_shapes(mock_clock, authflow_hasher) -> None:
    op = TestOpenIDProvider("https://accounts.google.com", clock=mock_clock)
    emulate(
        op,
        "google",
        id_token_signing_alg_values_supported=["RS256"],
        code_challenge_methods_supported=["plain", "S256"],
        token_endpoint_auth_methods_supported=["client_secret_post", "client_secret_basic"],
    )
    op.login_as(
        "104331238891247912345",
        email="alice@gmail.com",
        email_verified=True,
        name="Alice Doe",
        picture="https://lh3.googleusercontent.com/a/x",
        azp=CLIENT_ID,
        at_hash_ignored="x",
    )
    fed = PresetApp("google", settings("google"), op, mock_clock, authflow_hasher)
    client = fed.client()
    query, params = fed.authorize(client)
    assert set(dict(parse_qsl(query))["scope"].split()) == {"openid", "email", "profile"}
    assert client.get("/auth/callback/google", query_string=params).status_code == 302
    signed_in_as(fed, client, "google:104331238891247912345")
    assert op.token_requests == ["client_secret_basic"]


# --- microsoft ----------------------------------------------------------------------------------


def microsoft_claims(tid: str | None) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "oid": "00000000-0000-0000-66f3-3332eca7ea81",
        "preferred_username": "alice@contoso.example",
        "name": "Alice",
        "email": "alice@contoso.example",
        "ver": "2.0",
        "aio": "Df2UVXL1ix",
    }
    if tid is not None:
        claims["tid"] = tid
    return claims


def microsoft_op(clock: MockClock, path: str) -> TestOpenIDProvider:
    op = TestOpenIDProvider(f"https://login.microsoftonline.com/{path}/v2.0", clock=clock)
    op.publish_alg = False  # Entra ID publishes its keys without alg
    return op


def test_microsoft_single_tenant_signs_in_with_keys_without_alg(mock_clock, authflow_hasher) -> None:
    op = microsoft_op(mock_clock, TENANT)
    emulate(
        op,
        "microsoft",
        id_token_signing_alg_values_supported=["RS256"],
        code_challenge_methods_supported=None,
        token_endpoint_auth_methods_supported=[
            "client_secret_post",
            "private_key_jwt",
            "client_secret_basic",
        ],
    )
    op.login_as("AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", **microsoft_claims(TENANT))
    fed = PresetApp("microsoft", settings("microsoft", tenant_id=TENANT), op, mock_clock, authflow_hasher)
    client = fed.client()
    assert fed.sign_in(client, drop_iss=True).status_code == 302
    signed_in_as(fed, client, "microsoft:AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ")
    assert "alg" not in op.jwks()["keys"][0]
    assert op.userinfo_requests == 0  # the claims come from the ID token


def multi_tenant_app(clock: MockClock, hasher: Any, **values: Any) -> PresetApp:
    op = microsoft_op(clock, "organizations")
    emulate(
        op,
        "microsoft",
        issuer=MS_TEMPLATE,
        id_token_signing_alg_values_supported=["RS256"],
        code_challenge_methods_supported=None,
    )
    return PresetApp(
        "microsoft", settings("microsoft", tenant_id="organizations", **values), op, clock, hasher
    )


def test_microsoft_multi_tenant_checks_iss_against_the_tokens_tid(mock_clock, authflow_hasher) -> None:
    fed = multi_tenant_app(mock_clock, authflow_hasher)
    fed.op.token_issuer = f"https://login.microsoftonline.com/{TENANT}/v2.0"
    fed.op.login_as("ms-sub-1", **microsoft_claims(TENANT))
    client = fed.client()
    assert fed.sign_in(client, drop_iss=True).status_code == 302
    signed_in_as(fed, client, "microsoft:ms-sub-1")


@pytest.mark.parametrize(
    ("tid", "token_tenant", "allowed"),
    [
        (OTHER_TENANT, OTHER_TENANT, [TENANT]),  # a tenant not on the allow-list
        (TENANT, OTHER_TENANT, []),  # iss of another tenant than tid
        (None, TENANT, []),  # no tid at all
        ("../evil", TENANT, []),  # a tid that is no tenant id
    ],
    ids=["tenant_not_allowed", "iss_not_of_tid", "tid_missing", "tid_malformed"],
)
def test_microsoft_multi_tenant_refusals(mock_clock, authflow_hasher, tid, token_tenant, allowed) -> None:
    fed = multi_tenant_app(mock_clock, authflow_hasher, allowed_tenants=allowed)
    fed.op.token_issuer = f"https://login.microsoftonline.com/{token_tenant}/v2.0"
    fed.op.login_as("ms-sub-2", **microsoft_claims(tid))
    client = fed.client()
    response = fed.sign_in(client, drop_iss=True)
    assert response.status_code == 401
    assert "tid" in response.text or "tenant" in response.text
    assert fed.audit()[-1] == ("failure", "id_token_invalid")
    assert client.get("/whoami").status_code != 200


def test_microsoft_allowed_tenant_signs_in(mock_clock, authflow_hasher) -> None:
    fed = multi_tenant_app(mock_clock, authflow_hasher, allowed_tenants=[TENANT])
    fed.op.token_issuer = f"https://login.microsoftonline.com/{TENANT}/v2.0"
    fed.op.login_as("ms-sub-3", **microsoft_claims(TENANT))
    client = fed.client()
    assert fed.sign_in(client, drop_iss=True).status_code == 302
    signed_in_as(fed, client, "microsoft:ms-sub-3")


def test_allowed_tenants_needs_a_multi_tenant_issuer() -> None:
    with pytest.raises(ConfigurationError, match="allowed_tenants needs a multi-tenant issuer"):
        OAuthProviderConfig(
            **preset(
                "microsoft",
                tenant_id=TENANT,
                client_id="c",
                client_secret="s",
                redirect_uri="https://app.example/cb",
                allowed_tenants=[TENANT],
            )
        )


# --- okta, auth0, keycloak, gitlab, cognito -----------------------------------------------------

CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "okta",
        "https://dev-123456.okta.com/oauth2/default",
        {"domain": "dev-123456.okta.com", "authorization_server": "default"},
        {
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
                "client_secret_jwt",
                "private_key_jwt",
                "none",
            ],
            "id_token_signing_alg_values_supported": ["RS256"],
        },
        {"ver": 1, "idp": "00o1", "amr": ["pwd"], "email": "a@okta.example", "email_verified": True},
    ),
    (
        "auth0",
        "https://acme.eu.auth0.com/",
        {"domain": "acme.eu.auth0.com"},
        {"id_token_signing_alg_values_supported": ["HS256", "RS256", "PS256"]},
        {
            "nickname": "alice",
            "picture": "https://s.gravatar.com/x",
            "updated_at": "2026-11-01T10:00:00.000Z",
        },
    ),
    (
        "keycloak",
        "https://sso.example.com/realms/acme",
        {"base_url": "https://sso.example.com", "realm": "acme"},
        {"id_token_signing_alg_values_supported": ["PS384", "ES384", "RS384", "HS256", "RS256", "ES256"]},
        {"typ": "ID", "azp": CLIENT_ID, "preferred_username": "alice", "session_state": "3f2a", "acr": "1"},
    ),
    (
        "gitlab",
        "https://gitlab.com",
        {},
        {"id_token_signing_alg_values_supported": ["RS256"]},
        {"nickname": "alice", "groups_direct": ["acme"], "sub_legacy": "2f5c", "email_verified": True},
    ),
    (
        "cognito",
        "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbC123xyz",
        {"region": "eu-west-1", "user_pool_id": "eu-west-1_AbC123xyz"},
        {"id_token_signing_alg_values_supported": ["RS256"], "userinfo_endpoint": None},
        {"cognito:username": "alice", "token_use": "id", "origin_jti": "a-b", "email_verified": True},
    ),
]


@pytest.mark.parametrize(("name", "issuer", "own", "document", "claims"), CASES, ids=[c[0] for c in CASES])
def test_preset_signs_in(mock_clock, authflow_hasher, name, issuer, own, document, claims) -> None:
    op = TestOpenIDProvider(issuer, clock=mock_clock, trailing_slash=issuer.endswith("/"))
    emulate(op, name, **document)
    op.login_as(f"{name}|sub-1", **claims)
    fed = PresetApp(name, settings(name, **own), op, mock_clock, authflow_hasher)
    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    signed_in_as(fed, client, f"{name}:{name}|sub-1")
    with fed.app.test_request_context():
        assert fed.authflow.federation.provider(name).issuer == issuer


@pytest.mark.parametrize(
    ("name", "values", "missing"),
    [
        ("okta", {}, "domain"),
        ("auth0", {}, "domain"),
        ("keycloak", {"base_url": "https://sso.example.com"}, "realm"),
        ("cognito", {"region": "eu-west-1"}, "user_pool_id"),
        ("microsoft", {}, "tenant_id"),
        ("apple", {"key_id": "K"}, "team_id"),
        ("google", {"client_secret": None}, "client_secret"),
    ],
)
def test_a_missing_preset_setting_is_named_at_init_app(authflow_hasher, name, values, missing) -> None:
    entry = {k: v for k, v in {**settings(name), **values}.items() if v is not None}
    app = Flask("missing")
    app.config.update(AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_OAUTH_PROVIDERS={name: entry})
    with pytest.raises(ConfigurationError, match=f"missing {missing}"):
        AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("nosuch", {}, "unknown preset 'nosuch'"),
        ("microsoft", {"tenant_id": "contoso.example"}, "Directory \\(tenant\\) ID"),
        ("okta", {"domain": "evil.example/path?x"}, "domain"),
        ("cognito", {"region": "nowhere", "user_pool_id": "p"}, "region"),
    ],
)
def test_a_malformed_preset_setting_is_refused(name, values, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        preset(name, client_id="c", client_secret="s", redirect_uri="https://app.example/cb", **values)


# --- apple --------------------------------------------------------------------------------------


def p256_pem() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


class AppleEmulation(TestOpenIDProvider):
    """Apple's token endpoint: the client secret must be the ES256 JWT of the team's key."""

    def __init__(self, public_pem: str, clock: MockClock) -> None:
        super().__init__(APPLE_ISSUER, algorithm="ES256", clock=clock)
        self.rotate_key("RS256")  # Apple's key set: RS256 signing next to an ES256 key
        self.team_key = ECKey.import_key(public_pem)
        self.secrets_seen: list[str] = []

    def _authenticate_client(self) -> RegisteredClient | Response:
        client = self._clients.get(request.form.get("client_id", ""))
        try:
            token = jwt.decode(request.form.get("client_secret", ""), self.team_key, algorithms=["ES256"])
        except (JoseError, ValueError):
            return self._invalid_client()
        claims = token.claims
        now = self._clock.now().timestamp()
        if (
            client is None
            or "authorization" in request.headers
            or token.header.get("kid") != "KEY123"
            or (claims.get("iss"), claims.get("sub"), claims.get("aud"))
            != ("TEAM123", CLIENT_ID, APPLE_ISSUER)
            or not claims.get("iat", now + 61) <= now + 60 < claims.get("exp", 0) + 60  # 1 min skew
        ):
            return self._invalid_client()
        self.secrets_seen.append(request.form["client_secret"])
        return client


def apple_app(clock: MockClock, hasher: Any) -> PresetApp:
    private, public = p256_pem()
    op = AppleEmulation(public, clock)
    emulate(
        op,
        "apple",
        secret="unused-apple-mints-it",
        userinfo_endpoint=None,
        response_modes_supported=["query", "fragment", "form_post"],
        id_token_signing_alg_values_supported=["RS256"],
        token_endpoint_auth_methods_supported=["client_secret_post"],
        scopes_supported=["openid", "email", "name"],
    )
    op.login_as(
        "001234.abcdef0123456789.1234",
        email="x7k2@privaterelay.appleid.com",
        email_verified="true",
        is_private_email="true",
        nonce_supported=True,
        auth_time=int(clock.now().timestamp()),
    )
    entry = settings("apple", team_id="TEAM123", key_id="KEY123", private_key=private)
    del entry["client_secret"]
    return PresetApp("apple", entry, op, clock, hasher)


def test_apple_signs_in_with_form_post_and_a_minted_client_secret(mock_clock, authflow_hasher) -> None:
    fed = apple_app(mock_clock, authflow_hasher)
    client = fed.client()
    query, params = fed.authorize(client, drop_iss=True)
    assert dict(parse_qsl(query))["response_mode"] == "form_post"
    response = client.post("/auth/callback/apple", data=params)
    assert response.status_code == 302, response.text
    signed_in_as(fed, client, "apple:001234.abcdef0123456789.1234")
    assert len(fed.op.secrets_seen) == 1


def test_apple_form_post_without_the_session_cookie_continues_as_get(mock_clock, authflow_hasher) -> None:
    fed = apple_app(mock_clock, authflow_hasher)
    client = fed.client()
    _query, params = fed.authorize(client, drop_iss=True)
    cross_site = fed.client().post("/auth/callback/apple", data=params)  # no Lax cookie on the POST
    assert cross_site.status_code == 303
    finished = client.get(cross_site.location)
    assert finished.status_code == 302, finished.text
    signed_in_as(fed, client, "apple:001234.abcdef0123456789.1234")


def test_apple_form_post_with_a_bad_state_is_refused(mock_clock, authflow_hasher) -> None:
    fed = apple_app(mock_clock, authflow_hasher)
    client = fed.client()
    _query, params = fed.authorize(client, drop_iss=True)
    response = client.post("/auth/callback/apple", data={**params, "state": "forged"})
    assert response.status_code == 401
    assert fed.audit()[-1] == ("failure", "csrf_mismatch")
    assert client.get("/whoami").status_code != 200
    assert fed.op.secrets_seen == []  # refused before any token request


def test_a_form_post_callback_is_refused_for_a_query_mode_provider(mock_clock, authflow_hasher) -> None:
    op = TestOpenIDProvider("https://accounts.google.com", clock=mock_clock)
    emulate(op, "google")
    op.login_as("g-sub")
    fed = PresetApp("google", settings("google"), op, mock_clock, authflow_hasher)
    client = fed.client()
    _query, params = fed.authorize(client)
    assert client.post("/auth/callback/google", data=params).status_code == 405
    assert client.post("/auth/callback/nosuch", data=params).status_code == 404


def test_the_apple_client_secret_is_short_lived_and_minted_again_before_expiry(mock_clock) -> None:
    private, public = p256_pem()
    secret = AppleClientSecret(
        team_id="TEAM123", key_id="KEY123", private_key=private, client_id=CLIENT_ID, clock=mock_clock
    )
    first = secret()
    token = jwt.decode(first, ECKey.import_key(public), algorithms=["ES256"])
    assert (token.header["alg"], token.header["kid"]) == ("ES256", "KEY123")
    assert token.claims["exp"] - token.claims["iat"] == 600
    assert secret() == first
    mock_clock.advance(7 * 60)
    assert secret() == first
    mock_clock.advance(90)  # within two minutes of expiry
    assert secret() != first


def test_the_apple_key_must_be_a_p256_private_key() -> None:
    with pytest.raises(ConfigurationError, match="not a PEM EC private key"):
        AppleClientSecret(team_id="T", key_id="K", private_key="not a key", client_id="c")
    _private, public = p256_pem()
    with pytest.raises(ConfigurationError, match="P-256 private key"):
        AppleClientSecret(team_id="T", key_id="K", private_key=public, client_id="c")


def test_apple_refuses_a_client_secret_signed_by_another_key(mock_clock, authflow_hasher) -> None:
    fed = apple_app(mock_clock, authflow_hasher)
    fed.op.team_key = ECKey.import_key(p256_pem()[1])  # Apple knows another key for the team
    client = fed.client()
    _query, params = fed.authorize(client, drop_iss=True)
    response = client.post("/auth/callback/apple", data=params)
    assert response.status_code == 401
    assert "invalid_client" in response.text
    assert fed.audit()[-1] == ("failure", "token_exchange_failed")
    assert client.get("/whoami").status_code != 200


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        ('{"code": "c", "state": "s"}', "application/json", 405),
        ("code=a&code=b&state=s", "application/x-www-form-urlencoded", 400),
        ("state=s&state=t", "application/x-www-form-urlencoded", 400),
        ("\xff\xfe=%ZZ", "application/x-www-form-urlencoded", 401),
    ],
    ids=["json_body", "repeated_code", "repeated_state", "garbage_form"],
)
def test_hostile_form_posts_get_a_4xx(mock_clock, authflow_hasher, body, content_type, status) -> None:
    fed = apple_app(mock_clock, authflow_hasher)
    client = fed.client()
    fed.authorize(client, drop_iss=True)
    response = client.post("/auth/callback/apple", data=body.encode("latin-1"), content_type=content_type)
    assert response.status_code == status, response.text
    assert client.get("/whoami").status_code != 200


# --- github: plain OAuth 2.0, identity from the user API ---------------------------------------


class GitHubEmulation:
    """github.com's authorize and token endpoints and api.github.com's user and e-mail APIs."""

    def __init__(self) -> None:
        self.emails: list[dict[str, Any]] = [
            {
                "email": "octo@users.noreply.github.com",
                "primary": False,
                "verified": True,
                "visibility": None,
            },
            {"email": "octocat@github.example", "primary": True, "verified": True, "visibility": "public"},
        ]
        self.token_error: str | None = None
        self.authorize_args: dict[str, str] = {}
        self._codes: dict[str, str] = {}
        self._tokens: set[str] = set()
        self.web = Flask("github_web")
        self.api = Flask("github_api")
        self.web.add_url_rule("/login/oauth/authorize", "authorize", self._authorize)
        self.web.add_url_rule("/login/oauth/access_token", "token", self._token, methods=["POST"])
        self.api.add_url_rule("/user", "user", self._user)
        self.api.add_url_rule("/user/emails", "emails", self._emails)

    def adapters(self) -> dict[str, Any]:
        return {
            "https://github.com/": wsgi_adapter(self.web),
            "https://api.github.com/": wsgi_adapter(self.api),
        }

    def _authorize(self) -> Response:
        self.authorize_args = dict(request.args)
        if request.args.get("client_id") != CLIENT_ID or request.args.get("redirect_uri") != redirect_uri(
            "github"
        ):
            return Response("bad client", status=400)
        code = secrets.token_urlsafe(16)
        self._codes[code] = request.args["code_challenge"]
        target = f"{redirect_uri('github')}?code={code}&state={request.args['state']}"
        return Response(status=302, headers={"Location": target})

    def _token(self) -> Response:
        form = request.form
        challenge = self._codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        if (
            self.token_error is not None
            or challenge is None
            or (form.get("client_id"), form.get("client_secret")) != (CLIENT_ID, CLIENT_SECRET)
            or pkce_challenge(verifier) != challenge
        ):  # GitHub answers its errors with HTTP 200
            return jsonify(error=self.token_error or "bad_verification_code")
        token = "gho_" + secrets.token_urlsafe(24)
        self._tokens.add(token)
        # An id_token here would be a forgery: a plain OAuth provider's answer is never read for one.
        return jsonify(
            access_token=token, token_type="bearer", scope="read:user,user:email", id_token="x.y.z"
        )

    def _authorized(self) -> bool:
        auth = request.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and auth[7:] in self._tokens

    def _user(self) -> Response:
        if not self._authorized():
            return Response(status=401)
        return jsonify(
            id=583231, login="octocat", name="The Octocat", email=None, node_id="MDQ6VXNlcjU4MzIzMQ=="
        )

    def _emails(self) -> Response:
        return jsonify(self.emails) if self._authorized() else Response(status=401)


def github_app(clock: MockClock, hasher: Any, gh: GitHubEmulation, **values: Any) -> PresetApp:
    fed = PresetApp.__new__(PresetApp)
    fed.name = "github"
    fed.app = Flask("preset_github")
    fed.app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_OAUTH_PROVIDERS={"github": settings("github", **values)},
    )
    fed.backend = InMemoryBackend(clock=clock)
    fed.authflow = AuthFlow(
        fed.app,
        backend=fed.backend,
        session_store=MemorySessionStore(clock=clock),
        clock=clock,
        hasher=hasher,
        http_client=RequestsHttpClient(adapters=gh.adapters()),
    )

    @fed.app.get("/whoami")
    @login_required
    def whoami() -> str:
        return f"{current_user.identifier} via {current_session.record.auth_method}"

    return fed


def github_sign_in(fed: PresetApp, gh: GitHubEmulation, client: FlaskClient, **override: str) -> Any:
    start = client.get("/auth/login/github")
    assert start.status_code == 302, start.text
    answer = gh.web.test_client().get(start.location.replace("https://github.com", ""))
    assert answer.status_code == 302, answer.text
    params = {**dict(parse_qsl(urlsplit(answer.location).query)), **override}
    return client.get("/auth/callback/github", query_string=params)


def test_github_signs_in_through_its_user_api_never_as_openid(mock_clock, authflow_hasher) -> None:
    gh = GitHubEmulation()
    fed = github_app(mock_clock, authflow_hasher, gh)
    client = fed.client()
    response = github_sign_in(fed, gh, client)
    assert response.status_code == 302, response.text
    page = client.get("/whoami")
    assert page.text == "github:583231 via oauth:github"
    args = gh.authorize_args
    assert args["scope"] == "read:user user:email"
    assert args["code_challenge_method"] == "S256" and args["state"]
    assert "nonce" not in args and "openid" not in args["scope"]
    link = fed.backend.find_link("https://github.com", "583231")
    assert link is not None
    record = [row for row in fed.backend.audit_rows if not row.event.startswith("device_")][-1]
    assert record.status == "success"


def test_github_without_a_verified_primary_email_is_refused(mock_clock, authflow_hasher) -> None:
    gh = GitHubEmulation()
    gh.emails = [
        {"email": "octocat@github.example", "primary": True, "verified": False},
        {"email": "other@github.example", "primary": False, "verified": True},
    ]
    fed = github_app(mock_clock, authflow_hasher, gh)
    client = fed.client()
    response = github_sign_in(fed, gh, client)
    assert response.status_code == 401
    assert "no verified primary e-mail" in response.text
    assert fed.audit()[-1] == ("failure", "userinfo_failed")
    assert fed.backend.find_link("https://github.com", "583231") is None
    assert client.get("/whoami").status_code != 200


def test_github_state_and_token_errors_are_refused(mock_clock, authflow_hasher) -> None:
    gh = GitHubEmulation()
    fed = github_app(mock_clock, authflow_hasher, gh)
    client = fed.client()
    assert github_sign_in(fed, gh, client, state="forged").status_code == 401
    assert fed.audit()[-1] == ("failure", "csrf_mismatch")
    gh.token_error = "bad_verification_code"
    response = github_sign_in(fed, gh, client)
    assert response.status_code == 401 and "bad_verification_code" in response.text
    assert fed.audit()[-1] == ("failure", "token_exchange_failed")
    assert client.get("/whoami").status_code != 200


def test_github_is_not_an_openid_provider(mock_clock, authflow_hasher) -> None:
    gh = GitHubEmulation()
    fed = github_app(mock_clock, authflow_hasher, gh)
    response = fed.client().post("/auth/backchannel-logout/github", data={"logout_token": "x.y.z"})
    assert response.status_code == 400  # no logout tokens from a plain OAuth provider
    with fed.app.test_request_context(), pytest.raises(UnknownProvider, match=r"plain OAuth 2\.0"):
        fed.authflow.federation.provider("github")
    with pytest.raises(ConfigurationError, match="not OpenID Connect"):
        github_app(mock_clock, authflow_hasher, gh, scopes=["openid", "read:user"])


def test_provider_settings_pass_through_a_preset_and_win() -> None:
    config = OAuthProviderConfig(
        **preset(
            "google",
            client_id="c",
            client_secret="s",
            redirect_uri="https://app.example/cb",
            scopes=["openid", "email"],
            link_by_email=True,
        )
    )
    assert config.scopes == ("openid", "email") and config.link_by_email
    assert config.discovery_url == "https://accounts.google.com/.well-known/openid-configuration"
    with pytest.raises(ConfigurationError, match="unknown key"):
        provider_config(settings("google", colour="blue"), "AUTHFLOW_OAUTH_PROVIDERS['google']")
