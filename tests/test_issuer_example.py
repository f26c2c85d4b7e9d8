"""The issuer example (``examples/issuer/app.py``): routes, access control and tokens.

In-process with the test client, then once over a real HTTP server on 127.0.0.1 with
PyJWT's ``PyJWKClient`` fetching the served JWK set.
"""

from __future__ import annotations

import json
import secrets
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from examples.issuer.app import create_app
from flask_authflow import get_state
from flask_authflow._clock import MockClock
from flask_authflow._core.encoding import b64url_decode
from flask_authflow.errors import TokenVerificationError
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from tests.parts import free_port

# The example as deployed: its SQLite file (in tmp_path) and, where a test passes none, the
# system clock, which PyJWT's own expiry check over HTTP also reads.
pytestmark = pytest.mark.authflow_stores("app")

ISS = "https://issuer-example.test"
AUD = "https://api.example"
PASSWORDS = {"alice": "wonderland-rabbit-42", "root": "operator-pass-1"}
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    """Build the example on a fresh SQLite file and key directory; users alice and root."""
    made: list[Flask] = []

    def make(clock: MockClock | None = None, **config: Any) -> Flask:
        n = len(made)
        app = create_app(
            {
                "TESTING": True,
                "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
                "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / f'issuer{n}.db'}",
                "AUTHFLOW_ISSUER": ISS,
                "ISSUER_OPERATORS": ["root"],
                **FAST_ARGON2,
                **config,
            },
            instance_path=str(tmp_path / f"instance{n}"),
            clock=clock,
        )
        made.append(app)
        runner = app.test_cli_runner()
        for name, password in PASSWORDS.items():
            result = runner.invoke(
                args=["authflow", "create-user", name, "--password-stdin"], input=f"{password}\n"
            )
            assert result.exit_code == 0, result.output
        return app

    yield make
    for app in made:
        get_state(app).backend.engine.dispose()


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


def login(app: Flask, username: str) -> FlaskClient:
    client = app.test_client()
    response = client.post("/login", json={"username": username, "password": PASSWORDS[username]})
    assert response.status_code == 200, response.data
    assert response.get_json() == {"status": "authenticated"}
    return client


def user_id(app: Flask, username: str) -> str:
    with app.app_context():
        user = get_state(app).backend.find_user("default", username)
    assert user is not None
    return str(user.user_id)


def jwks(app: Flask) -> dict[str, Any]:
    response = app.test_client().get("/jwks.json")
    assert response.status_code == 200
    body = response.get_json()
    assert isinstance(body, dict)
    return body


def verify(app: Flask, token: str, audience: str = AUD, clock: MockClock | None = None) -> dict[str, Any]:
    verifier = JwtVerifier(JwksHandle(jwks(app)), clock=clock).with_algorithms(["ES256", "RS256"])
    return dict(verifier.verify(token, audience, issuer=ISS).claims)


def kid_of(token: str) -> str:
    return str(json.loads(b64url_decode(token.split(".")[0]))["kid"])


def assert_json_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.data
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["error"] == code and isinstance(body["message"], str) and body["message"]
    return dict(body)


# -- public routes ----------------------------------------------------------------------------------------


def test_discovery_and_jwks_routes(app: Flask) -> None:
    client = app.test_client()
    response = client.get("/.well-known/openid-configuration")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=300"
    doc = response.get_json()
    assert doc["issuer"] == ISS
    assert doc["jwks_uri"] == f"{ISS}/jwks.json"
    assert doc["id_token_signing_alg_values_supported"] == ["ES256"]
    keys = jwks(app)["keys"]
    assert [k["kid"] for k in keys] == [get_state(app).issuer.current_kid]
    assert "d" not in keys[0]


def test_key_store_defaults_to_a_file_store_in_the_instance_folder(app: Flask) -> None:
    kid = get_state(app).issuer.current_kid
    current = Path(app.instance_path) / "issuer-keys" / "current.kid"
    assert current.read_text() == f"{kid}\n"


def test_index_renders_the_current_kid(app: Flask) -> None:
    response = app.test_client().get("/")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    kid = get_state(app).issuer.current_kid
    assert f'<code id="kid">{kid}</code> (ES256)' in response.text
    assert f'<code id="issuer">{ISS}</code>' in response.text
    assert f"<code>{AUD}</code>" in response.text

    rotated = login(app, "root").post("/admin/rotate", json={})
    assert rotated.status_code == 200
    page = app.test_client().get("/").text
    assert f'<code id="kid">{rotated.get_json()["kid"]}</code>' in page
    assert kid not in page


# -- /issue -----------------------------------------------------------------------------------------------


def test_issue_requires_login(app: Flask) -> None:
    assert_json_error(app.test_client().post("/issue", json={"audience": AUD}), 401, "unauthenticated")
    client = login(app, "alice")
    assert client.post("/logout").status_code == 200
    assert_json_error(client.post("/issue", json={"audience": AUD}), 401, "unauthenticated")


def test_wrong_password_gets_no_session(app: Flask) -> None:
    client = app.test_client()
    response = client.post("/login", json={"username": "alice", "password": "not-it"})
    assert_json_error(response, 401, "invalid_credentials")
    assert_json_error(client.post("/issue", json={"audience": AUD}), 401, "unauthenticated")


def test_issue_mints_a_token_for_the_logged_in_user(app: Flask) -> None:
    response = login(app, "alice").post("/issue", json={"audience": AUD})
    assert response.status_code == 200
    body = response.get_json()
    issuer = get_state(app).issuer
    assert body["kid"] == issuer.current_kid == kid_of(body["token"])
    assert body["expires_in"] == 300
    claims = verify(app, body["token"])
    assert claims["sub"] == user_id(app, "alice")
    assert claims["sub"] != user_id(app, "root")
    assert claims["aud"] == AUD and claims["iss"] == ISS
    assert claims["tenant"] == "default"
    assert claims["exp"] - claims["iat"] == 300
    with pytest.raises(TokenVerificationError):
        verify(app, body["token"], audience="https://other.example")
    # PyJWT agrees, with the key from the served JWKS.
    (jwk,) = jwks(app)["keys"]
    decoded = pyjwt.decode(
        body["token"], pyjwt.PyJWK(jwk).key, algorithms=["ES256"], audience=AUD, issuer=ISS
    )
    assert decoded["sub"] == user_id(app, "alice")


@pytest.mark.parametrize(
    "body",
    [
        {"audience": "https://evil.example"},
        {"audience": "https://api.example/"},
        {"audience": "HTTPS://API.EXAMPLE"},
        {"audience": ""},
        {"audience": 123},
        {"audience": None},
        {"audience": [AUD]},
        {"audience": {"aud": AUD}},
        {},
    ],
)
def test_issue_refuses_audiences_off_the_allowlist(app: Flask, body: dict[str, Any]) -> None:
    response = login(app, "alice").post("/issue", json=body)
    error = assert_json_error(response, 400, "invalid_input")
    assert AUD in error["message"]
    assert "token" not in response.get_json()


def test_issue_allowlist_is_configurable(make_app: Callable[..., Flask]) -> None:
    app = make_app(ISSUER_AUDIENCES=["api://a", "api://b"])
    client = login(app, "alice")
    assert verify(app, client.post("/issue", json={"audience": "api://b"}).get_json()["token"], "api://b")
    assert_json_error(client.post("/issue", json={"audience": AUD}), 400, "invalid_input")


@pytest.mark.parametrize("ttl", [0, -1, "300", True, False, 10**9, 1.5, None, 901, [300]])
def test_issue_refuses_bad_ttls(app: Flask, ttl: Any) -> None:
    response = login(app, "alice").post("/issue", json={"audience": AUD, "ttl": ttl})
    error = assert_json_error(response, 400, "invalid_input")
    assert "ttl must be an integer from 1 to 900 seconds" in error["message"]


@pytest.mark.parametrize("ttl", [1, 900])
def test_issue_accepts_ttls_at_the_bounds(app: Flask, ttl: int) -> None:
    response = login(app, "alice").post("/issue", json={"audience": AUD, "ttl": ttl})
    assert response.status_code == 200, response.data
    assert response.get_json()["expires_in"] == ttl
    claims = verify(app, response.get_json()["token"])
    assert claims["exp"] - claims["iat"] == ttl


def test_issue_never_exceeds_the_issuer_max_lifetime(make_app: Callable[..., Flask]) -> None:
    app = make_app(ISSUER_MAX_TTL=7200)  # misconfigured over AUTHFLOW_ISSUER_MAX_LIFETIME (1 h)
    client = login(app, "alice")
    assert client.post("/issue", json={"audience": AUD, "ttl": 3600}).status_code == 200
    error = assert_json_error(
        client.post("/issue", json={"audience": AUD, "ttl": 3601}), 400, "issuance_error"
    )
    assert "maximum of 3600s" in error["message"]


# -- bad bodies -------------------------------------------------------------------------------------------

BAD_BODIES = [
    ("{not json", "application/json"),
    ("[]", "application/json"),
    ('"a string"', "application/json"),
    ("null", "application/json"),
    ("\xff\xfe", "application/json"),
    ("audience=x", "application/x-www-form-urlencoded"),
]


@pytest.mark.parametrize(("data", "content_type"), BAD_BODIES)
def test_bad_bodies_are_400_not_500(app: Flask, data: str, content_type: str) -> None:
    guest = app.test_client()
    response = guest.post(
        "/login", data=data, content_type=content_type, headers={"Accept": "application/json"}
    )
    assert_json_error(response, 400, "invalid_input")

    alice = login(app, "alice")
    response = alice.post(
        "/issue", data=data, content_type=content_type, headers={"Accept": "application/json"}
    )
    assert_json_error(response, 400, "invalid_input")

    kid = get_state(app).issuer.current_kid
    root = login(app, "root")
    response = root.post(
        "/admin/rotate", data=data, content_type=content_type, headers={"Accept": "application/json"}
    )
    assert_json_error(response, 400, "invalid_input")
    assert get_state(app).issuer.current_kid == kid  # a malformed request rotates nothing
    assert len(jwks(app)["keys"]) == 1


def test_login_needs_string_credentials(app: Flask) -> None:
    client = app.test_client()
    for body in ({"username": "alice"}, {"username": "alice", "password": 42}, {"password": "x"}):
        assert_json_error(client.post("/login", json=body), 400, "invalid_input")


# -- /admin/rotate ----------------------------------------------------------------------------------------


def test_rotate_access_control(app: Flask) -> None:
    kid = get_state(app).issuer.current_kid
    assert_json_error(app.test_client().post("/admin/rotate", json={}), 401, "unauthenticated")
    assert_json_error(login(app, "alice").post("/admin/rotate", json={}), 403, "forbidden")
    assert get_state(app).issuer.current_kid == kid

    root = login(app, "root")
    assert_json_error(root.post("/admin/rotate", json={"algorithm": "HS256"}), 400, "invalid_input")
    assert_json_error(root.post("/admin/rotate", json={"algorithm": ["ES256"]}), 400, "invalid_input")
    assert get_state(app).issuer.current_kid == kid

    response = root.post("/admin/rotate", json={"algorithm": "ES256"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["algorithm"] == "ES256" and body["jwks_keys"] == 2
    assert body["kid"] == get_state(app).issuer.current_kid != kid
    assert [k["kid"] for k in jwks(app)["keys"]] == [body["kid"], kid]
    # Persisted in the file store: a restart of the same instance would sign with it.
    current = Path(app.instance_path) / "issuer-keys" / "current.kid"
    assert current.read_text() == f"{body['kid']}\n"
    # No body (or a form post from another page) rotates nothing; an empty JSON object means ES256.
    assert_json_error(root.post("/admin/rotate"), 400, "invalid_input")
    assert_json_error(root.post("/admin/rotate", data={"algorithm": "ES256"}), 400, "invalid_input")
    assert len(jwks(app)["keys"]) == 2
    assert root.post("/admin/rotate", json={}).get_json()["jwks_keys"] == 3


def test_rotate_needs_a_login_at_most_five_minutes_old(make_app: Callable[..., Flask]) -> None:
    clock = MockClock()
    app = make_app(clock=clock)
    assert get_state(app).clock is clock and get_state(app).issuer.clock is clock
    root = login(app, "root")
    alice = login(app, "alice")
    kid = get_state(app).issuer.current_kid

    clock.advance(timedelta(minutes=5))
    first = root.post("/admin/rotate", json={})
    assert first.status_code == 200, first.data

    clock.advance(timedelta(seconds=1))
    rotated = get_state(app).issuer.current_kid
    assert rotated != kid
    assert_json_error(root.post("/admin/rotate", json={}), 401, "step_up_required")
    assert_json_error(alice.post("/admin/rotate", json={}), 401, "step_up_required")
    assert get_state(app).issuer.current_kid == rotated
    # The stale session is still a session: issuing needs no fresh login.
    token = alice.post("/issue", json={"audience": AUD}).get_json()["token"]
    assert verify(app, token, clock=clock)["sub"] == user_id(app, "alice")

    fresh = login(app, "root")
    assert fresh.post("/admin/rotate", json={}).status_code == 200


def test_tokens_minted_before_and_after_rotation_both_verify(app: Flask) -> None:
    alice = login(app, "alice")
    before = alice.post("/issue", json={"audience": AUD}).get_json()["token"]
    assert login(app, "root").post("/admin/rotate", json={}).status_code == 200
    after = alice.post("/issue", json={"audience": AUD}).get_json()["token"]
    assert kid_of(before) != kid_of(after)
    assert kid_of(after) == get_state(app).issuer.current_kid
    assert verify(app, before)["sub"] == verify(app, after)["sub"] == user_id(app, "alice")


# -- over real HTTP ---------------------------------------------------------------------------------------


class _Http:
    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def call(self, path: str, body: Any = None, method: str | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method or ("GET" if body is None else "POST"),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with self.opener.open(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())


@pytest.mark.http
def test_issuer_example_over_real_http(make_app: Callable[..., Flask]) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app = make_app(AUTHFLOW_ISSUER=base, AUTHFLOW_COOKIE_SECURE=False)
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        alice, root, guest = _Http(base), _Http(base), _Http(base)
        status, discovery = guest.call("/.well-known/openid-configuration")
        assert status == 200 and discovery["jwks_uri"] == f"{base}/jwks.json"
        assert guest.call("/issue", {"audience": AUD})[0] == 401

        assert alice.call("/login", {"username": "alice", "password": PASSWORDS["alice"]})[0] == 200
        status, before = alice.call("/issue", {"audience": AUD, "ttl": 120})
        assert status == 200
        client = pyjwt.PyJWKClient(discovery["jwks_uri"])
        key = client.get_signing_key_from_jwt(before["token"])
        claims = pyjwt.decode(before["token"], key.key, algorithms=["ES256"], audience=AUD, issuer=base)
        assert claims["sub"] == user_id(app, "alice") and claims["exp"] - claims["iat"] == 120

        assert root.call("/login", {"username": "root", "password": PASSWORDS["root"]})[0] == 200
        assert alice.call("/admin/rotate", {})[0] == 403
        status, rotated = root.call("/admin/rotate", {})
        assert status == 200 and rotated["jwks_keys"] == 2
        status, after = alice.call("/issue", {"audience": AUD})
        assert status == 200 and after["kid"] == rotated["kid"] != before["kid"]
        # A client that fetches /jwks.json now verifies tokens of both keys. (PyJWT's caching
        # client would not refetch on the unknown kid within its cool-down, so use a fresh one.)
        client = pyjwt.PyJWKClient(discovery["jwks_uri"], cache_jwk_set=False, cache_keys=False)
        for token in (before["token"], after["token"]):
            key = client.get_signing_key_from_jwt(token)
            assert (
                pyjwt.decode(token, key.key, algorithms=["ES256"], audience=AUD, issuer=base)["iss"] == base
            )
        with pytest.raises(pyjwt.InvalidAudienceError):
            pyjwt.decode(after["token"], key.key, algorithms=["ES256"], audience="api://x", issuer=base)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_rotate_refuses_a_same_named_user_of_another_tenant(app: Flask) -> None:
    from flask_authflow.testing import login_test_client

    before = jwks(app)
    impostor = login_test_client(app, "root", tenant="other-tenant", password="impostor-pass-1")
    assert_json_error(impostor.post("/admin/rotate", json={}), 403, "forbidden")
    assert jwks(app) == before
