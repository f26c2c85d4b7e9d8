"""Users of a real Flask-Security-Too 5.9 application, one under each password scheme it
offers and with its HMAC salt, imported from its database and logged in through our login:
each hash is replaced by Argon2id on the way."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow import get_state
from flask_authflow.testing.pytest_plugin import login_test_client
from tests.appfactory import AppFactory

flask_security = pytest.importorskip("flask_security")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

PASSWORD = "correct horse battery staple"
SALT = "the-old-apps-security-password-salt"
#: The schemes Flask-Security-Too offers that flask-authflow verifies (its own defaults).
CARRIED = ["argon2", "bcrypt", "pbkdf2_sha256", "pbkdf2_sha512", "sha256_crypt", "sha512_crypt"]
#: Offered by Flask-Security-Too, never carried over (weak): those users reset their password.
REFUSED = ["des_crypt", "plaintext"]


def build_fst_database(url: str) -> dict[str, str]:
    """A Flask-Security-Too app per scheme on one database; one user each, hashed by FST with
    its HMAC. Returns ``{email: scheme}``."""
    from flask_security import Security, SQLAlchemyUserDatastore, hash_password, verify_password
    from flask_security.models import fsqla_v3 as fsqla
    from flask_sqlalchemy import SQLAlchemy

    db = SQLAlchemy()
    fsqla.FsModels.set_db_info(db)  # type: ignore[attr-defined,no-untyped-call]

    class Role(db.Model, fsqla.FsRoleMixin):  # type: ignore[name-defined,misc]
        pass

    class User(db.Model, fsqla.FsUserMixin):  # type: ignore[name-defined,misc]
        pass

    class WebAuthn(db.Model, fsqla.FsWebAuthnMixin):  # type: ignore[name-defined,misc]
        pass

    made: dict[str, str] = {}
    for scheme in CARRIED + REFUSED:
        app = Flask(f"fst_{scheme}")
        app.config.update(
            TESTING=True,
            SECRET_KEY="fst-secret",
            SECURITY_PASSWORD_SALT=SALT,
            SECURITY_PASSWORD_HASH=scheme,
            SQLALCHEMY_DATABASE_URI=url,
        )
        db.init_app(app)
        datastore = SQLAlchemyUserDatastore(db, User, Role)
        Security(app, datastore)
        with app.app_context():
            db.create_all()
            email = f"{scheme.replace('_', '-')}@example.com"
            user = datastore.create_user(
                email=email, password=hash_password(PASSWORD), confirmed_at=datetime.now(UTC)
            )
            db.session.commit()
            assert user.password is not None and verify_password(PASSWORD, user.password)  # FST logs it in
            made[email] = scheme
            db.session.remove()
        with app.app_context():
            db.engine.dispose()
    return made


@pytest.fixture(scope="module")
def fst_database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The Flask-Security-Too database, built once: ``(file, {email: scheme})``."""
    path = tmp_path_factory.mktemp("fst") / "fst.db"
    return path, build_fst_database(f"sqlite:///{path}")


def fst_copy(fst_database: tuple[Path, dict[str, str]], tmp_path: Path) -> str:
    copy = tmp_path / "fst.db"
    shutil.copyfile(fst_database[0], copy)
    return f"sqlite:///{copy}"


@pytest.mark.slow  # real legacy hashes at their real costs
@pytest.mark.authflow_stores("sql")
def test_every_fst_user_logs_in_and_is_rehashed(
    app_factory: AppFactory, tmp_path: Path, fst_database: tuple[Path, dict[str, str]]
) -> None:
    fst_url = fst_copy(fst_database, tmp_path)
    made = fst_database[1]
    app = app_factory(
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}",
        AUTHFLOW_LEGACY_PASSWORD_SCHEMES=CARRIED,
        AUTHFLOW_LEGACY_PASSWORD_SALT=SALT,
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", fst_url, "--json"]
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    assert report["imported"] == len(CARRIED)
    refused = {item["identifier"]: item["reason"] for item in report["refused"]}
    assert set(refused) == {f"{s.replace('_', '-')}@example.com" for s in REFUSED}
    assert all("of no scheme" in reason for reason in refused.values())
    backend = get_state(app).backend
    for email, scheme in made.items():
        if scheme in REFUSED:
            continue
        with app.app_context():
            user = backend.find_user("default", email)
            assert user is not None, scheme
            assert user.email == email and user.email_verified_at is not None  # confirmed in FST
            before = backend.get_password_hash("default", user.user_id)
        with pytest.raises(RuntimeError, match="failed"):
            login_test_client(app, email, password="not " + PASSWORD)
        login_test_client(app, email, password=PASSWORD)
        with app.app_context():
            after = str(backend.get_password_hash("default", user.user_id))
        assert after != before and after.startswith("$argon2id$"), scheme
        assert get_state(app).hasher.verify(after, PASSWORD)
        login_test_client(app, email, password=PASSWORD)  # and natively from now on
    again = app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", fst_url, "--json"]
    )
    assert json.loads(again.output)["imported"] == 0


@pytest.mark.authflow_stores("sql")
def test_fst_users_are_refused_without_the_salt(
    app_factory: AppFactory, tmp_path: Path, fst_database: tuple[Path, dict[str, str]]
) -> None:
    fst_url = fst_copy(fst_database, tmp_path)
    app: Flask = app_factory(
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}",
        AUTHFLOW_LEGACY_PASSWORD_SCHEMES=CARRIED,
    )
    result = app.test_cli_runner().invoke(args=["authflow", "users", "import", "--from-url", fst_url])
    assert result.exit_code == 0, result.output
    with pytest.raises(RuntimeError, match="failed"):
        login_test_client(app, "bcrypt@example.com", password=PASSWORD)
