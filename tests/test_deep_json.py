"""Deep or huge JSON bodies answer a typed 400 on every view of the package, never a 500.

Python's ``json`` recurses once per nesting level: 20,000 ``[`` in a 40 KB body used to
end in a ``RecursionError`` (a 500) in the CSRF check of every view that reads one. The
views now read JSON only through ``flask_authflow._web.json_body``, which bounds the size
and the depth before parsing; the package's blueprints answer such a body
``400 invalid_input`` before any view runs. Every rule of the package's blueprints that
takes POST is tried, as a guest and signed in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.routing import Rule

from flask_authflow._web.json_body import MAX_JSON_BYTES, MAX_JSON_DEPTH
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory, HtmlOutbox
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI
from tests.test_views import PASSWORD, Site, make_site

ORIGIN = "https://app.example.com"
#: The fuzzer's body: past the parser's recursion limit, well under the size bound.
DEEP_JSON = b"[" * 20_000 + b"]" * 20_000
#: The blueprints of the package (the issuer's answers only GET).
PACKAGE_BLUEPRINTS = ("authflow_views", "authflow_logout", "authflow_oauth", "authflow_issuer")


def full_site(app_factory: AppFactory, provider: TestOpenIDProvider, **config: Any) -> Site:
    """The ready views with sign-up, reset and e-mail change, one OpenID provider (so the
    ``authflow_oauth`` blueprint is there) and the local issuer; alice has a password."""
    provider.register_client(CLIENT_ID, CLIENT_SECRET, [REDIRECT_URI])
    settings: dict[str, Any] = {
        "AUTHFLOW_REGISTRATION": True,
        "AUTHFLOW_PASSWORD_RESET": True,
        "AUTHFLOW_EXTERNAL_URL": ORIGIN,
        "AUTHFLOW_ISSUER": "https://issuer.example",
        "AUTHFLOW_ISSUER_KEY_STORE": "memory",
        "AUTHFLOW_OAUTH_PROVIDERS": {
            PROVIDER: {
                "discovery_url": provider.discovery_url,
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uri": REDIRECT_URI,
            }
        },
        **config,
    }
    return make_site(
        app_factory,
        mail_sender=HtmlOutbox(),
        http_client=RequestsHttpClient(adapters=provider.http_adapters()),
        **settings,
    )


def package_rules(app: Flask) -> list[Rule]:
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.split(".")[0] in PACKAGE_BLUEPRINTS]
    assert {r.endpoint.split(".")[0] for r in rules} == set(PACKAGE_BLUEPRINTS)  # all four are there
    return rules


def path_of(rule: Rule) -> str:
    """The rule's path with every variable filled in (a provider's: the configured one)."""
    values = {name: PROVIDER if name == "provider" else "0" * 64 for name in rule.arguments}
    return rule.build(values, append_unknown=False)[1]  # type: ignore[index]


def token(client: FlaskClient) -> str:
    answer = client.get("/csrf")
    assert answer.json is not None
    return str(answer.json["csrf_token"])


def signed_in(site: Site) -> FlaskClient:
    client = site.client()
    answer = client.post(
        "/login", json={"username": "alice", "password": PASSWORD, "csrf_token": token(client)}
    )
    assert answer.status_code == 200 and answer.json is not None
    assert answer.json["status"] == "authenticated"
    return client


@pytest.fixture
def site(app_factory: AppFactory, oidc_provider: TestOpenIDProvider) -> Site:
    return full_site(app_factory, oidc_provider)


def post_rules(site: Site) -> list[str]:
    paths = [path_of(r) for r in package_rules(site.app) if "POST" in (r.methods or ())]
    assert "/login" in paths and f"/auth/link/{PROVIDER}" in paths and "/auth/logout" in paths
    return paths


def refused(answer: Any) -> bool:
    return answer.status_code == 400 and answer.json is not None and answer.json["error"] == "invalid_input"


def test_a_deep_body_is_a_typed_400_on_every_view_that_takes_post(site: Site) -> None:
    guest, member = site.client(), signed_in(site)
    for path in post_rules(site):
        for client in (guest, member):
            answer = client.post(path, data=DEEP_JSON, content_type="application/json")
            assert refused(answer), (path, answer.status_code, answer.text[:200])
    assert signed_in(site).get("/account").status_code == 200  # nothing was broken on the way


def test_nesting_just_past_the_bound_is_refused_and_at_the_bound_is_read(site: Site) -> None:
    client = site.client()
    at_bound = {
        "username": "alice",
        "password": PASSWORD,
        "csrf_token": token(client),
        "extra": json.loads("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)),
    }
    assert client.post("/login", json=at_bound).json["status"] == "authenticated"  # type: ignore[index]
    too_deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    answer = site.client().post(
        "/login", json={"username": "alice", "password": PASSWORD, "x": json.loads(too_deep)}
    )
    assert refused(answer)


def test_brackets_inside_strings_do_not_count_as_nesting(site: Site) -> None:
    client = site.client()
    body = {"username": "alice", "password": PASSWORD, "csrf_token": token(client), "note": "[{" * 5000}
    answer = client.post("/login", json=body)
    assert answer.json is not None and answer.json["status"] == "authenticated"


def test_an_oversize_body_is_a_typed_400(site: Site) -> None:
    big = {"username": "alice", "password": PASSWORD, "pad": "x" * MAX_JSON_BYTES}
    for path in post_rules(site):
        assert refused(site.client().post(path, json=big)), path


def test_malformed_json_is_a_typed_400_and_forms_are_untouched(site: Site) -> None:
    assert refused(site.client().post("/login", data=b'{"username": ', content_type="application/json"))
    assert refused(site.client().post("/login", data=b"\xff\xfe{}", content_type="application/json"))
    page = site.client().post("/login", data={"username": "[" * 50_000, "password": "x"})
    assert page.status_code == 400  # a form: the CSRF check, never the JSON bound


def test_the_apps_max_content_length_answers_first_with_413(
    app_factory: AppFactory, oidc_provider: TestOpenIDProvider
) -> None:
    site = full_site(app_factory, oidc_provider, MAX_CONTENT_LENGTH=1024)
    answer = site.client().post("/login", data=DEEP_JSON, content_type="application/json")
    assert answer.status_code == 413
