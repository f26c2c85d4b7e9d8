"""The operator's factor commands: ``enroll-totp``, ``factors list``, ``factors disable`` and
``recovery-codes regenerate``, with the :class:`AccountAdmin` methods behind them.

Every change is checked by what a login does afterwards (the real service: password, then
the code pyotp computes at the app clock's time), on memory stores and on SQLite.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyotp
import pytest
from click.testing import Result
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow import get_state, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
)
from flask_authflow._web.state import account_admin
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._pytest_plugin import TEST_USER_AGENT, login_test_client
from tests.appfactory import AppFactory
from tests.test_cli_operators import STORES, build_app, unreachable_app

PASSWORD = "correct-horse-42"
#: A TOTP time step: after a code is used, the next login needs the next step's code.
STEP = 30
FACTOR_FIELDS = {"id", "kind", "label", "created_at", "last_used_at", "confirmed"}


@pytest.fixture(params=STORES)
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    # Unthrottled: a test here signs in more often than one address may in a minute.
    app = build_app(app_factory, tmp_path, request.param, AUTHFLOW_THROTTLE=False)
    with app.app_context():
        account_admin(app).create_user("default", "alice", PASSWORD)
    return app


# --- helpers ---------------------------------------------------------------------------------------


def run(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", *args])


def ok(app: Flask, *args: str) -> Result:
    result = run(app, *args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


def run_json(app: Flask, *args: str) -> Any:
    """Run with --json: the command succeeds, stdout is one JSON document and stderr is empty."""
    result = ok(app, *args, "--json")
    assert result.stderr == ""
    return json.loads(result.stdout)


def assert_error(result: Result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ")
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


def assert_json_error(result: Result, code: str, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    document = json.loads(result.stdout)
    assert set(document) == {"error", "message"}
    assert document["error"] == code, document
    for fragment in fragments:
        assert fragment in document["message"], document


def key_of(uri: str) -> str:
    parts = urlsplit(uri)
    assert parts.scheme == "otpauth" and parts.netloc == "totp", uri
    (key,) = parse_qs(parts.query)["secret"]
    return key


def totp_code(key: str, clock: MockClock) -> str:
    return pyotp.TOTP(key).at(clock.now())


@contextmanager
def login_session(client: FlaskClient) -> Iterator[AuthSession]:
    # The session is bound to the device: every request of the client sends the same one.
    with client.session_transaction(environ_base=client.environ_base) as session:
        assert isinstance(session, AuthSession)
        yield session


def begin(app: Flask, username: str = "alice", password: str = PASSWORD) -> tuple[FlaskClient, FactorOutcome]:
    """A new client that began a login and presented the password: the service's answer."""
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    with login_session(client) as session:
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        handle.begin_login(username, "default", session)
        outcome = handle.verify_factor(FactorCredential.password(password), session)
    return client, outcome


def present(app: Flask, client: FlaskClient, kind: FactorKind, value: str) -> FactorOutcome:
    with login_session(client) as session:
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        return handle.verify_factor(FactorCredential.code(kind, value), session)


def second_step(app: Flask, kind: FactorKind, value: str) -> FactorOutcome:
    """Password, then ``value`` at the second step (which must be asked for)."""
    client, first = begin(app)
    assert isinstance(first, FactorRequired), first
    assert kind in first.kinds, first
    outcome = present(app, client, kind, value)
    if isinstance(outcome, Authenticated):
        assert client.get("/who").text == "authenticated"
    return outcome


def enroll(app: Flask, username: str = "alice", *extra: str) -> str:
    result = ok(app, "enroll-totp", username, *extra)
    return result.stdout.strip()


def stored(app: Flask, kind: FactorKind, tenant: str = "default", name: str = "alice") -> list[FactorConfig]:
    with app.app_context():
        admin = account_admin(app)
        return [c for c in admin.list_factors(tenant, name, include_pending=True) if c.kind is kind]


# --- enroll-totp -----------------------------------------------------------------------------------


def test_enroll_totp_prints_a_uri_whose_codes_log_in(app: Flask, mock_clock: MockClock) -> None:
    result = ok(app, "enroll-totp", "Alice")
    uri = result.stdout.strip()
    assert result.stdout == uri + "\n"  # standard output is the URI alone
    assert uri.startswith("otpauth://totp/")
    assert "alice" in urlsplit(uri).path
    key = key_of(uri)
    # Nothing else secret: the key appears once (in the URI), no QR code, no sealed secret.
    assert result.output.count(key) == 1
    assert key not in result.stderr
    assert "<svg" not in result.output and "sealed:" not in result.output
    assert "sessions are revoked" in result.stderr
    (totp,) = stored(app, FactorKind.TOTP)
    assert totp.confirmed  # counted at once: an operator cannot prove possession
    assert totp.secret not in result.output

    # The login now asks for a second factor, and the key's code passes it.
    client, first = begin(app)
    assert isinstance(first, FactorRequired) and FactorKind.TOTP in first.kinds
    code = totp_code(key, mock_clock)
    assert isinstance(present(app, client, FactorKind.TOTP, code), Authenticated)
    assert client.get("/who").text == "authenticated"
    # The code was used up; the next time step's code passes the next login.
    assert isinstance(second_step(app, FactorKind.TOTP, code), InvalidCredential)
    mock_clock.advance(STEP)
    assert isinstance(second_step(app, FactorKind.TOTP, totp_code(key, mock_clock)), Authenticated)


def test_enroll_totp_json_prints_only_the_uri(app: Flask, mock_clock: MockClock) -> None:
    document = run_json(app, "enroll-totp", "alice")
    assert set(document) == {"otpauth_uri"}
    key = key_of(document["otpauth_uri"])
    assert isinstance(second_step(app, FactorKind.TOTP, totp_code(key, mock_clock)), Authenticated)


def test_re_enrolling_replaces_the_key(app: Flask, mock_clock: MockClock) -> None:
    old = key_of(enroll(app))
    (first,) = stored(app, FactorKind.TOTP)
    new = key_of(enroll(app))
    assert new != old
    (second,) = stored(app, FactorKind.TOTP)  # exactly one TOTP factor, a new one
    assert second.factor_id != first.factor_id
    mock_clock.advance(STEP)
    assert isinstance(second_step(app, FactorKind.TOTP, totp_code(old, mock_clock)), InvalidCredential)
    assert isinstance(second_step(app, FactorKind.TOTP, totp_code(new, mock_clock)), Authenticated)


def test_enroll_totp_replaces_a_pending_self_service_enrollment(app: Flask) -> None:
    client = login_test_client(app, "alice", password=PASSWORD)
    with login_session(client) as session:
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        started = handle.begin_enrollment(session, FactorKind.TOTP)
    assert [c.confirmed for c in stored(app, FactorKind.TOTP)] == [False]
    enroll(app)
    (only,) = stored(app, FactorKind.TOTP)
    assert only.confirmed and only.factor_id != started.factor_id


def test_enroll_totp_with_a_tenant(app: Flask, mock_clock: MockClock) -> None:
    with app.app_context():
        account_admin(app).create_user("acme", "alice", "acme-passphrase-9")
    uri = enroll(app, "alice", "--tenant", "acme")
    assert stored(app, FactorKind.TOTP, "acme") and not stored(app, FactorKind.TOTP, "default")
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = TEST_USER_AGENT
    with login_session(client) as session:
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        handle.begin_login("alice", "acme", session)
        outcome = handle.verify_factor(FactorCredential.password("acme-passphrase-9"), session)
        assert isinstance(outcome, FactorRequired)
        code = FactorCredential.code(FactorKind.TOTP, totp_code(key_of(uri), mock_clock))
        assert isinstance(handle.verify_factor(code, session), Authenticated)
    # The default tenant's alice still logs in with her password alone.
    assert isinstance(begin(app)[1], Authenticated)


# --- factors list ----------------------------------------------------------------------------------


def test_factors_list_shows_the_factors_and_no_secret(app: Flask, mock_clock: MockClock) -> None:
    key = key_of(enroll(app))
    (totp,) = stored(app, FactorKind.TOTP)
    (password,) = stored(app, FactorKind.PASSWORD)

    text = ok(app, "factors", "list", "alice").output
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "KIND", "LABEL", "CREATED", "LAST", "USED", "CONFIRMED"]
    row = next(line for line in lines if line.startswith(totp.factor_id))
    assert row.split()[1] == "totp" and "Authenticator app" in row
    assert mock_clock.now().isoformat() in row and "never" in row and row.endswith("yes")
    assert any(line.startswith(password.factor_id) and " password " in line for line in lines)
    assert lines[-1] == "2 factor(s) of 'alice' in tenant 'default'"
    for secret in (key, totp.secret, password.secret):
        assert secret not in text

    documents = run_json(app, "factors", "list", "alice")
    assert all(set(document) == FACTOR_FIELDS for document in documents)
    assert {d["id"]: d["kind"] for d in documents} == {
        totp.factor_id: "totp",
        password.factor_id: "password",
    }
    entry = next(d for d in documents if d["kind"] == "totp")
    assert entry == {
        "id": totp.factor_id,
        "kind": "totp",
        "label": "Authenticator app",
        "created_at": mock_clock.now().isoformat(),
        "last_used_at": None,
        "confirmed": True,
    }
    raw = json.dumps(documents)
    assert key not in raw and totp.secret not in raw and password.secret not in raw

    # A login moves "last used".
    mock_clock.advance(STEP)
    assert isinstance(second_step(app, FactorKind.TOTP, totp_code(key, mock_clock)), Authenticated)
    after = next(d for d in run_json(app, "factors", "list", "alice") if d["kind"] == "totp")
    assert after["last_used_at"] == mock_clock.now().isoformat()


def test_factors_list_shows_pending_enrollments(app: Flask) -> None:
    client = login_test_client(app, "alice", password=PASSWORD)
    with login_session(client) as session:
        handle = get_state(app).service.with_audit_context(AuditContext.unknown())
        started = handle.begin_enrollment(session, FactorKind.TOTP)
    row = next(
        line for line in ok(app, "factors", "list", "alice").output.splitlines() if started.factor_id in line
    )
    assert row.endswith("pending")
    entry = next(d for d in run_json(app, "factors", "list", "alice") if d["id"] == started.factor_id)
    assert entry["confirmed"] is False


# --- factors disable -------------------------------------------------------------------------------


def test_factors_disable_removes_the_totp(app: Flask, mock_clock: MockClock) -> None:
    enroll(app)
    (totp,) = stored(app, FactorKind.TOTP)
    result = ok(app, "factors", "disable", "alice", totp.factor_id)
    assert f"totp factor {totp.factor_id} of 'alice' disabled" in result.output
    assert stored(app, FactorKind.TOTP) == []
    assert totp.factor_id not in ok(app, "factors", "list", "alice").output
    # The login no longer asks for a TOTP code: the password is enough.
    client, outcome = begin(app)
    assert isinstance(outcome, Authenticated)
    assert client.get("/who").text == "authenticated"


def test_factors_disable_json(app: Flask) -> None:
    enroll(app)
    (totp,) = stored(app, FactorKind.TOTP)
    document = run_json(app, "factors", "disable", "alice", totp.factor_id)
    assert document == {
        "identifier": "alice",
        "tenant": "default",
        "factor_id": totp.factor_id,
        "kind": "totp",
        "disabled": True,
    }
    # Disabling it again: it is gone.
    assert_json_error(run(app, "factors", "disable", "alice", totp.factor_id, "--json"), "factor_not_found")


@pytest.mark.parametrize("factor_id", ["-leading-dash", "--two-dashes", "-h"])
def test_a_factor_id_that_starts_with_a_dash(app: Flask, mock_clock: MockClock, factor_id: str) -> None:
    # token_urlsafe ids start with "-" one time in 64: they are not taken for options.
    with app.app_context():
        alice = get_state(app).backend.find_user("default", "alice")
        assert alice is not None
        config = FactorConfig(
            alice.user_id, FactorKind.TOTP, mock_clock.now(), factor_id=factor_id, confirmed=False
        )
        get_state(app).service.record_store().add_factor("default", config)
    assert factor_id in ok(app, "factors", "list", "alice").output
    assert run_json(app, "factors", "disable", "alice", factor_id)["factor_id"] == factor_id
    assert stored(app, FactorKind.TOTP) == []
    assert_error(run(app, "factors", "disable", "alice", "--", factor_id), "no factor")


def test_factors_disable_unknown_factor(app: Flask) -> None:
    assert_error(run(app, "factors", "disable", "alice", "no-such-factor"), "no factor 'no-such-factor'")
    assert_json_error(
        run(app, "factors", "disable", "alice", "no-such-factor", "--json"),
        "factor_not_found",
        "factors list",
    )


def test_factors_disable_never_touches_another_users_factor(app: Flask) -> None:
    with app.app_context():
        account_admin(app).create_user("default", "bob", "bob-passphrase-77")
    enroll(app, "bob")
    (bobs,) = stored(app, FactorKind.TOTP, name="bob")
    assert_error(run(app, "factors", "disable", "alice", bobs.factor_id), "no factor")
    assert stored(app, FactorKind.TOTP, name="bob") == [bobs]


def test_the_password_cannot_be_disabled(app: Flask) -> None:
    (password,) = stored(app, FactorKind.PASSWORD)
    assert_error(run(app, "factors", "disable", "alice", password.factor_id), "set-password")
    assert_json_error(
        run(app, "factors", "disable", "alice", password.factor_id, "--json"), "password_factor"
    )
    with app.app_context():
        assert account_admin(app).disable_factor("default", "alice", password.factor_id) is False
    assert stored(app, FactorKind.PASSWORD) == [password]
    assert isinstance(begin(app)[1], Authenticated)


# --- recovery-codes regenerate ---------------------------------------------------------------------


def test_recovery_codes_each_work_once(app: Flask) -> None:
    enroll(app)
    result = ok(app, "recovery-codes", "regenerate", "alice")
    codes = result.stdout.split()
    assert len(codes) == 10 and len(set(codes)) == 10
    assert all(len(code) == 11 and code[5] == "-" for code in codes)
    assert "previous recovery codes no longer work" in result.stderr
    assert "not shown again" in result.stderr
    for code in codes:
        # Offered beside the TOTP at the second step; each code passes once.
        assert isinstance(second_step(app, FactorKind.RECOVERY_CODE, code), Authenticated)
        assert isinstance(second_step(app, FactorKind.RECOVERY_CODE, code), InvalidCredential)


def test_regenerating_kills_the_old_set(app: Flask) -> None:
    enroll(app)
    old = run_json(app, "recovery-codes", "regenerate", "alice")
    assert set(old) == {"identifier", "tenant", "codes", "warning"}
    assert len(old["codes"]) == 10 and "no longer work" in old["warning"]
    assert isinstance(second_step(app, FactorKind.RECOVERY_CODE, old["codes"][0]), Authenticated)
    new = run_json(app, "recovery-codes", "regenerate", "alice")["codes"]
    assert not set(new) & set(old["codes"])
    assert len(stored(app, FactorKind.RECOVERY_CODE)) == 1  # one set: the new one
    for code in old["codes"][1:3]:  # unused codes of the old set, which worked until now
        assert isinstance(second_step(app, FactorKind.RECOVERY_CODE, code), InvalidCredential)
    assert isinstance(second_step(app, FactorKind.RECOVERY_CODE, new[0]), Authenticated)


def test_recovery_codes_are_listed_without_the_codes(app: Flask) -> None:
    codes = run_json(app, "recovery-codes", "regenerate", "alice")["codes"]
    text = ok(app, "factors", "list", "alice").output
    assert "recovery_code" in text and "Recovery codes" in text
    raw = json.dumps(run_json(app, "factors", "list", "alice"))
    assert not any(code in text or code in raw or code.replace("-", "") in raw for code in codes)


# --- what every change does to the user's sessions -----------------------------------------------


def test_each_change_revokes_the_users_sessions(app: Flask, mock_clock: MockClock) -> None:
    reasons: list[tuple[str, str]] = []

    def receiver(sender: object, **extra: Any) -> None:
        assert sender is app
        reasons.append((extra["user_id"], extra["reason"]))

    with app.app_context():
        alice = get_state(app).backend.find_user("default", "alice")
    assert alice is not None
    signals.session_revoked.connect(receiver)
    try:
        client = login_test_client(app, "alice", password=PASSWORD)
        assert client.get("/who").text == "authenticated"
        key = key_of(enroll(app))
        assert client.get("/who").text == "guest"

        def logged_in() -> FlaskClient:
            mock_clock.advance(STEP)
            client, first = begin(app)
            assert isinstance(first, FactorRequired)
            assert isinstance(
                present(app, client, FactorKind.TOTP, totp_code(key, mock_clock)), Authenticated
            )
            assert client.get("/who").text == "authenticated"
            return client

        client = logged_in()
        ok(app, "recovery-codes", "regenerate", "alice")
        assert client.get("/who").text == "guest"

        client = logged_in()
        (codes,) = stored(app, FactorKind.RECOVERY_CODE)
        ok(app, "factors", "disable", "alice", codes.factor_id)
        assert client.get("/who").text == "guest"

        client = logged_in()
        (totp,) = stored(app, FactorKind.TOTP)
        ok(app, "factors", "disable", "alice", totp.factor_id)
        assert client.get("/who").text == "guest"
    finally:
        signals.session_revoked.disconnect(receiver)
    assert reasons == [
        (alice.user_id, "factor_enrolled"),
        (alice.user_id, "recovery_codes_regenerated"),
        (alice.user_id, "factor_disabled"),
        (alice.user_id, "factor_disabled"),
    ]


def test_a_refused_change_revokes_nothing(app: Flask) -> None:
    client = login_test_client(app, "alice", password=PASSWORD)
    (password,) = stored(app, FactorKind.PASSWORD)
    assert run(app, "factors", "disable", "alice", password.factor_id).exit_code == 1
    assert run(app, "factors", "disable", "alice", "no-such-factor").exit_code == 1
    ok(app, "factors", "list", "alice")
    assert client.get("/who").text == "authenticated"


# --- errors ----------------------------------------------------------------------------------------

COMMANDS = [
    ["enroll-totp", "nobody"],
    ["factors", "list", "nobody"],
    ["factors", "disable", "nobody", "some-factor-id"],
    ["recovery-codes", "regenerate", "nobody"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_user(app: Flask, command: list[str]) -> None:
    assert_error(run(app, *command), "no user 'nobody' in tenant 'default'")
    assert_json_error(run(app, *command, "--json"), "user_not_found", "nobody")
    # alice exists in "default" only
    named = [word if word != "nobody" else "alice" for word in command]
    assert_error(run(app, *named, "--tenant", "acme"), "no user 'alice' in tenant 'acme'")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_database_that_cannot_be_opened(
    tmp_path: Path, app_factory: AppFactory, command: list[str]
) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    app = unreachable_app(app_factory, f"sqlite:///{folder / 'authflow.db'}")
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    shutil.rmtree(folder)  # the database's folder went away after the app started
    backend.engine.dispose()
    # Our words and code; the driver's reason after them (SQLite's) is its own.
    assert_error(run(app, *command), "the authentication database is unavailable: ")
    assert_json_error(
        run(app, *command, "--json"), "store_unavailable", "the authentication database is unavailable"
    )


@pytest.mark.parametrize(
    "command", [["enroll-totp"], ["factors", "list"], ["recovery-codes", "regenerate"]], ids=" ".join
)
def test_a_user_argument_is_required(app: Flask, command: list[str]) -> None:
    result = run(app, *command)
    assert result.exit_code == 2 and "USERNAME" in result.output  # click's usage error names it
    usage = run(app, *command, "--json")
    assert usage.exit_code == 2 and json.loads(usage.stdout)["error"] == "usage_error"


def test_the_commands_take_tenant_and_json(app: Flask) -> None:
    from flask_authflow._cli import authflow_cli

    for path in (
        ("enroll-totp",),
        ("factors", "list"),
        ("factors", "disable"),
        ("recovery-codes", "regenerate"),
    ):
        command: Any = authflow_cli
        for name in path:
            command = command.commands[name]
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"--tenant", "--json"} <= options, path


def test_account_admin_without_a_service_refuses_factor_changes(app: Flask) -> None:
    state = get_state(app)
    admin = AccountAdmin(state.backend, state.session_store)
    with app.app_context(), pytest.raises(ConfigurationError, match="service"):
        admin.enroll_totp("default", "alice")
    with app.app_context():
        assert account_admin(app).service is state.service
