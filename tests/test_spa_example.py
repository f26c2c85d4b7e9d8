"""The single-page example (``examples/spa``) in headless Chromium: sign in with the
password and a TOTP code through the headless API, call the app's protected JSON route,
sign out; the session cookie stays out of the page's reach."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyotp
import pytest

from examples.spa.app import authflow, create_app
from flask_authflow._clock import MockClock
from tests.oidc_parts import serve_app
from tests.test_browser import browsers  # noqa: F401 - the headless Chromium fixture

pytestmark = pytest.mark.browser

PASSWORD = "spa-passphrase-forty-two"


@pytest.fixture
def spa(tmp_path: Path) -> Iterator[tuple[str, pyotp.TOTP]]:
    app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_COOKIE_SECURE": False,
            "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": True,
        },
        instance_path=str(tmp_path),
    )
    with app.app_context():
        alice = authflow.accounts.create("alice", PASSWORD)
        totp = pyotp.parse_uri(authflow.factors.create_totp(alice.user_id))
    server = serve_app(app)
    try:
        yield server.url, totp
    finally:
        server.stop()


class Spa:
    """The page in one browser: type, click, wait for what the script shows."""

    def __init__(self, driver: Any) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(driver, 15)

    def visible(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.visibility_of_element_located((By.ID, element_id)))

    def type(self, element_id: str, text: str) -> None:
        field = self.visible(element_id)
        field.clear()
        field.send_keys(text)

    def click(self, element_id: str) -> None:
        self.visible(element_id).click()

    def text(self, element_id: str, expected: str) -> str:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        self.wait.until(ec.text_to_be_present_in_element((By.ID, element_id), expected))
        return str(self.driver.find_element(By.ID, element_id).text)


def test_password_totp_api_call_and_logout(
    browsers: Any,  # noqa: F811
    spa: tuple[str, pyotp.TOTP],
    mock_clock: MockClock,
) -> None:
    url, totp = spa
    driver = browsers()
    driver.get(url + "/")
    page = Spa(driver)
    page.text("status", "Sign in with your username and password.")

    page.type("username", "alice")
    page.type("password", "not her password")
    page.click("login-submit")
    page.text("error", "Wrong username or password.")

    page.type("username", "alice")
    page.type("password", PASSWORD)
    page.click("login-submit")
    page.text("status", "Enter the code (totp).")
    page.type("code", totp.at(mock_clock.now()))
    page.click("factor-submit")
    page.text("status", "You are signed in.")
    assert page.text("whoami", "alice") == "alice"

    cookie = driver.get_cookie("authflow_session")
    assert cookie is not None and cookie["httpOnly"] is True
    assert "authflow_session" not in driver.execute_script("return document.cookie")

    page.click("notes-button")
    assert "Welcome back, alice." in page.text("notes", "Welcome back")

    page.click("logout-button")
    page.text("status", "You are signed out.")
    page.visible("login-form")
    after = driver.get_cookie("authflow_session")
    assert after is None or after["value"] != cookie["value"]
