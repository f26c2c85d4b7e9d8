"""The ready views, as the reference app serves them, in real headless Chromium browsers
(Debian's chromium + chromium-driver): sign in, change the password (other sessions end),
and "log out all other sessions" (a second browser's session ends)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.parts import missing_part, require_marker
from tests.test_reference_app import live_server  # noqa: F401 - the real server fixture

pytestmark = pytest.mark.browser


def _open_browser() -> Any:
    require_marker("browser", "headless Chromium")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        missing_part(
            "headless Chromium and ChromeDriver are not installed (Debian: chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing_part("selenium is not installed (pip install -e '.[dev]')")
        raise
    profile = tempfile.mkdtemp(prefix="authflow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=900,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(driver_path)), options=options)
    driver.set_page_load_timeout(20)
    driver._authflow_profile = profile  # removed with the browser
    return driver


@pytest.fixture
def browsers() -> Iterator[Callable[[], Any]]:
    """A factory of headless Chromium browsers, each with a profile (cookies) of its own."""
    opened: list[Any] = []

    def open_one() -> Any:
        driver = _open_browser()
        opened.append(driver)
        return driver

    try:
        yield open_one
    finally:
        for driver in opened:
            driver.quit()
            shutil.rmtree(driver._authflow_profile, ignore_errors=True)


class Page:
    """One browser on the reference app, with waits that cannot race a navigation."""

    def __init__(self, driver: Any, base: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.base = base
        self.wait = WebDriverWait(driver, 15)

    def _new_document_loaded(self, driver: Any) -> bool:
        from selenium.common.exceptions import WebDriverException

        try:
            return bool(
                driver.execute_script(
                    "return window.__authflowOldPage === undefined && document.readyState === 'complete'"
                )
            )
        except WebDriverException:  # the old document went away mid-call: not loaded yet
            return False

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def type(self, element_id: str, text: str) -> None:
        from selenium.webdriver.common.by import By

        field = self.driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(text)

    def submit(self, button_id: str) -> None:
        """Click, then wait for a new, fully loaded document.

        A marker set on the old page's window disappears with it; Chromium's own
        staleness checks can fail with "node does not belong to the document" instead.
        """
        from selenium.webdriver.common.by import By

        self.driver.execute_script("window.__authflowOldPage = true")
        self.driver.find_element(By.ID, button_id).click()
        self.wait.until(self._new_document_loaded)

    def text_of(self, element_id: str) -> str:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return str(self.wait.until(ec.presence_of_element_located((By.ID, element_id))).text)

    @property
    def path(self) -> str:
        return str(self.driver.current_url).removeprefix(self.base)

    def sign_in(self, username: str, password: str) -> None:
        self.open("/account")
        assert self.path == "/login?next=/account"  # redirected, with a safe next
        self.type("username", username)
        self.type("password", password)
        self.submit("login-submit")
        assert self.path == "/account", self.driver.page_source[:2000]


def test_sign_in_wrong_then_right_and_sign_out(browsers: Any, live_server: str, tmp_path: Path) -> None:  # noqa: F811
    page = Page(browsers(), live_server)
    page.open("/account")
    assert page.path == "/login?next=/account"
    page.type("username", "alice")
    page.type("password", "not-her-password")
    page.submit("login-submit")
    assert "Wrong username or password." in page.text_of("error")

    page.type("username", "alice")
    page.type("password", "wonderland-rabbit-42")
    page.submit("login-submit")
    assert page.path == "/account"
    assert "Signed in as alice" in page.text_of("whoami")
    cookie = page.driver.get_cookie("authflow_session")
    assert cookie is not None and cookie["httpOnly"] is True and cookie["sameSite"] == "Lax"
    signed_in_value = cookie["value"]
    assert page.driver.execute_script("return document.cookie").find("authflow_session") == -1
    # This browser's session is listed with its device, and marked as the current one.
    sessions = page.driver.find_elements("css selector", "li.session[data-current='true']")
    assert len(sessions) == 1 and "Chrome" in sessions[0].text
    page.driver.save_screenshot(str(tmp_path / "account.png"))

    page.submit("logout-submit")
    assert page.path.startswith("/login")
    page.open("/account")
    assert page.path.startswith("/login")
    after = page.driver.get_cookie("authflow_session")
    assert after is None or after["value"] != signed_in_value


def test_changing_the_password_ends_the_other_sessions(browsers: Any, live_server: str) -> None:  # noqa: F811
    first, second = Page(browsers(), live_server), Page(browsers(), live_server)
    first.sign_in("carol", "carols-first-passphrase")
    second.sign_in("carol", "carols-first-passphrase")

    first.open("/account")
    first.type("current-password", "carols-first-passphrase")
    first.type("new-password", "carols-second-passphrase")
    first.type("new-password-confirm", "carols-second-passphrase")
    first.submit("change-password-submit")
    assert "Your password has been changed" in first.text_of("notice")

    second.open("/account")
    assert second.path.startswith("/login")  # the other browser was signed out
    first.open("/account")
    assert first.path == "/account"  # the browser that changed it stays signed in

    third = Page(browsers(), live_server)
    third.open("/login")
    third.type("username", "carol")
    third.type("password", "carols-first-passphrase")
    third.submit("login-submit")
    assert "Wrong username or password." in third.text_of("error")
    third.type("username", "carol")
    third.type("password", "carols-second-passphrase")
    third.submit("login-submit")
    assert third.path == "/account"


def test_log_out_all_other_sessions(browsers: Any, live_server: str) -> None:  # noqa: F811
    first, second = Page(browsers(), live_server), Page(browsers(), live_server)
    first.sign_in("dave", "daves-long-passphrase")
    second.sign_in("dave", "daves-long-passphrase")
    first.open("/account")
    assert len(first.driver.find_elements("css selector", "li.session")) == 2
    first.submit("revoke-others-submit")
    assert "All your other sessions have been logged out." in first.text_of("notice")
    assert len(first.driver.find_elements("css selector", "li.session")) == 1
    second.open("/account")
    assert second.path.startswith("/login")
    first.open("/account")
    assert first.path == "/account"
