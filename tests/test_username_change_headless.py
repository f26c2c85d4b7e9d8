"""Change of username through the headless API (``POST /auth/api/v1/account/username``), both
client kinds; every answer is checked against the served OpenAPI document. And the session
state of a sign-in held until a second factor is set up (``required_enrollment``)."""

from __future__ import annotations

from typing import Any

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.headless_support import KINDS, ApiClient
from tests.test_views import PASSWORD, Site, make_site


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def signed_in(site: Site, kind: str) -> ApiClient:
    api = ApiClient(site.app, kind)
    answer = api.post("/login/password", {"username": "alice", "password": PASSWORD})
    assert answer.status_code == 200 and answer.json["status"] == "authenticated"
    return api


def test_a_username_changes_through_the_api(app_factory: AppFactory, kind: str) -> None:
    site = make_site(app_factory)
    get_state(site.app).mail_sender = Outbox()
    site.backend.set_email("default", site.user_id(), "alice@example.com", verified_at=site.clock.now())
    api = signed_in(site, kind)
    answer = api.post("/account/username", {"username": "Alice.Liddell"})
    assert answer.status_code == 200 and answer.json == {
        "status": "username_changed",
        "username": "alice.liddell",
    }
    answer.close()  # the notice goes out once the answer was sent
    assert api.get("/session").json["user"]["identifier"] == "alice.liddell"
    sender = get_state(site.app).mail_sender
    assert isinstance(sender, Outbox) and [m.to for m in sender.messages] == ["alice@example.com"]


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("bob", 409, "user_exists"),
        ("alice", 400, "username_unchanged"),
        ("bob@example.com", 400, "identifier_not_own_address"),
        ("a:b", 400, "invalid_input"),
        ("", 400, "invalid_input"),
    ],
)
def test_each_refusal_is_a_documented_answer(
    app_factory: AppFactory, kind: str, name: str, status: int, code: str
) -> None:
    site = make_site(app_factory)
    api = signed_in(site, kind)
    answer = api.post("/account/username", {"username": name})
    assert answer.status_code == status and answer.json["error"] == code


def test_a_guest_and_a_stale_login_are_refused(app_factory: AppFactory, kind: str) -> None:
    site = make_site(app_factory)
    guest = ApiClient(site.app, kind).post("/account/username", {"username": "dodo"})
    assert guest.status_code == 401 and guest.json["error"] == "login_required"
    api = signed_in(site, kind)
    site.clock.advance(11 * 60)
    stale = api.post("/account/username", {"username": "dodo"})
    assert stale.status_code == 401 and stale.json["error"] == "step_up_required"


def test_a_held_sign_in_says_what_to_set_up(app_factory: AppFactory, kind: str) -> None:
    site = make_site(app_factory, AUTHFLOW_MFA_REQUIRED=True)
    api = ApiClient(site.app, kind)
    step: Any = api.post("/login/password", {"username": "alice", "password": PASSWORD})
    assert step.status_code == 200 and step.json["status"] == "enrollment_required"
    assert "totp" in step.json["kinds"] and "recovery_code" not in step.json["kinds"]
    state = api.get("/session").json
    assert state["state"] == "pending_workflow" and state["user"] is None
    assert state["required_enrollment"] == step.json["kinds"]
    assert ApiClient(site.app, kind).get("/session").json["required_enrollment"] == []  # a guest
