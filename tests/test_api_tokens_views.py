"""The account page's API tokens: created (shown once), listed, revoked, and ended with
"log out all other sessions"."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from flask import jsonify

from flask_authflow import current_user, login_required
from flask_authflow._web.api_auth import token_service
from flask_authflow.api_auth._tokens import TOKEN_PREFIX
from tests.appfactory import AppFactory
from tests.test_views import Site, account_token, login, make_site, parse

TOKEN = re.compile(r'id="new-api-token-value" value="(afp_[^"]+)"')


def token_site(app_factory: AppFactory, **config: Any) -> Site:
    site = make_site(app_factory, **config)

    @site.app.get("/api/me")
    @login_required(api=True)
    def me() -> Any:
        return jsonify(identifier=current_user.identifier)

    return site


def bearer(site: Site, value: str) -> int:
    return site.client().get("/api/me", headers={"Authorization": f"Bearer {value}"}).status_code


def create(client: Any, **form: Any) -> Any:
    return client.post("/account/api-tokens", data={"csrf_token": account_token(client), **form})


def revoke(client: Any, name: str) -> Any:
    return client.post("/account/api-tokens/revoke", data={"csrf_token": account_token(client), "name": name})


def test_create_shows_the_token_once_then_lists_and_revokes_it(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    client = site.client()
    login(client)
    assert 'id="no-api-tokens"' in client.get("/account").text
    created = create(client, name="laptop script", scopes="notes:read notes:write", expires_in_days="30")
    assert created.status_code == 201
    assert created.headers["Cache-Control"] == "no-store"
    value = TOKEN.search(created.text)
    assert value is not None and value.group(1).startswith(TOKEN_PREFIX)
    assert bearer(site, value.group(1)) == 200

    page = client.get("/account").text
    assert value.group(1) not in page  # shown once
    assert 'data-token="laptop script"' in page and "notes:read, notes:write" in page
    expires = (site.clock.now() + timedelta(days=30)).strftime("%Y-%m-%d")
    assert "expires <time" in page and expires in page
    form = parse(page).forms["create-api-token-form"]
    assert {i.get("name") for i in form["inputs"]} >= {"csrf_token", "name", "scopes", "expires_in_days"}

    revoked = revoke(client, "laptop script")
    assert revoked.status_code == 302 and revoked.location == "/account?notice=api_token_revoked"
    assert bearer(site, value.group(1)) == 401
    assert 'id="no-api-tokens"' in client.get("/account").text


def test_configured_scopes_are_checkboxes_and_others_refused(app_factory: AppFactory) -> None:
    site = token_site(app_factory, AUTHFLOW_API_TOKEN_SCOPES=["notes:read", "notes:write"])
    client = site.client()
    login(client)
    page = client.get("/account").text
    assert page.count('type="checkbox"') == 2 and 'for="api-token-scope-2">notes:write<' in page
    assert create(client, name="a", scope=["notes:read"]).status_code == 201
    refused = create(client, name="b", scope=["admin"])
    assert refused.status_code == 400 and "unknown scope" in refused.text
    assert [t.name for t in token_service(site.app).list("default", site.user_id())] == ["a"]


def test_form_refusals_never_a_500(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    client = site.client()
    login(client)
    for form in (
        {"name": ""},
        {"name": "x" * 100},
        {"name": "ok", "expires_in_days": "-3"},
        {"name": "ok", "expires_in_days": "ten"},
        {"name": "ok", "expires_in_days": "9" * 40},
        {"name": "ok", "expires_in_days": "400"},
        {"name": "ok", "scopes": "UPPER"},
    ):
        response = create(client, **form)
        assert response.status_code == 400, form
        assert 'id="error"' in response.text and "afp_" not in response.text
    assert create(client, name="ok").status_code == 201
    taken = create(client, name="ok")
    assert taken.status_code == 409 and 'id="error"' in taken.text
    missing = client.post(
        "/account/api-tokens/revoke", data={"csrf_token": account_token(client), "name": "nope"}
    )
    assert missing.status_code == 404


def test_csrf_login_and_freshness_are_required(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    guest = site.client()
    assert guest.post("/account/api-tokens", data={"name": "x"}).status_code == 302  # to the login page
    client = site.client()
    login(client)
    no_csrf = client.post("/account/api-tokens", data={"name": "x"})
    assert no_csrf.status_code == 400
    site.clock.advance(timedelta(minutes=11))  # beyond AUTHFLOW_FRESHNESS
    stale = create(client, name="x")
    assert stale.status_code == 302 and stale.location.startswith("/step-up?next=")
    assert token_service(site.app).list("default", site.user_id()) == []


def test_a_user_revokes_only_their_own_tokens(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    bobs = token_service(site.app).create("default", site.user_id("bob"), "ci")
    client = site.client()
    login(client)
    response = client.post(
        "/account/api-tokens/revoke", data={"csrf_token": account_token(client), "name": "ci"}
    )
    assert response.status_code == 404
    assert bearer(site, bobs.value) == 200
    assert 'data-token="ci"' not in client.get("/account").text  # and never listed to alice


def test_log_out_all_other_sessions_revokes_the_tokens_too(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    alices = token_service(site.app).create("default", site.user_id(), "ci")
    bobs = token_service(site.app).create("default", site.user_id("bob"), "ci")
    client = site.client()
    login(client)
    response = client.post("/account/sessions/revoke-others", data={"csrf_token": account_token(client)})
    assert response.status_code == 302
    assert "Your API tokens have been revoked." in client.get(response.location).text
    assert bearer(site, alices.value) == 401
    assert bearer(site, bobs.value) == 200


def test_a_guest_session_cookie_and_a_bearer_is_the_tokens_user(app_factory: AppFactory) -> None:
    site = token_site(app_factory)
    alices = token_service(site.app).create("default", site.user_id(), "ci")
    client = site.client()
    assert client.get("/login").status_code == 200  # a guest session with its CSRF token
    assert client.get_cookie("authflow_session") is not None
    answer = client.get("/api/me", headers={"Authorization": f"Bearer {alices.value}"})
    assert answer.status_code == 200 and answer.get_json() == {"identifier": "alice"}
    assert client.get("/account").status_code == 401  # the cookie's session is still a guest's
