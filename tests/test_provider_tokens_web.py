"""Provider tokens through the app: the callback keeps them, ``authflow.federation.token``
hands them out and refreshes them at the test provider, its refusals answer typed 4xx/502
(never a 500), and unlink, back-channel logout and user deletion revoke and delete them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_authflow import current_user
from flask_authflow._clock import MockClock
from flask_authflow._web.state import account_admin
from flask_authflow._web.views import csrf_token
from flask_authflow.testing._provider import TestOpenIDProvider
from flask_authflow.testing._users import add_user
from tests.federation_support import PROVIDER, FederatedApp, federated_app
from tests.provider_tokens_support import Scripted

SCOPES = ["openid", "email", "offline_access"]
PASSWORD = "correct horse battery staple"
JSON = {"Accept": "application/json"}


@pytest.fixture
def script(oidc_provider: TestOpenIDProvider) -> Scripted:
    scripted = Scripted(passthrough=True)
    scripted.install(oidc_provider)
    return scripted


def _app(
    oidc_provider: TestOpenIDProvider, mock_clock: MockClock, hasher: Any, **settings: Any
) -> FederatedApp:
    oidc_provider.login_as("alice-sub", email="alice@example.com", email_verified=True)
    fed = federated_app(
        oidc_provider, mock_clock, hasher, **{"store_tokens": True, "scopes": SCOPES, **settings}
    )
    app, authflow = fed.app, fed.authflow

    @app.get("/api")
    def api() -> str:
        return authflow.federation.token(PROVIDER, scopes=["email"])

    @app.get("/calendar")
    def calendar() -> str:
        return authflow.federation.token(PROVIDER, scopes=["calendar"])

    @app.get("/me")
    def me() -> str:
        return str(current_user.get_id())

    app.add_url_rule("/token", "token", csrf_token)

    @app.post("/signin")
    def signin() -> str:
        return type(authflow.login.password("bob@example.com", PASSWORD)).__name__

    return fed


@pytest.fixture
def fed(
    oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, script: Scripted
) -> FederatedApp:
    return _app(oidc_provider, mock_clock, authflow_hasher)


def _userinfo(fed: FederatedApp, token: str) -> int:
    answer = fed.browser().get(
        "https://op.test/userinfo", headers={"Authorization": f"Bearer {token}"}, timeout=5
    )
    return int(answer.status_code)


def _events(fed: FederatedApp, prefix: str = "provider_token") -> list[tuple[str, str, str | None]]:
    return [(r.event, r.status, r.reason) for r in fed.backend.audit_rows if r.event.startswith(prefix)]


def _signed_in(fed: FederatedApp) -> tuple[FlaskClient, str]:
    client = fed.client()
    assert fed.sign_in(client).status_code == 302
    return client, client.get("/me").text


def test_the_callback_keeps_the_tokens_and_they_are_refreshed_after_expiry(
    fed: FederatedApp, script: Scripted, mock_clock: MockClock
) -> None:
    client, user_id = _signed_in(fed)
    row = fed.backend.get_provider_tokens("default", user_id, PROVIDER)
    assert row is not None and set(row.scopes) == set(SCOPES)
    first = client.get("/api")
    assert first.status_code == 200 and _userinfo(fed, first.text) == 200
    assert script.refreshes == []
    mock_clock.advance(timedelta(seconds=290))  # within 30 s of the 300 s lifetime
    second = client.get("/api")
    assert second.status_code == 200 and second.text != first.text
    assert len(script.refreshes) == 1
    assert _userinfo(fed, second.text) == 200
    assert client.get("/api").text == second.text
    assert _events(fed) == [
        ("provider_token_store", "success", None),
        ("provider_token_refresh", "success", "rotated"),
    ]
    assert all(first.text not in str(r) and second.text not in str(r) for r in fed.backend.audit_rows)


def test_refusals_are_typed_answers(fed: FederatedApp, script: Scripted, mock_clock: MockClock) -> None:
    assert fed.client().get("/api", headers=JSON).status_code == 401  # nobody signed in
    client, _user = _signed_in(fed)
    missing = client.get("/calendar", headers=JSON)
    assert missing.status_code == 403 and missing.json["error"] == "insufficient_scope"
    mock_clock.advance(timedelta(seconds=300))
    script.answers.append((502, "text/html", b"<h1>Bad gateway</h1>"))
    down = client.get("/api", headers=JSON)
    assert down.status_code == 502 and down.json["error"] == "provider_unreachable"
    script.answers.append((400, "application/json", b'{"error": "invalid_grant"}'))
    expired = client.get("/api", headers=JSON)
    assert expired.status_code == 401 and expired.json["error"] == "refresh_token_expired"
    gone = client.get("/api", headers=JSON)
    assert gone.status_code == 404 and gone.json["error"] == "no_provider_token"


def test_without_offline_access_an_expired_token_needs_a_new_sign_in(
    oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, script: Scripted
) -> None:
    short = _app(oidc_provider, mock_clock, authflow_hasher, scopes=["openid", "email"])
    client, _user = _signed_in(short)
    assert client.get("/api").status_code == 200
    mock_clock.advance(timedelta(seconds=300))
    refused = client.get("/api", headers=JSON)
    assert refused.status_code == 401 and refused.json["error"] == "no_refresh_token"
    assert script.refreshes == []


def test_a_provider_without_store_tokens_keeps_nothing(
    oidc_provider: TestOpenIDProvider, mock_clock: MockClock, authflow_hasher: Any, script: Scripted
) -> None:
    fed = _app(oidc_provider, mock_clock, authflow_hasher, store_tokens=False)
    client, user_id = _signed_in(fed)
    assert fed.backend.provider_tokens_of_user("default", user_id) == []
    assert client.get("/api", headers=JSON).status_code == 404


def test_backchannel_logout_revokes_and_deletes_the_tokens(fed: FederatedApp, script: Scripted) -> None:
    _client, user_id = _signed_in(fed)
    assert fed.provider.send_backchannel_logout(fed.client(), sub="alice-sub").status_code == 200
    assert fed.backend.provider_tokens_of_user("default", user_id) == []
    assert [hint for hint, _token in script.revoked] == ["refresh_token", "access_token"]
    assert _events(fed)[-1] == ("provider_token_revoke", "success", "backchannel_logout")


def test_deleting_the_user_revokes_and_deletes_the_tokens(fed: FederatedApp, script: Scripted) -> None:
    _client, user_id = _signed_in(fed)
    script.revoke_status = 500  # the provider fails: the tokens go all the same
    with fed.app.app_context():
        account_admin().delete("default", "test-op:alice-sub")
    assert fed.backend.provider_tokens_of_user("default", user_id) == []
    assert len(script.revoked) == 1
    assert _events(fed)[-1] == ("provider_token_revoke", "failure", "user_deleted:provider_unreachable")


def test_unlinking_revokes_and_deletes_the_tokens(fed: FederatedApp, script: Scripted) -> None:
    client = fed.client()
    bob = add_user(fed.backend, "default", "bob@example.com", PASSWORD).user_id
    assert client.post("/signin").text == "Authenticated"
    start = client.post(f"/auth/link/{PROVIDER}", data={"csrf_token": client.get("/token").text})
    callback = fed.browser().get(start.location, allow_redirects=False, timeout=5).headers["Location"]
    assert client.get(callback.removeprefix("http://localhost")).status_code == 302
    assert [r.provider for r in fed.backend.provider_tokens_of_user("default", bob)] == [PROVIDER]
    token = client.get("/api").text
    done = client.post(f"/auth/unlink/{PROVIDER}", data={"csrf_token": client.get("/token").text})
    assert done.status_code == 302
    assert fed.backend.provider_tokens_of_user("default", bob) == []
    assert ("access_token", token) in script.revoked
    assert _events(fed)[-1] == ("provider_token_revoke", "success", "unlink")
    assert client.get("/api", headers=JSON).status_code == 404
