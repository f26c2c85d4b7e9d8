"""The scripted "mobile" client of ``examples/spa`` against the example served on a local
port: password, TOTP, the app's own API with the session token, logout; never a cookie,
and a new token at each step of the login."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pyotp
import pytest
import requests
from flask import Flask

from examples.spa.app import authflow, create_app
from examples.spa.mobile_client import MobileClient, Refused
from flask_authflow._clock import MockClock
from tests.oidc_parts import serve_app

pytestmark = pytest.mark.http

PASSWORD = "mobile-passphrase-forty-2"


@pytest.fixture
def served(tmp_path: object, mock_clock: MockClock) -> Iterator[tuple[str, Flask, pyotp.TOTP]]:
    app = create_app(
        {"TESTING": True, "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48)}, instance_path=str(tmp_path)
    )
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        totp = pyotp.parse_uri(authflow.factors.create_totp(alice.user_id))
    server = serve_app(app)
    try:
        yield server.url, app, totp
    finally:
        server.stop()


def test_login_factor_api_calls_and_logout_with_a_token_and_no_cookie(
    served: tuple[str, Flask, pyotp.TOTP], mock_clock: MockClock
) -> None:
    url, _, totp = served
    client = MobileClient(url)
    assert client.session()["state"] == "guest" and client.tokens == []  # a guest has no session to carry
    with pytest.raises(Refused) as refused:
        client.notes()
    assert refused.value.status == 401

    client.login("alice", PASSWORD, lambda: totp.at(mock_clock.now()))
    password_step, factor_step = client.tokens
    assert password_step and factor_step and password_step != factor_step  # rotated at each step
    state = client.session()
    assert state["state"] == "authenticated" and state["user"]["identifier"] == "alice"
    assert state["client"] == "app" and state["csrf_token"] is None
    assert client.notes()["user"] == "alice"

    # The token of the password step died with the rotation; the token is useless as a cookie.
    stale = MobileClient(url, token=password_step)
    assert stale.session()["state"] == "guest"
    as_cookie = requests.get(
        f"{url}/api/notes",
        cookies={"authflow_session": factor_step},
        headers={"User-Agent": client.user_agent, "Accept": "application/json"},
        timeout=10,
    )
    assert as_cookie.status_code == 401

    client.logout()
    assert client.tokens[-1] == "" and client.token is None  # the session ended: drop the token
    replay = MobileClient(url, token=factor_step)
    assert replay.session()["state"] == "guest"
    with pytest.raises(Refused):
        replay.notes()

    assert client.cookies_offered == [] and len(client.http.cookies) == 0  # never a cookie


def test_a_wrong_code_is_refused_and_the_login_waits(
    served: tuple[str, Flask, pyotp.TOTP], mock_clock: MockClock
) -> None:
    url, _, totp = served
    client = MobileClient(url)
    with pytest.raises(Refused) as wrong:
        client.login(
            "alice", PASSWORD, lambda: "000000" if totp.at(mock_clock.now()) != "000000" else "111111"
        )
    assert wrong.value.status == 401 and wrong.value.body["error"] == "retry_code"
    assert client.session()["state"] == "authenticating"
    done = client.call(
        "POST", "/auth/api/v1/login/factor", {"kind": "totp", "code": totp.at(mock_clock.now())}
    )
    assert done["status"] == "authenticated"
