"""Users of a real Flask-Security-Too 5.9 application, with everything it stores, imported from
its database and signed in through our pages with exactly the factors they had.

The FST database is built once per module: argon2 and bcrypt users under its HMAC salt, roles
with permissions, confirmed and unconfirmed addresses, a disabled user, TOTP (passlib's
encrypted JSON under ``SECURITY_TOTP_SECRETS``) with encrypted recovery codes, e-mail
two-factor, and a WebAuthn key registered by a software authenticator (verified by the same
``webauthn`` library FST uses) in FST's ``webauthn`` table.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyotp
import pytest
from cryptography.fernet import Fernet
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow import AuthFlow, get_state, login_required, permissions_required, roles_required
from flask_authflow._clock import MockClock
from flask_authflow._core.session import AuthState
from flask_authflow.testing import Outbox
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory
from tests.test_views import csrf_of, factor_step, hidden_value, login
from tests.webauthn_soft import SoftAuthenticator

flask_security = pytest.importorskip("flask_security")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

PASSWORD = "correct horse battery staple"
SALT = "the-old-apps-security-password-salt"
TOTP_SECRETS = {"1": "the-old-apps-totp-secret-of-32-characters"}
RECOVERY_KEYS = [Fernet.generate_key()]
RP_ID, ORIGIN = "example.com", "https://example.com"
#: The schemes Flask-Security-Too offers that flask-authflow verifies (its own defaults).
CARRIED = ["argon2", "bcrypt", "pbkdf2_sha256", "pbkdf2_sha512", "sha256_crypt", "sha512_crypt"]
#: Offered by Flask-Security-Too, never carried over (weak): those users reset their password.
REFUSED = ["des_crypt", "plaintext"]


@dataclass
class FstWorld:
    """The FST database file, each user's TOTP secret as FST stored it, the recovery codes
    FST showed, and the authenticator that holds gwen's key."""

    path: Path
    totp: dict[str, str]
    recovery: dict[str, list[str]]
    authenticator: SoftAuthenticator
    passkey: SoftAuthenticator | None = None


def _fst_models() -> tuple[Any, Any, Any, Any]:
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

    return db, User, Role, WebAuthn


def _fst_app(db: Any, models: tuple[Any, Any, Any], url: str, scheme: str) -> tuple[Flask, Any]:
    from flask_security import Security, SQLAlchemyUserDatastore

    app = Flask(f"fst_{scheme}")
    app.config.update(
        TESTING=True,
        SECRET_KEY="fst-secret",
        SECURITY_PASSWORD_SALT=SALT,
        SECURITY_PASSWORD_HASH=scheme,
        SQLALCHEMY_DATABASE_URI=url,
        SECURITY_TOTP_SECRETS=TOTP_SECRETS,
        SECURITY_TOTP_ISSUER="The old app",
        SECURITY_MULTI_FACTOR_RECOVERY_CODES=True,
        SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS=RECOVERY_KEYS,
    )
    db.init_app(app)
    user, role, webauthn = models
    datastore = SQLAlchemyUserDatastore(db, user, role, webauthn)
    Security(app, datastore)
    return app, datastore


def _webauthn_key(user: Any, datastore: Any, handle: str, usage: str = "secondary") -> SoftAuthenticator:
    """Register a key the way FST does (py_webauthn's options and verification) and store it
    in FST's table with FST's datastore; a ``first`` key is a discoverable passkey."""
    from webauthn import generate_registration_options, options_to_json, verify_registration_response

    user.fs_webauthn_user_handle = handle
    options = generate_registration_options(
        rp_id=RP_ID,
        rp_name="The old app",
        user_id=user.fs_webauthn_user_handle.encode(),
        user_name=user.email,
    )
    authenticator = SoftAuthenticator(origin=ORIGIN)
    response, _ = authenticator.register(json.loads(options_to_json(options)), discoverable=usage == "first")
    verified = verify_registration_response(
        credential=response,
        expected_challenge=options.challenge,
        expected_rp_id=RP_ID,
        expected_origin=ORIGIN,
    )
    datastore.create_webauthn(
        user,
        credential_id=verified.credential_id,
        public_key=verified.credential_public_key,
        name="Blue key",
        sign_count=verified.sign_count,
        usage=usage,
        device_type=verified.credential_device_type,
        backup_state=verified.credential_backed_up,
        transports=["usb"],
    )
    return authenticator


def _add_everyone(app: Flask, datastore: Any, db: Any, world: FstWorld) -> None:
    """The argon2 app's users: every feature in use."""
    from flask_security import hash_password
    from flask_security.recovery_codes import MfRecoveryCodesUtil
    from flask_security.totp import Totp

    admin = datastore.create_role(name="admin", permissions=["users:read", "users:write"])
    datastore.create_role(name="editor", permissions=["posts:write"])
    now = datetime.now(UTC)

    def make(email: str, **fields: Any) -> Any:
        return datastore.create_user(email=email, password=hash_password(PASSWORD), **fields)

    make("alice@example.com", confirmed_at=now, roles=[admin])
    make("carol@example.com", confirmed_at=None)
    make("frank@example.com", confirmed_at=now, active=False)
    dave = make("dave@example.com", confirmed_at=now)
    secret = Totp(TOTP_SECRETS, "The old app").generate_totp_secret()
    dave.tf_totp_secret, dave.tf_primary_method = secret, "authenticator"
    world.totp["dave@example.com"] = secret
    world.recovery["dave@example.com"] = MfRecoveryCodesUtil(app).create_recovery_codes(dave)
    erin = make("erin@example.com", confirmed_at=now)
    erin.tf_totp_secret = Totp(TOTP_SECRETS, "The old app").generate_totp_secret()
    erin.tf_primary_method = "email"
    gwen = make("gwen@example.com", confirmed_at=now)
    world.authenticator = _webauthn_key(gwen, datastore, "a3c5e7f9" * 4)
    hana = make("hana@example.com", confirmed_at=now)
    world.passkey = _webauthn_key(hana, datastore, "b4d6f8a0" * 4, usage="first")
    db.session.commit()


def build_fst_database(path: Path) -> FstWorld:
    """The FST database: ``bob`` under bcrypt (role editor), everyone else under argon2."""
    world = FstWorld(path, {}, {}, SoftAuthenticator(origin=ORIGIN))
    db, user, role, webauthn = _fst_models()
    url = f"sqlite:///{path}"
    app, datastore = _fst_app(db, (user, role, webauthn), url, "argon2")
    with app.app_context():
        db.create_all()
        _add_everyone(app, datastore, db, world)
        db.session.remove()
        db.engine.dispose()
    app, datastore = _fst_app(db, (user, role, webauthn), url, "bcrypt")
    with app.app_context():
        from flask_security import hash_password

        editor = datastore.find_role("editor")
        datastore.create_user(
            email="bob@example.com",
            password=hash_password(PASSWORD),
            confirmed_at=datetime.now(UTC),
            roles=[editor],
        )
        db.session.commit()
        db.session.remove()
        db.engine.dispose()
    return world


@pytest.fixture(scope="module")
def fst_world(tmp_path_factory: pytest.TempPathFactory) -> FstWorld:
    return build_fst_database(tmp_path_factory.mktemp("fst") / "fst.db")


def fst_copy(world: FstWorld, tmp_path: Path) -> str:
    copy = tmp_path / "fst-copy.db"
    shutil.copyfile(world.path, copy)
    return f"sqlite:///{copy}"


def migrated_app(app_factory: AppFactory, tmp_path: Path, outbox: Outbox, **config: Any) -> Flask:
    """The new application: SQL store, the old app's keys, WebAuthn on the same RP id, and
    the views FST guarded by role and permission."""
    settings: dict[str, Any] = {
        "AUTHFLOW_VIEWS": True,
        "AUTHFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'authflow.db'}",
        "AUTHFLOW_LEGACY_PASSWORD_SCHEMES": ["argon2", "bcrypt"],
        "AUTHFLOW_LEGACY_PASSWORD_SALT": SALT,
        "AUTHFLOW_WEBAUTHN_RP_ID": RP_ID,
        "AUTHFLOW_WEBAUTHN_ORIGINS": [ORIGIN],
        "AUTHFLOW_PASSKEY_LOGIN": True,
        "SECURITY_TOTP_SECRETS": TOTP_SECRETS,
        "SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS": RECOVERY_KEYS,
    }
    settings.update(config)
    app = app_factory(
        authflow=AuthFlow(), mail_sender=outbox, **{k: v for k, v in settings.items() if v is not None}
    )

    @app.get("/admin")
    @roles_required("admin")
    def admin() -> str:
        return "admin page"

    @app.get("/posts/new")
    @permissions_required("posts:write")
    def new_post() -> str:
        return "new post"

    @app.get("/private")
    @login_required
    def private() -> str:
        return "private page"

    return app


def run_import(app: Flask, url: str, *args: str) -> Any:
    return app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", url, "--json", *args]
    )


def totp_code(world: FstWorld, email: str, clock: MockClock) -> str:
    """The code dave's authenticator app shows now, from the secret FST stored."""
    from passlib.totp import TOTP  # type: ignore[import-untyped]

    opened = TOTP.using(secrets=TOTP_SECRETS).from_json(world.totp[email])
    return str(opened.generate(time=clock.now().timestamp()).token)


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def imported(
    app_factory: AppFactory, tmp_path: Path, fst_world: FstWorld, outbox: Outbox
) -> Iterator[tuple[Flask, dict[str, Any]]]:
    app = migrated_app(app_factory, tmp_path, outbox)
    result = run_import(app, fst_copy(fst_world, tmp_path))
    assert result.exit_code == 0, result.output
    yield app, json.loads(result.output)


def client_of(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.mark.authflow_stores("sql")
def test_the_report_says_what_carries_for_each_user(imported: tuple[Flask, dict[str, Any]]) -> None:
    _, report = imported
    assert report["source"] == "flask-security-too" and report["refused"] == []
    assert report["imported"] == 8 and report["summary"]["lowered"] == 0
    users = {u["identifier"]: u for u in report["users"]}
    assert "authenticator app (TOTP)" in users["dave@example.com"]["carried"]
    assert any(item.startswith("recovery codes") for item in users["dave@example.com"]["carried"])
    assert "e-mail codes" in users["erin@example.com"]["carried"]
    assert "security key (second factor)" in users["gwen@example.com"]["carried"]
    assert "passkey" in users["hana@example.com"]["carried"]
    assert "disabled" in users["frank@example.com"]["carried"]
    assert users["carol@example.com"]["asked"] == ["confirm the e-mail address"]
    assert "role admin" in users["alice@example.com"]["carried"]


@pytest.mark.authflow_stores("sql")
def test_plain_users_sign_in_and_roles_guard_the_same_views(imported: tuple[Flask, dict[str, Any]]) -> None:
    app, _ = imported
    alice, bob = client_of(app), client_of(app)
    assert login(alice, "alice@example.com", PASSWORD).location == "/account"
    assert login(bob, "bob@example.com", PASSWORD).location == "/account"
    assert alice.get("/admin").status_code == 200 and bob.get("/admin").status_code == 403
    assert bob.get("/posts/new").status_code == 200 and alice.get("/posts/new").status_code == 403
    with app.app_context():
        assert get_state(app).backend.permissions_of(
            "default",
            get_state(app).backend.find_user("default", "alice@example.com").user_id,  # type: ignore[union-attr]
        ) == ["users:read", "users:write"]


@pytest.mark.authflow_stores("sql")
def test_the_unconfirmed_and_the_disabled_are_refused_as_in_fst(
    imported: tuple[Flask, dict[str, Any]],
) -> None:
    app, _ = imported
    carol = client_of(app)
    refused = login(carol, "carol@example.com", PASSWORD)
    assert refused.status_code == 403 and carol.get("/private").status_code != 200
    frank = client_of(app)
    assert (
        login(frank, "frank@example.com", PASSWORD).status_code == 401
        and frank.get("/private").status_code != 200
    )


@pytest.mark.authflow_stores("sql")
def test_the_totp_user_needs_the_same_code_from_the_same_secret(
    imported: tuple[Flask, dict[str, Any]], fst_world: FstWorld
) -> None:
    app, _ = imported
    clock = get_state(app).clock
    assert isinstance(clock, MockClock)
    dave = client_of(app)
    assert login(dave, "dave@example.com", PASSWORD).location.startswith("/login/factor")
    assert dave.get("/private").status_code != 200  # the password alone is not enough
    code = totp_code(fst_world, "dave@example.com", clock)
    assert factor_step(dave, f"{(int(code) + 1) % 1_000_000:06d}").status_code == 401
    login(dave, "dave@example.com", PASSWORD)
    assert factor_step(dave, code).location == "/account"
    assert dave.get("/private").text == "private page"


@pytest.mark.authflow_stores("sql")
def test_the_recovery_codes_fst_showed_still_work_once(
    imported: tuple[Flask, dict[str, Any]], fst_world: FstWorld
) -> None:
    app, _ = imported
    code = fst_world.recovery["dave@example.com"][0]
    first = client_of(app)
    login(first, "dave@example.com", PASSWORD)
    assert factor_step(first, code, kind="recovery_code").location == "/account"
    again = client_of(app)
    login(again, "dave@example.com", PASSWORD)
    assert factor_step(again, code, kind="recovery_code").status_code == 401


@pytest.mark.authflow_stores("sql")
def test_the_email_two_factor_user_gets_a_code_by_mail(
    imported: tuple[Flask, dict[str, Any]], outbox: Outbox
) -> None:
    app, _ = imported
    erin = client_of(app)
    assert login(erin, "erin@example.com", PASSWORD).location.startswith("/login/factor")
    assert outbox[-1].to == "erin@example.com"
    code = next(word for word in outbox[-1].body.split() if word.isdigit() and len(word) == 8)
    assert factor_step(erin, code, kind="email_otp").location == "/account"


@pytest.mark.authflow_stores("sql")
def test_the_webauthn_user_signs_in_with_the_same_key(
    imported: tuple[Flask, dict[str, Any]], fst_world: FstWorld
) -> None:
    app, _ = imported
    gwen = client_of(app)
    assert login(gwen, "gwen@example.com", PASSWORD).location.startswith("/login/factor")
    token = csrf_of(gwen.get("/login/factor").text)
    options = gwen.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assert options.status_code == 200
    public = options.json["publicKey"] if options.json is not None else {}
    credential = fst_world.authenticator.assert_(public)
    done = gwen.post(
        "/login/factor", data={"kind": "webauthn", "credential": credential, "csrf_token": token}
    )
    assert done.location == "/account" and gwen.get("/private").text == "private page"


@pytest.mark.authflow_stores("sql")
def test_a_run_without_the_totp_keys_refuses_unless_reenrollment_is_accepted(
    app_factory: AppFactory, tmp_path: Path, fst_world: FstWorld, outbox: Outbox
) -> None:
    app = migrated_app(app_factory, tmp_path, outbox, SECURITY_TOTP_SECRETS=None)
    url = fst_copy(fst_world, tmp_path)
    dry = run_import(app, url, "--dry-run")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    dave = next(u for u in plan["users"] if u["identifier"] == "dave@example.com")
    assert [item.split(":")[0] for item in dave["lowered"]] == ["totp"]
    assert plan["summary"]["lowered"] == 1 and plan["imported"] == 0
    assert any("would be refused" in notice for notice in plan["notices"])
    backend = get_state(app).backend
    with app.app_context():
        assert backend.list_users("default") == []  # a dry run writes nothing

    refused = run_import(app, url)
    assert refused.exit_code == 1 and json.loads(refused.output)["error"] == "would_lower"
    with app.app_context():
        assert backend.list_users("default") == []  # nor does a refused run

    accepted = run_import(app, url, "--accept-reenrollment")
    assert accepted.exit_code == 0, accepted.output
    report = json.loads(accepted.output)
    dave = next(u for u in report["users"] if u["identifier"] == "dave@example.com")
    assert dave["asked"] == ["set up totp again"] and report["imported"] == 8

    client = client_of(app)
    assert login(client, "dave@example.com", PASSWORD).location == "/account/factors"
    assert client.get("/private").status_code != 200  # not authenticated before the enrollment
    with app.app_context():
        sessions = get_state(app).session_store.list_user_sessions(
            "default",
            backend.find_user("default", "dave@example.com").user_id,  # type: ignore[union-attr]
        )
    assert [s.state for s in sessions] == [AuthState.PENDING_WORKFLOW]
    listing = client.get("/account/factors")
    assert 'id="required-enrollment"' in listing.text and 'id="add-totp-form"' in listing.text
    # Setting the authenticator up again completes the sign-in.
    page = client.post("/account/factors/totp", data={"csrf_token": csrf_of(listing.text)})
    found = re.search(r'id="totp-secret">([A-Z2-7]+)</code>', page.text)
    assert page.status_code == 200 and found is not None
    clock = get_state(app).clock
    done = client.post(
        "/account/factors/totp/confirm",
        data={
            "factor_id": hidden_value(page.text, "factor_id"),
            "code": pyotp.TOTP(found.group(1)).at(int(clock.now().timestamp())),
            "csrf_token": csrf_of(page.text),
        },
    )
    assert done.status_code == 302 and client.get("/private").text == "private page"


# --- one user per password scheme Flask-Security-Too offers ------------------------------------


def build_scheme_database(url: str) -> dict[str, str]:
    """A Flask-Security-Too app per scheme on one database; one user each, hashed by FST with
    its HMAC. Returns ``{email: scheme}``."""
    from flask_security import Security, SQLAlchemyUserDatastore, hash_password, verify_password

    db, User, Role, _ = _fst_models()

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
    """A Flask-Security-Too database with one user per password scheme, built once:
    ``(file, {email: scheme})``."""
    path = tmp_path_factory.mktemp("fst-schemes") / "fst.db"
    return path, build_scheme_database(f"sqlite:///{path}")


def scheme_copy(fst_database: tuple[Path, dict[str, str]], tmp_path: Path) -> str:
    copy = tmp_path / "fst-schemes.db"
    shutil.copyfile(fst_database[0], copy)
    return f"sqlite:///{copy}"


@pytest.mark.slow  # real legacy hashes at their real costs
@pytest.mark.authflow_stores("sql")
def test_every_fst_user_logs_in_and_is_rehashed(
    app_factory: AppFactory, tmp_path: Path, fst_database: tuple[Path, dict[str, str]]
) -> None:
    fst_url = scheme_copy(fst_database, tmp_path)
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
    fst_url = scheme_copy(fst_database, tmp_path)
    app: Flask = app_factory(
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}",
        AUTHFLOW_LEGACY_PASSWORD_SCHEMES=CARRIED,
    )
    result = app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", fst_url, "--json"]
    )
    assert result.exit_code == 1  # every user would be refused at sign-in: the run is refused
    assert "AUTHFLOW_LEGACY_PASSWORD_SALT" in json.loads(result.output)["message"]
    with app.app_context():
        assert get_state(app).backend.list_users("default") == []


@pytest.mark.authflow_stores("sql")
def test_the_passkey_user_signs_in_with_the_same_passkey_alone(
    imported: tuple[Flask, dict[str, Any]], fst_world: FstWorld
) -> None:
    """A key FST used as a first factor signs in without a password: the authenticator names
    the user by FST's user handle, which the import kept."""
    app, _ = imported
    assert fst_world.passkey is not None
    hana = client_of(app)
    token = csrf_of(hana.get("/login").text)
    options = hana.post("/login/passkey/options", data={"csrf_token": token})
    assert options.status_code == 200 and options.json is not None
    credential = fst_world.passkey.assert_(options.json["publicKey"])
    done = hana.post("/login/passkey", data={"csrf_token": token, "credential": credential})
    assert done.status_code == 200, done.json
    assert done.json is not None and done.json["status"] == "authenticated"
    assert hana.get("/private").text == "private page"
