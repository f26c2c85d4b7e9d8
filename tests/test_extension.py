"""AuthFlow wiring: init_app, per-app state, error responses, the insecure-loopback guard."""

from __future__ import annotations

import re
import secrets
import sys

import pytest
from flask import Flask, session

from flask_authflow import AuthFlow, AuthSession, current_session, get_state
from flask_authflow._responses import SERVER_ERROR_MESSAGE
from flask_authflow._web import loopback
from flask_authflow.audit._client_ip import parse_ip
from flask_authflow.errors import AuthFlowError, ConfigurationError, InvalidInput, StoreUnavailable
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app


def test_direct_and_factory_forms_both_install_state(tmp_path, authflow_hasher) -> None:
    direct = base_app(AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'a.db'}")
    AuthFlow(direct, hasher=authflow_hasher)
    ext = AuthFlow(hasher=authflow_hasher)
    one = base_app(AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'b.db'}")
    two = base_app(AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'c.db'}")
    ext.init_app(one)
    ext.init_app(two)
    assert get_state(direct) is not get_state(one) is not get_state(two)
    assert get_state(one).backend is not get_state(two).backend
    with one.app_context():
        assert ext.state is get_state(one)


def test_second_init_app_is_refused(authflow_hasher) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext = AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    with pytest.raises(RuntimeError, match="already initialised"):
        ext.init_app(app)
    with pytest.raises(RuntimeError, match="already initialised"):
        AuthFlow(app)


def test_get_state_without_init_names_the_fix() -> None:
    with Flask(__name__).app_context(), pytest.raises(RuntimeError, match="AuthFlow\\(app\\)"):
        get_state()


@pytest.mark.authflow_stores("app")  # the default database, in the instance folder
def test_default_database_is_sqlite_in_instance_folder(tmp_path, authflow_hasher) -> None:
    app = base_app(instance_path=tmp_path / "instance")
    AuthFlow(app, hasher=authflow_hasher)
    with app.app_context():
        add_user(get_state(app).backend, "default", "alice", "correct horse battery")
    assert (tmp_path / "instance" / "authflow.db").exists()


def test_flask_session_is_the_auth_session(authflow_app, authflow_client) -> None:
    @authflow_app.get("/probe")
    def probe() -> str:
        assert isinstance(session._get_current_object(), AuthSession)
        assert current_session.is_guest
        return current_session.state.value

    assert authflow_client.get("/probe").text == "guest"


def test_typed_errors_become_json_or_text_never_500(authflow_app, authflow_client) -> None:
    @authflow_app.get("/boom")
    def boom() -> str:
        raise StoreUnavailable()

    as_json = authflow_client.get("/boom", headers={"Accept": "application/json"})
    assert as_json.status_code == 503
    body = as_json.json
    assert body["error"] == "store_unavailable"
    assert body["message"] == f"{SERVER_ERROR_MESSAGE} (request id {body['request_id']})"
    assert as_json.headers["Cache-Control"] == "no-store"
    as_text = authflow_client.get("/boom")
    assert as_text.status_code == 503
    assert as_text.mimetype == "text/plain"
    assert as_text.text.startswith(SERVER_ERROR_MESSAGE)


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("sqlite file /srv/app/instance/authflow.db is mode 0644"),
        ConfigurationError("AUTHFLOW_ISSUER_KEY_STORE=file:/etc/authflow/keys is writable by others"),
    ],
)
def test_5xx_never_shows_the_internal_message(authflow_app, authflow_client, error, caplog) -> None:
    @authflow_app.get("/boom")
    def boom() -> str:
        raise error

    with caplog.at_level("ERROR", logger="flask_authflow"):
        for accept in ("application/json", "text/html"):
            response = authflow_client.get(
                "/boom", headers={"Accept": accept, "X-Request-Id": "rid-from-proxy"}
            )
            assert response.status_code >= 500
            assert "/srv" not in response.text and "/etc" not in response.text and "0644" not in response.text
            assert "writable" not in response.text
            assert SERVER_ERROR_MESSAGE in response.text
    # Operators find the real message in the log, under the id the client was shown.
    rid = response.text.rsplit("request id ", 1)[1].rstrip(")\n")
    assert any(error.message in r.getMessage() and rid in r.getMessage() for r in caplog.records)


def test_4xx_keeps_its_message(authflow_app, authflow_client) -> None:
    @authflow_app.get("/bad")
    def bad() -> str:
        raise InvalidInput("the username is empty")

    response = authflow_client.get("/bad", headers={"Accept": "application/json"})
    assert response.status_code == 400 and response.json["message"] == "the username is empty"


def test_custom_data_over_limit_is_413_not_500(authflow_app, authflow_client) -> None:
    @authflow_app.post("/big")
    def big() -> str:
        current_session["blob"] = "x" * (70 * 1024)
        return "stored"

    response = authflow_client.post("/big", headers={"Accept": "application/json"})
    assert response.status_code == 413
    assert response.json["error"] == "session_data_too_large"


def test_insecure_loopback_mode_refuses_non_loopback_peers(authflow_hasher) -> None:
    app = base_app(
        TESTING=False,
        AUTHFLOW_COOKIE_SECURE=False,
        AUTHFLOW_ALLOW_INSECURE_LOOPBACK=True,
        AUTHFLOW_SESSION_STORE="memory",
    )
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)

    @app.get("/")
    def index() -> str:
        return "ok"

    client = app.test_client()
    assert client.get("/", environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 200
    assert client.get("/", environ_base={"REMOTE_ADDR": "::1"}).status_code == 200
    assert client.get("/", environ_base={"REMOTE_ADDR": "::ffff:127.0.0.1"}).status_code == 200
    assert client.get("/", environ_base={"REMOTE_ADDR": "::ffff:203.0.113.9"}).status_code == 403
    refused = client.get("/", environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert refused.status_code == 403
    assert "only answers clients on this machine" in refused.text
    assert "AUTHFLOW_" not in refused.text  # configuration details stay in the log
    spoofed = client.get(
        "/", environ_base={"REMOTE_ADDR": "203.0.113.9"}, headers={"X-Forwarded-For": "127.0.0.1"}
    )
    assert spoofed.status_code == 403
    # A proxy on this machine forwarding a remote client does not make the client local.
    for hops in ("203.0.113.9", "127.0.0.1, 203.0.113.9", "203.0.113.9, 127.0.0.1", "not-an-ip"):
        proxied = client.get(
            "/", environ_base={"REMOTE_ADDR": "127.0.0.1"}, headers={"X-Forwarded-For": hops}
        )
        assert proxied.status_code == 403, hops
    # Repeated header lines count hop by hop too, whichever line names the remote client.
    for lines in (("203.0.113.9", "127.0.0.1"), ("127.0.0.1", "203.0.113.9")):
        repeated = client.get(
            "/",
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
            headers=[("X-Forwarded-For", line) for line in lines],
        )
        assert repeated.status_code == 403, lines
    local_chain = client.get(
        "/", environ_base={"REMOTE_ADDR": "127.0.0.1"}, headers={"X-Forwarded-For": "127.0.0.1, ::1"}
    )
    assert local_chain.status_code == 200
    # So does a local proxy that names the remote client in X-Real-IP (nginx's common setup).
    for real_ip in ("203.0.113.9", "not-an-ip", "127.0.0.1, 203.0.113.9"):
        real = client.get("/", environ_base={"REMOTE_ADDR": "127.0.0.1"}, headers={"X-Real-IP": real_ip})
        assert real.status_code == 403, real_ip
    local = client.get("/", environ_base={"REMOTE_ADDR": "127.0.0.1"}, headers={"X-Real-IP": "::1"})
    assert local.status_code == 200


def test_every_error_class_has_code_and_status() -> None:
    import flask_authflow.errors as errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, AuthFlowError):
            assert cls.code and 400 <= cls.status < 600, name


@pytest.mark.authflow_stores("app")  # the session store the setting names, not the plugin's
def test_memory_store_option(authflow_hasher) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    assert isinstance(get_state(app).session_store, MemorySessionStore)


class _FlakyStore(MemorySessionStore):
    """A memory store whose writes fail while ``down`` is set (a database outage)."""

    down = False

    def save(self, record, expires_at, *, replaces=(), existing=False):  # type: ignore[no-untyped-def]
        if self.down:
            raise StoreUnavailable("session store down")
        return super().save(record, expires_at, replaces=replaces, existing=existing)

    def delete(self, sid):  # type: ignore[no-untyped-def]
        if self.down:
            raise StoreUnavailable("session store down")
        super().delete(sid)


def test_store_outage_on_save_is_503_and_keeps_nothing(authflow_hasher, mock_clock) -> None:
    from flask_authflow.testing import login_test_client

    store = _FlakyStore(clock=mock_clock)
    app = base_app()
    AuthFlow(
        app,
        backend=InMemoryBackend(clock=mock_clock),
        session_store=store,
        clock=mock_clock,
        hasher=authflow_hasher,
    )

    @app.post("/remember")
    def remember() -> str:
        current_session["note"] = "kept?"
        return "stored"

    @app.get("/note")
    def note() -> str:
        return f"{current_session.state.value}:{current_session.get('note')}"

    client = login_test_client(app, "alice")
    store.down = True
    failed = client.post("/remember", headers={"Accept": "application/json"})
    assert failed.status_code == 503
    assert failed.json["error"] == "store_unavailable"
    assert "Set-Cookie" not in failed.headers
    store.down = False
    assert client.get("/note").text == "authenticated:None"


def test_logout_during_outage_fails_closed(authflow_hasher, mock_clock) -> None:
    from flask_authflow.testing import login_test_client

    store = _FlakyStore(clock=mock_clock)
    app = base_app()
    authflow = AuthFlow(
        app,
        backend=InMemoryBackend(clock=mock_clock),
        session_store=store,
        clock=mock_clock,
        hasher=authflow_hasher,
    )

    @app.post("/logout")
    def logout() -> str:
        authflow.login.logout()
        return "logged out"

    client = login_test_client(app, "alice")
    store.down = True
    response = client.post("/logout")
    assert response.status_code == 503  # the user is told the logout did not happen
    assert response.text != "logged out"


def test_binding_mismatch_is_counted(authflow_app, login_client) -> None:
    @authflow_app.get("/state")
    def state_view() -> str:
        return current_session.state.value

    client = login_client("alice")
    assert client.get("/state").text == "authenticated"
    stolen = authflow_app.test_client()
    stolen.set_cookie("authflow_session", client.get_cookie("authflow_session").value)
    stolen.environ_base["HTTP_USER_AGENT"] = "curl/8.0"
    assert stolen.get("/state").text == "guest"
    counters = get_state(authflow_app).counters.snapshot()
    assert counters["session_binding_mismatches"] == 1
    assert client.get("/state").text == "authenticated"  # the real holder keeps the session


PROVIDER_ENTRY = {
    "discovery_url": "https://op.example/.well-known/openid-configuration",
    "client_id": "app",
    "client_secret": "secret",
    "redirect_uri": "https://app.example/auth/callback/corp",
}
#: A setting per optional package, and the module whose absence is simulated.
NEEDS_AN_EXTRA = [
    ("oidc", "authlib", {"AUTHFLOW_OAUTH_PROVIDERS": {"corp": PROVIDER_ENTRY}}),
    ("oidc", "requests", {"AUTHFLOW_OAUTH_PROVIDERS": {"corp": PROVIDER_ENTRY}}),
    ("redis", "redis", {"AUTHFLOW_SESSION_STORE": "redis", "AUTHFLOW_REDIS_URL": "redis://127.0.0.1:1/0"}),
    ("zxcvbn", "zxcvbn", {"AUTHFLOW_PASSWORD_ZXCVBN_MIN_SCORE": 3}),
    ("webauthn", "webauthn", {"AUTHFLOW_WEBAUTHN_RP_ID": "app.example"}),
    ("postgres", "psycopg", {"AUTHFLOW_DATABASE_URL": "postgresql+psycopg://u@127.0.0.1:1/db"}),
]


@pytest.mark.parametrize(("extra", "module", "config"), NEEDS_AN_EXTRA)
@pytest.mark.authflow_stores("sql")  # the configured URL reaches the check
def test_a_setting_whose_package_is_missing_fails_at_init_app(
    monkeypatch: pytest.MonkeyPatch, authflow_hasher, extra: str, module: str, config: dict[str, object]
) -> None:
    app = base_app(**config)
    for name in [n for n in sys.modules if n == module or n.startswith(f"{module}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # an import of the package now fails
    with pytest.raises(
        ConfigurationError, match=re.escape(f"pip install 'flask-authflow[{extra}]'")
    ) as caught:
        AuthFlow(app, hasher=authflow_hasher)
    assert repr(module) in caught.value.message
    assert "authflow" not in app.extensions  # nothing installed: fix the environment and retry


def test_a_provider_registered_in_code_without_its_packages_fails_at_registration(
    monkeypatch: pytest.MonkeyPatch, authflow_hasher
) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext = AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    monkeypatch.setitem(sys.modules, "authlib", None)
    with pytest.raises(ConfigurationError, match=re.escape("flask-authflow[oidc]")):
        ext.register_provider("corp", PROVIDER_ENTRY)
    assert get_state(app).federation is None


def test_settings_without_optional_packages_need_none(
    monkeypatch: pytest.MonkeyPatch, authflow_hasher
) -> None:
    for _extra, module, _config in NEEDS_AN_EXTRA:
        monkeypatch.setitem(sys.modules, module, None)
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    assert get_state(app).federation is None


# --- composition: adapters, settings, nothing test-aware ----------------------------------------


@pytest.mark.authflow_stores("app")  # the extension's own defaults
def test_init_app_arguments_win_over_the_constructors_adapters(authflow_hasher, mock_clock) -> None:
    from flask_authflow._clock import MockClock, SystemClock

    ext = AuthFlow(hasher=authflow_hasher, clock=mock_clock)
    assert ext.adapters.clock is mock_clock and ext.adapters.backend is None
    shared = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext.init_app(shared, backend=InMemoryBackend())
    own_clock = MockClock()
    own = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext.init_app(own, clock=own_clock, backend=InMemoryBackend())
    assert get_state(shared).clock is mock_clock
    assert get_state(own).clock is own_clock
    assert get_state(shared).hasher is get_state(own).hasher is authflow_hasher
    plain = base_app(AUTHFLOW_SESSION_STORE="memory")
    AuthFlow(plain, backend=InMemoryBackend(), hasher=authflow_hasher)
    assert isinstance(get_state(plain).clock, SystemClock)  # nothing else supplies a clock


@pytest.mark.authflow_stores("app")  # the plugin would point the spool away from the folder
def test_a_given_backend_leaves_the_instance_folder_alone(tmp_path, authflow_hasher) -> None:
    app = base_app(instance_path=tmp_path / "instance", AUTHFLOW_SESSION_STORE="memory")
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    assert not (tmp_path / "instance").exists()  # no database file nor spool was made for nothing


def test_the_login_service_is_built_from_the_settings(authflow_hasher) -> None:
    from datetime import timedelta

    app = base_app(
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_FRESHNESS=180,
        AUTHFLOW_SITE_NAME="Acme",
        AUTHFLOW_LOCKOUT_MAX_FAILURES="3",
        AUTHFLOW_PASSWORD_MIN_LENGTH=20,
    )
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    state = get_state(app)
    assert state.service.freshness == timedelta(minutes=3)
    assert state.service.site_name == "Acme"
    assert state.service.policy.max_failures == 3
    assert state.password_policy is not None and state.password_policy.min_length == 20
    assert state.service.passkey_login_allowed("default") is False
    assert state.mail_sender is None  # no AUTHFLOW_SMTP_HOST


def test_smtp_settings_are_parsed_once_into_the_sender(authflow_hasher) -> None:
    from flask_authflow._mail import SmtpSender

    app = base_app(
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_SMTP_HOST="smtp.example.com",
        AUTHFLOW_SMTP_FROM="no-reply@example.com",
        AUTHFLOW_SMTP_PORT="2525",
    )
    AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    state = get_state(app)
    assert isinstance(state.mail_sender, SmtpSender)
    assert state.mail_sender.settings is state.config.mail
    assert (state.config.mail.host, state.config.mail.port) == ("smtp.example.com", 2525)


def test_a_refused_setting_leaves_the_app_untouched(authflow_hasher) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory", AUTHFLOW_SMTP_HOST="smtp.example.com")  # no FROM
    with pytest.raises(ConfigurationError, match="AUTHFLOW_SMTP_FROM is not set"):
        AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    assert "authflow" not in app.extensions
    assert "authflow" not in app.cli.commands


def test_production_code_knows_nothing_of_tests() -> None:
    """Outside flask_authflow/testing/, no module imports pytest or looks at a test's
    temporary folder: apps behave the same under tests as in production."""
    import ast
    from pathlib import Path

    import flask_authflow

    package = Path(flask_authflow.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] == "testing":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            imported = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            names = [node.id] if isinstance(node, ast.Name) else []
            names += [node.attr] if isinstance(node, ast.Attribute) else []
            if any(name.split(".")[0] in ("pytest", "_pytest") for name in imported) or any(
                "tmp_path" in name or "plugin_wiring" in name for name in names
            ):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize(
    "address",
    [
        *(None, "", "127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1", "::1%lo", "10.0.0.1"),
        *("::ffff:10.0.0.1", " 127.0.0.1", "127.1", "localhost", "127.0.0.1, 10.0.0.1", "1" * 65),
        "::1" + " " * 62,
    ],
)
def test_the_remembered_loopback_answer_is_the_parsers(address: str | None) -> None:
    expected = (ip := parse_ip(address)) is not None and ip.is_loopback
    assert loopback._is_loopback(address) is expected
    assert loopback._is_loopback(address) is expected  # remembered: the same answer


def test_the_loopback_memory_is_bounded_and_keeps_no_long_strings() -> None:
    cached = loopback._is_loopback_text
    assert cached.cache_info().maxsize is not None
    before = cached.cache_info().currsize
    assert not loopback._is_loopback("127.0.0.1" + " " * 200)  # an X-Forwarded-For hop of junk
    assert cached.cache_info().currsize == before


def corp_factory(tenant: str | None) -> dict[str, str]:
    """A provider factory (called on first use only)."""
    return PROVIDER_ENTRY


def test_a_provider_registered_after_the_first_request_is_refused(authflow_hasher) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext = AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    app.test_client().get("/")
    with pytest.raises(RuntimeError, match="register_provider after the app served requests"):
        ext.register_provider("corp", corp_factory)
    assert get_state(app).federation is None
    assert "authflow_oauth" not in app.blueprints


def test_a_provider_registered_before_the_first_request_installs_federation(authflow_hasher) -> None:
    app = base_app(AUTHFLOW_SESSION_STORE="memory")
    ext = AuthFlow(app, backend=InMemoryBackend(), hasher=authflow_hasher)
    ext.register_provider("corp", corp_factory)
    assert get_state(app).federation is not None
    assert "authflow_oauth" in app.blueprints


def test_a_session_store_built_without_a_clock_follows_the_apps(mock_clock, authflow_hasher) -> None:
    from datetime import timedelta

    from flask_authflow.sessions._stores import MemorySessionStore
    from flask_authflow.testing import login_test_client

    store = MemorySessionStore()  # built at import time, before the app chose a clock
    app = Flask("adopted_clock")
    app.config.update(TESTING=True, AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32))
    AuthFlow(app, session_store=store, clock=mock_clock, hasher=authflow_hasher)
    login_test_client(app, "alice", password="x")
    assert store.purge_expired() == 0
    mock_clock.advance(timedelta(hours=13))  # past the absolute lifetime, on the app's clock
    assert store.purge_expired() == 1  # the store reads the same clock
