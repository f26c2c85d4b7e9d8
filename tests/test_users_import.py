"""``flask authflow users import``: users with their password hashes from CSV, JSON or a
Flask-Security-Too database; refused rows say why; a second run changes nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from flask import Flask
from passlib import hash as passlib_hash  # type: ignore[import-untyped]
from sqlalchemy import Boolean, Column, DateTime, Integer, MetaData, String, Table, create_engine
from werkzeug.security import generate_password_hash

from flask_authflow import AuthFlow, get_state
from flask_authflow.errors import StoreUnavailable
from flask_authflow.login._verification import EmailNotVerified
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory

PASSWORD = "correct horse battery staple"
STORES = ["memory", pytest.param("sqlite", marks=pytest.mark.authflow_stores("sql"))]
LEGACY = {"AUTHFLOW_LEGACY_PASSWORD_SCHEMES": ["bcrypt", "werkzeug", "pbkdf2_sha256"]}


def build_app(app_factory: AppFactory, tmp_path: Path, store: str, **config: Any) -> Flask:
    if store == "sqlite":
        config = {"AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'authflow.db'}", **config}
    app = app_factory(instance_path=tmp_path / f"instance-{store}", **{**LEGACY, **config})
    assert isinstance(get_state(app).backend, InMemoryBackend) is (store == "memory")
    return app


@pytest.fixture(params=STORES)
def app(request: pytest.FixtureRequest, tmp_path: Path, app_factory: AppFactory) -> Flask:
    return build_app(app_factory, tmp_path, request.param)


def run(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", "users", "import", *args])


def bcrypt_hash(secret: str = PASSWORD) -> str:
    return str(passlib_hash.bcrypt.using(rounds=4).hash(secret))


def rows(app: Flask) -> list[dict[str, Any]]:
    return [
        {"identifier": "Alice", "hash": bcrypt_hash(), "email": "alice@example.com", "confirmed": "true"},
        {"identifier": "bob", "hash": generate_password_hash(PASSWORD, "scrypt:1024:8:1"), "tenant": "acme"},
        {"identifier": "carol", "hash": get_state(app).hasher.hash(PASSWORD)},
        {"identifier": "dave", "hash": bcrypt_hash(), "disabled": "yes"},
        {"identifier": "", "hash": bcrypt_hash()},
        {"identifier": "erin", "hash": ""},
        {"identifier": "frank", "hash": "$1$md5crypt$abcdefghijklmnopqrstuv"},
        {"identifier": "grace", "hash": str(passlib_hash.sha512_crypt.using(rounds=1000).hash(PASSWORD))},
        {"identifier": "heidi", "hash": "$2b$20$" + "a" * 53},
        {"identifier": "ivan", "hash": "$2b$12$broken"},
        {"identifier": "judy", "hash": bcrypt_hash(), "disabled": "maybe"},
        {"identifier": "ken\x00", "hash": bcrypt_hash()},
        {"identifier": "mallory", "hash": bcrypt_hash(), "email": "not an address"},
        {"identifier": "alice2", "hash": bcrypt_hash(), "email": "alice@example.com"},
    ]


EXPECTED_REFUSALS = {
    "": "no identifier",
    "erin": "no password hash",
    "frank": "of no scheme",
    "grace": "'sha512_crypt' is not in AUTHFLOW_LEGACY_PASSWORD_SCHEMES",
    "heidi": "over the ceilings",
    "ivan": "malformed",
    "judy": "disabled is not a yes/no value",
    "ken\x00": "identifier",
    "mallory": "the e-mail address is malformed",
    "alice2": "belongs to another user already",
}


def write_csv(path: Path, items: list[dict[str, Any]]) -> Path:
    fields = ["identifier", "email", "hash", "tenant", "disabled", "confirmed"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(items)
    return path


def check_report(result: Result, imported: int, present: int) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    assert (report["imported"], report["already_present"]) == (imported, present)
    refused = {item["identifier"]: item["reason"] for item in report["refused"]}
    assert refused.keys() == EXPECTED_REFUSALS.keys()
    for who, reason in EXPECTED_REFUSALS.items():
        assert reason in refused[who], (who, refused[who])
    return report


def test_csv_import_logs_users_in_and_a_second_run_changes_nothing(app: Flask, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "users.csv", rows(app))
    check_report(run(app, str(source), "--json"), imported=4, present=0)
    backend = get_state(app).backend
    with app.app_context():
        before = {
            u.identifier: backend.get_password_hash(u.tenant, u.user_id) for u in backend.list_users(None)
        }
    assert set(before) == {"alice", "bob", "carol", "dave"}
    check_report(run(app, str(source), "--json"), imported=0, present=4)
    with app.app_context():
        again = {
            u.identifier: backend.get_password_hash(u.tenant, u.user_id) for u in backend.list_users(None)
        }
    assert again == before
    login_test_client(app, "alice", password=PASSWORD)
    login_test_client(app, "bob", tenant="acme", password=PASSWORD)
    login_test_client(app, "carol", password=PASSWORD)
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "dave", password=PASSWORD)  # imported disabled
    with app.app_context():
        alice = backend.find_user("default", "alice")
        assert alice is not None
        assert str(backend.get_password_hash("default", alice.user_id)).startswith("$argon2id$")
        assert alice.email == "alice@example.com" and alice.email_verified_at is not None
        bob = backend.find_user("acme", "bob")
        assert bob is not None and bob.email is None and bob.email_verified_at is None


def test_text_report_names_counts_and_reasons(app: Flask, tmp_path: Path) -> None:
    result = run(app, str(write_csv(tmp_path / "users.csv", rows(app))))
    assert result.exit_code == 0, result.output
    assert "4 imported, 0 already present, 10 refused" in result.output
    assert "refused 'frank': the hash is of no scheme" in result.output
    assert PASSWORD not in result.output and "$2b$" not in result.output


@pytest.mark.parametrize("wrap", [False, True])
def test_json_import(app: Flask, tmp_path: Path, wrap: bool) -> None:
    items = rows(app)
    source = tmp_path / "users.json"
    source.write_text(json.dumps({"users": items} if wrap else items), "utf-8")
    check_report(run(app, str(source), "--json"), imported=4, present=0)
    login_test_client(app, "alice", password=PASSWORD)


def test_json_booleans_and_non_string_fields(app: Flask, tmp_path: Path) -> None:
    source = tmp_path / "users.json"
    items = [
        {"identifier": 7, "hash": bcrypt_hash()},
        {"identifier": "zoe", "hash": bcrypt_hash(), "disabled": True},
    ]
    source.write_text(json.dumps(items), "utf-8")
    result = run(app, str(source), "--json")
    report = json.loads(result.output)
    assert report["imported"] == 1 and report["refused"] == [{"identifier": "7", "reason": "no identifier"}]
    with app.app_context():
        zoe = get_state(app).backend.find_user("default", "zoe")
    assert zoe is not None and zoe.disabled


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.json", "{not json", "is not JSON"),
        ("list.json", '{"people": []}', "expected a list"),
        ("scalars.json", "[1, 2]", "expected a list"),
        ("noheader.csv", "a,b\n1,2\n", "must name at least identifier and hash"),
        ("empty.csv", "", "must name at least identifier and hash"),
    ],
)
def test_malformed_files_fail_cleanly(
    app: Flask, tmp_path: Path, name: str, content: str, message: str
) -> None:
    source = tmp_path / name
    source.write_text(content, "utf-8")
    result = run(app, str(source), "--json")
    assert result.exit_code == 1
    assert message in json.loads(result.output)["message"]
    assert "Traceback" not in result.output


def test_not_utf8_and_usage_errors(app: Flask, tmp_path: Path) -> None:
    source = tmp_path / "latin1.csv"
    source.write_bytes("identifier,hash\nJos\xe9,x\n".encode("latin-1"))
    result = run(app, str(source))
    assert result.exit_code == 1 and "not UTF-8" in result.output
    assert run(app).exit_code == 2
    assert run(app, str(source), "--from-url", "sqlite://").exit_code == 2
    bad_url = run(app, "--from-url", "no-such-dialect://x", "--json")
    assert bad_url.exit_code == 1 and "not a database URL" in json.loads(bad_url.output)["message"]
    no_table = run(app, "--from-url", f"sqlite:///{tmp_path / 'empty.db'}", "--json")
    assert no_table.exit_code == 1 and "no known source" in json.loads(no_table.output)["message"]


def test_a_failed_write_leaves_no_half_created_user(
    app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_state(app).backend

    def fail(*_args: Any) -> None:
        raise StoreUnavailable("database down")

    monkeypatch.setattr(backend, "set_password_hash", fail)
    source = write_csv(tmp_path / "one.csv", [{"identifier": "alice", "hash": bcrypt_hash()}])
    result = run(app, str(source))
    assert result.exit_code == 1
    with app.app_context():
        assert backend.find_user("default", "alice") is None


def fst_like_database(path: Path, items: list[dict[str, Any]]) -> str:
    """A table shaped as Flask-Security-Too's ``user`` table (the columns the import reads)."""
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    table = Table(
        "user",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("email", String(255), unique=True),
        Column("username", String(255), nullable=True),
        Column("password", String(255), nullable=True),
        Column("active", Boolean),
        Column("confirmed_at", DateTime, nullable=True),
        Column("fs_uniquifier", String(64)),
    )
    table.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), items)
    engine.dispose()
    return url


def test_from_url_reads_a_flask_security_table(app: Flask, tmp_path: Path) -> None:
    from datetime import datetime

    url = fst_like_database(
        tmp_path / "fst.db",
        [
            {"email": "a@example.com", "username": None, "password": bcrypt_hash(), "active": True,
             "confirmed_at": datetime(2024, 1, 1), "fs_uniquifier": "u1"},
            {"email": "b@example.com", "username": "bee", "password": bcrypt_hash(), "active": False,
             "confirmed_at": None, "fs_uniquifier": "u2"},
            {"email": "c@example.com", "username": None, "password": None, "active": True,
             "confirmed_at": None, "fs_uniquifier": "u3"},
        ],
    )  # fmt: skip
    salt_missing = run(app, "--from-url", url, "--json")  # FST hashes an HMAC under its salt
    assert salt_missing.exit_code == 1
    assert "AUTHFLOW_LEGACY_PASSWORD_SALT" in json.loads(salt_missing.output)["message"]
    with app.app_context():
        assert get_state(app).backend.find_user("default", "a@example.com") is None
    app.config["SECURITY_PASSWORD_SINGLE_HASH"] = True  # these hashes are of the passwords themselves
    result = run(app, "--from-url", url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert any("SECURITY_PASSWORD_SINGLE_HASH" in notice for notice in report["notices"])
    assert report["imported"] == 2
    assert report["refused"] == [{"identifier": "c@example.com", "reason": "no password hash"}]
    login_test_client(app, "a@example.com", password=PASSWORD)
    with app.app_context():
        bee = get_state(app).backend.find_user("default", "bee")
    assert bee is not None and bee.disabled
    assert json.loads(run(app, "--from-url", url, "--json").output)["imported"] == 0


@pytest.mark.parametrize("store", STORES)
def test_the_application_user_hook_runs_for_each_imported_user(
    app_factory: AppFactory, tmp_path: Path, store: str
) -> None:
    authflow = AuthFlow()
    app = build_app(app_factory, tmp_path, store, authflow=authflow)
    seen: list[tuple[str, str]] = []

    @authflow.user_created
    def created(new: Any) -> None:
        if new.account.identifier == "bad":
            raise RuntimeError("the application refuses this user")
        seen.append((new.account.identifier, new.source))

    items = [
        {"identifier": "alice", "hash": bcrypt_hash(), "email": "a@example.com", "confirmed": "yes"},
        {"identifier": "bad", "hash": bcrypt_hash()},
    ]
    result = run(app, str(write_csv(tmp_path / "hooked.csv", items)), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["refused"] == [
        {"identifier": "bad", "reason": "the application's user_created hook failed (RuntimeError)"}
    ]
    assert seen == [("alice", "import")]
    with app.app_context():
        backend = get_state(app).backend
        assert backend.find_user("default", "bad") is None  # removed with the hook's failure
        alice = backend.find_user("default", "alice")
    assert alice is not None and alice.email == "a@example.com" and alice.email_verified_at is not None
    login_test_client(app, "alice", password=PASSWORD)


@pytest.mark.parametrize("store", STORES)
def test_an_unconfirmed_address_is_gated_as_after_sign_up(
    app_factory: AppFactory, tmp_path: Path, store: str
) -> None:
    """A user who had not confirmed the address is refused after the password, as an account
    made by sign-up is, until the address is confirmed."""
    app = build_app(app_factory, tmp_path, store)
    items = [{"identifier": "carol", "hash": bcrypt_hash(), "email": "c@example.com", "confirmed": "no"}]
    result = run(app, str(write_csv(tmp_path / "carol.csv", items)), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["users"][0]["asked"] == ["confirm the e-mail address"]
    assert document["summary"]["asked"] == 1
    with pytest.raises(EmailNotVerified):
        login_test_client(app, "carol", password=PASSWORD)


@pytest.mark.parametrize("store", STORES)
def test_the_hook_is_told_the_source_attributes(app_factory: AppFactory, tmp_path: Path, store: str) -> None:
    """With ``--from-url`` the ``user_created`` hook gets ``fs_uniquifier`` (and the old id) as
    claims, so the application links its existing row instead of making one."""
    authflow = AuthFlow()
    app = build_app(app_factory, tmp_path, store, authflow=authflow)
    app.config["SECURITY_PASSWORD_SINGLE_HASH"] = True
    linked: dict[str, dict[str, Any]] = {}

    @authflow.user_created
    def created(new: Any) -> None:
        linked[new.account.identifier] = {"source": new.source, **new.claims}

    from datetime import datetime

    url = fst_like_database(
        tmp_path / "fst.db",
        [{"id": 7, "email": "a@example.com", "username": None, "password": bcrypt_hash(), "active": True,
          "confirmed_at": datetime(2024, 1, 1), "fs_uniquifier": "uniq-7"}],
    )  # fmt: skip
    assert run(app, "--from-url", url).exit_code == 0
    assert linked == {"a@example.com": {"source": "import", "fs_uniquifier": "uniq-7", "fst_id": "7"}}
