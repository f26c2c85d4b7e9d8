"""The sign-in page keeps its account links ("Forgot password?", "Create account") in
every state: a wrong password, a throttled or locked login, a failed factor, a refused
logout form, an application's own login view that hands a form to the ready one (as the
reference app does), and the federated "sign-in not completed" page. Without the
features, no links."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import current_app

from flask_authflow._web.state import get_state
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory
from tests.federation_support import PROVIDER
from tests.test_deep_json import full_site
from tests.test_views import FixedCode, Site, csrf_of, login, make_site

HTML = {"Accept": "text/html"}
LINKS = ('id="forgot-link"', 'id="signup-link"')


@pytest.fixture
def site(app_factory: AppFactory, oidc_provider: TestOpenIDProvider) -> Site:
    site = full_site(
        app_factory,
        oidc_provider,
        AUTHFLOW_THROTTLE_LIMITS={"login.address": "3/minute", "login.network": "50/minute"},
    )

    @site.app.post("/app-login")
    def app_login() -> Any:  # an app's own route that hands forms to the ready view
        return current_app.view_functions["authflow_views.login"]()

    return site


def has_links(answer: Any) -> bool:
    return all(link in answer.text for link in LINKS)


def test_a_wrong_password_keeps_the_links(site: Site) -> None:
    answer = login(site.client(), password="not the password")
    assert answer.status_code == 401 and has_links(answer)


def test_the_applications_own_login_route_keeps_the_links(site: Site) -> None:
    client = site.client()
    page = client.get("/login")
    form = {"username": "alice", "password": "not the password", "csrf_token": csrf_of(page.text)}
    answer = client.post("/app-login", data=form, headers=HTML)
    assert answer.status_code == 401 and has_links(answer)


def test_a_throttled_login_keeps_the_links(site: Site) -> None:
    client = site.client()
    statuses = [login(client, password=f"wrong password {n}").status_code for n in range(5)]
    assert statuses[-1] == 429
    assert has_links(login(client, password="wrong again"))


def test_a_locked_account_keeps_the_links(app_factory: AppFactory) -> None:
    site = make_site(app_factory, AUTHFLOW_REGISTRATION=True, AUTHFLOW_PASSWORD_RESET=True,
                     AUTHFLOW_EXTERNAL_URL="https://app.example.com")  # fmt: skip
    for n in range(6):
        answer = login(site.client(), password=f"wrong password {n}")
    assert answer.status_code == 403 and has_links(answer)


def test_a_failed_factor_that_ends_the_login_keeps_the_links(site: Site) -> None:
    get_state(site.app).service.register_factor(FixedCode("123456"))
    site.backend.enroll_factor("default", site.user_id(), "totp", "seed")  # type: ignore[arg-type]
    client = site.client()
    assert login(client).location.startswith("/login/factor")
    page = client.get("/login/factor")
    answers = [
        client.post("/login/factor", data={"code": "000000", "csrf_token": csrf_of(page.text)})
        for _ in range(5)
    ]
    assert answers[-1].status_code in (401, 403)
    ended = [a for a in answers if 'id="login-form"' in a.text]
    assert ended and all(has_links(a) for a in ended)


def test_a_refused_logout_form_keeps_the_links(site: Site) -> None:
    answer = site.client().post("/auth/logout", data={"csrf_token": "forged"}, headers=HTML)
    assert answer.status_code == 400 and has_links(answer)


def test_a_cancelled_federated_sign_in_keeps_the_links(site: Site) -> None:
    client = site.client()
    start = client.get(f"/auth/login/{PROVIDER}", headers=HTML)
    assert start.status_code == 302
    state = parse_qs(urlsplit(start.location).query)["state"][0]
    answer = client.get(f"/auth/callback/{PROVIDER}", query_string={"state": state, "error": "access_denied"},
                        headers=HTML)  # fmt: skip
    assert answer.status_code >= 400 and "way-back" in answer.text and has_links(answer)


def test_without_the_features_there_are_no_links(app_factory: AppFactory) -> None:
    site = make_site(app_factory)
    for answer in (login(site.client(), password="not the password"), site.client().get("/login")):
        assert not any(link in answer.text for link in LINKS)
        assert 'id="account-links"' not in answer.text


def test_the_links_are_there_on_a_fresh_page(site: Site) -> None:
    assert has_links(site.client().get("/login"))
