"""Sign-in by e-mailed code through the headless API, for both client kinds (issue 31,
points 1 and 4): ask, pass the code, a second factor after it, each refusal; every answer
is checked against the served OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from tests.appfactory import AppFactory
from tests.headless_support import KINDS, ApiClient
from tests.test_login_code import ALICE, code_site, mailed, other, outbox
from tests.test_views import Site, enroll_totp, login, make_site, totp_now


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return code_site(app_factory)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ask(api: ApiClient, username: str) -> Any:
    answer = api.post("/login/code", {"username": username})
    answer.close()  # the mail goes out after the answer
    return answer


def test_sign_in_by_code(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    asked = ask(api, ALICE)
    assert asked.status_code == 200
    assert asked.json["status"] == "factor_required" and asked.json["kinds"] == ["login_code"]
    code, link = mailed(site)
    assert link.startswith("https://app.example.com/login/code/link?code=")
    wrong = api.post("/login/code/verify", {"code": other(code)})
    assert wrong.status_code == 401 and wrong.json["error"] == "retry_code"
    done = api.post("/login/code/verify", {"code": code})
    assert done.status_code == 200 and done.json["status"] == "authenticated"
    assert api.get("/session").json["state"] == "authenticated"


def test_unknown_accounts_get_the_same_answer(site: Site, kind: str) -> None:
    answers = []
    for username in ("carol", "nobody", "nobody@example.com"):
        api = ApiClient(site.app, kind)
        asked = ask(api, username)
        answers.append((asked.status_code, asked.json["status"], asked.json["kinds"]))
        refused = api.post("/login/code/verify", {"code": "00000000"})
        answers.append((refused.status_code, refused.json["error"]))
    assert answers[0:2] == answers[2:4] == answers[4:6]
    assert [m.to for m in outbox(site).messages] == [ALICE]


def test_refusals(site: Site, kind: str) -> None:
    api = ApiClient(site.app, kind)
    none_waiting = api.post("/login/code/verify", {"code": "12345678"})
    assert none_waiting.status_code == 409 and none_waiting.json["error"] == "login_not_started"
    ask(api, "carol")
    malformed = api.post("/login/code/verify", {"code": "1234abcd"})
    assert malformed.status_code == 400 and malformed.json["error"] == "invalid_input"
    empty = api.call("POST", "/login/code", {"username": ""}, check=False)
    assert empty.status_code == 400


def test_off_by_default(app_factory: AppFactory, kind: str) -> None:
    api = ApiClient(make_site(app_factory).app, kind)
    answer = api.post("/login/code", {"username": "alice"})
    assert answer.status_code == 404 and answer.json["error"] == "not_found"


def test_a_totp_user_is_asked_for_totp_after_the_code(site: Site, kind: str) -> None:
    setup = site.client()
    login(setup, "carol", "carol's long passphrase")
    secret = enroll_totp(site, setup)
    api = ApiClient(site.app, kind)
    ask(api, ALICE)
    code, _ = mailed(site)
    step = api.post("/login/code/verify", {"code": code})
    assert step.json["status"] == "factor_required" and "totp" in step.json["kinds"]
    site.clock.advance(30)
    done = api.post("/login/factor", {"kind": "totp", "code": totp_now(secret, site.clock)})
    assert done.json["status"] == "authenticated"
