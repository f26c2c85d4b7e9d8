"""A passkey-only account in real headless Chromium (issue 31.2), against the reference app
run by ``flask run``: sign-up with a passkey and an address (Chromium's virtual
authenticator), the mailed link, sign-out, and sign-in by **passkey autofill**: the sign-in
page's conditional ``navigator.credentials.get`` (``mediation: "conditional"``).

Chromium's virtual authenticator environment answers a conditional request by itself with
the credential it holds for the RP (no autofill menu is shown headlessly, nobody picks an
entry): so this drives the page's own conditional code path end to end, from
``isConditionalMediationAvailable()`` to the signed-in account page. What cannot be
automated is a person choosing the passkey from the username field's suggestion list, and
so the interplay of a pending autofill request with the "Sign in with a passkey" button
(the script aborts the autofill request before the button's ceremony): headlessly the
autofill request is answered before anyone could press the button, so the button is driven
with autofill reported unavailable.
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_webauthn import add_virtual_authenticator, stored_credentials
from tests.parts import free_port, wait_for_port
from tests.test_browser import browsers  # noqa: F401 - the Chromium fixture
from tests.test_browser_mfa import MfaPage
from tests.test_reference_app import REFERENCE_FLASK, ROOT

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def passkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``flask run`` of the reference app with passkey sign-up on; its base URL on
    ``localhost`` and its mail outbox folder."""
    workdir = tmp_path_factory.mktemp("passkey-server")
    outbox = workdir / "outbox"
    outbox.mkdir()
    port = free_port()
    origin = f"http://localhost:{port}"
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{workdir / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_EXTERNAL_URL": origin,
        "FLASK_AUTHFLOW_MAIL_OUTBOX": str(outbox),
        "FLASK_AUTHFLOW_REGISTRATION": "true",
        "FLASK_AUTHFLOW_REGISTRATION_PASSKEY": "true",
        # from_prefixed_env reads these as JSON
        "FLASK_AUTHFLOW_WEBAUTHN_RP_ID": json.dumps("localhost"),
        "FLASK_AUTHFLOW_WEBAUTHN_ORIGINS": json.dumps([origin]),
        "FLASK_AUTHFLOW_PASSKEY_LOGIN": "true",
        "PYTHONPATH": str(ROOT),
    }
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
        yield origin, outbox
    finally:
        server.terminate()
        server.wait(timeout=10)


def mailed_path(outbox: Path, origin: str) -> str:
    """The path of the verification link in the newest mail of the outbox."""
    [path] = sorted(outbox.glob("*.eml"))[-1:]
    message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    found = re.search(re.escape(origin) + r"(/\S*token=[A-Za-z0-9_-]{43})", body.get_content())
    assert found is not None, body.get_content()
    return found.group(1)


def test_passkey_sign_up_sign_out_and_sign_in_by_autofill(
    browsers: Any,  # noqa: F811
    passkey_server: tuple[str, Path],
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    origin, outbox = passkey_server
    page = MfaPage(browsers(), origin)
    authenticator = add_virtual_authenticator(page.driver)

    page.open("/signup")
    page.type("passkey-username", "nina")
    page.type("passkey-email", "nina@example.com")
    page.run_ceremony("passkey-signup-submit", "passkey-signup-status")
    assert "Check your mail" in page.text_of("signup-sent")
    [held] = stored_credentials(page.driver, authenticator)
    assert held["isResidentCredential"] is True and held["rpId"] == "localhost"

    page.open(mailed_path(outbox, origin))  # the mailed link: a button confirms the address
    page.submit("verify-submit")
    assert page.text_of("signup-confirmed")

    # The button first, autofill off: a script that runs before the page's own says the
    # browser cannot (the virtual authenticator would answer a conditional request at
    # once, racing the button's ceremony, where a person would have to pick a passkey).
    no_autofill = {"source": "PublicKeyCredential.isConditionalMediationAvailable = async () => false;"}
    hidden = page.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", no_autofill)
    page.open("/login?next=/account")
    assert page.clickable("username").get_attribute("autocomplete") == "username"  # as before
    page.run_ceremony("passkey-button", "passkey-status")  # the passkey alone signs in
    page.signed_in_as("nina")
    assert page.css("#set-password-form")  # no password yet: the account page offers one
    page.sign_out()  # on the sign-in page, /login?next=/account
    page.driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hidden)

    # Passkey autofill: the page asks the browser, marks the field and starts the
    # conditional request at load; the virtual authenticator answers it by itself.
    page.open("/login?next=/account")
    WebDriverWait(page.driver, 30).until(lambda driver: page.path == "/account")
    page.signed_in_as("nina")
    assert held["signCount"] < stored_credentials(page.driver, authenticator)[0]["signCount"]

    # Without passkey autofill the form works as before (a wrong password is refused).
    page.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", no_autofill)
    page.open("/login")
    page.clickable("passkey-button")  # the script ran and enabled the button
    assert page.clickable("username").get_attribute("autocomplete") == "username"
    page.type("username", "nina")
    page.type("password", "not the password at all")
    page.submit("login-submit")
    assert page.path == "/login" and page.text_of("error")
