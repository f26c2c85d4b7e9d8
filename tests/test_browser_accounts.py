"""Sign-up and password reset in real headless Chromium browsers against the reference app
under ``flask run``, with its mail going through a real SMTP server on 127.0.0.1: sign up,
read the mail, follow the link, sign in; forget the password, follow the mailed link, set a
new one (a second browser's session ends); a TOTP user passes TOTP during the reset."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyotp
import pytest

from tests.parts import free_port, wait_for_port
from tests.smtp_server import SmtpTestServer, smtp_server  # noqa: F401 - the real SMTP server fixture
from tests.test_browser import Page, browsers  # noqa: F401 - the Chromium fixture
from tests.test_reference_app import REFERENCE_FLASK, ROOT

pytestmark = pytest.mark.browser

USERS = {"erin": "erins-first-passphrase", "tom": "toms-first-passphrase"}


def _flask(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*REFERENCE_FLASK, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def server(tmp_path: Path, smtp_server: SmtpTestServer) -> Iterator[tuple[str, dict[str, str]]]:  # noqa: F811
    """The reference app on 127.0.0.1, sending through ``smtp_server``; the TOTP keys of its users."""
    port = free_port()
    env = {
        **os.environ,
        "FLASK_AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
        "FLASK_AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'live.db'}",
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
        "FLASK_AUTHFLOW_ARGON2_MEMORY_COST": "19456",
        "FLASK_AUTHFLOW_ARGON2_TIME_COST": "1",
        "FLASK_AUTHFLOW_ARGON2_PARALLELISM": "1",
        "PYTHONPATH": str(ROOT),
    }
    for key, value in smtp_server.config().items():
        env[f"FLASK_{key}"] = json.dumps(value)
    for user, password in USERS.items():
        _flask(env, "authflow", "create-user", user, "--email", f"{user}@example.com", "--password-stdin",
               stdin=f"{password}\n")  # fmt: skip
    keys = {"tom": pyotp.parse_uri(_flask(env, "authflow", "enroll-totp", "tom").strip()).secret}
    process = subprocess.Popen(
        [*REFERENCE_FLASK, "run", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}", keys
    finally:
        process.terminate()
        process.wait(timeout=10)


_TOKEN_LINK = re.compile(r"(http://\S+token=[A-Za-z0-9_-]{43})")


def mailed_link(smtp: SmtpTestServer, to: str, count: int) -> str:
    """The link of the ``count``-th mail with a token link to ``to`` (waiting for it: it goes
    out after the answer); security notices, which carry no token, are not counted."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        mails = [m.message for m in smtp.messages if to in m.rcpt_tos]
        texts = [mail.get_body(preferencelist=("plain",)).get_content() for mail in mails]
        links = [found.group(1) for text in texts if (found := _TOKEN_LINK.search(text))]
        if len(links) >= count:
            return links[count - 1]
        time.sleep(0.1)
    raise AssertionError(f"no mail {count} with a link to {to}")


def test_sign_up_read_the_mail_follow_the_link_sign_in(
    browsers: Any,  # noqa: F811
    server: tuple[str, dict[str, str]],
    smtp_server: SmtpTestServer,  # noqa: F811
) -> None:
    base, _ = server
    page = Page(browsers(), base)
    page.open("/login")
    page.submit("signup-link")  # the sign-in page links to the sign-up form
    page.type("username", "nora")
    page.type("email", "nora@example.com")
    page.type("password", "noras-long-passphrase")
    page.type("password_confirm", "noras-long-passphrase")
    page.submit("signup-submit")
    assert "Check your mail" in page.text_of("signup-sent")
    link = mailed_link(smtp_server, "nora@example.com", 1)
    page.open("/login")
    page.type("username", "nora")
    page.type("password", "noras-long-passphrase")
    page.submit("login-submit")
    assert "Confirm your e-mail address first" in page.text_of("error")
    page.driver.get(link)
    page.submit("verify-submit")
    assert "confirmed" in page.text_of("signup-confirmed")
    page.sign_in("nora", "noras-long-passphrase")


def _forgot(page: Page, username: str) -> None:
    page.open("/login")
    page.submit("forgot-link")  # the sign-in page links to the forgot form
    page.type("username", username)
    page.submit("forgot-submit")
    assert "If an account matches" in page.text_of("reset-sent")


def test_forgot_password_mail_new_password_ends_the_other_browsers_session(
    browsers: Any,  # noqa: F811
    server: tuple[str, dict[str, str]],
    smtp_server: SmtpTestServer,  # noqa: F811
) -> None:
    base, _ = server
    other = Page(browsers(), base)
    other.sign_in("erin", USERS["erin"])
    page = Page(browsers(), base)
    _forgot(page, "erin")
    page.driver.get(mailed_link(smtp_server, "erin@example.com", 1))
    page.type("password", "erins-second-passphrase")
    page.type("password_confirm", "erins-second-passphrase")
    page.submit("reset-submit")
    assert "Your password has been changed" in page.text_of("reset-done")
    other.open("/account")
    assert other.path.startswith("/login")  # the second browser's session is gone
    page.sign_in("erin", "erins-second-passphrase")


def test_a_totp_user_passes_totp_during_the_reset(
    browsers: Any,  # noqa: F811
    server: tuple[str, dict[str, str]],
    smtp_server: SmtpTestServer,  # noqa: F811
) -> None:
    base, keys = server
    page = Page(browsers(), base)
    _forgot(page, "tom")
    page.driver.get(mailed_link(smtp_server, "tom@example.com", 1))
    page.type("password", "toms-second-passphrase")
    page.type("password_confirm", "toms-second-passphrase")
    page.submit("reset-submit")
    assert page.path.startswith("/login/factor")
    page.type("code-totp", pyotp.TOTP(keys["tom"]).now())
    page.submit("factor-submit-totp")
    assert page.path.startswith("/password/reset")
    page.type("password", "toms-second-passphrase")
    page.type("password_confirm", "toms-second-passphrase")
    page.submit("reset-submit")
    assert "Your password has been changed" in page.text_of("reset-done")
    page.open("/login")
    page.type("username", "tom")
    page.type("password", "toms-second-passphrase")
    page.submit("login-submit")
    assert page.path.startswith("/login/factor")  # the new password passed; TOTP comes next
