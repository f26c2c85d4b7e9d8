"""The ready views' JSON mode takes JSON booleans for "remember me" and "trust this
device" (``"remember": true``, ``"trust_device": true``, as docs/devices.rst says), refuses
any other type with a typed 400 before the password or code is checked, and the forms keep
sending ``1``."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow._web.state import get_state
from flask_authflow.testing._pytest_plugin import Outbox
from tests.appfactory import AppFactory
from tests.test_devices_web import CHROME, FIREFOX, make_device_site, rows
from tests.test_views import PASSWORD, Site, csrf_of, login, make_site


@pytest.fixture
def site(app_factory: AppFactory) -> Site:
    return make_device_site(app_factory)  # alice: password, then TOTP 123456


def token(client: FlaskClient) -> str:
    answer = client.get("/csrf")
    assert answer.json is not None
    return str(answer.json["csrf_token"])


def password_step(client: FlaskClient, **extra: Any) -> Any:
    body = {"username": "alice", "password": PASSWORD, "csrf_token": token(client), **extra}
    return client.post("/login", json=body)


def code_step(client: FlaskClient, **extra: Any) -> Any:
    return client.post("/login/factor", json={"code": "123456", "csrf_token": token(client), **extra})


def failures(site: Site) -> int:
    return len([r for r in rows(site, "factor_verify") if r.status == "failure"])


def test_json_true_remembers_and_trusts(site: Site) -> None:
    client = site.client(FIREFOX)
    step = password_step(client, remember=True)
    assert step.json["status"] == "factor_required"
    done = code_step(client, trust_device=True)
    assert done.json["status"] == "authenticated"
    assert [r.status for r in rows(site, "remember_me")] == ["success"]
    assert [r.status for r in rows(site, "device_trusted")] == ["success"]
    [record] = site.sessions()
    assert record.remember
    [device] = site.backend.list_devices("default", site.user_id())
    assert device.trusted_until is not None


@pytest.mark.parametrize("value", [False, None])
def test_json_false_or_null_is_no(site: Site, value: Any) -> None:
    client = site.client(FIREFOX)
    password_step(client, remember=value)
    assert code_step(client, trust_device=value).json["status"] == "authenticated"
    assert rows(site, "remember_me") == [] and rows(site, "device_trusted") == []
    [record] = site.sessions()
    assert not record.remember


@pytest.mark.parametrize("value", ["1", "true", 1, 0, [], {"yes": True}])
def test_a_non_boolean_remember_is_a_typed_400_that_costs_no_attempt(site: Site, value: Any) -> None:
    client = site.client(FIREFOX)
    answer = password_step(client, remember=value)
    assert answer.status_code == 400
    assert answer.json["error"] == "invalid_input"
    assert rows(site, "login_begin") == []  # refused before the password was looked at
    assert site.sessions() == []


@pytest.mark.parametrize("value", ["1", 1, "yes"])
def test_a_non_boolean_trust_device_is_a_typed_400_and_keeps_the_login(site: Site, value: Any) -> None:
    client = site.client(FIREFOX)
    password_step(client)
    answer = code_step(client, trust_device=value)
    assert answer.status_code == 400 and answer.json["error"] == "invalid_input"
    assert failures(site) == 0  # the code was not checked, nothing counted
    assert code_step(client, trust_device=True).json["status"] == "authenticated"


def test_the_forms_keep_working_with_their_checkboxes(site: Site) -> None:
    client = site.client(CHROME)
    page = client.get("/login")
    form = {"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text), "remember": "1"}
    assert client.post("/login", data=form).status_code == 302
    factor_page = client.get("/login/factor")
    done = client.post(
        "/login/factor", data={"code": "123456", "csrf_token": csrf_of(factor_page.text), "trust_device": "1"}
    )
    assert done.status_code == 302
    assert [r.status for r in rows(site, "remember_me")] == ["success"]
    assert [r.status for r in rows(site, "device_trusted")] == ["success"]


def test_an_unticked_form_box_is_no(site: Site) -> None:
    client = site.client(CHROME)
    page = client.get("/login")
    form = {"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text), "remember": "junk"}
    assert client.post("/login", data=form).status_code == 302
    assert rows(site, "remember_me") == []


# --- email_not_verified -------------------------------------------------------------------------


def test_an_unverified_account_answers_the_documented_code(app_factory: AppFactory) -> None:
    """docs/accounts.rst: until the address is confirmed, the right password is answered
    ``email_not_verified`` (403), in JSON and on the page (with the way to a new link)."""
    site = make_site(app_factory, AUTHFLOW_REGISTRATION=True, AUTHFLOW_EXTERNAL_URL="https://app.example.com")
    get_state(site.app).mail_sender = Outbox()
    signup = {"username": "carol", "email": "carol@example.com", "password": PASSWORD}
    site.client().post("/signup", json=signup).close()
    client = site.client()
    body = {"username": "carol", "password": PASSWORD, "csrf_token": token(client)}
    refused = client.post("/login", json=body)
    assert refused.status_code == 403 and refused.json["error"] == "email_not_verified"
    wrong = client.post("/login", json={**body, "password": "not the password at all"})
    assert wrong.status_code == 401 and wrong.json["error"] == "invalid"  # no hint without the password
    page = login(site.client(), "carol", PASSWORD)
    assert page.status_code == 403 and 'id="error"' in page.text and 'id="resend-link"' in page.text
