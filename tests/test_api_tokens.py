"""Personal API tokens on the web: bearer use, listing, revocation, refusals and scopes."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask, jsonify, request
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, current_user, login_required
from flask_authflow._clock import MockClock
from flask_authflow._web.api_auth import current_api_token, token_service
from flask_authflow._web.decorators import api_scopes_required
from flask_authflow._web.state import account_admin, get_state
from flask_authflow.api_auth._service import CreatedToken
from flask_authflow.api_auth._tokens import TOKEN_PREFIX
from flask_authflow.errors import ApiTokenNameTaken, ConfigurationError, InvalidInput
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory

USER_AGENT = "api-client/1.0"


def build(app_factory: AppFactory, **config: Any) -> tuple[Flask, AuthFlow]:
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, **config)

    @app.get("/api/me")
    @login_required(api=True)
    def me() -> Any:
        token = current_api_token()
        return jsonify(
            user_id=current_user.user_id,
            tenant=current_user.tenant,
            via="token" if token is not None else "session",
            admin=current_user.has_role("admin"),
        )

    @app.get("/api/notes")
    @api_scopes_required("notes:read")
    def notes() -> Any:
        return jsonify(notes=[], user_id=current_user.user_id)

    @app.get("/page")
    @login_required
    def page() -> str:
        return "session only"

    return app, authflow


def user_and_token(
    app: Flask, identifier: str = "alice", *, tenant: str = "default", name: str = "ci", **options: Any
) -> tuple[str, CreatedToken]:
    backend = get_state(app).backend
    user = backend.find_user(tenant, identifier) or add_user(backend, tenant, identifier, "pw-" * 6)
    return user.user_id, token_service(app).create(tenant, user.user_id, name, **options)


def call(app: Flask, path: str, value: str | None, **headers: str) -> Any:
    client = app.test_client()
    if value is not None:
        headers["Authorization"] = f"Bearer {value}"
    return client.get(path, headers={"User-Agent": USER_AGENT, **headers})


def assert_invalid_token(response: Any) -> None:
    assert response.status_code == 401
    assert response.get_json()["error"] == "invalid_token"
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    assert response.headers["Cache-Control"] == "no-store"


def test_a_created_token_is_a_bearer_on_a_json_route_listed_and_revoked(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app, scopes=["notes:read"])
    assert created.value.startswith(TOKEN_PREFIX) and created.value not in repr(created)

    response = call(app, "/api/me", created.value)
    assert response.status_code == 200
    assert response.get_json() == {"user_id": user_id, "tenant": "default", "via": "token", "admin": False}
    assert "Set-Cookie" not in response.headers  # a token request never gets a session
    assert response.headers["Cache-Control"] == "private, no-store"
    assert "Authorization" in response.headers["Vary"]

    listed = token_service(app).list("default", user_id)
    assert [(t.name, t.scopes) for t in listed] == [("ci", ("notes:read",))]
    assert listed[0].token_hash != created.value and created.value not in repr(listed)
    assert listed[0].last_used_at is not None

    assert token_service(app).revoke("default", user_id, "ci")
    assert not token_service(app).revoke("default", user_id, "ci")
    assert_invalid_token(call(app, "/api/me", created.value))


def test_without_credentials_an_api_view_answers_a_bearer_challenge(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    response = call(app, "/api/me", None)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    assert response.get_json()["error"] == "unauthenticated"


def test_an_expired_token_is_refused(app_factory: AppFactory, mock_clock: MockClock) -> None:
    app, _ = build(app_factory)
    _, created = user_and_token(app, expires_in=timedelta(days=1))
    assert call(app, "/api/me", created.value).status_code == 200
    mock_clock.advance(timedelta(days=1))
    assert_invalid_token(call(app, "/api/me", created.value))


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda v: "ghp_" + v[4:], id="wrong-prefix"),
        pytest.param(lambda v: v[:-1], id="too-short"),
        pytest.param(lambda v: v + "A", id="too-long"),
        pytest.param(lambda v: v[:-1] + "!", id="bad-alphabet"),
        pytest.param(lambda v: v[:-1] + "\u00e9", id="non-ascii"),
        pytest.param(lambda v: v[:4] + v[4:20].upper() + v[20:], id="upper-case-id"),
        pytest.param(lambda v: v[:-2] + ("B" if v[-2] == "A" else "A") + v[-1], id="wrong-secret"),
        pytest.param(lambda v: v + "A" * 10_000, id="huge-header"),
        pytest.param(lambda v: "", id="empty"),
        pytest.param(lambda v: "not-a-token", id="junk"),
    ],
)
def test_malformed_or_wrong_tokens_are_refused_never_a_500(app_factory: AppFactory, mangle: Any) -> None:
    app, _ = build(app_factory)
    _, created = user_and_token(app)
    assert_invalid_token(call(app, "/api/me", mangle(created.value)))


def test_another_users_secret_under_this_id_is_refused(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _, alice = user_and_token(app, "alice")
    _, bob = user_and_token(app, "bob", tenant="other")
    spliced = alice.value[:21] + bob.value[21:]  # alice's lookup id, bob's secret
    assert_invalid_token(call(app, "/api/me", spliced))
    bob_me = call(app, "/api/me", bob.value).get_json()
    assert (bob_me["tenant"], bob_me["user_id"]) == ("other", bob.record.user_id)


def test_a_user_cannot_revoke_another_users_token(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _, alice = user_and_token(app, "alice")
    bob_id, _ = user_and_token(app, "bob", name="bobs")
    assert not token_service(app).revoke("default", bob_id, "ci")  # alice's name, bob's account
    assert call(app, "/api/me", alice.value).status_code == 200
    assert not token_service(app).revoke("other", alice.record.user_id, "ci")  # wrong tenant
    assert call(app, "/api/me", alice.value).status_code == 200


def test_scopes_are_checked_for_tokens_only(app_factory: AppFactory, login_client: Any) -> None:
    app, _ = build(app_factory)
    _, writer = user_and_token(app, name="writer", scopes=["notes:write"])
    _, reader = user_and_token(app, name="reader", scopes=["notes:read", "notes:write"])
    refused = call(app, "/api/notes", writer.value)
    assert refused.status_code == 403
    assert refused.get_json()["error"] == "insufficient_scope"
    assert refused.headers["WWW-Authenticate"] == (
        'Bearer realm="api", error="insufficient_scope", scope="notes:read"'
    )
    assert call(app, "/api/notes", reader.value).status_code == 200
    session = login_test(app, login_client)
    assert session.get("/api/notes").status_code == 200  # a session is the user: no scope applies


def login_test(app: Flask, login_client: Any) -> FlaskClient:
    from flask_authflow.testing._pytest_plugin import login_test_client

    return login_test_client(app, "carol", password="correct horse battery")


def test_a_sessionless_request_with_cookie_and_bearer_is_the_tokens_user(
    app_factory: AppFactory,
) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    client = app.test_client()
    client.set_cookie("authflow_session", "junk-or-expired-session")
    response = client.get(
        "/api/me", headers={"Authorization": f"Bearer {created.value}", "User-Agent": USER_AGENT}
    )
    assert response.status_code == 200
    assert response.get_json()["user_id"] == user_id


def test_an_authenticated_session_wins_over_a_bearer(app_factory: AppFactory, login_client: Any) -> None:
    app, _ = build(app_factory)
    _, bobs = user_and_token(app, "bob")
    client = login_test(app, login_client)
    carol = get_state(app).backend.find_user("default", "carol")
    answer = client.get("/api/me", headers={"Authorization": f"Bearer {bobs.value}"}).get_json()
    assert (answer["user_id"], answer["via"]) == (carol.user_id, "session")


def test_views_without_api_access_ignore_bearer_tokens(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _, created = user_and_token(app)
    response = call(app, "/page", created.value)
    assert response.status_code == 401
    assert "WWW-Authenticate" not in response.headers


def test_roles_of_a_token_user_are_read_like_a_session_users(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    backend = get_state(app).backend
    backend.create_role("default", "admin")
    backend.add_user_role("default", user_id, "admin")
    assert call(app, "/api/me", created.value).get_json()["admin"] is True


def test_the_request_loader_is_consulted_on_api_views_only(app_factory: AppFactory) -> None:
    app, authflow = build(app_factory)
    seen: list[str] = []

    @authflow.request_loader
    def by_api_key(req: Any) -> Any:
        seen.append(req.path)
        if req.headers.get("X-Api-Key") == "let-me-in":
            return get_state().backend.find_user("default", "alice")
        return None

    user_id, _ = user_and_token(app)
    answer = call(app, "/api/me", None, **{"X-Api-Key": "let-me-in"})
    assert answer.status_code == 200
    assert answer.get_json() == {"user_id": user_id, "tenant": "default", "via": "session", "admin": False}
    assert call(app, "/api/me", None, **{"X-Api-Key": "wrong"}).status_code == 401
    assert call(app, "/page", None, **{"X-Api-Key": "let-me-in"}).status_code == 401
    assert seen == ["/api/me", "/api/me"]


def test_the_request_loader_sees_foreign_bearer_tokens_first(app_factory: AppFactory) -> None:
    app, authflow = build(app_factory)
    user_and_token(app)

    @authflow.request_loader
    def by_jwt(req: Any) -> Any:
        if request.headers.get("Authorization") == "Bearer app-own-token":
            return get_state().backend.find_user("default", "alice")
        return None

    assert call(app, "/api/me", "app-own-token").status_code == 200
    assert_invalid_token(call(app, "/api/me", "someone-elses-token"))


def test_revoking_while_twenty_threads_use_it_leaves_no_later_success(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    stop = threading.Event()
    revoked_at: list[float] = []
    outcomes: list[tuple[float, int]] = []
    lock = threading.Lock()

    def hammer() -> None:
        client = app.test_client()
        headers = {"Authorization": f"Bearer {created.value}", "User-Agent": USER_AGENT}
        while not stop.is_set():
            started = time.monotonic()
            status = client.get("/api/me", headers=headers).status_code
            with lock:
                outcomes.append((started, status))

    threads = [threading.Thread(target=hammer) for _ in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    assert token_service(app).revoke("default", user_id, "ci")
    revoked_at.append(time.monotonic())
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join(30)
    after = [status for started, status in outcomes if started > revoked_at[0]]
    before = [status for started, status in outcomes if started <= revoked_at[0]]
    assert 200 in before and after, (len(before), len(after))
    assert 401 in after and set(after) <= {401, 429}  # 429: the refusals throttled the address
    assert set(before) <= {200, 401, 429}


def test_audit_rows_name_the_token_id_never_its_value(app_factory: AppFactory, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    wrong = created.value[:-1] + ("x" if created.value[-1] != "x" else "y")
    call(app, "/api/me", wrong)  # the right id, a wrong secret
    call(app, "/api/me", "afp_nonsense")
    token_service(app).revoke("default", user_id, "ci")
    call(app, "/api/me", created.value)
    rows = [r for r in get_state(app).backend.audit_rows if r.event.startswith("api_token")]
    assert [(r.event, r.status, r.reason) for r in rows] == [
        ("api_token_created", "success", created.record.token_id),
        ("api_token_refused", "failure", "mismatch"),
        ("api_token_refused", "failure", "malformed"),
        ("api_token_revoked", "success", created.record.token_id),
        ("api_token_refused", "failure", "unknown"),
    ]
    assert rows[0].user_id == user_id and rows[1].user_id is None
    secret = created.value[21:]
    assert not any(secret in str(row.to_dict()) for row in get_state(app).backend.audit_rows)
    assert secret not in caplog.text


def test_last_use_is_written_at_most_once_a_minute(app_factory: AppFactory, mock_clock: MockClock) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    first = mock_clock.now()
    call(app, "/api/me", created.value)
    mock_clock.advance(timedelta(seconds=59))
    call(app, "/api/me", created.value)
    assert token_service(app).list("default", user_id)[0].last_used_at == first
    mock_clock.advance(timedelta(seconds=1))
    call(app, "/api/me", created.value)
    assert token_service(app).list("default", user_id)[0].last_used_at == first + timedelta(minutes=1)


@pytest.mark.parametrize("reason", ["disable", "delete", "revoke_sessions", "password"])
def test_tokens_end_with_the_users_sessions(app_factory: AppFactory, reason: str) -> None:
    app, _ = build(app_factory)
    user_id, created = user_and_token(app)
    _, other = user_and_token(app, "bob")
    with app.app_context():
        admin = account_admin(app)
        if reason == "disable":
            admin.disable("default", "alice")
        elif reason == "delete":
            admin.delete("default", "alice")
        elif reason == "revoke_sessions":
            admin.revoke_sessions("default", user_id)
        else:
            admin.set_password("default", "alice", "a brand new passphrase here")
    assert_invalid_token(call(app, "/api/me", created.value))
    assert token_service(app).list("default", user_id) == []
    assert call(app, "/api/me", other.value).status_code == 200  # another user's token stays


def test_a_disabled_users_token_is_refused_even_if_it_survived(app_factory: AppFactory) -> None:
    app, _ = build(app_factory)
    _, created = user_and_token(app)
    get_state(app).backend.set_disabled("default", "alice", True)  # the store alone: no signal
    assert_invalid_token(call(app, "/api/me", created.value))


def test_creation_refusals(app_factory: AppFactory) -> None:
    app, _ = build(app_factory, AUTHFLOW_API_TOKEN_SCOPES=["notes:read"], AUTHFLOW_API_TOKEN_MAX_PER_USER=2)
    user_id, _ = user_and_token(app)
    tokens = token_service(app)
    with pytest.raises(ApiTokenNameTaken):
        tokens.create("default", user_id, "ci")
    for bad in ({"name": " "}, {"name": "x" * 65}, {"name": "tab\there"}):
        with pytest.raises(InvalidInput):
            tokens.create("default", user_id, **bad)
    with pytest.raises(InvalidInput):
        tokens.create("default", user_id, "other", ["notes:write"])  # not an allowed scope
    with pytest.raises(InvalidInput):
        tokens.create("default", user_id, "other", expires_in=timedelta(days=400))
    with pytest.raises(InvalidInput):
        tokens.create("default", user_id, "other", expires_in=None)  # must expire
    tokens.create("default", user_id, "second")
    with pytest.raises(InvalidInput):
        tokens.create("default", user_id, "third")  # at most two per user


@pytest.mark.parametrize(
    "config",
    [
        {"AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY": timedelta(days=400)},
        {"AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY": None},
        {"AUTHFLOW_API_TOKEN_SCOPES": ["Not A Scope"]},
        {"AUTHFLOW_API_TOKEN_MAX_PER_USER": 0},
    ],
)
def test_unsafe_settings_are_refused_at_init_app(app_factory: AppFactory, config: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="AUTHFLOW_API_TOKEN_"):
        app_factory(**config)


def test_tokens_that_never_expire_need_no_maximum(app_factory: AppFactory, mock_clock: MockClock) -> None:
    app, _ = build(app_factory, AUTHFLOW_API_TOKEN_DEFAULT_EXPIRY=None, AUTHFLOW_API_TOKEN_MAX_EXPIRY=None)
    _, created = user_and_token(app)
    assert created.record.expires_at is None
    mock_clock.advance(timedelta(days=3650))
    assert call(app, "/api/me", created.value).status_code == 200


def test_a_decorator_refuses_malformed_scopes_when_it_decorates() -> None:
    with pytest.raises(ValueError, match="scopes"):
        api_scopes_required("Not a scope")
    with pytest.raises(TypeError):
        api_scopes_required()
