"""``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer`` on every answer
of the package's blueprints (pages, JSON, refusals), and on none of the application's own
views unless it registers :func:`flask_authflow._responses.package_headers` itself.

Reset and verification links carry their token in the URL: with ``no-referrer`` the page
they open never hands it to another site in a ``Referer``. Every rule of the four
blueprints is requested with each of its methods, as a guest and signed in, as a browser
and as a script.
"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from flask_authflow._responses import PACKAGE_HEADERS, package_headers
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory
from tests.test_deep_json import full_site, package_rules, path_of, signed_in
from tests.test_views import Site

EXPECTED = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
HTML = {"Accept": "text/html"}
JSON = {"Accept": "application/json"}


@pytest.fixture
def site(app_factory: AppFactory, oidc_provider: TestOpenIDProvider) -> Site:
    return full_site(app_factory, oidc_provider)


def carries_headers(client: FlaskClient, method: str, path: str, headers: dict[str, str]) -> None:
    answer = client.open(path, method=method, headers=headers)
    assert answer.status_code != 500, (method, path)
    for name, value in EXPECTED.items():
        assert answer.headers.get(name) == value, (method, path, answer.status_code, name)


def test_every_rule_of_the_package_answers_with_the_headers(site: Site) -> None:
    assert PACKAGE_HEADERS == EXPECTED
    clients = (site.client(), signed_in(site))
    tried = 0
    for rule in package_rules(site.app):
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            for client in clients:
                for headers in (HTML, JSON):
                    carries_headers(client, method, path_of(rule), headers)
                    tried += 1
    assert tried >= 4 * 40  # every rule, not a sample


def test_refusals_and_redirects_carry_them_too(site: Site) -> None:
    guest = site.client()
    carries_headers(guest, "POST", "/login", HTML)  # a missing CSRF token: 400 page
    carries_headers(guest, "GET", "/account", HTML)  # not signed in: a redirect
    carries_headers(guest, "POST", "/account/password", JSON)  # 401 JSON
    carries_headers(guest, "GET", "/auth/login/no-such-provider", HTML)  # unknown provider: 404
    answer = guest.post("/login", data=b"[" * 20_000, content_type="application/json")
    assert answer.status_code == 400 and answer.headers["X-Content-Type-Options"] == "nosniff"


def test_a_view_that_sets_its_own_policy_keeps_it(site: Site) -> None:
    @site.app.after_request
    def stricter(response):  # type: ignore[no-untyped-def]
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    assert site.client().get("/login").headers["Referrer-Policy"] == "same-origin"


def test_the_applications_own_views_are_left_alone_unless_it_opts_in(
    site: Site, app_factory: AppFactory, oidc_provider: TestOpenIDProvider
) -> None:
    own = signed_in(site).get("/private")
    assert own.status_code == 200
    assert "X-Content-Type-Options" not in own.headers and "Referrer-Policy" not in own.headers
    opting = full_site(app_factory, oidc_provider)
    opting.app.after_request(package_headers)  # the documented opt-in
    opted = signed_in(opting).get("/private")
    assert opted.status_code == 200
    assert all(opted.headers[name] == value for name, value in EXPECTED.items())
