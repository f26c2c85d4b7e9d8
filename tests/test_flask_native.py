"""Flask-native integration: current_user and user_loader, login_user, denial handlers,
fresh/predicate decorators, init_app injectables, Flask-SQLAlchemy wiring."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, jsonify, render_template_string
from werkzeug.exceptions import HTTPException

from flask_authflow import (
    AnonymousUser,
    Authenticated,
    AuthFlow,
    FactorKind,
    FactorRequired,
    UserMixin,
    current_session,
    current_user,
    fresh_login_required,
    get_state,
    login_required,
    signals,
)
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import UserRecord
from flask_authflow.errors import (
    AccountDisabled,
    ConfigurationError,
    InvalidInput,
    PermissionDenied,
    StepUpNeeded,
    Unauthenticated,
    UserNotFound,
)
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing import login_test_client
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory


@dataclass
class AppUser(UserMixin):
    """An application's own user object."""

    id: str
    name: str
    is_admin: bool = False


def site(app_factory: AppFactory, **config: Any) -> tuple[Flask, AuthFlow, InMemoryBackend]:
    """An ``app_factory`` app, the extension that initialised it and its in-memory backend."""
    authflow = AuthFlow()
    app = app_factory(authflow=authflow, **config)
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    return app, authflow, backend


def client_of(app: Flask) -> Any:
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    return client


# --- current_user ---------------------------------------------------------------------------


def test_current_user_without_loader_is_the_library_record(app_factory) -> None:
    app, _, _ = site(app_factory)

    @app.get("/me")
    def me() -> Any:
        user = current_user._get_current_object()
        return jsonify(
            kind=type(user).__name__,
            authenticated=current_user.is_authenticated,
            identifier=getattr(user, "identifier", None),
        )

    guest = client_of(app).get("/me").json
    assert guest == {"kind": "AnonymousUser", "authenticated": False, "identifier": None}
    alice = login_test_client(app, "alice").get("/me").json
    assert alice == {"kind": "UserRecord", "authenticated": True, "identifier": "alice"}


def test_user_loader_gives_the_app_object_once_per_request(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    calls: list[tuple[str, str]] = []

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> AppUser:
        calls.append((tenant, user_id))
        return AppUser(id=user_id, name=f"user {user_id}")

    @app.get("/me")
    @login_required
    def me() -> str:
        first = current_user.name
        second = current_user.name
        return f"{first}|{second}|{current_user.id}"

    client = login_test_client(app, "alice")
    user = backend.find_user("default", "alice")
    assert user is not None
    response = client.get("/me")
    assert response.text == f"user {user.user_id}|user {user.user_id}|{user.user_id}"
    assert calls == [("default", user.user_id)]  # login_required and the view share one load
    client.get("/me")
    assert len(calls) == 2  # the next request loads again


def test_loader_returning_none_means_anonymous_and_denied(app_factory) -> None:
    app, authflow, _ = site(app_factory)
    gone: set[str] = set()

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> AppUser | None:
        return None if user_id in gone else AppUser(id=user_id, name="x")

    @app.get("/secret")
    @login_required
    def secret() -> str:
        return "secret"

    @app.get("/who")
    def who() -> str:
        return repr(current_user._get_current_object())

    client = login_test_client(app, "alice")
    assert client.get("/secret").status_code == 200
    gone.add(get_state(app).backend.find_user("default", "alice").user_id)  # type: ignore[union-attr]
    assert client.get("/secret", headers={"Accept": "application/json"}).status_code == 401
    assert client.get("/who").text == "<AnonymousUser>"


def test_anonymous_while_a_login_waits_for_a_factor(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    user = add_user(backend, "default", "alice", "a long enough password")
    backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "secret")

    @app.post("/start")
    def start() -> str:
        outcome = authflow.login.user(user.user_id, method="magic_link")
        return f"{type(outcome).__name__}:{current_user.is_authenticated}:{current_session.state.value}"

    assert client_of(app).post("/start").text == "FactorRequired:False:authenticating"


def test_current_user_and_session_in_templates(app_factory) -> None:
    app, authflow, _ = site(app_factory)

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> AppUser:
        return AppUser(id=user_id, name="Alice A.")

    @app.get("/page")
    def page() -> str:
        return render_template_string(
            "{% if current_user.is_authenticated %}hi {{ current_user.name }} "
            "({{ current_session.state.value }}){% else %}guest{% endif %}"
        )

    assert client_of(app).get("/page").text == "guest"
    assert login_test_client(app, "alice").get("/page").text == "hi Alice A. (authenticated)"


def test_anonymous_user_answers_like_flask_login() -> None:
    anonymous = AnonymousUser()
    assert not anonymous.is_authenticated and not anonymous.is_active and anonymous.is_anonymous
    assert anonymous.get_id() is None and not anonymous
    record = UserRecord("u1", "default", "alice", created_at=MockClock().now())
    assert record.is_authenticated and record.is_active and not record.is_anonymous
    assert record.get_id() == "u1"
    assert not UserRecord("u2", "default", "bob", created_at=MockClock().now(), disabled=True).is_active


# --- login_user -----------------------------------------------------------------------------


def test_login_user_goes_through_the_state_machine(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    user = backend.create_user("default", "alice")
    received: list[dict[str, Any]] = []

    def on_login(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    @app.post("/signup")
    def signup() -> str:
        before = current_session.sid
        outcome = authflow.login.user(user.user_id, method="signup")
        assert isinstance(outcome, Authenticated)
        return f"{before != current_session.sid}:{current_session.record.auth_method}"

    @app.get("/me")
    @login_required
    def me() -> str:
        return str(current_user.identifier)

    client = client_of(app)
    client.get("/me")  # a guest session first: its id must not survive the login
    with signals.login_succeeded.connected_to(on_login, app):
        assert client.post("/signup").text == "True:signup"
    assert client.get("/me").text == "alice"
    assert received == [{"user_id": user.user_id, "tenant": "default", "step_up": False, "method": "signup"}]
    rows = [row for row in backend.audit_rows if row.event == "login"]
    assert [(row.status, row.factor, row.user_id, row.reason) for row in rows] == [
        ("success", "signup", user.user_id, None)
    ]
    # The session is bound to the User-Agent it was established with.
    thief = app.test_client()
    thief.set_cookie(
        get_state(app).config.session.cookie_name,
        client.get_cookie(get_state(app).config.session.cookie_name).value,
    )
    thief.environ_base["HTTP_USER_AGENT"] = "another browser"
    assert thief.get("/me", headers={"Accept": "application/json"}).status_code == 401


def test_login_user_refuses_disabled_and_unknown_users(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    user = backend.create_user("default", "alice")
    backend.set_disabled("default", "alice", True)

    @app.post("/login/<user_id>")
    def login(user_id: str) -> str:
        authflow.login.user(user_id, method="magic_link")
        return "in"

    client = client_of(app)
    refused = client.post(f"/login/{user.user_id}", headers={"Accept": "application/json"})
    assert refused.status_code == 403 and refused.json["error"] == AccountDisabled.code
    unknown = client.post("/login/nobody", headers={"Accept": "application/json"})
    assert unknown.status_code == 404 and unknown.json["error"] == UserNotFound.code
    rows = [(row.status, row.reason) for row in backend.audit_rows if row.event == "login"]
    assert rows == [("refused", "account_disabled"), ("refused", "user_not_found")]
    with client.session_transaction(environ_base=client.environ_base) as session:
        assert session.is_guest  # a refused login changed nothing


def test_login_user_never_skips_enrolled_factors_unless_asked(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    user = add_user(backend, "default", "alice", "a long enough password")
    backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "secret")

    @app.post("/login")
    def login() -> str:
        outcome = authflow.login.user(user.user_id, method="magic_link")
        assert isinstance(outcome, FactorRequired) and outcome.kind is FactorKind.TOTP
        return f"{current_session.state.value}:{current_session.next_factor}"

    @app.post("/login-skip")
    def login_skip() -> str:
        outcome = authflow.login.user(user.user_id, method="support_override", skip_factors=True)
        assert isinstance(outcome, Authenticated)
        return current_session.state.value

    assert client_of(app).post("/login").text == "authenticating:totp"
    assert client_of(app).post("/login-skip").text == "authenticated"
    rows = [(row.status, row.factor, row.reason) for row in backend.audit_rows if row.event == "login"]
    assert rows == [("next_factor", "magic_link", None), ("success", "support_override", "factors_skipped")]


def test_login_user_ends_another_users_login_first(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    bob = backend.create_user("default", "bob")

    @app.post("/as-bob")
    def as_bob() -> str:
        authflow.login.user(bob.user_id, method="signup")
        return str(current_session.user_id)

    client = login_test_client(app, "alice")
    assert client.post("/as-bob").text == bob.user_id
    logout_rows = [row for row in backend.audit_rows if row.event == "logout"]
    assert [(row.reason, row.user_id != bob.user_id) for row in logout_rows] == [("new_login", True)]


@pytest.mark.parametrize("method", ["", "Magic Link", "x" * 33, "sign\nup", "ok;drop"])
def test_login_user_refuses_a_bad_method_label(app_factory, method: str) -> None:
    app, authflow, backend = site(app_factory)
    user = backend.create_user("default", "alice")
    with app.test_request_context(), pytest.raises(InvalidInput):
        authflow.login.user(user.user_id, method=method)


# --- handlers and decorators ------------------------------------------------------------------


def protected_app(app_factory: AppFactory, **config: Any) -> tuple[Flask, AuthFlow]:
    app, authflow, _ = site(app_factory, **config)

    @app.get("/secret")
    @login_required
    def secret() -> str:
        return "secret"

    @app.get("/fresh")
    @fresh_login_required
    def fresh() -> str:
        return "fresh"

    @app.get("/fresh-5")
    @fresh_login_required(within=timedelta(minutes=5))
    def fresh_5() -> str:
        return "fresh-5"

    @app.get("/fresh-positional")
    @fresh_login_required(timedelta(minutes=1))
    def fresh_positional() -> str:
        return "fresh-positional"

    return app, authflow


def test_unauthorized_handler_answers_denials(app_factory) -> None:
    app, authflow = protected_app(app_factory)

    @authflow.unauthorized_handler
    def unauthorized() -> Any:
        return "please sign in", 418

    response = client_of(app).get("/secret")
    assert (response.status_code, response.text) == (418, "please sign in")
    assert client_of(app).get("/fresh").status_code == 418


def test_without_handler_app_errorhandler_for_the_typed_error_works(app_factory) -> None:
    app, _ = protected_app(app_factory)

    @app.errorhandler(Unauthenticated)
    def custom(error: Unauthenticated) -> Any:
        return f"custom 401: {error.code}", 401

    response = client_of(app).get("/secret", headers={"Accept": "text/html"})
    assert (response.status_code, response.text) == (401, "custom 401: unauthenticated")


def test_without_handler_app_errorhandler_401_works(app_factory) -> None:
    app, _ = protected_app(app_factory)

    @app.errorhandler(401)
    def custom(error: HTTPException) -> Any:
        return f"<h1>Who are you?</h1><p>{error.description}</p>", 401

    response = client_of(app).get("/secret", headers={"Accept": "text/html"})
    assert response.status_code == 401
    assert response.text == f"<h1>Who are you?</h1><p>{Unauthenticated().message}</p>"


def test_default_denials_redirect_browsers_and_answer_json(app_factory, mock_clock) -> None:
    app, _ = protected_app(
        app_factory, AUTHFLOW_LOGIN_VIEW="login_page", AUTHFLOW_STEP_UP_VIEW="step_up_page"
    )
    app.add_url_rule("/login", "login_page", lambda: "login")
    app.add_url_rule("/step-up", "step_up_page", lambda: "step up")
    guest = client_of(app)
    redirect = guest.get("/secret?a=1", headers={"Accept": "text/html"})
    assert redirect.status_code == 302 and redirect.location == "/login?next=/secret?a%3D1"
    assert guest.get("/secret", headers={"Accept": "application/json"}).json["error"] == "unauthenticated"

    client = login_test_client(app, "alice")
    assert client.get("/fresh").text == "fresh"
    mock_clock.advance(timedelta(minutes=11))  # past AUTHFLOW_FRESHNESS (10 minutes)
    step_up = client.get("/fresh", headers={"Accept": "text/html"})
    assert step_up.status_code == 302 and step_up.location == "/step-up?next=/fresh"
    as_json = client.get("/fresh", headers={"Accept": "application/json"})
    assert as_json.status_code == 401 and as_json.json["error"] == "step_up_required"
    assert as_json.headers["Cache-Control"] == "no-store"


def test_fresh_login_required_bare_and_called(app_factory, mock_clock) -> None:
    app, _ = protected_app(app_factory)
    client = login_test_client(app, "alice")
    json = {"Accept": "application/json"}
    assert [client.get(p).status_code for p in ("/fresh", "/fresh-5", "/fresh-positional")] == [200] * 3
    mock_clock.advance(timedelta(minutes=2))
    assert [client.get(p, headers=json).status_code for p in ("/fresh", "/fresh-5", "/fresh-positional")] == [
        200,
        200,
        401,
    ]
    mock_clock.advance(timedelta(minutes=4))
    assert client.get("/fresh-5", headers=json).json["error"] == StepUpNeeded.code
    assert client.get("/fresh", headers=json).status_code == 200
    assert client_of(app).get("/fresh", headers=json).json["error"] == "unauthenticated"


def test_step_up_handler_answers_stale_logins(app_factory, mock_clock) -> None:
    app, authflow = protected_app(app_factory)

    @authflow.step_up_handler
    def stale() -> Any:
        return "confirm your password", 428

    client = login_test_client(app, "alice")
    mock_clock.advance(timedelta(minutes=11))
    response = client.get("/fresh")
    assert (response.status_code, response.text) == (428, "confirm your password")


def test_login_required_with_a_predicate(app_factory) -> None:
    app, authflow, backend = site(app_factory)
    admins: set[str] = set()

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> AppUser:
        return AppUser(id=user_id, name=user_id, is_admin=user_id in admins)

    @app.get("/admin")
    @login_required(lambda user: user.is_admin)
    def admin() -> str:
        return f"admin {current_user.id}"

    @app.get("/admin-kw")
    @login_required(predicate=lambda user: user.is_admin)
    def admin_kw() -> str:
        return "admin kw"

    client = login_test_client(app, "alice")
    json = {"Accept": "application/json"}
    refused = client.get("/admin", headers=json)
    assert refused.status_code == 403 and refused.json["error"] == PermissionDenied.code
    assert client.get("/admin-kw", headers=json).status_code == 403
    assert client_of(app).get("/admin", headers=json).status_code == 401
    admins.add(backend.find_user("default", "alice").user_id)  # type: ignore[union-attr]
    assert client.get("/admin").text.startswith("admin ")
    assert client.get("/admin-kw").text == "admin kw"


def test_app_errorhandler_403_answers_a_failed_predicate(app_factory) -> None:
    app, _, _ = site(app_factory)

    @app.get("/admin")
    @login_required(lambda user: user.identifier == "root")
    def admin() -> str:
        return "admin"

    @app.errorhandler(403)
    def forbidden(error: HTTPException) -> Any:
        return "<h1>Not for you</h1>", 403

    response = login_test_client(app, "alice").get("/admin")
    assert (response.status_code, response.text) == (403, "<h1>Not for you</h1>")


# --- init_app injectables and Flask-SQLAlchemy ---------------------------------------------------


@pytest.mark.authflow_stores("sql")  # the factory's own SQL stores, sessions included
def test_init_app_takes_the_clock_of_a_factory(tmp_path: Path, authflow_hasher) -> None:
    clock = MockClock()
    authflow = AuthFlow()  # at import time, as in a factory-pattern app

    def create_app(*, clock: MockClock | None = None) -> Flask:
        app = Flask(__name__, instance_path=str(tmp_path / "instance"))
        app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
        authflow.init_app(app, clock=clock, hasher=authflow_hasher, backend=None)

        @app.get("/me")
        @login_required
        def me() -> str:
            return "me"

        return app

    app = create_app(clock=clock)
    assert get_state(app).clock is clock
    client = login_test_client(app, "alice")
    assert client.get("/me").status_code == 200
    clock.advance(timedelta(hours=13))  # past AUTHFLOW_SESSION_TTL
    assert client.get("/me", headers={"Accept": "application/json"}).status_code == 401


@pytest.mark.authflow_stores("sql")  # the factory's own SQL stores, sessions included
def test_flask_sqlalchemy_model_integration_without_app_context(tmp_path: Path, authflow_hasher) -> None:
    from flask_sqlalchemy import SQLAlchemy
    from sqlalchemy import inspect

    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    db = SQLAlchemy()

    class User(db.Model):  # type: ignore[name-defined,misc]
        __tablename__ = "app_users"
        id = db.Column(db.String(64), primary_key=True)
        display_name = db.Column(db.String(100))

    backend = SqlAlchemyBackend(db)  # module level: no app context
    assert {"authflow_users", "authflow_sessions", "authflow_audit"} <= set(db.metadata.tables)
    authflow = AuthFlow(backend=backend, hasher=authflow_hasher)

    app = Flask(__name__, instance_path=str(tmp_path / "instance"))
    url = f"sqlite:///{tmp_path / 'app.db'}"
    app.config.update(
        TESTING=True,
        SQLALCHEMY_DATABASE_URI=url,
        AUTHFLOW_DATABASE_URL=url,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
    )
    db.init_app(app)
    authflow.init_app(app)  # no app context pushed

    @authflow.user_loader
    def load(tenant: str, user_id: str) -> User | None:
        return db.session.get(User, user_id)

    @app.get("/me")
    @login_required
    def me() -> str:
        return str(current_user.display_name)

    with app.app_context():
        db.create_all()
        user = add_user(get_state(app).backend, "default", "alice", "a long enough password")
        db.session.add(User(id=user.user_id, display_name="Alice Liddell"))
        db.session.commit()
        assert get_state(app).backend.engine is db.engine
        tables = set(inspect(db.engine).get_table_names())
    assert {"app_users", "authflow_users", "authflow_sessions"} <= tables
    client = login_test_client(app, "alice", password="a long enough password")
    assert client.get("/me").text == "Alice Liddell"


@pytest.mark.authflow_stores("sql")  # the factory's own SQL stores, sessions included
def test_flask_sqlalchemy_backend_needs_db_init_app_first(tmp_path: Path, authflow_hasher) -> None:
    from flask_sqlalchemy import SQLAlchemy

    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    db = SQLAlchemy()
    backend = SqlAlchemyBackend(db)
    with pytest.raises(ConfigurationError, match="not bound"):
        _ = backend.engine  # the import-time object itself is never bound
    app = Flask(__name__, instance_path=str(tmp_path / "instance"))
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    with pytest.raises(ConfigurationError, match=r"db\.init_app\(app\) before authflow\.init_app\(app\)"):
        AuthFlow(app, backend=backend)


@pytest.mark.authflow_stores("sql")  # the factory's own SQL stores, sessions included
def test_one_import_time_backend_serves_every_app_of_a_factory(tmp_path: Path, authflow_hasher) -> None:
    from flask_sqlalchemy import SQLAlchemy

    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    db = SQLAlchemy()
    authflow = AuthFlow(backend=SqlAlchemyBackend(db), hasher=authflow_hasher)

    def create_app(name: str) -> Flask:
        app = Flask(name, instance_path=str(tmp_path / name))
        app.config.update(
            TESTING=True,
            SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / name}.db",
            AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        )
        db.init_app(app)
        authflow.init_app(app)
        return app

    first, second = create_app("first"), create_app("second")
    add_user(get_state(first).backend, "default", "alice", "a long enough password")
    assert get_state(first).backend.find_user("default", "alice") is not None
    assert get_state(second).backend.find_user("default", "alice") is None  # its own database
    with first.app_context():
        assert get_state(first).backend.engine is db.engine  # type: ignore[attr-defined]
