"""Trusted devices in real headless Chromium (Debian's chromium + chromium-driver), against
the reference app run by ``flask run``: trust the browser at the TOTP step, sign in again
with the password only, forget the device on the account page, and the next sign-in asks
for the TOTP code again."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest

from tests.parts import free_port, wait_for_port
from tests.test_browser import browsers  # noqa: F401 - the Chromium fixture
from tests.test_browser_mfa import MfaPage
from tests.test_reference_app import REFERENCE_FLASK, ROOT, create_users

pytestmark = pytest.mark.browser

USERS = {"dora": "doras-trusted-device-phrase"}


@pytest.fixture(scope="module")
def device_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``flask run`` of the reference app, configured only from the environment."""
    workdir = tmp_path_factory.mktemp("device-server")
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
        "PYTHONPATH": str(ROOT),
    }
    create_users(env, USERS)
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


def _add_totp(page: MfaPage) -> pyotp.TOTP:
    page.open("/account/factors")
    page.submit("add-totp-submit")
    totp = pyotp.TOTP(page.text_of("totp-secret"))
    page.type("totp-code", totp.now())
    page.submit("confirm-totp-submit")
    assert page.path == "/account/factors?notice=totp_added"
    return totp


def test_trust_this_device_then_forget_it(browsers: Any, device_server: str) -> None:  # noqa: F811
    page = MfaPage(browsers(), device_server)
    page.sign_in("dora", USERS["dora"])
    totp = _add_totp(page)
    page.sign_out()

    # The TOTP step, with "trust this device" ticked.
    page.password_step("dora", USERS["dora"])
    assert page.path.startswith("/login/factor"), page.driver.page_source[:2000]
    page.clickable("trust-device-totp").click()
    page.type("code-totp", totp.at(time.time() + 30))  # the enrollment code is used up
    page.submit("factor-submit-totp")
    page.signed_in_as("dora")
    cookie = page.driver.get_cookie("authflow_device")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    [mine] = page.css("li.device[data-current=true]")
    assert mine.get_attribute("data-trusted") == "true" and "Chrom" in mine.text
    page.sign_out()

    # The same browser: the password alone signs in.
    page.password_step("dora", USERS["dora"])
    page.signed_in_as("dora")

    # Forget it on the account page: the next sign-in asks for the TOTP code again.
    device_id = page.css("li.device[data-current=true]")[0].get_attribute("data-device")
    page.submit(f"forget-{device_id}")
    assert page.path == "/account?notice=device_forgotten"
    assert not page.css(f"#device-{device_id}")
    page.sign_out()
    page.password_step("dora", USERS["dora"])
    assert page.path.startswith("/login/factor"), page.driver.page_source[:2000]
    assert page.clickable("code-totp").get_attribute("autocomplete") == "one-time-code"
