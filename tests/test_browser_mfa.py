"""Multi-factor sign-in through the ready views in real headless Chromium (Debian's chromium
+ chromium-driver), against the reference app run by ``flask run``: an authenticator app
(TOTP, codes from pyotp), a security key and a passkey (Chromium's virtual WebAuthn
authenticator, over the DevTools protocol), each added on ``/account/factors`` and then used
to sign in.

WebAuthn needs a secure context: the pages are opened at ``http://localhost:PORT`` (an RP id
cannot be an IP address), with ``AUTHFLOW_WEBAUTHN_RP_ID=localhost`` and that origin.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest

from tests.browser_webauthn import add_virtual_authenticator, stored_credentials
from tests.parts import free_port, wait_for_port
from tests.test_browser import Page, browsers  # noqa: F401 - the Chromium fixture
from tests.test_reference_app import REFERENCE_FLASK, ROOT, create_users

pytestmark = pytest.mark.browser

#: One user per test: each adds its own sign-in methods.
MFA_USERS = {
    "tess": "tess-totp-passphrase-7",
    "kim": "kims-security-key-phrase",
    "pia": "pias-passkey-passphrase-3",
}


@pytest.fixture(scope="module")
def mfa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``flask run`` of the reference app with WebAuthn and passkey sign-in on, configured
    only from the environment, for the whole module; its base URL on ``localhost``."""
    workdir = tmp_path_factory.mktemp("mfa-server")
    port = free_port()
    origin = f"http://localhost:{port}"
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{workdir / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_ARGON2_MEMORY_COST": "19456",
        "FLASK_AUTHFLOW_ARGON2_TIME_COST": "1",
        "FLASK_AUTHFLOW_ARGON2_PARALLELISM": "1",
        # from_prefixed_env reads these as JSON
        "FLASK_AUTHFLOW_WEBAUTHN_RP_ID": json.dumps("localhost"),
        "FLASK_AUTHFLOW_WEBAUTHN_ORIGINS": json.dumps([origin]),
        "FLASK_AUTHFLOW_PASSKEY_LOGIN": "true",
        "PYTHONPATH": str(ROOT),
    }
    create_users(env, MFA_USERS)
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
        yield origin
    finally:
        server.terminate()
        server.wait(timeout=10)


class CeremonyStopped(AssertionError):
    """A WebAuthn button's script reported an error instead of leading to the next page."""


class MfaPage(Page):
    """A :class:`Page` with the steps of a multi-factor sign-in."""

    def clickable(self, element_id: str) -> Any:
        """The element, once enabled and shown (WebAuthn buttons are enabled by the script)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.element_to_be_clickable((By.ID, element_id)))

    def run_ceremony(self, button_id: str, status_id: str) -> None:
        """Click a WebAuthn button and wait for the page it leads to; the script's message
        (a refused key, a cancelled prompt) fails the test instead of a bare timeout."""
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By

        button = self.clickable(button_id)
        self.driver.execute_script("window.__authflowOldPage = true")
        button.click()

        def settled(driver: Any) -> bool:
            if self._new_document_loaded(driver):
                return True
            try:
                return bool(driver.find_element(By.ID, status_id).text.strip())
            except WebDriverException:  # the old page is going away: not settled yet
                return False

        self.wait.until(settled)
        if not self._new_document_loaded(self.driver):
            raise CeremonyStopped(
                f"the WebAuthn ceremony stopped on {self.path}: {self.text_of(status_id)!r}"
            )

    def css(self, selector: str) -> list[Any]:
        return list(self.driver.find_elements("css selector", selector))

    def password_step(self, username: str, password: str) -> None:
        """Signed out: the account page sends to the sign-in page; the password there."""
        self.open("/account")
        assert self.path == "/login?next=/account"  # not signed in
        self.type("username", username)
        self.type("password", password)
        self.submit("login-submit")

    def sign_out(self) -> None:
        self.open("/account")
        self.submit("logout-submit")
        assert self.path.startswith("/login")
        self.open("/account")
        assert self.path == "/login?next=/account"  # the session is gone

    def signed_in_as(self, username: str) -> None:
        assert self.path == "/account", self.driver.page_source[:2000]
        assert f"Signed in as {username}" in self.text_of("whoami")


def _not_a_valid_code(secret: str) -> str:
    """Six digits that no step near now accepts."""
    totp = pyotp.TOTP(secret)
    near = {totp.at(time.time() + offset) for offset in range(-90, 120, 30)}
    return next(code for code in (f"{n:06d}" for n in range(1000)) if code not in near)


def test_password_then_authenticator_app(browsers: Any, mfa_server: str) -> None:  # noqa: F811
    page = MfaPage(browsers(), mfa_server)
    page.sign_in("tess", MFA_USERS["tess"])  # no second factor yet: the password alone
    page.open("/account/factors")
    assert page.css("#no-factors")

    page.submit("add-totp-submit")
    assert page.css("figure#totp-qr svg")  # the QR code, inline
    secret = page.text_of("totp-secret")
    totp = pyotp.TOTP(secret)
    page.type("totp-code", _not_a_valid_code(secret))
    page.submit("confirm-totp-submit")
    assert "That code was not accepted. Try again, or start again." in page.text_of("error")
    assert not page.css("#totp-secret")  # the key is shown once, not again after a refusal
    enrollment_code = totp.now()
    page.type("totp-code", enrollment_code)
    page.submit("confirm-totp-submit")
    assert page.path == "/account/factors?notice=totp_added"
    assert "Your authenticator app is set up." in page.text_of("notice")
    assert len(page.css("ul#factors li[data-kind=totp]")) == 1

    page.sign_out()
    page.password_step("tess", MFA_USERS["tess"])
    assert page.path.startswith("/login/factor"), page.driver.page_source[:2000]
    assert page.clickable("code-totp").get_attribute("autocomplete") == "one-time-code"
    # The code that confirmed the app is used up: refused, with the page's message.
    page.type("code-totp", enrollment_code)
    page.submit("factor-submit-totp")
    assert page.path.startswith("/login/factor")
    assert "That code was not accepted. Try again." in page.text_of("error")
    # The next step's code (the server takes one step of drift either way) signs in.
    page.type("code-totp", totp.at(time.time() + 30))
    page.submit("factor-submit-totp")
    page.signed_in_as("tess")


def test_security_key_then_login_with_it(browsers: Any, mfa_server: str) -> None:  # noqa: F811
    page = MfaPage(browsers(), mfa_server)
    authenticator = add_virtual_authenticator(page.driver)
    page.sign_in("kim", MFA_USERS["kim"])
    page.open("/account/factors")
    page.type("webauthn-label", "Kim's test key")
    page.run_ceremony("add-webauthn-submit", "webauthn-status")
    assert page.path == "/account/factors?notice=webauthn_added"
    assert "Your security key is added." in page.text_of("notice")
    listed = page.css("ul#factors li[data-kind=webauthn]")
    assert len(listed) == 1 and "Kim's test key" in listed[0].text
    held = stored_credentials(page.driver, authenticator)
    assert len(held) == 1 and held[0]["rpId"] == "localhost" and held[0]["userName"] == "kim"
    assert held[0]["isResidentCredential"] is False  # a security key, not a passkey
    sign_count = held[0]["signCount"]

    page.sign_out()
    page.password_step("kim", MFA_USERS["kim"])
    assert page.path.startswith("/login/factor"), page.driver.page_source[:2000]
    assert page.css("#method-webauthn")
    page.run_ceremony("webauthn-button", "webauthn-status")
    page.signed_in_as("kim")
    assert stored_credentials(page.driver, authenticator)[0]["signCount"] > sign_count


def test_passkey_sign_in_without_username_or_password(browsers: Any, mfa_server: str) -> None:  # noqa: F811
    page = MfaPage(browsers(), mfa_server)
    authenticator = add_virtual_authenticator(page.driver)
    page.sign_in("pia", MFA_USERS["pia"])
    page.open("/account/factors")
    page.type("webauthn-label", "Pia's laptop")
    page.clickable("webauthn-passkey").click()
    page.run_ceremony("add-webauthn-submit", "webauthn-status")
    assert page.path == "/account/factors?notice=webauthn_added"
    listed = page.css("ul#factors li[data-kind=webauthn]")
    assert len(listed) == 1 and "Passkey" in listed[0].text
    held = stored_credentials(page.driver, authenticator)
    assert len(held) == 1 and held[0]["isResidentCredential"] is True  # discoverable

    # The button, with passkey autofill reported unavailable: Chromium's virtual
    # authenticator answers a conditional request at once, racing the button's ceremony
    # (autofill itself: tests/test_browser_passkey_only.py).
    no_autofill = {"source": "PublicKeyCredential.isConditionalMediationAvailable = async () => false;"}
    hidden = page.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", no_autofill)
    try:
        page.sign_out()  # on the sign-in page, /login?next=/account
        page.run_ceremony("passkey-button", "passkey-status")  # no username, no password
        page.signed_in_as("pia")
    finally:
        page.driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hidden)
