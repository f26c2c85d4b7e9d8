"""The ``flask authflow`` command group: users, passwords and sessions."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from flask import Flask

from flask_authflow import get_state
from flask_authflow._cli import authflow_cli
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory


@pytest.fixture
def app(app_factory: AppFactory) -> Flask:
    app = app_factory()

    @app.get("/who")
    def who() -> str:
        from flask_authflow import current_session

        return current_session.state.value

    return app


def test_create_user_from_stdin_then_login(app: Flask) -> None:
    runner = app.test_cli_runner()
    result = runner.invoke(
        args=["authflow", "create-user", "Alice", "--password-stdin"], input="s3cret-passphrase-1\n"
    )
    assert result.exit_code == 0, result.output
    assert "created user 'alice'" in result.output
    assert "s3cret-passphrase-1" not in result.output
    client = login_test_client(app, "alice", password="s3cret-passphrase-1")
    assert client.get("/who").text == "authenticated"


def test_create_user_prompts_with_confirmation(app: Flask) -> None:
    runner = app.test_cli_runner()
    result = runner.invoke(
        args=["authflow", "create-user", "bob", "--tenant", "acme"],
        input="pw-one-long-enough\npw-one-long-enough\n",
    )
    assert result.exit_code == 0, result.output
    with app.app_context():
        assert get_state(app).backend.find_user("acme", "bob") is not None
        assert get_state(app).backend.find_user("default", "bob") is None


def test_create_user_mismatched_confirmation_fails(app: Flask) -> None:
    """A password and a confirmation that differ are not used: the password is asked again, and
    the account gets the one that was confirmed (how click words the mismatch is its own)."""
    first, confirmed = "first-long-passphrase", "the-confirmed-passphrase"
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "bob"], input=f"{first}\n{confirmed}x\n{confirmed}\n{confirmed}\n"
    )
    assert result.exit_code == 0, result.output
    assert login_test_client(app, "bob", password=confirmed).get("/who").text == "authenticated"
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "bob", password=first)


def test_password_is_never_an_argument(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["authflow", "create-user", "carol", "--password", "x"])
    assert result.exit_code == 2  # click's usage error (its wording is its own)
    with app.app_context():
        assert get_state(app).backend.find_user("default", "carol") is None


def test_duplicate_user_is_a_clean_error(app: Flask) -> None:
    runner = app.test_cli_runner()
    runner.invoke(args=["authflow", "create-user", "dave", "--password-stdin"], input="first-pass\n")
    again = runner.invoke(args=["authflow", "create-user", "DAVE", "--password-stdin"], input="second-pass\n")
    assert again.exit_code == 1
    assert "Error" in again.output
    assert "Traceback" not in again.output


def test_empty_password_refused(app: Flask) -> None:
    result = app.test_cli_runner().invoke(
        args=["authflow", "create-user", "erin", "--password-stdin"], input="\n"
    )
    assert result.exit_code != 0
    assert "empty" in result.output


def test_set_password_revokes_sessions(app: Flask) -> None:
    runner = app.test_cli_runner()
    runner.invoke(
        args=["authflow", "create-user", "frank", "--password-stdin"], input="old-passphrase-here\n"
    )
    client = login_test_client(app, "frank", password="old-passphrase-here")
    assert client.get("/who").text == "authenticated"
    result = runner.invoke(
        args=["authflow", "set-password", "frank", "--password-stdin"], input="new-passphrase-here\n"
    )
    assert result.exit_code == 0, result.output
    assert "1 session(s) revoked" in result.output
    assert client.get("/who").text == "guest"
    assert login_test_client(app, "frank", password="new-passphrase-here").get("/who").text == "authenticated"


def test_set_password_unknown_user(app: Flask) -> None:
    result = app.test_cli_runner().invoke(
        args=["authflow", "set-password", "nobody", "--password-stdin"], input="x-pass\n"
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output


def test_sessions_list_and_revoke(app: Flask) -> None:
    runner = app.test_cli_runner()
    runner.invoke(args=["authflow", "create-user", "gina", "--password-stdin"], input="gina-password\n")
    first = login_test_client(app, "gina", password="gina-password")
    second = login_test_client(app, "gina", password="gina-password")
    listing = runner.invoke(args=["authflow", "sessions", "list", "--user", "gina"])
    assert listing.exit_code == 0, listing.output
    assert "2 session(s)" in listing.output
    assert "authenticated" in listing.output
    revoke = runner.invoke(args=["authflow", "sessions", "revoke", "--user", "gina"])
    assert "2 session(s) revoked" in revoke.output
    assert first.get("/who").text == "guest"
    assert second.get("/who").text == "guest"
    unknown = runner.invoke(args=["authflow", "sessions", "list", "--user", "nobody"])
    assert unknown.exit_code == 1
    assert "no user 'nobody'" in unknown.output


# --- the shape every command shares ------------------------------------------------------------------


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    found: dict[tuple[str, ...], click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, (*prefix, name)))
        else:
            found[(*prefix, name)] = command
    return found


COMMANDS = leaf_commands(authflow_cli)
USER_AND_SESSION_COMMANDS = [
    path for path in COMMANDS if path[0] in ("users", "sessions", "create-user", "set-password")
]


def test_the_group_has_the_operator_commands() -> None:
    assert set(COMMANDS) >= {
        ("create-user",),
        ("set-password",),
        ("sessions", "list"),
        ("sessions", "revoke"),
        ("users", "list"),
        ("users", "disable"),
        ("users", "enable"),
        ("users", "unlock"),
        ("users", "delete"),
        ("rotate-key",),
        ("mint",),
        ("audit", "replay-spool"),
    }


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_takes_json(path: tuple[str, ...]) -> None:
    options = {opt for param in COMMANDS[path].params for opt in getattr(param, "opts", [])}
    assert "--json" in options


@pytest.mark.parametrize("path", sorted(USER_AND_SESSION_COMMANDS), ids=" ".join)
def test_every_user_and_session_command_takes_tenant(path: tuple[str, ...]) -> None:
    options = {opt for param in COMMANDS[path].params for opt in getattr(param, "opts", [])}
    assert "--tenant" in options


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_is_run_by_a_test(path: tuple[str, ...]) -> None:
    # A new command without a test that runs it fails here.
    sources = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    spelled = ", ".join(f'"{part}"' for part in path)
    assert spelled in sources, f"no test runs {' '.join(path)!r}"


def test_help_lists_every_command(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["authflow", "users", "--help"])
    assert result.exit_code == 0
    for name in ("list", "disable", "enable", "unlock", "delete"):
        assert name in result.output
    sessions = app.test_cli_runner().invoke(args=["authflow", "sessions", "revoke", "--help"])
    assert "--session HASH" in sessions.output and "--json" in sessions.output
