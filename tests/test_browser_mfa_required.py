"""Enforced second factors in real headless Chromium, against the reference app run by
``flask run`` with ``AUTHFLOW_MFA_REQUIRED = ["admin"]`` (from the environment): an
administrator without a factor signs in, is made to set up an authenticator app before
reaching ``/admin``, then reaches it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest

from tests.parts import free_port, wait_for_port
from tests.test_browser import Page, browsers  # noqa: F401 - the Chromium fixture
from tests.test_reference_app import REFERENCE_FLASK, ROOT

pytestmark = pytest.mark.browser

ADMIN, PASSWORD = "ada", "adas-admin-passphrase-9"


#: Creates the administrator in one interpreter (three ``flask authflow`` commands would
#: start three): the user, the role and the grant, through the app as an operator would.
SETUP = f"""
from examples.reference.app import create_app
from flask_authflow._web import services
from flask_authflow._web.state import account_admin

app = create_app()
with app.app_context():
    user = account_admin().create_user("default", {ADMIN!r}, {PASSWORD!r})
    services.roles().create("admin")
    services.roles().grant(user.user_id, "admin")
"""


@pytest.fixture(scope="module")
def mfa_required_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The reference app requiring a second factor of administrators; its base URL."""
    workdir = tmp_path_factory.mktemp("mfa-required-server")
    port = free_port()
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{workdir / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_ARGON2_MEMORY_COST": "19456",
        "FLASK_AUTHFLOW_ARGON2_TIME_COST": "1",
        "FLASK_AUTHFLOW_ARGON2_PARALLELISM": "1",
        "FLASK_AUTHFLOW_MFA_REQUIRED": json.dumps(["admin"]),  # from_prefixed_env reads JSON
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", SETUP],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with (workdir / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [*REFERENCE_FLASK, "run", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port)
        yield f"http://localhost:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_an_administrator_sets_up_totp_before_reaching_admin(
    browsers: Any,  # noqa: F811
    mfa_required_server: str,
) -> None:
    page = Page(browsers(), mfa_required_server)
    page.open("/admin")
    assert page.path == "/login?next=/admin"
    page.type("username", ADMIN)
    page.type("password", PASSWORD)
    page.submit("login-submit")
    assert page.path == "/account/factors", page.driver.page_source[:2000]  # held: set one up first
    assert page.text_of("required-enrollment")
    page.open("/admin")
    assert page.path == "/account/factors"  # /admin is not reachable yet
    page.open("/account")
    assert page.path == "/account/factors"  # nor the account page

    page.open("/account/factors")
    page.submit("add-totp-submit")
    secret = page.text_of("totp-secret")
    page.type("totp-code", pyotp.TOTP(secret).now())
    page.submit("confirm-totp-submit")
    assert page.path == "/account/factors?notice=totp_added", page.driver.page_source[:2000]
    page.open("/admin")
    assert page.path == "/admin"
    assert "admin area of tenant default" in page.driver.page_source
