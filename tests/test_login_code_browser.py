"""Sign-in by e-mailed code in real headless Chromium against the reference app under
``flask run``, its mail going through a real SMTP server on 127.0.0.1 (issue 31, point 1):
the code from the mail (a TOTP user is then asked for TOTP), and the mailed link, which
signs in the browser that asked and nothing in another one."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest

from tests.parts import free_port, wait_for_port
from tests.smtp_server import SmtpServers, SmtpTestServer
from tests.test_browser import Page, browsers  # noqa: F401 - the Chromium fixture
from tests.test_browser_accounts import _flask
from tests.test_reference_app import REFERENCE_FLASK, ROOT

pytestmark = pytest.mark.browser

USERS = {"cora": "coras-long-passphrase", "tina": "tinas-long-passphrase"}
_CODE = re.compile(r"code: ([0-9]{8})")
_LINK = re.compile(r"(http://\S+/login/code/link\?code=[0-9]{8})")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpTestServer, str]]:
    """The reference app with sign-in by code, sending through a real SMTP server, for the
    module; its base URL, the SMTP server and tina's TOTP key."""
    workdir = tmp_path_factory.mktemp("login-code")
    servers = SmtpServers(workdir / "smtp-tls")
    smtp = servers()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{workdir / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_ARGON2_MEMORY_COST": "19456",
        "FLASK_AUTHFLOW_ARGON2_TIME_COST": "1",
        "FLASK_AUTHFLOW_ARGON2_PARALLELISM": "1",
        "FLASK_AUTHFLOW_LOGIN_BY_CODE": "true",
        "FLASK_AUTHFLOW_EXTERNAL_URL": json.dumps(base),
        "PYTHONPATH": str(ROOT),
    }
    for key, value in smtp.config().items():
        env[f"FLASK_{key}"] = json.dumps(value)
    for user, password in USERS.items():
        _flask(env, "authflow", "create-user", user, "--email", f"{user}@example.com", "--password-stdin",
               stdin=f"{password}\n")  # fmt: skip
    key = pyotp.parse_uri(_flask(env, "authflow", "enroll-totp", "tina").strip()).secret
    process = subprocess.Popen(
        [*REFERENCE_FLASK, "run", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield base, smtp, key
    finally:
        process.terminate()
        process.wait(timeout=10)
        servers.stop_all()


def mailed(smtp: SmtpTestServer, to: str, count: int) -> tuple[str, str]:
    """The code and the link of the ``count``-th sign-in code mailed to ``to`` (waiting for
    it: it goes out after the answer)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        mails = [m.message for m in smtp.messages if to in m.rcpt_tos]
        texts = [mail.get_body(preferencelist=("plain",)).get_content() for mail in mails]
        found = [
            (c.group(1), link.group(1)) for t in texts if (c := _CODE.search(t)) and (link := _LINK.search(t))
        ]
        if len(found) >= count:
            return found[count - 1]
        time.sleep(0.1)
    raise AssertionError(f"no sign-in code {count} mailed to {to}")


def ask_for_a_code(page: Page, address: str) -> None:
    page.open("/account")
    assert page.path == "/login?next=/account"
    page.submit("login-code-link")  # "E-mail me a code instead", keeping next
    page.type("username", address)
    page.submit("login-code-submit")
    assert page.path.startswith("/login/code")  # the factor page answers the request
    assert "If an account matches" in page.text_of("notice")


def test_the_code_from_the_mail_then_totp(
    browsers: Any,  # noqa: F811
    server: tuple[str, SmtpTestServer, str],
) -> None:
    base, smtp, key = server
    page = Page(browsers(), base)
    ask_for_a_code(page, "tina@example.com")
    code, _ = mailed(smtp, "tina@example.com", 1)
    page.type("code-login_code", code)
    page.submit("factor-submit-login_code")
    assert page.path.startswith("/login/factor")  # the code passed; her authenticator app is next
    page.type("code-totp", pyotp.TOTP(key).now())
    page.submit("factor-submit-totp")
    assert page.path == "/account", page.driver.page_source[:2000]


def test_the_mailed_link_signs_in_the_browser_that_asked_and_no_other(
    browsers: Any,  # noqa: F811
    server: tuple[str, SmtpTestServer, str],
) -> None:
    base, smtp, _ = server
    page, phone = Page(browsers(), base), Page(browsers(), base)
    ask_for_a_code(page, "cora")
    _, link = mailed(smtp, "cora@example.com", 1)
    assert link.startswith(f"{base}/login/code/link?code=")
    phone.driver.get(link)  # opened on another device: nothing signs in there
    assert "only the browser where the code was asked for" in phone.text_of("login-code-elsewhere")
    phone.open("/account")
    assert phone.path.startswith("/login")
    page.driver.get(link)
    page.submit("login-code-link-submit")
    page.open("/account")
    assert page.path == "/account", page.driver.page_source[:2000]
