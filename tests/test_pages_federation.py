"""A federated sign-in that fails or is cancelled: a browser gets a page with a way back
(framed by nobody, cached by nobody), other clients the text as before."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from flask_authflow._clock import MockClock
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.federation_support import PROVIDER, FederatedApp, federated_app

HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture
def fed(oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any) -> FederatedApp:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    return federated_app(oidc_provider, mock_clock, authflow_hasher)


def _callback(fed: FederatedApp, client: FlaskClient, **overrides: str) -> tuple[str, dict[str, str]]:
    target = urlsplit(fed.authorize(client))
    query = {k: v[0] for k, v in parse_qs(target.query).items()}
    query.update(overrides)
    return target.path, query


def _assert_protected(page: TestResponse) -> None:
    assert page.mimetype == "text/html"
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Cache-Control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert '<a href="/" id="way-back">' in page.text


def test_a_cancelled_sign_in_is_a_page_with_a_way_back(fed: FederatedApp) -> None:
    client = fed.client()
    path, query = _callback(fed, client, error="access_denied")
    query.pop("code", None)
    page = client.get(path, query_string=query, headers=HTML)
    assert page.status_code == 401 and "<h1>Sign-in cancelled</h1>" in page.text
    assert f"The sign-in with {PROVIDER} was cancelled" in page.text
    _assert_protected(page)
    assert client.get("/dashboard").status_code == 401  # nobody was signed in


def test_a_failed_sign_in_is_a_page_naming_the_reason(fed: FederatedApp) -> None:
    client = fed.client()
    path, query = _callback(fed, client, state="forged-state")
    page = client.get(path, query_string=query, headers=HTML)
    assert page.status_code >= 400 and "<h1>Sign-in not completed</h1>" in page.text
    assert "<script" not in page.text and "forged-state" not in page.text
    _assert_protected(page)


def test_an_unknown_provider_is_a_page_for_browsers_and_text_for_scripts(fed: FederatedApp) -> None:
    client = fed.client()
    page = client.get("/auth/login/no-such-provider", headers=HTML)
    assert page.status_code == 404 and "Sign-in not completed" in page.text
    _assert_protected(page)
    text = client.get("/auth/login/no-such-provider")
    assert text.status_code == 404 and text.mimetype == "text/plain"


def test_a_scripts_failed_callback_keeps_its_text_answer(fed: FederatedApp) -> None:
    client = fed.client()
    path, query = _callback(fed, client, error="access_denied")
    answer = client.get(path, query_string=query)
    assert answer.status_code == 401 and answer.mimetype == "text/plain"
    assert "refused the login" in answer.text
