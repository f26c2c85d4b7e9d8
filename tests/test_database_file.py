"""The SQLite database holds hashes and keys: created 0600, tightened, or refused; bad URLs named."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flask_authflow import AuthFlow, get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._sql import engine as engine_module
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import base_app


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.authflow_stores("app")  # the default database, in the instance folder
def test_default_database_is_created_0600(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the usual umask, under which SQLite alone would make 0644
    try:
        _default_database_is_private(tmp_path)
    finally:
        os.umask(previous)


def _default_database_is_private(tmp_path: Path) -> None:
    app = base_app(instance_path=tmp_path / "instance")
    AuthFlow(app, hasher=PasswordHasher.fast_for_tests())
    with app.app_context():
        add_user(get_state(app).backend, "default", "alice", "correct horse battery staple")
    db = tmp_path / "instance" / "authflow.db"
    assert mode(db) == 0o600
    for sibling in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        if sibling.exists():
            assert mode(sibling) & 0o077 == 0, sibling
    get_state(app).backend.close()  # type: ignore[attr-defined]


def test_an_existing_world_readable_database_is_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "old.db"
    db.write_bytes(b"")
    db.chmod(0o644)
    backend = SqlAlchemyBackend(f"sqlite:///{db}")
    assert mode(db) == 0o600
    assert "tightened" in caplog.text
    backend.close()


def test_a_database_owned_by_someone_else_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "theirs.db"
    db.write_bytes(b"")
    db.chmod(0o644)
    real_uid = os.geteuid()
    monkeypatch.setattr(engine_module.os, "geteuid", lambda: real_uid + 1)  # as if another user owned it
    with pytest.raises(ConfigurationError, match=rf"AUTHFLOW_DATABASE_URL: .*chmod 600 {db}"):
        SqlAlchemyBackend(f"sqlite:///{db}")
    assert mode(db) == 0o644  # untouched


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "nosuchdb://host/db",
        "sqlite:////proc/definitely/not/here/authflow.db",
    ],
)
@pytest.mark.authflow_stores("sql")  # the configured URL reaches the check
def test_bad_database_urls_are_configuration_errors(tmp_path: Path, url: str) -> None:
    app = base_app(instance_path=tmp_path / "instance", AUTHFLOW_DATABASE_URL=url)
    with pytest.raises(ConfigurationError, match="AUTHFLOW_DATABASE_URL"):
        AuthFlow(app, hasher=PasswordHasher.fast_for_tests())
    assert "authflow" not in app.extensions


def test_a_database_path_under_a_file_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ConfigurationError, match="AUTHFLOW_DATABASE_URL"):
        SqlAlchemyBackend(f"sqlite:///{blocker / 'authflow.db'}")
