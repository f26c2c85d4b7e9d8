"""Account linking in a real headless Chromium: a password user links the scriptable
provider from the account page, signs out, and signs in again through the provider."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from examples.reference.app import create_app
from flask_authflow import get_state
from flask_authflow.testing._users import add_user
from tests.federation_support import ServedProvider
from tests.test_browser import Page, browsers  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.browser

PROVIDER = "test-op"
PASSWORD = "wonderland-rabbit-42"


class _LiveApp:
    """The reference app behind a real HTTP server on 127.0.0.1 (its port known before the
    app is built, so the provider's redirect URI can name it)."""

    def __init__(self) -> None:
        self.app: Any = None
        self.server = make_server("127.0.0.1", 0, self._wsgi, threaded=True)
        self.base = f"http://127.0.0.1:{self.server.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    def _wsgi(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        return self.app(environ, start)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(timeout=5)
        self.server.server_close()


@pytest.fixture
def linking_site(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    served = ServedProvider()
    live = _LiveApp()
    op = served.provider
    redirect_uri = f"{live.base}/auth/callback/{PROVIDER}"
    op.register_client("browser-client", "browser-secret", [redirect_uri])
    op.login_as("Browser-Sub", email="carol@example.com", email_verified=True)
    try:
        yield from _serve(live, op, redirect_uri, tmp_path)
    finally:
        live.stop()
        served.stop()


def _serve(live: _LiveApp, op: Any, redirect_uri: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    live.app = create_app(
        {
            "TESTING": True,
            "AUTHFLOW_SIGNING_KEY": secrets.token_urlsafe(48),
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'linking.db'}",
            "AUTHFLOW_COOKIE_SECURE": False,
            "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": True,
            "AUTHFLOW_ARGON2_TIME_COST": 1,
            "AUTHFLOW_ARGON2_MEMORY_COST": 8,
            "AUTHFLOW_ARGON2_PARALLELISM": 1,
            "AUTHFLOW_OAUTH_PROVIDERS": {
                PROVIDER: {
                    "discovery_url": op.discovery_url,
                    "client_id": "browser-client",
                    "client_secret": "browser-secret",
                    "redirect_uri": redirect_uri,
                }
            },
        },
        instance_path=str(tmp_path / "instance"),
    )
    with live.app.app_context():
        user = add_user(get_state(live.app).backend, "default", "carol", PASSWORD)
    live.thread.start()
    yield live.base, (live.app, user, op)


def test_link_a_provider_then_sign_in_with_it(browsers: Any, linking_site: tuple[str, Any]) -> None:  # noqa: F811
    base, (app, carol, op) = linking_site
    page = Page(browsers(), base)
    page.sign_in("carol", PASSWORD)
    assert "Signed in as carol" in page.text_of("whoami")

    page.submit(f"link-{PROVIDER}")  # to the provider and back through the callback
    assert page.path == "/account?notice=identity_linked", page.driver.page_source[:2000]
    assert "The provider is linked" in page.text_of("notice")
    assert page.driver.find_elements("id", f"unlink-{PROVIDER}")
    with app.app_context():
        link = get_state(app).backend.find_link(op.issuer, "Browser-Sub")
    assert link is not None and link.user_id == carol.user_id

    page.submit("logout-submit")
    assert page.path.startswith("/login")
    page.open("/login")
    page.submit(f"provider-{PROVIDER}")  # "Sign in with test-op"
    page.open("/account")
    assert page.path == "/account", page.driver.page_source[:2000]
    assert "Signed in as carol" in page.text_of("whoami")  # the same user, not a new account
