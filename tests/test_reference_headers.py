"""Every HTML response of the reference app and of the ready views is kept out of other
sites' frames and out of caches; the reference app's ``/metrics`` answers only this machine
or the configured bearer token."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from examples.reference.app import create_app
from flask_authflow import AuthFlow

PASSWORD = "wonderland-rabbit-42"
FAST_ARGON2 = {
    "AUTHFLOW_ARGON2_TIME_COST": 1,
    "AUTHFLOW_ARGON2_MEMORY_COST": 8,
    "AUTHFLOW_ARGON2_PARALLELISM": 1,
}
#: Values for the rules' variables: well-formed, naming nothing that exists.
URL_VALUES = {
    "session_hash": "0" * 64,
    "factor_id": "no-such-factor",
    "filename": "missing.css",
    "device_id": "D" * 22,
}
_HIDDEN_FIELD = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]+)">')


def _reference(tmp_path: Path, **config: object) -> Flask:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'ref.db'}",
            **FAST_ARGON2,
            **config,
        },
        instance_path=str(tmp_path / "instance"),
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "alice", "--password-stdin"], input=f"{PASSWORD}\n"
    )
    assert result.exit_code == 0, result.output
    return app


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    # Unthrottled: the crawl signs in once for each route, more often than one address may.
    return _reference(tmp_path, AUTHFLOW_THROTTLE=False)


def assert_protected(response: TestResponse, what: str) -> None:
    assert response.mimetype == "text/html", what
    framing = response.headers.get("X-Frame-Options") == "DENY" or "frame-ancestors 'none'" in (
        response.headers.get("Content-Security-Policy") or ""
    )
    assert framing, f"{what}: no frame protection in {dict(response.headers)}"
    assert response.cache_control.no_store, (
        f"{what}: Cache-Control is {response.headers.get('Cache-Control')}"
    )


def _form_token(client: FlaskClient, page: str) -> dict[str, str]:
    """The hidden CSRF field of ``page`` as form data."""
    found = _HIDDEN_FIELD.search(client.get(page).text)
    assert found is not None, f"no hidden CSRF field on {page}"
    return {found.group(1): found.group(2)}


def _guest(app: Flask) -> FlaskClient:
    return app.test_client()


def _user(app: Flask) -> FlaskClient:
    client = app.test_client()
    answer = client.post("/login", json={"username": "alice", "password": PASSWORD})
    assert answer.text == "authenticated\n"
    return client


def _requests(app: Flask) -> Iterator[tuple[str, str]]:
    """Each (method, path) the app routes, once (``/login`` is both the app's and the views')."""
    seen: set[tuple[str, str]] = set()
    for rule in app.url_map.iter_rules():
        path = rule.rule
        for name in rule.arguments:
            path = re.sub(rf"<(?:[^:>]+:)?{name}>", URL_VALUES[name], path)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            if (method, path) not in seen:
                seen.add((method, path))
                yield method, path


def _crawl(app: Flask, make_client: Callable[[Flask], FlaskClient], token_page: str) -> tuple[int, set[str]]:
    """Request every route (a POST without and with the CSRF token, as a form) with a new
    client each time; assert the headers on every HTML answer. Returns how many HTML
    answers there were and the paths requested."""
    checked, paths = 0, set()
    for method, path in _requests(app):
        for with_token in (False, True):
            if method == "GET" and with_token:
                continue
            client = make_client(app)
            data = _form_token(client, token_page) if with_token else {}
            response = client.open(path, method=method, data=data if method == "POST" else None)
            assert response.status_code != 500, f"{method} {path}"
            paths.add(path)
            if response.mimetype == "text/html":
                assert_protected(response, f"{method} {path} (token: {with_token})")
                checked += 1
    return checked, paths


@pytest.mark.parametrize(("who", "token_page"), [(_guest, "/login"), (_user, "/account")])
def test_every_html_response_of_the_reference_app_is_protected(
    app: Flask, who: Callable[[Flask], FlaskClient], token_page: str
) -> None:
    checked, paths = _crawl(app, who, token_page)
    every_path = {path for _, path in _requests(app)}
    assert paths == every_path
    assert checked >= 25  # pages, refusals, redirects and Flask's own error pages


def test_a_guests_sign_in_page_is_protected_though_it_sets_a_cookie(app: Flask) -> None:
    response = app.test_client().get("/login")
    assert response.status_code == 200
    assert response.headers.get("Set-Cookie")  # the session that holds the page's CSRF token
    assert_protected(response, "GET /login")


def test_pages_rerendered_by_the_reference_apps_own_login_routes_are_protected(app: Flask) -> None:
    client = app.test_client()
    token = _form_token(client, "/login")
    wrong = client.post("/login", data={**token, "username": "alice", "password": "not-it"})
    assert wrong.status_code == 401
    assert "alice" in wrong.text  # the form again, with what was typed
    assert_protected(wrong, "POST /login (wrong password)")
    step = client.post("/login/factor", data={**token, "code": "123456"})
    assert step.status_code < 500
    assert_protected(step, "POST /login/factor (no login waiting)")
    refused = client.post("/login", data={"username": "alice", "password": PASSWORD})
    assert refused.status_code == 400  # no CSRF token
    assert_protected(refused, "POST /login (no token)")


def test_json_answers_keep_their_own_headers(app: Flask) -> None:
    """The hook is for pages: the JSON and text answers are not turned into something else."""
    answer = app.test_client().post("/login", json={"username": "alice", "password": PASSWORD})
    assert answer.mimetype == "text/plain"
    assert "X-Frame-Options" not in answer.headers


def test_the_ready_views_alone_protect_their_pages_and_the_logout_refusal(tmp_path: Path) -> None:
    """An app of its own (no hook like the reference app's): the package's pages, the guest's
    sign-in page and the logout route's refusal page included, carry the headers."""
    app = Flask("plain", instance_path=str(tmp_path))
    app.config.update(
        TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32), AUTHFLOW_SESSION_STORE="memory"
    )
    app.config["AUTHFLOW_DATABASE_URL"] = "sqlite://"
    authflow = AuthFlow(app)
    authflow.views.register(app)

    @app.get("/own")
    def own() -> str:
        return "<p>the app's own page</p>"

    client = app.test_client()
    assert_protected(client.get("/login"), "GET /login")
    assert_protected(client.get("/login/factor"), "GET /login/factor")
    refused = client.post("/auth/logout", data={})
    assert refused.status_code == 400 and refused.mimetype == "text/html"
    assert_protected(refused, "POST /auth/logout without a token")
    assert "X-Frame-Options" not in client.get("/own").headers  # the app's own pages are its business


# -- /metrics -------------------------------------------------------------------------------------

REMOTE = {"REMOTE_ADDR": "203.0.113.9"}
TOKEN = "m" * 43  # the /metrics token (fixed: test ids must not change between processes)


def test_metrics_answer_a_local_client(app: Flask) -> None:
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    assert "authflow_login_attempts_total" in response.text


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-Forwarded-For": "203.0.113.9"}, {"X-Real-IP": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}],
)
def test_metrics_are_hidden_from_other_clients_without_a_token(app: Flask, headers: dict[str, str]) -> None:
    """A remote peer, or a local proxy relaying someone else, gets 404 when no token is set."""
    environ = REMOTE if not headers else {"REMOTE_ADDR": "127.0.0.1"}
    response = app.test_client().get("/metrics", headers=headers, environ_base=environ)
    assert response.status_code == 404
    assert "authflow_" not in response.text


def test_metrics_ignore_a_bearer_when_no_token_is_configured(app: Flask) -> None:
    response = app.test_client().get("/metrics", headers={"Authorization": "Bearer x"}, environ_base=REMOTE)
    assert response.status_code == 404


@pytest.fixture
def token_app(tmp_path: Path) -> Flask:
    return _reference(tmp_path, METRICS_TOKEN=TOKEN)


def test_metrics_answer_the_configured_bearer_token(token_app: Flask) -> None:
    response = token_app.test_client().get(
        "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, environ_base=REMOTE
    )
    assert response.status_code == 200
    assert "authflow_login_attempts_total" in response.text


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer t\u00f6ken", f"Basic {TOKEN}", "Bearer", ""],
)
def test_metrics_refuse_a_missing_or_wrong_token_with_401(
    token_app: Flask, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = token_app.test_client().get("/metrics", headers=headers, environ_base=REMOTE)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "authflow_" not in response.text


def test_a_wrong_token_is_refused_even_from_this_machine(token_app: Flask) -> None:
    response = token_app.test_client().get("/metrics", headers={"Authorization": "Bearer wrong-token"})
    assert response.status_code == 401
    assert token_app.test_client().get("/metrics").status_code == 200  # no token: this machine


@pytest.mark.parametrize("token", ["", "short", 12345678901234567890])
def test_a_weak_metrics_token_is_refused_at_start(tmp_path: Path, token: object) -> None:
    with pytest.raises(ValueError, match="METRICS_TOKEN must be a string of at least 16 characters"):
        _reference(tmp_path, METRICS_TOKEN=token)
