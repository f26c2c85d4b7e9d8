"""Pages that belong to the app: the layout the ready pages extend, where sign-in and sign-out
land, the JSON mode of every ready flow, the denial pages, the account page's content and
``csrf_token()`` in the app's own templates."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import render_template_string
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, fresh_login_required, get_state, login_required
from flask_authflow._web.views.common import MESSAGES, readable_time
from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.test_views import (
    PASSWORD,
    UNSAFE_NEXT,
    Site,
    account_token,
    csrf_of,
    enroll_totp,
    login,
    make_site,
    totp_now,
)

JSON = {"Accept": "application/json"}
HTML = {"Accept": "text/html"}


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_site(app_factory)


def _layout_site(app_factory: AppFactory, tmp_path: Path, **config: Any) -> Site:
    (tmp_path / "layout.html").write_text(
        "<!doctype html><title>{% block title %}{% endblock %}</title>"
        '<nav id="app-nav">My app</nav><main>{% block content %}{% endblock %}</main>'
    )
    return make_site(
        app_factory, template_folder=str(tmp_path), AUTHFLOW_VIEWS_LAYOUT="layout.html", **config
    )


# --- the layout ----------------------------------------------------------------------------------


def test_the_pages_extend_the_configured_layout(app_factory: AppFactory, tmp_path: Path) -> None:
    site = _layout_site(app_factory, tmp_path)
    client = site.client()
    page = client.get("/login")
    assert page.status_code == 200 and 'id="app-nav"' in page.text and 'id="login-form"' in page.text
    assert 'id="home-link"' not in page.text  # the package's own base.html is not used
    login(client)
    assert 'id="app-nav"' in client.get("/account").text


def test_the_default_layout_links_back_to_the_app(site: Site) -> None:
    page = site.client().get("/login")
    assert '<a href="/" id="home-link">Home</a>' in page.text


@pytest.mark.parametrize("layout", ["", "   ", 7])
def test_a_blank_layout_is_refused(app_factory: AppFactory, layout: object) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_VIEWS_LAYOUT"):
        make_site(app_factory, AUTHFLOW_VIEWS_LAYOUT=layout)


# --- post-login and post-logout destinations ----------------------------------------------------


def _home_site(app_factory: AppFactory, **config: Any) -> Site:
    site = make_site(app_factory, **config)

    @site.app.get("/home")
    def home() -> str:
        return "home"

    return site


@pytest.mark.parametrize("configured", ["home", "/home"])
def test_sign_in_lands_on_the_configured_view(app_factory: AppFactory, configured: str) -> None:
    site = _home_site(app_factory, AUTHFLOW_POST_LOGIN_VIEW=configured)
    assert login(site.client()).location == "/home"


def test_a_safe_next_wins_over_the_configured_view(app_factory: AppFactory) -> None:
    site = _home_site(app_factory, AUTHFLOW_POST_LOGIN_VIEW="home")
    assert login(site.client(), next="/private").location == "/private"


@pytest.mark.parametrize("unsafe", UNSAFE_NEXT)
def test_an_unsafe_next_falls_back_to_the_configured_view(app_factory: AppFactory, unsafe: str) -> None:
    site = _home_site(app_factory, AUTHFLOW_POST_LOGIN_VIEW="/home")
    assert login(site.client(), next=unsafe).location == "/home"


@pytest.mark.parametrize("key", ["AUTHFLOW_POST_LOGIN_VIEW", "AUTHFLOW_POST_LOGOUT_VIEW"])
@pytest.mark.parametrize(
    "unsafe", ["//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)", "/a\nb"]
)
def test_an_unsafe_destination_is_refused_at_init_app(app_factory: AppFactory, key: str, unsafe: str) -> None:
    with pytest.raises(ConfigurationError, match=key):
        make_site(app_factory, **{key: unsafe})


def test_an_unknown_endpoint_falls_back_to_the_account_page(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_POST_LOGIN_VIEW="no_such_view")
    assert login(site.client()).location == "/account"


@pytest.mark.parametrize("configured", ["home", "/home"])
def test_sign_out_lands_on_the_configured_view(app_factory: AppFactory, configured: str) -> None:
    site = _home_site(app_factory, AUTHFLOW_POST_LOGOUT_VIEW=configured)
    client = site.client()
    login(client)
    assert client.post("/auth/logout", data={"csrf_token": account_token(client)}).location == "/home"


# --- the JSON mode -------------------------------------------------------------------------------


def _token(client: FlaskClient) -> str:
    answer = client.get("/csrf")
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    body = answer.get_json()
    assert body["field"] == "csrf_token" and body["header"] == "X-CSRF-Token"
    return str(body["csrf_token"])


def _json_login(client: FlaskClient, password: str = PASSWORD, **body: Any) -> Any:
    return client.post(
        "/login",
        json={"username": "alice", "password": password, **body},
        headers={"X-CSRF-Token": _token(client)},
    )


def test_a_json_login_answers_json(site: Site) -> None:
    client = site.client()
    answer = _json_login(client, next="/private")
    assert answer.status_code == 200 and answer.get_json() == {
        "status": "authenticated",
        "location": "/private",
    }
    assert client.get("/private").text == "private page"


def test_a_json_login_without_the_token_is_a_json_400(site: Site) -> None:
    client = site.client()
    answer = client.post("/login", json={"username": "alice", "password": PASSWORD})
    assert answer.status_code == 400 and answer.mimetype == "application/json"
    assert answer.get_json()["error"] == "csrf"
    assert client.get("/private").status_code != 200


def test_a_token_of_another_session_is_refused(site: Site) -> None:
    other = site.client()
    client = site.client()
    client.get("/csrf")
    answer = client.post(
        "/login", json={"username": "alice", "password": PASSWORD}, headers={"X-CSRF-Token": _token(other)}
    )
    assert answer.status_code == 400 and answer.get_json()["error"] == "csrf"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"username": "alice", "password": "wrong password!"}, 401, "invalid"),
        ({"username": "alice"}, 400, "missing"),
        ({"username": ["alice"], "password": {"x": 1}}, 400, "missing"),
    ],
)
def test_refused_json_logins_have_typed_codes(
    site: Site, body: dict[str, Any], status: int, code: str
) -> None:
    client = site.client()
    answer = client.post("/login", json=body, headers={"X-CSRF-Token": _token(client)})
    assert answer.status_code == status and answer.mimetype == "application/json"
    assert answer.get_json()["error"] == code and answer.get_json()["message"]


def test_a_malformed_json_body_is_a_json_400_not_html(site: Site) -> None:
    client = site.client()
    answer = client.post(
        "/login", data="{not json", content_type="application/json", headers={"X-CSRF-Token": _token(client)}
    )
    assert answer.status_code == 400 and answer.mimetype == "application/json"


def test_a_form_post_that_prefers_json_gets_json(site: Site) -> None:
    client = site.client()
    page = client.get("/login")
    answer = client.post(
        "/login",
        data={"username": "alice", "password": "nope", "csrf_token": csrf_of(page.text)},
        headers=JSON,
    )
    assert answer.status_code == 401 and answer.get_json()["error"] == "invalid"


def test_pages_answer_json_to_json_clients(site: Site) -> None:
    client = site.client()
    assert client.get("/login", headers=JSON).get_json()["page"] == "login"
    assert client.get("/account", headers=JSON).status_code == 401  # a guest: no page
    _json_login(client)
    account = client.get("/account", headers=JSON)
    body = account.get_json()
    assert account.status_code == 200 and body["page"] == "account" and body["identifier"] == "alice"
    assert [s["current"] for s in body["sessions"]] == [True] and len(body["sessions"][0]["hash"]) == 64
    assert "sid" not in str(body["sessions"]).replace("sid_hash", "")
    assert body["enrolled_factors"] == []


def test_the_factor_step_and_enrollment_in_json(site: Site) -> None:
    client = site.client()
    _json_login(client)
    headers = {"X-CSRF-Token": _token(client)}
    started = client.post("/account/factors/totp", json={}, headers=headers)
    assert started.status_code == 200, started.text
    setup = started.get_json()
    assert (
        setup["page"] == "enroll_totp" and setup["secret"] and started.headers["Cache-Control"] == "no-store"
    )
    wrong = client.post(
        "/account/factors/totp/confirm",
        json={"factor_id": setup["factor_id"], "code": "000000"},
        headers=headers,
    )
    assert wrong.status_code == 400 and wrong.get_json()["error"] == "enroll_code"
    done = client.post(
        "/account/factors/totp/confirm",
        json={"factor_id": setup["factor_id"], "code": totp_now(setup["secret"], site.clock)},
        headers=headers,
    )
    assert done.status_code == 200 and done.get_json()["notice"] == "totp_added"
    assert client.get("/account", headers=JSON).get_json()["enrolled_factors"] == ["Authenticator app"]
    # sign in again, in JSON: the password, then the code
    fresh = site.client()
    step = _json_login(fresh)
    assert step.status_code == 200 and step.get_json()["status"] == "factor_required"
    assert "totp" in step.get_json()["kinds"]
    site.clock.advance(timedelta(seconds=30))
    code = totp_now(setup["secret"], site.clock)
    token = {"X-CSRF-Token": _token(fresh)}
    malformed = fresh.post("/login/factor", json={"kind": "totp", "code": "12"}, headers=token)
    assert malformed.status_code == 400 and malformed.get_json()["error"] == "invalid_input"
    refused = fresh.post("/login/factor", json={"kind": "totp", "code": "000000"}, headers=token)
    assert refused.status_code == 401 and refused.get_json()["error"] == "retry_code"
    passed = fresh.post("/login/factor", json={"kind": "totp", "code": code}, headers=token)
    assert passed.get_json() == {"status": "authenticated", "location": "/account"}


def test_step_up_and_logout_in_json(site: Site) -> None:
    client = site.client()
    _json_login(client)
    site.clock.advance(timedelta(minutes=11))
    denied = client.get("/sensitive", headers=JSON)
    assert denied.status_code == 401 and denied.get_json()["error"] == "step_up_required"
    page = client.get("/step-up", headers=JSON).get_json()
    assert page["page"] == "step_up" and page["kinds"] == ["password"]
    headers = {"X-CSRF-Token": page["csrf_token"]}
    wrong = client.post("/step-up", json={"password": "not it at all"}, headers=headers)
    assert wrong.status_code == 401 and wrong.get_json()["error"] == "wrong_password"
    done = client.post("/step-up", json={"password": PASSWORD, "next": "/sensitive"}, headers=headers)
    assert done.get_json()["location"] == "/sensitive"
    assert client.get("/sensitive").text == "sensitive page"
    out = client.post("/auth/logout", data={"csrf_token": _token(client)}, headers=JSON)
    assert out.status_code == 200 and out.get_json()["location"] == "/login"
    assert client.get("/private").status_code == 401


# --- denial pages ----------------------------------------------------------------------------------


def _bare_app(app_factory: AppFactory, authflow: AuthFlow | None = None) -> Any:
    """An app without the ready views: nothing to redirect a denied browser to."""
    app = app_factory(authflow=authflow or AuthFlow(), import_name=__name__)

    @app.get("/private")
    @login_required
    def private() -> str:
        return "private page"

    @app.get("/sensitive")
    @fresh_login_required
    def sensitive() -> str:
        return "sensitive page"

    return app


@pytest.mark.parametrize("path", ["/private", "/sensitive"])
def test_a_guest_browser_without_views_gets_a_page(app_factory: AppFactory, path: str) -> None:
    heading = "Sign-in required"
    client = _bare_app(app_factory).test_client()
    page = client.get(path, headers=HTML)
    assert page.status_code == 401 and page.mimetype == "text/html" and f"<h1>{heading}</h1>" in page.text
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Cache-Control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert 'id="way-back"' in page.text
    assert client.get(path).mimetype != "text/html"  # an API client keeps its JSON or text


def test_a_stale_login_without_a_step_up_view_gets_the_step_up_page(app_factory: AppFactory) -> None:
    authflow = AuthFlow()
    app = _bare_app(app_factory, authflow)
    state = get_state(app)
    add_user(state.backend, "default", "alice", PASSWORD)

    @app.post("/test-login")
    def test_login() -> str:
        return type(authflow.login.password("alice", PASSWORD)).__name__

    client = app.test_client()
    assert client.post("/test-login").text == "Authenticated"
    assert client.get("/sensitive", headers=HTML).text == "sensitive page"
    state.clock.advance(timedelta(minutes=11))  # type: ignore[attr-defined]
    page = client.get("/sensitive", headers=HTML)
    assert page.status_code == 401 and "<h1>Confirm it is you</h1>" in page.text
    assert page.headers["X-Frame-Options"] == "DENY" and 'id="way-back"' in page.text
    assert client.get("/sensitive", headers=JSON).get_json()["error"] == "step_up_required"


# --- the account page ------------------------------------------------------------------------------


def test_the_account_page_lists_the_factors_really_enrolled(site: Site) -> None:
    client = site.client()
    login(client)
    before = client.get("/account").text
    assert 'id="factors-hint"' in before and "a password alone is not enough" in before
    enroll_totp(site, client)
    after = client.get("/account").text
    assert 'id="factors-hint"' not in after and "a password alone is not enough" not in after
    assert "Besides your password you sign in with: Authenticator app." in after


def test_the_account_page_offers_one_sign_out(site: Site) -> None:
    client = site.client()
    login(client)
    other = site.client()
    login(other)
    page = client.get("/account").text
    assert "Log out this session" not in page and page.count(">Sign out</button>") == 1
    assert page.count('class="revoke-session"') == 1  # the other session only


def test_the_account_page_shows_readable_times(site: Site) -> None:
    client = site.client()
    login(client)
    page = client.get("/account").text
    shown = readable_time(site.clock.now())
    assert f">{shown}</time>" in page and "data-local" in page
    assert not re.search(r">[^<]*\d{4}-\d\d-\d\d", page) and shown.endswith(" UTC")  # no ISO text


def test_readable_time_of_a_naive_and_an_aware_time() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    assert readable_time(datetime(2026, 11, 5, 9, 7)) == "5 Nov 2026, 09:07 UTC"
    paris = datetime(2026, 11, 5, 10, 7, tzinfo=timezone(timedelta(hours=1)))
    assert readable_time(paris) == "5 Nov 2026, 09:07 UTC"
    assert readable_time(None) == ""
    assert readable_time(datetime(2026, 1, 2, tzinfo=UTC)) == "2 Jan 2026, 00:00 UTC"


# --- csrf_token() in the app's templates -----------------------------------------------------------


def test_the_apps_own_templates_get_csrf_token(site: Site) -> None:
    @site.app.get("/my-page")
    def my_page() -> str:
        return render_template_string(
            '<form method="post" action="/auth/logout">'
            '<input type="hidden" name="{{ csrf_field_name }}" value="{{ csrf_token() }}"></form>'
        )

    client = site.client()
    login(client)
    token = csrf_of(client.get("/my-page").text)
    assert client.post("/auth/logout", data={"csrf_token": token}).location == "/login"
    assert client.get("/private").status_code == 401


def test_a_forged_token_from_an_app_template_is_refused(site: Site) -> None:
    client = site.client()
    login(client)
    answer = client.post("/auth/logout", data={"csrf_token": "forged"}, headers=HTML)
    assert answer.status_code == 400 and MESSAGES["csrf"] in answer.text
    assert client.get("/private").text == "private page"
