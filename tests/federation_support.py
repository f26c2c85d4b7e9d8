"""Shared set-up of the federation tests: an app signing in with the in-process test provider."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from flask_authflow import AuthFlow, current_session, current_user, login_required
from flask_authflow._clock import MockClock
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._provider import TestOpenIDProvider
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from tests.appfactory import make_app

PROVIDER = "test-op"
CLIENT_ID = "test-client"
CLIENT_SECRET = "test-secret"
REDIRECT_URI = f"http://localhost/auth/callback/{PROVIDER}"
LOGOUT_RETURN = f"http://localhost/auth/logout/return/{PROVIDER}"
BACKCHANNEL_URI = f"http://localhost/auth/backchannel-logout/{PROVIDER}"


@dataclass
class FederatedApp:
    app: Flask
    authflow: AuthFlow
    backend: InMemoryBackend
    sessions: MemorySessionStore
    provider: TestOpenIDProvider
    clock: MockClock

    def client(self) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
        return client

    def browser(self) -> requests.Session:
        """The browser's view of the provider (its pages are served in-process)."""
        session = requests.Session()
        for prefix, adapter in self.provider.http_adapters().items():
            session.mount(prefix, adapter)
        return session

    def authorize(self, client: FlaskClient, path: str = f"/auth/login/{PROVIDER}") -> str:
        """Follow the login redirect to the provider; returns the callback path and query."""
        start = client.get(path)
        assert start.status_code == 302, start.text
        answer = self.browser().get(start.location, allow_redirects=False, timeout=5)
        assert answer.status_code == 302, answer.text
        callback = urlsplit(answer.headers["Location"])
        assert f"{callback.scheme}://{callback.netloc}{callback.path}" == REDIRECT_URI
        return f"{callback.path}?{callback.query}"

    def sign_in(self, client: FlaskClient, **query_overrides: str) -> Any:
        """A whole federated login; returns the callback response."""
        target = self.authorize(client)
        if query_overrides:
            parts = urlsplit(target)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            query.update(query_overrides)
            return client.get(parts.path, query_string=query)
        return client.get(target)


def federated_app(
    provider: TestOpenIDProvider,
    clock: MockClock,
    hasher: Any,
    **provider_settings: Any,
) -> FederatedApp:
    provider.register_client(
        CLIENT_ID,
        CLIENT_SECRET,
        [REDIRECT_URI],
        post_logout_redirect_uris=[LOGOUT_RETURN],
        backchannel_logout_uri=BACKCHANNEL_URI,
    )
    settings: dict[str, Any] = {
        "discovery_url": provider.discovery_url,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uri": REDIRECT_URI,
        "allowed_post_logout_redirect_uris": [LOGOUT_RETURN],
        "post_login_redirect": "/dashboard",
    }
    settings.update(provider_settings)
    backend = InMemoryBackend(clock=clock)
    sessions = MemorySessionStore(clock=clock)
    authflow = AuthFlow()
    app = make_app(
        authflow=authflow,
        import_name="federated_app",
        backend=backend,
        session_store=sessions,
        clock=clock,
        hasher=hasher,
        http_client=RequestsHttpClient(adapters=provider.http_adapters()),
        AUTHFLOW_OAUTH_PROVIDERS={PROVIDER: settings},
    )

    @app.get("/dashboard")
    @login_required
    def dashboard() -> str:
        return f"dashboard of {current_user.identifier} via {current_session.record.auth_method}"

    return FederatedApp(app, authflow, backend, sessions, provider, clock)


class ServedProvider:
    """The in-process test provider behind a real HTTP server on 127.0.0.1; its JWKS can fail."""

    def __init__(self, **options: Any) -> None:
        """``options`` go to :class:`TestOpenIDProvider` (``algorithm``, ``trailing_slash``...)."""
        self.jwks_down = False
        self.server = make_server("127.0.0.1", 0, self._wsgi, threaded=True)
        self.provider = TestOpenIDProvider(f"http://127.0.0.1:{self.server.port}", **options)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def _wsgi(self, environ: dict[str, object], start: Callable[..., object]) -> Iterable[bytes]:
        if self.jwks_down and environ.get("PATH_INFO") == "/jwks":
            start("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"down for maintenance\n"]
        return self.provider.app(environ, start)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
