"""The reference app: its routes and statuses, in-process and over real HTTP."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from examples.reference.app import create_app
from tests.federation_support import ServedProvider
from tests.parts import free_port, wait_for_port

# The app as configured: its SQLite file in tmp_path (the plugin still gives it mock_clock).
pytestmark = pytest.mark.authflow_stores("sql")

ROOT = Path(__file__).resolve().parent.parent
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
        },
        instance_path=str(tmp_path / "instance"),
    )
    runner = app.test_cli_runner()
    result = runner.invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input="wonderland-rabbit-42\n"
    )
    assert result.exit_code == 0, result.output
    runner.invoke(
        args=["authflow", "create-user", "alice", "--tenant", "other", "--password-stdin"],
        input="x-other-1\n",
    )
    return app


def _login(client: FlaskClient, username: str, password: str, **extra: str):
    return client.post("/login", json={"username": username, "password": password, **extra})


def test_index_is_a_page_with_links_to_the_pages(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    for path in ("/login", "/account", "/account/factors", "/dashboard"):
        assert f'href="{path}"' in response.text
    assert 'id="logout-form"' not in response.text  # a guest has nothing to sign out of
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Cache-Control"] == "no-store"


def test_dashboard_requires_login(client: FlaskClient) -> None:
    assert client.get("/dashboard").status_code == 401


def test_login_dashboard_logout_and_dead_cookie(client: FlaskClient) -> None:
    response = _login(client, "alice", "wonderland-rabbit-42")
    assert response.status_code == 200
    assert response.text == "authenticated\n"
    assert client.get("/dashboard").status_code == 200
    old_cookie = client.get_cookie("authflow_session")
    assert old_cookie is not None
    assert client.post("/logout").status_code == 400  # neither JSON nor a CSRF-carrying form: refused
    assert client.get("/dashboard").status_code == 200  # ... and nothing happened
    assert client.post("/logout", json={}).status_code == 200
    assert client.get("/dashboard").status_code == 401
    replay = client.application.test_client()
    replay.set_cookie("authflow_session", old_cookie.value)
    assert replay.get("/dashboard").status_code == 401


def test_identifiers_are_case_insensitive(client: FlaskClient) -> None:
    assert _login(client, "ALICE", "wonderland-rabbit-42").status_code == 200


def test_unknown_user_wrong_tenant_wrong_password_are_byte_identical(app: Flask) -> None:
    responses = []
    for body in (
        {"username": "nobody", "password": "wonderland-rabbit-42"},
        {"username": "alice", "password": "wonderland-rabbit-42", "tenant": "nowhere"},
        {"username": "alice", "password": "wrong-password"},
        {"username": "alice", "password": "wonderland-rabbit-42", "tenant": "other"},
    ):
        response = app.test_client().post("/login", json=body)
        headers = sorted((k, v) for k, v in response.headers.items() if k.lower() != "date")
        responses.append((response.status_code, response.get_data(), headers))
    assert responses[0][0] == 401
    assert all(r == responses[0] for r in responses), responses


def test_lockout_is_403_with_lock_end(app: Flask) -> None:
    client = app.test_client()
    statuses = [_login(client, "alice", f"bad-{i}").status_code for i in range(5)]
    assert statuses[:4] == [401, 401, 401, 401]
    locked = _login(client, "alice", "wonderland-rabbit-42")
    assert locked.status_code == 403
    assert locked.text.startswith("account locked until 20")


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '{"username": "alice"}',
        '{"username": 5, "password": "x"}',
        '{"username": "alice", "password": "x", "tenant": []}',
    ],
)
def test_malformed_login_bodies_are_400_not_500(client: FlaskClient, body: str) -> None:
    response = client.post("/login", data=body, content_type="application/json")
    assert response.status_code == 400


def test_over_long_password_is_401_error_not_500(client: FlaskClient) -> None:
    response = _login(client, "alice", "x" * 5000)
    assert response.status_code == 401
    assert "login error" in response.text


def test_metrics_count_attempts(client: FlaskClient) -> None:
    _login(client, "alice", "wonderland-rabbit-42")
    _login(client, "alice", "nope-nope")
    text = client.get("/metrics").text
    assert "# TYPE authflow_login_attempts_total counter" in text
    assert "authflow_login_successes_total 1" in text
    assert "authflow_login_failures_total 1" in text


def test_html_login_page_requires_csrf_token(client: FlaskClient) -> None:
    page = client.get("/login")
    assert page.status_code == 200
    assert 'name="csrf_token"' in page.text
    forged = client.post(
        "/login", data={"username": "alice", "password": "wonderland-rabbit-42", "csrf_token": "x"}
    )
    assert forged.status_code == 400
    assert client.get("/dashboard").status_code == 401


def test_html_login_flow_and_safe_next(client: FlaskClient) -> None:
    page = client.get("/login?next=//evil.example")
    assert "evil.example" not in page.text
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    wrong = client.post("/login", data={"username": "alice", "password": "bad", "csrf_token": token})
    assert wrong.status_code == 401
    assert "Wrong username or password." in wrong.text
    token = wrong.text.split('name="csrf_token" value="')[1].split('"')[0]
    ok = client.post(
        "/login",
        data={
            "username": "alice",
            "password": "wonderland-rabbit-42",
            "csrf_token": token,
            "next": "//evil.example",
        },
    )
    assert ok.status_code == 302
    assert ok.headers["Location"] == "/account"
    account = client.get("/account", headers={"Accept": "text/html"})
    assert "Signed in as <strong>alice</strong>" in account.text


def test_browser_is_redirected_to_login_page(client: FlaskClient) -> None:
    response = client.get("/account", headers={"Accept": "text/html"})
    assert response.status_code == 302
    assert response.headers["Location"] == "/login?next=/account"


def test_development_key_created_once_with_mode_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = tmp_path / "instance"
    first = create_app({"TESTING": True, **FAST_ARGON2}, instance_path=str(instance))
    key_file = instance / "dev-signing-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "created a development signing key" in capsys.readouterr().err
    second = create_app({"TESTING": True, **FAST_ARGON2}, instance_path=str(instance))
    assert "using the development signing key" in capsys.readouterr().err
    assert first.config["AUTHFLOW_SIGNING_KEY"] == second.config["AUTHFLOW_SIGNING_KEY"]
    assert len(first.config["AUTHFLOW_SIGNING_KEY"]) >= 32


# --- over real HTTP -----------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


#: ``flask`` on the reference app, as its README runs it.
REFERENCE_FLASK = [sys.executable, "-m", "flask", "--app", "examples/reference/app.py"]


def create_users(env: dict[str, str], users: dict[str, str]) -> None:
    """Create ``users`` (username: password) with ``flask authflow create-user`` in ``env``."""
    for username, password in users.items():
        created = subprocess.run(
            [*REFERENCE_FLASK, "authflow", "create-user", username, "--password-stdin"],
            input=f"{password}\n",
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )
        assert created.returncode == 0, created.stderr


#: The users ``live_server`` creates (the browser tests sign in as them).
LIVE_USERS = {
    "alice": "wonderland-rabbit-42",
    "carol": "carols-first-passphrase",
    "dave": "daves-long-passphrase",
}


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[str]:
    """``flask run`` of the reference app on 127.0.0.1, configured only from the environment."""
    port = free_port()
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_ARGON2_MEMORY_COST": "19456",
        "FLASK_AUTHFLOW_ARGON2_TIME_COST": "1",
        "FLASK_AUTHFLOW_ARGON2_PARALLELISM": "1",
        "PYTHONPATH": str(ROOT),
    }
    create_users(env, LIVE_USERS)
    server = subprocess.Popen(
        [*REFERENCE_FLASK, "run", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _call(
    opener: urllib.request.OpenerDirector, url: str, data: dict[str, str] | None = None
) -> tuple[int, str]:
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, method="POST" if data is not None else "GET")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.slow  # the reference app served by a `flask run` subprocess
@pytest.mark.http
def test_reference_app_over_real_http(live_server: str) -> None:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect())
    assert _call(opener, live_server + "/")[0] == 200
    assert _call(opener, live_server + "/dashboard")[0] == 401
    status, text = _call(
        opener, live_server + "/login", {"username": "alice", "password": "wonderland-rabbit-42"}
    )
    assert (status, text) == (200, "authenticated\n")
    cookie = next(c for c in jar if c.name == "authflow_session")
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert _call(opener, live_server + "/dashboard")[0] == 200
    stolen = cookie.value
    assert _call(opener, live_server + "/logout", {})[0] == 200
    assert _call(opener, live_server + "/dashboard")[0] == 401
    replay = urllib.request.Request(
        live_server + "/dashboard", headers={"Cookie": f"authflow_session={stolen}"}
    )
    try:
        urllib.request.urlopen(replay, timeout=10)
        replay_status = 200
    except urllib.error.HTTPError as error:
        replay_status = error.code
    assert replay_status == 401
    status, text = _call(
        opener, live_server + "/login", {"username": "nobody", "password": "wonderland-rabbit-42"}
    )
    assert (status, text) == (401, "invalid credentials\n")


@pytest.fixture
def client(authflow_client: FlaskClient) -> FlaskClient:
    return authflow_client


def _metric(client: FlaskClient, name: str) -> int:
    lines = client.get("/metrics").text.splitlines()
    return int(next(line.split()[1] for line in lines if line.startswith(f"{name} ")))


@pytest.mark.slow  # sleeps past the real 1 s JWKS debounce window twice
@pytest.mark.http
@pytest.mark.authflow_stores("app")  # a provider over real HTTP dates its tokens by the system clock
def test_metrics_count_every_real_jwks_fetch_and_its_failures(tmp_path: Path) -> None:
    served = ServedProvider()
    try:
        op = served.provider
        op.register_client("ref", "ref-secret", ["http://localhost/auth/callback/op"])
        app = create_app(
            {
                "TESTING": True,
                "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
                "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
                "AUTHFLOW_OAUTH_PROVIDERS": {
                    "op": {
                        "discovery_url": op.discovery_url,
                        "client_id": "ref",
                        "client_secret": "ref-secret",
                        "redirect_uri": "http://localhost/auth/callback/op",
                        "post_login_redirect": "/dashboard",
                        "jwks_debounce": 1,
                    }
                },
                **FAST_ARGON2,
            },
            instance_path=str(tmp_path / "instance"),
        )

        def sign_in() -> int:
            client = app.test_client()
            start = client.get("/auth/login/op")
            assert start.status_code == 302, start.text
            consent = requests.get(start.location, allow_redirects=False, timeout=10)
            assert consent.status_code == 302, consent.text
            callback = requests.Request("GET", consent.headers["Location"]).prepare().path_url
            return client.get(callback).status_code

        metrics = app.test_client()
        assert _metric(metrics, "authflow_jwks_refreshes_total") == 0
        op.login_as("ivan")
        assert sign_in() == 302  # the first ID token: the keys are fetched
        op.rotate_key(keep_old=False)
        time.sleep(1.1)  # past the debounce window: the new kid is fetched at once
        assert sign_in() == 302
        assert _metric(metrics, "authflow_jwks_refreshes_total") == 2
        assert _metric(metrics, "authflow_jwks_refresh_failures_total") == 0
        served.jwks_down = True
        op.rotate_key(keep_old=False)
        time.sleep(1.1)
        assert sign_in() == 401  # the new kid cannot be fetched: refused, counted
        assert _metric(metrics, "authflow_jwks_refreshes_total") == 3
        assert _metric(metrics, "authflow_jwks_refresh_failures_total") == 1
    finally:
        served.stop()
