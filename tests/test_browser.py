"""The reference app's HTML pages in a real headless Chromium (Debian's chromium + chromium-driver)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.parts import missing_part
from tests.test_reference_app import live_server  # noqa: F401 - the real server fixture

pytestmark = pytest.mark.browser


@pytest.fixture
def browser() -> Iterator[Any]:
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
        "--window-size=900,700",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(driver_path)), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_login_page_sign_in_and_out_in_chromium(browser: Any, live_server: str, tmp_path: Path) -> None:  # noqa: F811
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 15)

    def new_document_loaded(driver: Any) -> bool:
        try:
            return bool(
                driver.execute_script(
                    "return window.__authflowOldPage === undefined && document.readyState === 'complete'"
                )
            )
        except WebDriverException:  # the old document went away mid-call: not loaded yet
            return False

    def submit_and_wait(button_id: str) -> None:
        """Click, then wait for a new, fully loaded document (no race with the navigation).

        A marker set on the old page's window disappears with it; Chromium's own
        staleness checks can fail with "node does not belong to the document" instead.
        """
        browser.execute_script("window.__authflowOldPage = true")
        browser.find_element(By.ID, button_id).click()
        wait.until(new_document_loaded)

    browser.get(live_server + "/account")
    assert "/login" in browser.current_url  # redirected, with a safe next
    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys("not-her-password")
    submit_and_wait("submit")
    error = wait.until(ec.presence_of_element_located((By.ID, "error")))
    assert "invalid credentials" in error.text

    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys("wonderland-42")
    submit_and_wait("submit")
    wait.until(ec.url_contains("/account"))
    assert "Signed in as user alice" in wait.until(ec.presence_of_element_located((By.ID, "whoami"))).text
    cookie = browser.get_cookie("authflow_session")
    assert cookie is not None and cookie["httpOnly"] is True and cookie["sameSite"] == "Lax"
    logged_in_value = cookie["value"]
    assert browser.execute_script("return document.cookie").find("authflow_session") == -1
    browser.save_screenshot(str(tmp_path / "account.png"))

    submit_and_wait("logout")
    wait.until(ec.url_contains("/login"))
    browser.get(live_server + "/account")
    wait.until(ec.url_contains("/login"))
    after = browser.get_cookie("authflow_session")  # the login form's CSRF token lives in a guest session
    assert after is None or after["value"] != logged_in_value
