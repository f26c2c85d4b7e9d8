"""The headless API's OpenAPI document: a valid OpenAPI 3.1 document, built from the route
declarations (every registered route is in it and nothing else), served by the app, with a
committed reference page that is current; the runtime imports none of the test-only
packages that check it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from flask_authflow._web.headless import all_routes, api_document
from flask_authflow._web.headless.reference import reference_document, render_reference
from flask_authflow._web.headless.routes import Answer, Reply, Route, dispatch
from flask_authflow._web.headless.schema import Object, String, component_schemas
from tests.appfactory import AppFactory

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_served_document_is_valid_openapi_3_1(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_VIEWS=True)
    answer = app.test_client().get("/auth/api/v1/openapi.json")
    assert answer.status_code == 200
    document = answer.json
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_registered_route_is_in_the_document_and_nothing_else(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_VIEWS=True)
    with app.app_context():
        document = api_document(app)
    served = {
        (rule.rule.replace("<", "{").replace(">", "}"), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith("authflow_api.") and rule.endpoint != "authflow_api.openapi"
        for method in (rule.methods or ()) - {"HEAD", "OPTIONS"}
    }
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert served == documented
    assert len(documented) == len(all_routes())


def test_the_prefix_and_the_switch_are_configurable(app_factory: AppFactory) -> None:
    moved = app_factory(AUTHFLOW_HEADLESS=True, AUTHFLOW_HEADLESS_URL_PREFIX="/api/auth")
    client = moved.test_client()
    document = client.get("/api/auth/v1/openapi.json").json
    assert all(path.startswith("/api/auth/v1/") for path in document["paths"])
    assert client.get("/api/auth/v1/session").status_code == 200
    off = app_factory(AUTHFLOW_VIEWS=True, AUTHFLOW_HEADLESS=False)
    assert off.test_client().get("/auth/api/v1/session").status_code == 404
    assert app_factory().test_client().get("/auth/api/v1/session").status_code == 404  # follows the views


def test_a_declared_route_cannot_name_two_different_schemas_alike() -> None:
    first = Object({"a": String(8)}, name="Same")
    second = Object({"b": String(8)}, name="Same")
    with pytest.raises(ValueError, match="Same"):
        component_schemas([first, second])
    with pytest.raises(ValueError, match="not properties"):
        Object({"a": String(8)}, required=("b",))


def test_the_statuses_every_route_may_answer_are_declared() -> None:
    route = Route(
        "POST", "/x", "x", "x", "t", lambda call: None,  # type: ignore[arg-type,return-value]
        answers={200: Answer("ok")}, errors={409: ("conflict",)}, signed_in=True, throttled=True,
    )  # fmt: skip
    assert set(route.statuses()) == {400, 401, 409, 429, 503}


def test_the_committed_reference_page_is_current() -> None:
    committed = (DOCS / "headless-reference.rst").read_text(encoding="utf-8")
    assert committed == render_reference(reference_document()), (
        "docs/headless-reference.rst is stale: in docs/, run "
        "python -m flask_authflow._web.headless.reference > headless-reference.rst"
    )


@pytest.mark.slow  # a fresh interpreter
def test_the_runtime_imports_no_test_only_package() -> None:
    code = (
        "import sys, flask_authflow, flask_authflow._web.headless.reference as r\n"
        "r.render_reference(r.reference_document())\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('schemathesis', 'openapi_spec_validator', 'pydantic', 'jsonschema', 'hypothesis')]\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_route_that_answers_an_undeclared_status_warns(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_VIEWS=True)
    route = Route("GET", "/x", "x", "x", "t", lambda call: Reply({}, 418), answers={200: Answer("ok")})
    app.add_url_rule("/x", "x", dispatch(route, lambda: False))
    with pytest.warns(RuntimeWarning, match="418"):
        assert app.test_client().get("/x").status_code == 418
