"""A database that ``init_app`` cannot open makes every ``flask authflow`` command print one
error line (what failed, what to check) and exit 1, as docs/cli.rst promises, never the
traceback of the app's import: an unreachable PostgreSQL URL, a real server whose database
does not exist, a SQLite path that is a folder, a file that is not a database and a folder
that does not exist. Under ``--json`` the line is the JSON error. Outside the CLI the app
still refuses to start with the error itself."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.cli import FlaskGroup
from sqlalchemy.exc import OperationalError

from flask_authflow import AuthFlow
from flask_authflow.errors import ConfigurationError
from tests.parts import PostgresServer

# The app's own SQL stores on the configured URL, as an operator's app has them.
pytestmark = pytest.mark.authflow_stores("sql")

UNREACHABLE = "postgresql://127.0.0.1:1/x"
#: One command of each group, as an operator would type it.
COMMANDS = [
    ["users", "list"],
    ["sessions", "list", "--user", "alice"],
    ["roles", "list"],
    ["tokens", "list", "alice"],
    ["factors", "list", "alice"],
    ["devices", "list", "--user", "alice"],
    ["audit", "prune", "--older-than", "400"],
    ["db", "upgrade"],
    ["db", "current"],
    ["create-user", "carol", "--password-stdin"],
    ["set-password", "alice", "--password-stdin"],
]


def app_factory(url: str, tmp_path: Path) -> Callable[[], Flask]:
    def create_app() -> Flask:
        app = Flask("cli_store_errors", instance_path=str(tmp_path / "instance"))
        app.config.update(AUTHFLOW_SIGNING_KEY=secrets.token_urlsafe(48), AUTHFLOW_DATABASE_URL=url)
        AuthFlow(app)
        return app

    return create_app


def run(url: str, tmp_path: Path, args: list[str]) -> tuple[int, str]:
    """``flask authflow ARGS`` through the Flask CLI, loading the app as ``flask`` does."""
    cli = FlaskGroup(create_app=app_factory(url, tmp_path))
    result = CliRunner().invoke(cli, ["authflow", *args], input="a long enough password 42\n")
    return result.exit_code, result.output


def assert_one_line(code: int, output: str, *fragments: str) -> str:
    lines = output.strip().splitlines()
    assert code == 1, output
    assert len(lines) == 1, output
    assert "Traceback" not in output
    assert lines[0].startswith("Error: "), lines
    assert "AUTHFLOW_DATABASE_URL" in lines[0]  # what to check
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_an_unreachable_server_is_one_line_for_every_group(tmp_path: Path, args: list[str]) -> None:
    code, output = run(UNREACHABLE, tmp_path, args)
    assert_one_line(code, output, "unreachable", "127.0.0.1:1")


def test_the_password_of_the_url_is_not_shown(tmp_path: Path) -> None:
    code, output = run("postgresql://operator:hunter2-secret@127.0.0.1:1/x", tmp_path, ["users", "list"])
    line = assert_one_line(code, output, "operator:***@127.0.0.1:1")
    assert "hunter2-secret" not in line


def test_a_sqlite_path_that_is_a_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    for args in COMMANDS[:3]:
        assert_one_line(*run(f"sqlite:///{folder}", tmp_path, args))


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not an SQLite database, only text " * 200)
    garbage.chmod(0o600)
    assert_one_line(*run(f"sqlite:///{garbage}", tmp_path, ["users", "list"]))


def test_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    assert_one_line(*run(f"sqlite:///{tmp_path}/no/such/folder/a.db", tmp_path, ["users", "list"]), "folder")


def test_a_real_server_without_the_database_is_one_line(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.url("no_such_database_here")
    for args in (["users", "list"], ["db", "upgrade"], ["sessions", "list", "--user", "alice"]):
        assert_one_line(*run(url, tmp_path, args), "no_such_database_here")


@pytest.mark.slow  # a fresh interpreter per flask command
def test_the_flask_command_itself_prints_one_line_and_json(tmp_path: Path) -> None:
    """The real ``flask`` program, as an operator runs it (text, then ``--json``)."""
    (tmp_path / "app.py").write_text(
        "from flask import Flask\nfrom flask_authflow import AuthFlow\n"
        "app = Flask(__name__)\n"
        f"app.config.update(AUTHFLOW_SIGNING_KEY={secrets.token_urlsafe(48)!r})\n"
        f"app.config.update(AUTHFLOW_DATABASE_URL={UNREACHABLE!r})\n"
        "AuthFlow(app)\n"
    )
    flask = [sys.executable, "-m", "flask", "--app", "app", "authflow"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    text = subprocess.run(
        [*flask, "users", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert text.stdout == ""
    assert_one_line(text.returncode, text.stderr, "unreachable")
    as_json = subprocess.run(
        [*flask, "users", "list", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert as_json.returncode == 1 and len(as_json.stdout.strip().splitlines()) == 1
    document = json.loads(as_json.stdout)
    assert document["error"] == "store_unavailable" and "AUTHFLOW_DATABASE_URL" in document["message"]


def test_outside_the_cli_the_app_refuses_with_the_error_itself(tmp_path: Path) -> None:
    with pytest.raises(OperationalError):
        app_factory(UNREACHABLE, tmp_path)()
    with pytest.raises(ConfigurationError):
        app_factory(f"sqlite:///{tmp_path}/no/such/folder/a.db", tmp_path)()


@pytest.mark.slow  # waits out SQLite's busy timeout
def test_a_locked_sqlite_file_is_one_line(tmp_path: Path) -> None:
    """Another process holds the file's write lock: a command that writes waits its busy
    timeout, then ends with one line (what failed), not a traceback."""
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    assert run(url, tmp_path, ["users", "list"])[0] == 0  # the file exists, at head
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        code, output = run(url, tmp_path, ["create-user", "carol", "--password-stdin"])
    finally:
        holder.close()
    lines = output.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("Error: ") and "locked" in lines[0], output
    assert run(url, tmp_path, ["create-user", "carol", "--password-stdin"])[0] == 0  # and a retry works
