"""The protected request pays only for what it needs: hooks present only when their
feature has something to do, configuration-only work done once per app.

Counted and inspected, never timed (speed is measured in benchmarks/).
"""

from __future__ import annotations

import hashlib
from typing import Any

from flask import Flask
from itsdangerous import Signer

from flask_authflow import get_state, login_required
from flask_authflow.sessions._interface import COOKIE_SALT, AuthFlowSessionInterface
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory
from tests.test_devices_web import COOKIE, FIREFOX, device_cookie, make_device_site, sign_in

UA = "flask-authflow-tests/1.0"


def _protected(app: Flask) -> None:
    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"


def test_a_secure_app_has_no_before_request_hook_of_ours(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_COOKIE_SECURE=True)
    assert app.before_request_funcs.get(None, []) == []


def test_the_loopback_guard_is_installed_only_when_configured(app_factory: AppFactory) -> None:
    app = app_factory(AUTHFLOW_COOKIE_SECURE=False, AUTHFLOW_ALLOW_INSECURE_LOOPBACK=True, TESTING=False)
    (guard,) = app.before_request_funcs[None]
    _protected(app)
    remote = app.test_client().get("/p", environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert remote.status_code == 403  # refused before the view
    assert guard.__name__ == "loopback_only"


def test_no_app_wide_device_hook_and_the_sign_in_still_sets_the_device_cookie(
    app_factory: AppFactory,
) -> None:
    site = make_device_site(app_factory)
    hooks = [hook for funcs in site.app.after_request_funcs.values() for hook in funcs]
    assert not any(hook.__module__ == "flask_authflow._web.devices" for hook in hooks)
    client = site.client(FIREFOX)
    assert device_cookie(client) is None
    assert sign_in(client).status_code == 302
    assert device_cookie(client) is not None  # set by the sign-in's own after_this_request hook
    response = client.get("/account")
    assert response.status_code == 200
    assert not any(h.startswith(f"{COOKIE}=") for h in response.headers.getlist("Set-Cookie"))


def test_cookies_signed_before_the_key_was_derived_once_still_verify(app_factory: AppFactory) -> None:
    app = app_factory()
    interface = app.session_interface
    assert isinstance(interface, AuthFlowSessionInterface)
    key = get_state(app).config.session.signing_key
    per_call = Signer(key, salt=COOKIE_SALT, key_derivation="hmac", digest_method=hashlib.sha256)
    sid = "A" * 43
    assert interface.sign_sid(sid) == per_call.sign(sid).decode()
    forged = per_call.sign(sid).decode()[:-2] + "AA"
    assert interface._verify_cookie(forged) is None


def test_a_binding_mismatch_is_counted_once_per_request(app_factory: AppFactory) -> None:
    app = app_factory()
    _protected(app)
    client = login_test_client(app, "alice")
    counters = get_state(app).counters
    before = counters.snapshot().get("session_binding_mismatches", 0)
    assert client.get("/p", headers={"User-Agent": "another browser"}).status_code == 401
    assert client.get("/p", headers={"User-Agent": "another browser"}).status_code == 401
    assert counters.snapshot().get("session_binding_mismatches", 0) == before + 2


def test_a_protected_get_selects_no_locale(app_factory: AppFactory, monkeypatch: Any) -> None:
    import flask_authflow._i18n as i18n

    app = app_factory()
    _protected(app)
    client = login_test_client(app, "alice")

    def selected() -> str:
        raise AssertionError("the locale was worked out for a request that shows no text")

    monkeypatch.setattr(i18n, "_selected_locale", selected)
    assert client.get("/p").status_code == 200


def test_an_api_view_without_authorization_does_no_token_work(
    app_factory: AppFactory, monkeypatch: Any
) -> None:
    from flask_authflow.api_auth._service import ApiTokenService

    app = app_factory()

    @app.get("/api")
    @login_required(api=True)
    def api() -> str:
        return "ok"

    def verify(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a token was verified for a request that carries none")

    monkeypatch.setattr(ApiTokenService, "verify", verify)
    assert app.test_client().get("/api", headers={"Accept": "application/json"}).status_code == 401
    assert login_test_client(app, "alice").get("/api").status_code == 200


def test_a_cookie_costs_one_hmac_and_only_the_signers_spelling_verifies(
    app_factory: AppFactory, monkeypatch: Any
) -> None:
    app = app_factory()
    interface = app.session_interface
    assert isinstance(interface, AuthFlowSessionInterface)
    sid = "B" * 43
    value = interface.sign_sid(sid)
    signature = value.rpartition(".")[2]
    computed: list[bytes] = []
    real = Signer.get_signature

    def counting(self: Signer, text: str | bytes) -> bytes:
        computed.append(text if isinstance(text, bytes) else text.encode())
        return real(self, text)

    monkeypatch.setattr(Signer, "get_signature", counting)
    verified = interface._verify_cookie(value)
    assert verified is not None and verified[0] == sid
    assert computed == [sid.encode()]  # one signature computed: no derivation, no second HMAC
    # The same signature bytes spelled otherwise (padded, stray low bits) are refused.
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".index(signature[-1])
    stray = signature[:-1] + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last ^ 1]
    for spelling in (signature + "=", stray):
        assert interface._verify_cookie(f"{sid}.{spelling}") is None


def test_the_views_own_vary_and_cache_control_are_kept(app_factory: AppFactory) -> None:
    app = app_factory()
    _protected(app)

    @app.get("/own")
    @login_required
    def own() -> Any:
        return "ok", {"Vary": "Accept-Language", "Cache-Control": "private, max-age=60"}

    client = login_test_client(app, "alice")
    plain = client.get("/p")
    assert plain.headers["Vary"] == "Cookie"
    assert plain.headers["Cache-Control"] == "private, no-store"  # an authenticated answer
    mine = client.get("/own")
    assert set(mine.vary) == {"Accept-Language", "Cookie"}
    assert mine.headers["Cache-Control"] == "private, max-age=60"  # the view's own, kept


def test_a_bearer_user_is_not_the_next_requests_user_in_a_shared_app_context(
    app_factory: AppFactory,
) -> None:
    # An app context pushed around several requests gives them one flask.g: what one
    # request kept there (its token's user) must not answer for the next one.
    from tests.test_api_tokens import build, call, user_and_token

    app, _ = build(app_factory)
    _, created = user_and_token(app)
    with app.app_context():
        assert call(app, "/api/me", created.value).get_json()["via"] == "token"
        assert call(app, "/api/me", None, Accept="application/json").status_code == 401


def test_a_device_cookie_read_by_one_request_is_not_the_next_requests_in_a_shared_app_context(
    app_factory: AppFactory,
) -> None:
    from flask_authflow._web.devices import current_device_id

    site = make_device_site(app_factory)

    @site.app.get("/device-id")
    def device_id() -> dict[str, Any]:
        return {"device": current_device_id()}

    known = site.client(FIREFOX)
    assert sign_in(known).status_code == 302 and device_cookie(known) is not None
    with site.app.app_context():
        assert known.get("/device-id").json["device"] is not None
        assert site.client(FIREFOX).get("/device-id").json == {"device": None}  # no cookie: none


def test_a_json_body_parsed_by_one_request_is_not_the_next_requests_in_a_shared_app_context(
    app_factory: AppFactory,
) -> None:
    from flask_authflow._web.json_body import json_body

    app = app_factory()

    @app.post("/echo")
    def echo() -> dict[str, Any]:
        return {"body": json_body()}

    client = app.test_client()
    with app.app_context():
        assert client.post("/echo", json={"n": 1}).json == {"body": {"n": 1}}
        assert client.post("/echo", json={"n": 2}).json == {"body": {"n": 2}}
        refused = client.post("/echo", data="[[[", content_type="application/json")
        assert refused.status_code == 400  # its own body, refused: not the last request's
        assert client.post("/echo", json={"n": 3}).json == {"body": {"n": 3}}
