"""Every page of the reference app, in headless Chromium at 1280 and 390 CSS pixels wide: no
page is wider than the window (nothing to scroll sideways) and no button's label wraps onto
a second line. The screenshots go to a temporary folder (or ``AUTHFLOW_SCREENSHOT_DIR``) for
a person to look at; they are not kept in the repository."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyotp
import pytest

from tests.test_browser import Page, browsers  # noqa: F401 - the browser factory fixture
from tests.test_reference_app import live_server  # noqa: F401 - the real server fixture

pytestmark = pytest.mark.browser

WIDTHS = (1280, 390)

#: Buttons whose label takes more than one line, and how wide the document is.
_LAYOUT_PROBLEMS = """
const wrapped = [];
for (const button of document.querySelectorAll("button, a.button")) {
  if (button.offsetParent === null) continue;  // hidden
  const style = getComputedStyle(button);
  const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.3;
  const inner = button.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
  if (inner > line * 1.5) wrapped.push(button.id || button.textContent.trim());
}
return {wrapped: wrapped, scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth};
"""


def _folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("AUTHFLOW_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _shoot(page: Page, folder: Path, name: str) -> None:
    """Screenshots of the current page at each width, checking its layout at each."""
    for width in WIDTHS:
        page.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600},
        )
        found: dict[str, Any] = page.driver.execute_script(_LAYOUT_PROBLEMS)
        assert found["innerWidth"] == width, found
        assert found["scrollWidth"] <= found["innerWidth"], f"{name} at {width}px scrolls sideways: {found}"
        assert not found["wrapped"], f"{name} at {width}px: button labels wrap: {found['wrapped']}"
        assert page.driver.save_screenshot(str(folder / f"{name}-{width}.png"))
    page.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_every_page_fits_wide_and_narrow_windows(
    browsers: Any,  # noqa: F811
    live_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path)
    page = Page(browsers(), live_server)
    page.open("/")
    _shoot(page, folder, "index")
    page.open("/login")
    page.type("username", "alice")
    page.type("password", "not-her-password")
    page.submit("login-submit")
    _shoot(page, folder, "login-error")
    page.sign_in("alice", "wonderland-rabbit-42")
    _shoot(page, folder, "account")
    page.open("/account/factors")
    _shoot(page, folder, "factors")
    page.submit("add-totp-submit")
    secret = page.text_of("totp-secret")
    _shoot(page, folder, "enroll-totp")
    page.type("totp-code", pyotp.TOTP(secret).now())
    page.submit("confirm-totp-submit")
    assert "authenticator app is set up" in page.text_of("notice")
    page.submit("recovery-codes-submit")
    _shoot(page, folder, "recovery-codes")
    page.open("/step-up")
    _shoot(page, folder, "step-up")
    page.open("/account")
    _shoot(page, folder, "account-with-factor")

    second = Page(browsers(), live_server)
    second.open("/login")
    second.type("username", "alice")
    second.type("password", "wonderland-rabbit-42")
    second.submit("login-submit")
    assert second.path.startswith("/login/factor"), second.path
    _shoot(second, folder, "factor")
    second.open("/dashboard")  # not signed in yet: the API answer, no page to check
    assert len(list(folder.glob("*.png"))) == 2 * 9
