"""The operator commands of ``flask authflow``: users list / unlock, sessions with devices,
``--json`` and ``--tenant`` everywhere, and errors that never end in a traceback.

Every command is run in text and JSON modes, on the default tenant and with ``--tenant``,
on memory stores and on a SQLite database; error paths cover unknown users, bad tenants,
a database that cannot be reached and failures of the operating system.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.exc import IntegrityError, OperationalError

from flask_authflow import current_session, get_state, signals
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import AttemptKey, UserRecord
from flask_authflow._core.session import AuthSession, sid_hash
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorRequired,
    InvalidCredential,
    Locked,
)
from flask_authflow.audit._context import AuditContext
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.audit._spool import SpoolAuditSink
from flask_authflow.devices._labels import device_label
from flask_authflow.errors import AuthFlowError
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.login._accounts import AccountAdmin
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user as store_user
from tests.appfactory import AppFactory
from tests.parts import free_port

MAX_FAILURES = 3
LOCK = timedelta(minutes=15)
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
)
PASSWORD = "correct-horse-42"


#: The lockout these tests count against (the apps of tests/test_cli_factors.py keep the default).
# The account-wide lock at the per-address threshold: these tests lock accounts from one address.
LOCKOUT = {
    "AUTHFLOW_LOCKOUT_MAX_FAILURES": MAX_FAILURES,
    "AUTHFLOW_LOCKOUT_ACCOUNT_MAX_FAILURES": MAX_FAILURES,
    "AUTHFLOW_LOCKOUT_DURATION": LOCK,
}


def build_app(app_factory: AppFactory, tmp_path: Path, store: str, **config: Any) -> Flask:
    """An ``app_factory`` app with ``GET /who`` (the session's state): on the plugin's in-memory
    stores, or with ``store="sqlite"`` (a test marked for the SQL wiring) on a SQLite file."""
    if store == "sqlite":
        config = {
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'authflow.db'}",
            "AUTHFLOW_SESSION_STORE": "sql",
            **config,
        }
    app = app_factory(instance_path=tmp_path / f"instance-{store}", **config)
    assert isinstance(get_state(app).backend, InMemoryBackend) is (store == "memory")

    @app.get("/who")
    def who() -> str:
        return current_session.state.value

    return app


#: Each test runs on the plugin's in-memory stores and on a SQLite file.
STORES = ["memory", pytest.param("sqlite", marks=pytest.mark.authflow_stores("sql"))]


@pytest.fixture(params=STORES)
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    return build_app(app_factory, tmp_path, request.param, **LOCKOUT)


@pytest.fixture
def memory_app(tmp_path: Path, app_factory: AppFactory) -> Flask:
    return build_app(app_factory, tmp_path, "memory", **LOCKOUT)


# --- helpers ---------------------------------------------------------------------------------------


def run(app: Flask, *args: str, stdin: str | None = None) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", *args], input=stdin)


def run_json(app: Flask, *args: str, stdin: str | None = None) -> Any:
    """Run with --json; the command succeeds and stdout is exactly one JSON document."""
    result = run(app, *args, "--json", stdin=stdin)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return json.loads(result.stdout)


def assert_error(result: Result, *fragments: str, exit_code: int = 1) -> str:
    """A text-mode error: ``Error: ...`` on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    assert "Error: " in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


def assert_json_error(result: Result, code: str, *fragments: str, exit_code: int = 1) -> str:
    """A JSON-mode error: ``{"error": code, "message": ...}`` on stdout, exit status 1 (2 for usage)."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    document = json.loads(result.stdout)
    assert set(document) == {"error", "message"}
    assert document["error"] == code, document
    for fragment in fragments:
        assert fragment in document["message"], document
    return str(document["message"])


def add_user(app: Flask, name: str, tenant: str = "default", password: str = PASSWORD) -> UserRecord:
    with app.app_context():
        return store_user(get_state(app).backend, tenant, name, password)


def find(app: Flask, name: str, tenant: str = "default") -> UserRecord | None:
    with app.app_context():
        return get_state(app).backend.find_user(tenant, name)


def login(
    app: Flask, name: str, password: str = PASSWORD, *, tenant: str = "default", agent: str = FIREFOX
) -> tuple[FlaskClient, Any]:
    """A client that tries the password login with ``agent`` as its User-Agent; the outcome."""
    state = get_state(app)
    client = app.test_client()
    client.environ_base["HTTP_USER_AGENT"] = agent
    with client.session_transaction(environ_base=client.environ_base) as session:
        assert isinstance(session, AuthSession)
        handle = state.service.with_audit_context(AuditContext.unknown())
        begun = handle.begin_login(name, tenant, session)
        if not isinstance(begun, FactorRequired):
            return client, begun
        outcome = handle.verify_factor(FactorCredential.password(password), session)
    return client, outcome


def logged_in(app: Flask, name: str, **kwargs: Any) -> FlaskClient:
    client, outcome = login(app, name, **kwargs)
    assert isinstance(outcome, Authenticated), outcome
    return client


def is_logged_in(client: FlaskClient) -> bool:
    return client.get("/who").text == "authenticated"


def lock_out(app: Flask, name: str, tenant: str = "default") -> None:
    for _ in range(MAX_FAILURES):
        _, outcome = login(app, name, "wrong-password", tenant=tenant)
        assert isinstance(outcome, InvalidCredential | Locked)
    _, outcome = login(app, name, tenant=tenant)
    assert isinstance(outcome, Locked), outcome


def session_hashes(app: Flask, name: str, tenant: str = "default") -> list[str]:
    user = find(app, name, tenant)
    assert user is not None
    with app.app_context():
        return [
            sid_hash(r.sid) for r in get_state(app).session_store.list_user_sessions(tenant, user.user_id)
        ]


# --- users list ------------------------------------------------------------------------------------


def test_users_list_text_shows_disabled_and_locked_for_the_default_tenant(app: Flask) -> None:
    alice = add_user(app, "alice")
    bob = add_user(app, "bob")
    add_user(app, "carol", tenant="acme")
    assert run(app, "users", "disable", "bob").exit_code == 0
    lock_out(app, "alice")
    result = run(app, "users", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["IDENTIFIER", "ID", "TENANT", "DISABLED", "LOCKED"]
    clock: MockClock = get_state(app).clock  # type: ignore[assignment]
    until = (clock.now() + LOCK).isoformat(timespec="seconds")
    assert lines[1].split() == ["alice", alice.user_id, "default", "no", "until", until]
    assert lines[2].split() == ["bob", bob.user_id, "default", "yes", "no"]
    assert lines[3] == "2 user(s) in tenant 'default'"
    assert "carol" not in result.stdout


def test_users_list_json_per_tenant_and_for_all_tenants(app: Flask) -> None:
    add_user(app, "alice")
    carol = add_user(app, "carol", tenant="acme")
    lock_out(app, "carol", tenant="acme")
    clock: MockClock = get_state(app).clock  # type: ignore[assignment]
    [doc] = run_json(app, "users", "list", "--tenant", "acme")
    assert doc == {
        "id": carol.user_id,
        "identifier": "carol",
        "tenant": "acme",
        "disabled": False,
        "email": None,
        "email_verified": False,
        "created_at": carol.created_at.isoformat(),
        "locked": True,
        "locked_until": (clock.now() + LOCK).isoformat(),
    }
    everyone = run_json(app, "users", "list", "--all-tenants")
    assert [(d["tenant"], d["identifier"], d["locked"]) for d in everyone] == [
        ("acme", "carol", True),
        ("default", "alice", False),
    ]
    assert [d["identifier"] for d in run_json(app, "users", "list")] == ["alice"]
    assert run_json(app, "users", "list", "--tenant", "nobody-here") == []


def test_users_list_forgets_a_lock_once_it_has_ended(memory_app: Flask, mock_clock: MockClock) -> None:
    add_user(memory_app, "alice")
    lock_out(memory_app, "alice")
    assert run_json(memory_app, "users", "list")[0]["locked"] is True
    mock_clock.advance(LOCK + timedelta(seconds=1))
    [doc] = run_json(memory_app, "users", "list")
    assert doc["locked"] is False and doc["locked_until"] is None
    assert run(memory_app, "users", "list").stdout.splitlines()[1].split()[-1] == "no"


def test_users_list_tenant_and_all_tenants_together_is_a_usage_error(memory_app: Flask) -> None:
    text = run(memory_app, "users", "list", "--tenant", "acme", "--all-tenants")
    assert text.exit_code == 2 and "not both" in text.output and "Traceback" not in text.output
    as_json = run(memory_app, "users", "list", "--tenant", "acme", "--all-tenants", "--json")
    assert_json_error(as_json, "usage_error", "not both", exit_code=2)


def test_an_unknown_option_under_json_is_a_json_usage_error(memory_app: Flask) -> None:
    # The parser fails before --json is read: the arguments still say JSON was asked for.
    assert_json_error(
        run(memory_app, "users", "list", "--bogus", "--json"), "usage_error", "--bogus", exit_code=2
    )
    text = run(memory_app, "users", "list", "--bogus")
    assert text.exit_code == 2 and "--bogus" in text.stderr and text.stdout == ""  # click's usage error


def test_users_list_with_a_bad_tenant(memory_app: Flask) -> None:
    assert_error(run(memory_app, "users", "list", "--tenant", "bad\x00tenant"), "invalid tenant")
    assert_json_error(
        run(memory_app, "users", "list", "--tenant", "", "--json"), "invalid_input", "invalid tenant"
    )


# --- users unlock ----------------------------------------------------------------------------------


def test_unlock_ends_the_lock_and_gives_the_full_number_of_tries(app: Flask) -> None:
    add_user(app, "alice")
    lock_out(app, "alice")
    result = run(app, "users", "unlock", "ALICE")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("user 'alice' unlocked (the lock ran until ")
    for _ in range(MAX_FAILURES - 1):
        _, outcome = login(app, "alice", "wrong-password")
        assert isinstance(outcome, InvalidCredential)
    assert isinstance(login(app, "alice")[1], Authenticated)


def test_unlock_forgets_failures_counted_before_any_lock(app: Flask) -> None:
    add_user(app, "alice")
    for _ in range(MAX_FAILURES - 1):
        assert isinstance(login(app, "alice", "wrong-password")[1], InvalidCredential)
    document = run_json(app, "users", "unlock", "alice")
    assert document == {"identifier": "alice", "tenant": "default", "was_locked": False, "locked_until": None}
    # Without the reset, the next failure would be the third in the window and lock.
    for _ in range(MAX_FAILURES - 1):
        assert isinstance(login(app, "alice", "wrong-password")[1], InvalidCredential)
    assert isinstance(login(app, "alice")[1], Authenticated)
    assert run(app, "users", "unlock", "alice").stdout == (
        "user 'alice' was not locked; its failure count is reset\n"
    )


def test_unlock_json_and_tenant(app: Flask) -> None:
    add_user(app, "carol", tenant="acme")
    lock_out(app, "carol", tenant="acme")
    clock: MockClock = get_state(app).clock  # type: ignore[assignment]
    assert_error(run(app, "users", "unlock", "carol"), "no user 'carol' in tenant 'default'")
    document = run_json(app, "users", "unlock", "carol", "--tenant", "acme")
    assert document == {
        "identifier": "carol",
        "tenant": "acme",
        "was_locked": True,
        "locked_until": (clock.now() + LOCK).isoformat(),
    }
    assert isinstance(login(app, "carol", tenant="acme")[1], Authenticated)


def test_unlock_clears_a_step_up_lock_on_the_user_id(memory_app: Flask, mock_clock: MockClock) -> None:
    # A step-up without the identifier in the flow counts failures per "user:<id>".
    alice = add_user(memory_app, "alice")
    with memory_app.app_context():
        get_state(memory_app).backend.set_lock(
            AttemptKey("default", f"user:{alice.user_id}", "totp"), mock_clock.now() + LOCK
        )
    assert run_json(memory_app, "users", "list")[0]["locked"] is True
    assert run_json(memory_app, "users", "unlock", "alice")["was_locked"] is True
    with memory_app.app_context():
        backend = get_state(memory_app).backend
        assert backend.locked_until("default", f"user:{alice.user_id}", mock_clock.now()) is None


def test_unlock_unknown_user(memory_app: Flask) -> None:
    assert_error(run(memory_app, "users", "unlock", "nobody"), "no user 'nobody' in tenant 'default'")
    assert_json_error(run(memory_app, "users", "unlock", "nobody", "--json"), "user_not_found", "'nobody'")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def attempt_backend(
    request: pytest.FixtureRequest, tmp_path: Path, mock_clock: MockClock, authflow_hasher: PasswordHasher
) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemoryBackend(clock=mock_clock)
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'attempts.db'}"
    else:
        url = request.getfixturevalue("postgres_server").new_database()
    backend = SqlAlchemyBackend(url, clock=mock_clock)
    yield backend
    backend.close()


def test_clear_lock_also_forgets_the_failure_counts(attempt_backend: Any, mock_clock: MockClock) -> None:
    policy = {"window": timedelta(hours=1), "max_failures": MAX_FAILURES, "lock_duration": LOCK}
    key = AttemptKey("default", "alice", "password")
    other = AttemptKey("default", "alice", "totp")
    now = mock_clock.now()
    assert attempt_backend.register_failure(key, now=now, **policy).failures == 1
    assert attempt_backend.register_failure(key, now=now, **policy).failures == 2
    assert attempt_backend.register_failure(other, now=now, **policy).failures == 1
    attempt_backend.clear_lock("default", "alice")
    assert attempt_backend.register_failure(key, now=now, **policy).failures == 1
    assert attempt_backend.register_failure(other, now=now, **policy).failures == 1
    # A lock, with reservations in flight: cleared, the key has its full budget again.
    attempt_backend.register_failure(key, now=now, **policy)
    assert attempt_backend.register_failure(key, now=now, **policy).locked_until == now + LOCK
    assert attempt_backend.locked_until("default", "alice", now) == now + LOCK
    attempt_backend.clear_lock("default", "alice")
    assert attempt_backend.locked_until("default", "alice", now) is None
    tokens = [attempt_backend.reserve_attempt(key, now=now, **policy) for _ in range(MAX_FAILURES)]
    assert all(t.granted for t in tokens)
    assert not attempt_backend.reserve_attempt(key, now=now, **policy).granted
    attempt_backend.clear_lock("default", "alice")
    assert attempt_backend.reserve_attempt(key, now=now, **policy).granted
    # Another tenant's counter is not touched.
    acme = AttemptKey("acme", "alice", "password")
    attempt_backend.register_failure(acme, now=now, **policy)
    attempt_backend.clear_lock("default", "alice")
    assert attempt_backend.register_failure(acme, now=now, **policy).failures == 2


# --- sessions --------------------------------------------------------------------------------------


def test_sessions_list_text_shows_short_hashes_devices_and_last_seen(
    app: Flask, mock_clock: MockClock
) -> None:
    add_user(app, "alice")
    logged_in(app, "alice", agent=FIREFOX)
    first_seen = mock_clock.now()
    mock_clock.advance(timedelta(minutes=5))
    logged_in(app, "alice", agent=IPHONE)
    result = run(app, "sessions", "list", "--user", "Alice")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1] == "2 session(s)"
    # Newest first: the phone logged in last.
    # The one label of a browser, as the account page's sessions and devices lists show it.
    assert lines[0].endswith(device_label(IPHONE)) and lines[1].endswith(device_label(FIREFOX))
    assert f"last seen {first_seen.isoformat(timespec='seconds')}" in lines[1]
    hashes = session_hashes(app, "alice")
    assert {line.split()[0] for line in lines[:2]} == {h[:16] for h in hashes}
    assert all(line.split()[1] == "authenticated" for line in lines[:2])
    user = find(app, "alice")
    assert user is not None
    with app.app_context():
        for record in get_state(app).session_store.list_user_sessions("default", user.user_id):
            assert record.sid not in result.output


def test_sessions_list_json_has_full_hashes_and_devices(app: Flask, mock_clock: MockClock) -> None:
    add_user(app, "carol", tenant="acme")
    logged_in(app, "carol", tenant="acme", agent=FIREFOX)
    [doc] = run_json(app, "sessions", "list", "--user", "carol", "--tenant", "acme")
    [digest] = session_hashes(app, "carol", "acme")
    assert doc == {
        "session_hash": digest,
        "state": "authenticated",
        "device": device_label(FIREFOX),
        "user_agent": FIREFOX,
        "created_at": mock_clock.now().isoformat(),
        "last_seen_at": mock_clock.now().isoformat(),
        "authenticated_at": mock_clock.now().isoformat(),
        "auth_method": doc["auth_method"],
    }
    assert isinstance(doc["auth_method"], str) and doc["auth_method"]
    assert_json_error(
        run(app, "sessions", "list", "--user", "carol", "--json"), "user_not_found", "tenant 'default'"
    )


def test_sessions_list_of_a_user_without_sessions(memory_app: Flask) -> None:
    add_user(memory_app, "alice")
    assert run(memory_app, "sessions", "list", "--user", "alice").stdout == "0 session(s)\n"
    assert run_json(memory_app, "sessions", "list", "--user", "alice") == []


def test_sessions_list_errors(memory_app: Flask) -> None:
    assert_error(run(memory_app, "sessions", "list", "--user", "nobody"), "no user 'nobody'")
    assert_error(
        run(memory_app, "sessions", "list", "--user", "alice", "--tenant", "bad\ttenant"), "invalid tenant"
    )
    missing = run(memory_app, "sessions", "list", "--json")
    assert_json_error(missing, "usage_error", "--user", exit_code=2)


def test_sessions_revoke_all_text_and_json(app: Flask) -> None:
    add_user(app, "alice")
    clients = [logged_in(app, "alice"), logged_in(app, "alice", agent=IPHONE)]
    seen: list[dict[str, Any]] = []

    def receiver(_sender: object, **kwargs: Any) -> None:
        seen.append(kwargs)

    with signals.session_revoked.connected_to(receiver):
        result = run(app, "sessions", "revoke", "--user", "alice")
    # Every session of the user is "log out everywhere": the output says what else ended.
    assert result.exit_code == 0 and result.stdout == "2 session(s) revoked; 0 API token(s) revoked\n"
    assert not any(is_logged_in(c) for c in clients)
    assert [s["reason"] for s in seen] == ["logout_everywhere"] * 2  # the flow's two passes
    logged_in(app, "alice")
    document = run_json(app, "sessions", "revoke", "--user", "alice")
    assert document == {
        "identifier": "alice",
        "tenant": "default",
        "sessions_revoked": 1,
        "sessions_ended": 1,
        "api_tokens_revoked": 0,
        "account_tokens_voided": {},
        "email_change_voided": False,
        "lock_cleared": False,
    }
    assert run_json(app, "sessions", "revoke", "--user", "alice")["sessions_revoked"] == 0


def test_sessions_revoke_one_by_the_hash_the_listing_shows(app: Flask) -> None:
    add_user(app, "carol", tenant="acme")
    laptop = logged_in(app, "carol", tenant="acme", agent=FIREFOX)
    phone = logged_in(app, "carol", tenant="acme", agent=IPHONE)
    listing = run_json(app, "sessions", "list", "--user", "carol", "--tenant", "acme")
    phone_hash = next(d["session_hash"] for d in listing if d["device"] == device_label(IPHONE))
    result = run(
        app, "sessions", "revoke", "--user", "carol", "--tenant", "acme", "--session", phone_hash[:16]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"session {phone_hash[:16]} revoked; the user's other sessions and API tokens are kept\n"
    )
    assert not is_logged_in(phone) and is_logged_in(laptop)
    [laptop_hash] = session_hashes(app, "carol", "acme")
    document = run_json(
        app, "sessions", "revoke", "--user", "carol", "--tenant", "acme", "--session", laptop_hash.upper()
    )
    assert document == {
        "identifier": "carol",
        "tenant": "acme",
        "session_hash": laptop_hash,
        "sessions_revoked": 1,
        "api_tokens_revoked": 0,
    }
    assert not is_logged_in(laptop)


def test_sessions_revoke_never_touches_another_users_session(memory_app: Flask) -> None:
    add_user(memory_app, "alice")
    add_user(memory_app, "bob")
    bob = logged_in(memory_app, "bob")
    logged_in(memory_app, "alice")
    [bob_hash] = session_hashes(memory_app, "bob")
    text = run(memory_app, "sessions", "revoke", "--user", "alice", "--session", bob_hash[:16])
    assert_error(text, "the user has no session")
    as_json = run(memory_app, "sessions", "revoke", "--user", "alice", "--session", bob_hash, "--json")
    assert_json_error(as_json, "session_not_found")
    assert is_logged_in(bob) and len(session_hashes(memory_app, "alice")) == 1


@pytest.mark.parametrize("value", ["abc", "not-hex-at-all", "1234567"])
def test_sessions_revoke_refuses_a_value_that_is_no_hash(memory_app: Flask, value: str) -> None:
    add_user(memory_app, "alice")
    client = logged_in(memory_app, "alice")
    text = run(memory_app, "sessions", "revoke", "--user", "alice", "--session", value)
    assert text.exit_code == 2 and "--session" in text.output and "Traceback" not in text.output
    as_json = run(memory_app, "sessions", "revoke", "--user", "alice", "--session", value, "--json")
    assert_json_error(as_json, "usage_error", "hex", exit_code=2)
    assert is_logged_in(client)


def test_sessions_revoke_unknown_user(memory_app: Flask) -> None:
    assert_error(run(memory_app, "sessions", "revoke", "--user", "nobody"), "no user 'nobody'")
    result = run(memory_app, "sessions", "revoke", "--user", "nobody", "--tenant", "acme", "--json")
    assert_json_error(result, "user_not_found", "tenant 'acme'")


# --- create-user and set-password ------------------------------------------------------------------


def test_create_user_json_and_tenant(app: Flask) -> None:
    document = run_json(
        app, "create-user", "Dora", "--tenant", "acme", "--password-stdin", stdin="dora-passphrase-1\n"
    )
    user = find(app, "dora", "acme")
    assert user is not None and find(app, "dora") is None
    assert document == {
        "id": user.user_id,
        "identifier": "dora",
        "tenant": "acme",
        "disabled": False,
        "email": None,
        "email_verified": False,
        "created_at": user.created_at.isoformat(),
        "locked": False,
        "locked_until": None,
    }
    assert isinstance(login(app, "dora", "dora-passphrase-1", tenant="acme")[1], Authenticated)
    again = run(
        app,
        "create-user",
        "DORA",
        "--tenant",
        "acme",
        "--password-stdin",
        "--json",
        stdin="another long passphrase\n",
    )
    message = assert_json_error(again, "user_exists")
    assert message == "A user with this identifier already exists in the tenant."  # no driver detail


def test_create_user_prompt_goes_to_stderr_under_json(memory_app: Flask) -> None:
    result = run(memory_app, "create-user", "erin", "--json", stdin="erin-passphrase-x\nerin-passphrase-x\n")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["identifier"] == "erin"
    assert "Password" in result.stderr


class TooWeak(AuthFlowError):
    """The password is too weak."""

    code = "weak_password"


def test_create_user_and_set_password_report_the_account_layer_refusal(
    memory_app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_user(memory_app, "alice")

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise TooWeak("the password is too short: use at least 12 characters")

    monkeypatch.setattr(AccountAdmin, "create_user", refuse)
    monkeypatch.setattr(AccountAdmin, "change_password", refuse)
    for command in (["create-user", "bob"], ["set-password", "alice"]):
        text = run(memory_app, *command, "--password-stdin", stdin="short\n")
        assert assert_error(text) == "Error: the password is too short: use at least 12 characters\n"
        as_json = run(memory_app, *command, "--password-stdin", "--json", stdin="short\n")
        assert_json_error(as_json, "weak_password", "at least 12 characters")
    assert find(memory_app, "bob") is None


def test_set_password_json_tenant_and_unknown_user(app: Flask) -> None:
    add_user(app, "carol", tenant="acme")
    client = logged_in(app, "carol", tenant="acme")
    document = run_json(
        app, "set-password", "Carol", "--tenant", "acme", "--password-stdin", stdin="new-passphrase-9\n"
    )
    assert document == {
        "identifier": "carol",
        "tenant": "acme",
        "password_changed": True,
        "sessions_revoked": 1,
        "sessions_ended": 1,
        "api_tokens_revoked": 0,
        "account_tokens_voided": {},
        "email_change_voided": False,
        "lock_cleared": False,
    }
    assert not is_logged_in(client)
    assert isinstance(login(app, "carol", "new-passphrase-9", tenant="acme")[1], Authenticated)
    text = run(app, "set-password", "carol", "--password-stdin", stdin="other-pass\n")
    assert_error(text, "no user 'carol' in tenant 'default'")
    as_json = run(app, "set-password", "nobody", "--password-stdin", "--json", stdin="other-pass\n")
    assert_json_error(as_json, "user_not_found", "'nobody'")


def test_empty_password_under_json_is_a_json_usage_error(memory_app: Flask) -> None:
    result = run(memory_app, "create-user", "erin", "--password-stdin", "--json", stdin="\n")
    assert_json_error(result, "usage_error", "empty", exit_code=2)


# --- users disable / enable / delete ---------------------------------------------------------------


def test_users_disable_enable_json_and_tenant(app: Flask) -> None:
    add_user(app, "carol", tenant="acme")
    client = logged_in(app, "carol", tenant="acme")
    document = run_json(app, "users", "disable", "Carol", "--tenant", "acme")
    assert document == {"identifier": "carol", "tenant": "acme", "disabled": True, "sessions_revoked": 1}
    assert not is_logged_in(client)
    assert isinstance(login(app, "carol", tenant="acme")[1], InvalidCredential)
    assert run_json(app, "users", "list", "--tenant", "acme")[0]["disabled"] is True
    assert run_json(app, "users", "enable", "carol", "--tenant", "acme") == {
        "identifier": "carol",
        "tenant": "acme",
        "disabled": False,
    }
    assert isinstance(login(app, "carol", tenant="acme")[1], Authenticated)
    text = run(app, "users", "enable", "carol", "--tenant", "acme")
    assert text.exit_code == 0 and text.stdout == "user 'carol' enabled\n"


@pytest.mark.parametrize("action", ["disable", "enable", "delete"])
def test_users_actions_on_an_unknown_user(memory_app: Flask, action: str) -> None:
    extra = ["--yes"] if action == "delete" else []
    add_user(memory_app, "carol", tenant="acme")
    assert_error(run(memory_app, "users", action, "carol", *extra), "no user 'carol' in tenant 'default'")
    as_json = run(memory_app, "users", action, "nobody", "--tenant", "acme", *extra, "--json")
    assert_json_error(as_json, "user_not_found", "'nobody'", "tenant 'acme'")
    assert find(memory_app, "carol", "acme") is not None


def test_users_delete_json_and_tenant(app: Flask) -> None:
    add_user(app, "carol", tenant="acme")
    client = logged_in(app, "carol", tenant="acme")
    document = run_json(app, "users", "delete", "carol", "--tenant", "acme", "--yes")
    assert document == {"identifier": "carol", "tenant": "acme", "deleted": True, "sessions_revoked": 1}
    assert find(app, "carol", "acme") is None and not is_logged_in(client)


def test_users_delete_asks_on_stderr_under_json(memory_app: Flask) -> None:
    add_user(memory_app, "alice")
    refused = run(memory_app, "users", "delete", "alice", "--json", stdin="n\n")
    assert_json_error(refused, "aborted")
    assert "delete user 'alice'" in refused.stderr
    assert find(memory_app, "alice") is not None
    text_refused = run(memory_app, "users", "delete", "alice", stdin="n\n")
    assert text_refused.exit_code == 1 and "delete user 'alice'" in text_refused.output  # click's abort
    assert find(memory_app, "alice") is not None
    accepted = run(memory_app, "users", "delete", "alice", "--json", stdin="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert json.loads(accepted.stdout)["deleted"] is True
    assert find(memory_app, "alice") is None


# --- issuer commands -------------------------------------------------------------------------------

ISS = "https://cli-operators.example"


@pytest.fixture
def issuer_app(tmp_path: Path, app_factory: AppFactory) -> Flask:
    return build_app(
        app_factory,
        tmp_path,
        "memory",
        AUTHFLOW_ISSUER=ISS,
        AUTHFLOW_ISSUER_KEY_STORE=f"file:{tmp_path / 'keys'}",
        **LOCKOUT,
    )


def test_rotate_key_json_through_the_whole_procedure(issuer_app: Flask, mock_clock: MockClock) -> None:
    idp = get_state(issuer_app).issuer
    assert idp is not None
    first = idp.current_kid
    assert_json_error(run(issuer_app, "rotate-key", "--json"), "nothing_staged", "nothing is staged")
    staged = run_json(issuer_app, "rotate-key", "--stage", "--kid", "next-key")
    assert staged == {
        "action": "staged",
        "kid": "next-key",
        "algorithm": "ES256",
        "activate_after_seconds": int(idp.jwks_max_age.total_seconds()),
        "jwks_keys": 2,
    }
    mock_clock.advance(idp.jwks_max_age + timedelta(seconds=1))
    activated = run_json(issuer_app, "rotate-key")
    assert activated == {"action": "activated", "kid": "next-key", "algorithm": "ES256", "jwks_keys": 2}
    forced = run_json(issuer_app, "rotate-key", "--force", "--algorithm", "RS256", "--kid", "rsa-key")
    assert forced == {"action": "rotated", "kid": "rsa-key", "algorithm": "RS256", "jwks_keys": 3}
    mock_clock.advance(timedelta(days=2))
    pruned = run_json(issuer_app, "rotate-key", "--prune")
    assert pruned["action"] == "pruned" and first in pruned["pruned"] and "rsa-key" not in pruned["pruned"]
    assert pruned["jwks_keys"] == 3 - len(pruned["pruned"]) == len(idp.jwks()["keys"])
    duplicate = run(issuer_app, "rotate-key", "--force", "--kid", "rsa-key", "--json")
    assert_json_error(duplicate, "duplicate_kid", "rsa-key")


def test_mint_json_gives_the_token_its_kid_and_claims(issuer_app: Flask) -> None:
    document = run_json(issuer_app, "mint", "--sub", "svc", "--aud", "api://one", "--claim", "tier=3")
    idp = get_state(issuer_app).issuer
    assert idp is not None
    assert document["kid"] == idp.current_kid and document["algorithm"] == "ES256"
    assert document["claims"]["sub"] == "svc" and document["claims"]["tier"] == 3
    verifier = JwtVerifier(JwksHandle(idp.jwks())).with_algorithms(["ES256"])
    verified = verifier.verify(document["token"], "api://one", issuer=ISS, clock=idp.clock)
    assert verified.claims["tier"] == 3
    text = run(issuer_app, "mint", "--sub", "svc", "--aud", "api://one")
    assert text.exit_code == 0 and text.stdout.count(".") == 2 and "{" not in text.stdout
    too_long = run(issuer_app, "mint", "--sub", "svc", "--aud", "api://one", "--ttl", "999999", "--json")
    assert_json_error(too_long, "issuance_error", "maximum")


def test_issuer_commands_without_an_issuer(memory_app: Flask) -> None:
    for command in (["rotate-key", "--force"], ["mint", "--sub", "s", "--aud", "a"]):
        assert_error(run(memory_app, *command), "the local issuer is off")
        assert_json_error(run(memory_app, *command, "--json"), "issuer_off", "AUTHFLOW_ISSUER")


# --- audit replay-spool ----------------------------------------------------------------------------

ROW = AuditRecord(time=MockClock().now(), event="logout", status="success", tenant="default", user_id="u1")


def spool_of(app: Flask) -> SpoolAuditSink:
    spool = get_state(app).service.audit_fallback
    assert isinstance(spool, SpoolAuditSink)
    return spool


def test_replay_spool_json(memory_app: Flask) -> None:
    spool = spool_of(memory_app)
    assert run_json(memory_app, "audit", "replay-spool") == {
        "moved": 0,
        "remaining": 0,
        "spool": str(spool.path),
    }
    spool.write(ROW)
    spool.write(ROW)
    backend: InMemoryBackend = get_state(memory_app).backend  # type: ignore[assignment]
    backend.fail_next_write()
    failed = run(memory_app, "audit", "replay-spool", "--json")
    assert_json_error(failed, "audit_unavailable", "2 row(s) remain")
    assert run_json(memory_app, "audit", "replay-spool") == {
        "moved": 2,
        "remaining": 0,
        "spool": str(spool.path),
    }
    assert backend.audit_rows[-2:] == [ROW, ROW]


def test_replay_spool_errors(memory_app: Flask) -> None:
    spool = spool_of(memory_app)
    spool.path.mkdir(parents=True)  # a directory where the spool file should be
    assert_error(run(memory_app, "audit", "replay-spool"), "Is a directory", str(spool.path))
    assert_json_error(run(memory_app, "audit", "replay-spool", "--json"), "os_error", str(spool.path))
    get_state(memory_app).audit_spool = None
    assert_error(run(memory_app, "audit", "replay-spool"), "no audit spool file")
    assert_json_error(run(memory_app, "audit", "replay-spool", "--json"), "no_spool")


# --- a database that cannot be reached, and other failures below the library ------------------------

USER_COMMANDS = [
    ["users", "list"],
    ["users", "list", "--all-tenants"],
    ["users", "disable", "alice"],
    ["users", "enable", "alice"],
    ["users", "unlock", "alice"],
    ["users", "delete", "alice", "--yes"],
    ["sessions", "list", "--user", "alice"],
    ["sessions", "revoke", "--user", "alice"],
    ["sessions", "revoke", "--user", "alice", "--session", "0123456789abcdef"],
    ["set-password", "alice", "--password-stdin"],
    ["create-user", "alice", "--password-stdin"],
]


def unreachable_app(app_factory: AppFactory, url: str) -> Flask:
    """An ``app_factory`` app whose backend is the SQL database at ``url`` (about to go away)."""
    backend = SqlAlchemyBackend(url, create_tables=False)
    return app_factory(backend=backend, session_store=MemorySessionStore())


@pytest.mark.parametrize("command", USER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_sqlite_file_that_cannot_be_opened(
    tmp_path: Path, app_factory: AppFactory, command: list[str]
) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    app = unreachable_app(app_factory, f"sqlite:///{folder / 'authflow.db'}")
    shutil.rmtree(folder)  # the database's folder went away after the app started
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    backend.engine.dispose()  # and no pooled connection still holds the removed file
    text = run(app, *command, stdin="some-password-1\n")
    assert_error(text, "the authentication database is unavailable: ")  # then SQLite's own reason
    as_json = run(app, *command, "--json", stdin="some-password-1\n")
    assert_json_error(as_json, "store_unavailable", "the authentication database is unavailable")


@pytest.mark.parametrize("command", USER_COMMANDS[:3], ids=lambda c: " ".join(c[:2]))
def test_a_postgresql_server_that_is_not_there(app_factory: AppFactory, command: list[str]) -> None:
    url = f"postgresql+psycopg://authflow@127.0.0.1:{free_port()}/authflow?connect_timeout=5"
    app = unreachable_app(app_factory, url)
    message = assert_error(
        run(app, *command, stdin="some-password-1\n"), "the authentication database is unavailable: "
    )
    assert message.partition("unavailable: ")[2].strip()  # the driver's reason follows (in its words)
    assert_json_error(run(app, *command, "--json", stdin="some-password-1\n"), "store_unavailable")


class BrokenBackend(InMemoryBackend):
    """Raises what a store built on other layers might: raw SQLAlchemy and OS errors."""

    error: Exception = OSError()

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None:
        raise self.error

    def list_users(self, tenant: str | None = None) -> list[UserRecord]:
        raise self.error


@pytest.fixture
def broken_app(app_factory: AppFactory) -> Flask:
    return app_factory(backend=BrokenBackend())


def set_error(app: Flask, error: Exception) -> None:
    backend = get_state(app).backend
    assert isinstance(backend, BrokenBackend)
    backend.error = error


def test_a_raw_connection_error_is_reported_as_unreachable(broken_app: Flask) -> None:
    set_error(
        broken_app,
        OperationalError("SELECT * FROM authflow_users", {}, ConnectionRefusedError("connection refused")),
    )
    for command in (["users", "list"], ["users", "unlock", "alice"], ["sessions", "list", "--user", "alice"]):
        message = assert_error(run(broken_app, *command))
        assert message == "Error: the database is unreachable: connection refused\n"
        assert_json_error(
            run(broken_app, *command, "--json"), "store_unavailable", "the database is unreachable"
        )


def test_other_database_errors_keep_statements_and_parameters_out(broken_app: Flask) -> None:
    set_error(
        broken_app,
        IntegrityError(
            "INSERT INTO authflow_users VALUES (?)", {"secret": "hash-xyz"}, Exception("constraint failed")
        ),
    )
    result = run(broken_app, "users", "list")
    assert assert_error(result) == "Error: database error: constraint failed\n"
    assert "hash-xyz" not in result.output and "INSERT" not in result.output


def test_os_errors_are_a_message_with_the_file(broken_app: Flask) -> None:
    set_error(broken_app, PermissionError(13, "Permission denied", "/var/lib/authflow/db"))
    assert (
        assert_error(run(broken_app, "users", "list")) == "Error: Permission denied: /var/lib/authflow/db\n"
    )
    assert_json_error(run(broken_app, "users", "unlock", "x", "--json"), "os_error", "Permission denied")


def test_an_unexpected_exception_is_not_hidden(broken_app: Flask) -> None:
    # Bugs are not operator errors: they keep their traceback for the bug report.
    set_error(broken_app, ZeroDivisionError("bug"))
    result = run(broken_app, "users", "list")
    assert isinstance(result.exception, ZeroDivisionError)
