"""The reference app against a real, certified OpenID provider (``oidc-provider``) on 127.0.0.1.

The app is served by a real HTTP server; a ``requests`` session plays the browser through the
provider's development login, consent and logout pages. It signs in, shows the user on
``/dashboard``, is signed out by the provider's back-channel POST (the next request is a
guest), and signs out through RP-initiated logout.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from flask import Flask
from werkzeug.serving import make_server

from examples.reference.app import create_app
from flask_authflow import get_state
from tests.oidc_parts import OidcProviderProcess, drive_login, drive_logout, start_oidc_provider, wait_until
from tests.parts import free_port

pytestmark = [pytest.mark.http, pytest.mark.interop]


@dataclass
class Deployment:
    rp: str
    op: OidcProviderProcess
    app: Flask

    def user_id(self, identifier: str) -> str:
        user = get_state(self.app).backend.find_user("default", identifier)
        assert user is not None, identifier
        return user.user_id

    def sign_in(self, browser: requests.Session, user: str, provider: str = "op") -> requests.Response:
        start = browser.get(f"{self.rp}/auth/login/{provider}", allow_redirects=False, timeout=10)
        assert start.status_code == 302, start.text
        back = drive_login(start.headers["Location"], user, browser, issuer=self.op.issuer)
        assert back.iss == self.op.issuer
        landed = browser.get(back.url, allow_redirects=False, timeout=10)
        assert landed.status_code == 302, landed.text
        return landed


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    port = free_port()
    rp = f"http://127.0.0.1:{port}"
    op = start_oidc_provider(
        [f"{rp}/auth/callback/op", f"{rp}/auth/callback/op-es256"],
        [f"{rp}/auth/logout/return/op", f"{rp}/auth/logout/return/op-es256"],
        f"{rp}/auth/backchannel-logout/op",
    )

    def provider(client_id: str, name: str, alg: str = "RS256") -> dict[str, Any]:
        return {
            "discovery_url": op.discovery_url,
            "client_id": client_id,
            "client_secret": op.client_secret,
            "redirect_uri": f"{rp}/auth/callback/{name}",
            "allowed_post_logout_redirect_uris": [f"{rp}/auth/logout/return/{name}"],
            "post_login_redirect": "/dashboard",
            # the algorithm registered for the client (RS256, the default, needs no setting)
            "id_token_signed_response_alg": alg,
        }

    instance = tmp_path_factory.mktemp("reference-oidc")
    app = create_app(
        {
            "AUTHFLOW_SIGNING_KEY": "r" * 48,
            "AUTHFLOW_COOKIE_SECURE": False,
            "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": True,
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{instance / 'authflow.db'}",
            "AUTHFLOW_OAUTH_PROVIDERS": {
                "op": provider(op.client_id, "op"),
                "op-es256": provider(op.es256_client_id, "op-es256", "ES256"),
            },
        },
        instance_path=str(instance),
    )
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Deployment(rp, op, app)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        op.stop()


def test_sign_in_shows_the_user_on_the_dashboard(deployment: Deployment) -> None:
    browser = requests.Session()
    landed = deployment.sign_in(browser, "ivan")
    assert landed.headers["Location"] == "/dashboard"
    dashboard = browser.get(f"{deployment.rp}/dashboard", timeout=10)
    assert dashboard.status_code == 200
    assert dashboard.text == f"dashboard of user {deployment.user_id('op:ivan')} in tenant default\n"


def test_es256_id_tokens_sign_in_too(deployment: Deployment) -> None:
    browser = requests.Session()
    deployment.sign_in(browser, "judy", provider="op-es256")
    page = browser.get(f"{deployment.rp}/dashboard", timeout=10).text
    assert deployment.user_id("op-es256:judy") in page


def test_the_login_page_offers_each_provider(deployment: Deployment) -> None:
    page = requests.get(f"{deployment.rp}/login", timeout=10).text
    assert 'href="/auth/login/op"' in page and 'href="/auth/login/op-es256"' in page


def test_back_channel_logout_from_the_provider_ends_the_session(deployment: Deployment) -> None:
    browser = requests.Session()
    deployment.sign_in(browser, "karl")
    assert browser.get(f"{deployment.rp}/dashboard", timeout=10).status_code == 200
    # Sign out at the provider only: it confirms, then POSTs a logout token to the app.
    end_session = (
        deployment.op.discovery()["end_session_endpoint"]
        + "?"
        + urlencode(
            {
                "client_id": deployment.op.client_id,
                "post_logout_redirect_uri": f"{deployment.rp}/auth/logout/return/op",
            }
        )
    )
    drive_logout(end_session, browser, issuer=deployment.op.issuer)
    assert wait_until(lambda: browser.get(f"{deployment.rp}/dashboard", timeout=10).status_code == 401)
    assert "backchannel logout to reference-app sent" in deployment.op.output()


def test_rp_initiated_logout(deployment: Deployment) -> None:
    browser = requests.Session()
    deployment.sign_in(browser, "lena")
    account = browser.get(f"{deployment.rp}/account", timeout=10).text  # its "Sign out" form
    token = re.search(r'name="csrf_token" value="([^"]+)"', account)
    assert token is not None
    out = browser.post(
        f"{deployment.rp}/auth/logout", data={"csrf_token": token.group(1)}, allow_redirects=False, timeout=10
    )
    assert out.status_code == 302
    assert out.headers["Location"].startswith(deployment.op.discovery()["end_session_endpoint"])
    assert browser.get(f"{deployment.rp}/dashboard", timeout=10).status_code == 401  # ended here first
    back = drive_logout(out.headers["Location"], browser, issuer=deployment.op.issuer)
    assert back.url.startswith(f"{deployment.rp}/auth/logout/return/op")
    returned = browser.get(back.url, allow_redirects=False, timeout=10)
    assert returned.status_code == 302 and returned.headers["Location"] == "/"


def test_key_rotation_at_the_provider_between_two_logins(deployment: Deployment) -> None:
    first = requests.Session()
    deployment.sign_in(first, "mona")
    deployment.op.rotate_keys(keep_old=False)
    time.sleep(1.1)  # past the key cache's 1 s floor: the new kid is fetched
    second = requests.Session()
    deployment.sign_in(second, "mona")
    assert second.get(f"{deployment.rp}/dashboard", timeout=10).status_code == 200
