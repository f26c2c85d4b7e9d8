"""login_required / fresh_login_required and the safe ``next`` rule."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask

from flask_authflow import current_session, fresh_login_required, login_required, safe_next
from flask_authflow._clock import MockClock
from flask_authflow.testing import login_test_client
from tests.appfactory import AppFactory


@pytest.fixture
def app(app_factory: AppFactory) -> Flask:
    """Our own app: the plugin's authflow_app / logged_in_client pick it up."""
    authflow_app = app_factory(AUTHFLOW_LOGIN_VIEW="login_page")

    @authflow_app.get("/login")
    def login_page() -> str:
        return "login page"

    @authflow_app.get("/secret")
    @login_required
    def secret() -> str:
        return f"secret of {current_session.user_id}"

    @authflow_app.get("/async-secret")
    @login_required
    async def async_secret() -> str:
        return "async secret"

    @authflow_app.get("/fresh")
    @fresh_login_required(timedelta(minutes=5))
    def fresh() -> str:
        return "fresh"

    return authflow_app


def test_guest_json_request_gets_401_json(authflow_client) -> None:
    response = authflow_client.get("/secret", headers={"Accept": "application/json"})
    assert response.status_code == 401
    assert response.json["error"] == "unauthenticated"


def test_guest_curl_request_gets_401_text(authflow_client) -> None:
    response = authflow_client.get("/secret", headers={"Accept": "*/*"})
    assert response.status_code == 401


def test_guest_browser_is_redirected_with_safe_next(authflow_client) -> None:
    response = authflow_client.get("/secret?x=1", headers={"Accept": "text/html,application/xhtml+xml"})
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login?next=")
    assert response.headers["Location"] == "/login?next=/secret?x%3D1"


def test_authenticated_sync_and_async_views(logged_in_client) -> None:
    assert logged_in_client.get("/secret").text.startswith("secret of ")
    assert logged_in_client.get("/async-secret").text == "async secret"


def test_fresh_login_required_expires_into_step_up(logged_in_client, mock_clock) -> None:
    assert logged_in_client.get("/fresh").status_code == 200
    mock_clock.advance(timedelta(minutes=6))
    stale = logged_in_client.get("/fresh", headers={"Accept": "application/json"})
    assert stale.status_code == 401
    assert stale.json["error"] == "step_up_required"
    assert logged_in_client.get("/secret").status_code == 200  # still logged in


def test_fresh_login_required_refuses_guests(authflow_client) -> None:
    assert authflow_client.get("/fresh", headers={"Accept": "application/json"}).status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example",
        "//evil.example/path",
        "https://evil.example/",
        "http:evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "javascript:alert(1)",
        "evil.example",
        "/ok\r\nLocation: https://evil.example",
        "/\x00",
        "",
        None,
        "/" + "a" * 3000,
    ],
)
def test_safe_next_refuses_off_site_targets(target: str | None) -> None:
    assert safe_next(target) is None


@pytest.mark.parametrize("target", ["/", "/dashboard", "/a/b?c=d#e", "/account?next=%2F%2Fx"])
def test_safe_next_keeps_relative_paths(target: str) -> None:
    assert safe_next(target) == target


def test_fresh_login_required_with_zero_max_age_always_asks_for_step_up(
    app_factory: AppFactory, mock_clock: MockClock
) -> None:
    app = app_factory()

    @app.get("/now-only")
    @fresh_login_required(timedelta(0))
    def now_only() -> str:
        return "fresh"

    client = login_test_client(app, "alice")
    mock_clock.advance(timedelta(seconds=1))  # well inside the 10-minute default, but not within 0
    response = client.get("/now-only", headers={"Accept": "application/json"})
    assert response.status_code == 401
    assert response.get_json()["error"] == "step_up_required"
