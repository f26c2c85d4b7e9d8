"""``users import --dry-run`` (the plan, per user, writing nothing), the refusal of a run that
would lower users, and the source database's password kept off the command line."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import URL

from flask_authflow import get_state
from flask_authflow._cli.importing import sources
from flask_authflow._cli.importing.model import ImportedUser, TotpFactor, Unreadable
from flask_authflow._cli.importing.plan import PlanContext, plan_user
from flask_authflow.login._legacy_hashes import LegacyHashes
from tests.appfactory import AppFactory
from tests.test_users_import import bcrypt_hash, build_app, fst_like_database, run, write_csv

FST_ROW = {
    "email": "a@example.com", "username": None, "active": True,
    "confirmed_at": datetime(2024, 1, 1), "fs_uniquifier": "u1",
}  # fmt: skip


@pytest.fixture
def app(app_factory: AppFactory, tmp_path: Path) -> Flask:
    built = build_app(app_factory, tmp_path, "memory")
    built.config["SECURITY_PASSWORD_SINGLE_HASH"] = True
    return built


def test_a_dry_run_prints_each_user_and_writes_nothing(app: Flask, tmp_path: Path) -> None:
    items = [
        {
            "identifier": "alice",
            "hash": bcrypt_hash(),
            "email": "a@example.com",
            "confirmed": "yes",
            "disabled": "no",
        },
        {"identifier": "carol", "hash": bcrypt_hash(), "email": "c@example.com", "confirmed": "no"},
        {"identifier": "frank", "hash": "$1$md5crypt$abcdefghijklmnopqrstuv"},
    ]
    source = write_csv(tmp_path / "users.csv", items)
    text = run(app, str(source), "--dry-run")
    assert text.exit_code == 0, text.output
    assert "alice: carries password, e-mail address (verified)" in text.output
    assert "asked: confirm the e-mail address" in text.output
    assert "frank: refused (" in text.output
    assert "dry run: 2 would be imported, 1 refused" in text.output.splitlines()
    assert "1 will be asked at the next sign-in: carol (confirm the e-mail address)" in text.output
    document = json.loads(run(app, str(source), "--dry-run", "--json").output)
    assert document["dry_run"] is True and document["imported"] == 0
    assert document["summary"] == {"users": 3, "carried": 2, "asked": 1, "lowered": 0, "refused": 1}
    # bcrypt hashes and no salt: if they come from Flask-Security-Too, they will not match.
    assert any("AUTHFLOW_LEGACY_PASSWORD_SALT is not set" in notice for notice in document["notices"])
    with app.app_context():
        assert get_state(app).backend.list_users() == []


def plan_context(app: Flask, accept: bool, registered: frozenset[str] = frozenset({"totp"})) -> PlanContext:
    state = get_state(app)
    legacy = LegacyHashes(["bcrypt"])
    return PlanContext("default", state.hasher, legacy, lambda kind: kind in registered, accept)


def test_the_plan_lowers_nothing_in_silence(app: Flask) -> None:
    """A factor that cannot be carried is lowered (and required when accepted); a TOTP of a
    shape we do not verify, or a kind the app cannot set up again, the same or refused."""
    user = ImportedUser(
        "dave",
        bcrypt_hash(),
        unreadable=(Unreadable("totp", "no key"),),
        factors=(TotpFactor(b"k" * 20, digits=8),),
    )
    refused_run = plan_user(user, plan_context(app, accept=False))
    assert (
        refused_run.lowered == ["totp: 8 digits / 30 s / SHA1", "totp: no key"] and refused_run.required == []
    )
    accepted = plan_user(user, plan_context(app, accept=True))
    assert accepted.required == ["totp"] and accepted.asked == ["set up totp again"]
    cannot = plan_user(user, plan_context(app, accept=True, registered=frozenset()))
    assert cannot.refused is not None and "cannot set it up again" in cannot.refused


def capture_urls(monkeypatch: pytest.MonkeyPatch) -> list[URL]:
    seen: list[URL] = []
    real = sources.create_engine

    def spy(url: URL, **kwargs: Any) -> Any:  # SQLite takes no password: the engine gets it without
        seen.append(url)
        return real(URL.create(url.drivername, database=url.database), **kwargs)

    monkeypatch.setattr(sources, "create_engine", spy)
    return seen


def test_the_password_comes_from_the_environment(
    app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fst_like_database(tmp_path / "fst.db", [{**FST_ROW, "password": bcrypt_hash()}])
    seen = capture_urls(monkeypatch)
    monkeypatch.setenv(sources.PASSWORD_VARIABLE, "from-the-environment")
    result = run(app, "--from-url", url, "--json")
    assert result.exit_code == 0, result.output
    assert [u.password for u in seen] == ["from-the-environment"]
    assert "from-the-environment" not in result.output
    assert not any("carries a password" in n for n in json.loads(result.output)["notices"])


def test_the_password_is_asked_for(app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = fst_like_database(tmp_path / "fst.db", [{**FST_ROW, "password": bcrypt_hash()}])
    seen = capture_urls(monkeypatch)
    monkeypatch.setenv(sources.PASSWORD_VARIABLE, "not this one")
    result = app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", url, "--password-prompt"], input="typed-secret\n"
    )
    assert result.exit_code == 0, result.output
    assert [u.password for u in seen] == ["typed-secret"]
    assert "typed-secret" not in result.output  # a hidden prompt echoes nothing
    assert run(app, "some.csv", "--password-prompt").exit_code == 2  # only with --from-url


def test_a_password_in_the_url_is_warned_about(
    app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fst.db"
    fst_like_database(path, [{**FST_ROW, "password": bcrypt_hash()}])
    capture_urls(monkeypatch)
    result = run(app, "--from-url", f"sqlite://user:on-the-command-line@/{path}", "--json")
    assert result.exit_code == 0, result.output
    assert any("carries a password" in n for n in json.loads(result.output)["notices"])


def test_database_url_sets_only_the_password() -> None:
    url = sources.database_url("postgresql://importer@db.internal:5433/fst", "s3cret")
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "importer", "s3cret", "db.internal", 5433, "fst",
    )  # fmt: skip
    assert sources.database_url("postgresql://importer@db/fst", None).password is None
