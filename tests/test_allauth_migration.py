"""Users of a real django-allauth 65 project, imported with everything allauth stores.

The project (tests/allauth_project) is migrated and filled in a subprocess with the venv's
Python, through Django's and allauth's own APIs, so Django's global settings never touch this
process. Its database is then read by :class:`AllauthReader` (SQLAlchemy reflection, no Django).
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, inspect

from flask_authflow import AuthFlow, get_state, login_required, permissions_required, roles_required
from flask_authflow._cli.base import CommandFailed
from flask_authflow._cli.importing.allauth import AllauthReader, allauth_recovery_codes
from flask_authflow._cli.importing.model import (
    ImportedUser,
    RecoveryCodes,
    SourceData,
    SourceRefusal,
    TotpFactor,
    WebAuthnCredential,
    WebAuthnUse,
)
from flask_authflow._clock import MockClock
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.login._legacy_hashes import identify
from flask_authflow.testing import Outbox
from flask_authflow.testing._provider import TestOpenIDProvider
from tests.appfactory import AppFactory
from tests.concurrency import run_together
from tests.federation_support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI, FederatedApp
from tests.test_views import csrf_of, factor_step, login
from tests.webauthn_soft import SoftAuthenticator, SoftCredential, b64url

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "correct horse battery staple"
RP_ID = "example.com"
ORIGIN = "https://example.com"
#: Each user of the project and the Django hasher that made their password.
HASHERS = {
    "paula": "django_pbkdf2_sha256",
    "arne": "django_argon2",
    "bea": "django_bcrypt_sha256",
    "bert": "django_bcrypt",
}


@dataclass(frozen=True)
class Project:
    """The built project: its database file, what the build reported, and the software
    authenticator holding wendy's security key."""

    database: Path
    facts: dict[str, Any]
    authenticator: SoftAuthenticator
    key: SoftCredential

    def copy(self, directory: Path) -> str:
        """A copy of the database to change or import from; its SQLAlchemy URL."""
        target = directory / "allauth.db"
        shutil.copyfile(self.database, target)
        return f"sqlite:///{target}"


def build_project(directory: Path, database_url: str | None = None) -> Project:
    """Migrate and fill the django-allauth project's database (in a subprocess): a SQLite file
    in ``directory``, or the PostgreSQL database ``database_url``."""
    authenticator = SoftAuthenticator(origin=ORIGIN)
    options = {"rp": {"id": RP_ID}, "user": {"id": b64url(b"9")}, "challenge": b64url(b"allauth-challenge")}
    registration, key = authenticator.register(options, discoverable=False)
    (directory / "registration.json").write_text(registration)
    database = directory / "allauth.db"
    where = database_url or str(database)
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "tests.allauth_project.build",
            where,
            str(directory / "registration.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Project(database, json.loads(done.stdout), authenticator, key)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return build_project(tmp_path_factory.mktemp("allauth"))


def read(url: str, reader: AllauthReader | None = None) -> SourceData:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            chosen = reader or AllauthReader()
            assert chosen.recognises(conn, inspect(conn).get_table_names())
            return chosen.read(conn, {})
    finally:
        engine.dispose()


def users_of(data: SourceData) -> dict[str, ImportedUser]:
    found = {user.identifier: user for user in data.users if isinstance(user, ImportedUser)}
    assert len(found) == len(data.users)
    return found


def change(url: str, sql: str, *params: Any) -> None:
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute(sql, params)


# --- the reader ------------------------------------------------------------------------------


def test_the_reader_finds_every_user_with_what_allauth_stores(project: Project, tmp_path: Path) -> None:
    users = users_of(read(project.copy(tmp_path)))
    assert set(users) == {"paula", "arne", "bea", "bert", "ulla", "ines", "sofia", "max", "wendy"}
    for name, scheme in HASHERS.items():  # Django's own formats, as they are
        assert identify(str(users[name].password_hash)) == scheme
    paula = users["paula"]
    assert [(e.address, e.verified, e.primary) for e in paula.emails] == [
        ("paula@example.com", True, True),
        ("paula@old.example.com", False, False),
    ]
    assert [(e.verified, e.primary) for e in users["ulla"].emails] == [(False, True)]
    assert users["ines"].disabled and not any(u.disabled for n, u in users.items() if n != "ines")
    assert [(link.provider, link.subject) for link in users["sofia"].links] == [("test-op", "sofia-sub")]
    assert users["paula"].attributes["django_pk"] == users["paula"].source_ref == "1"
    assert all(not user.roles for user in users.values())  # groups only when asked
    assert all(not user.unreadable for user in users.values())


def test_the_totp_key_and_the_unused_recovery_codes_carry(project: Project, tmp_path: Path) -> None:
    (totp, codes) = users_of(read(project.copy(tmp_path)))["max"].factors
    assert isinstance(totp, TotpFactor) and isinstance(codes, RecoveryCodes)
    assert totp.secret == base64.b32decode(project.facts["totp_secret"])
    assert (totp.digits, totp.period, totp.algorithm) == (6, 30, "SHA1")
    # exactly the codes allauth would still accept: the one spent there is not carried
    assert list(codes.codes) == project.facts["unused_codes"]
    assert project.facts["spent_code"] not in codes.codes and len(codes.codes) == 9


def test_the_recovery_codes_are_allauths_derivation_of_its_seed(project: Project, tmp_path: Path) -> None:
    with closing(sqlite3.connect(project.database)) as conn:
        (data,) = conn.execute("select data from mfa_authenticator where type = 'recovery_codes'").fetchone()
    seed = json.loads(data)["seed"]
    every = allauth_recovery_codes(seed)
    assert len(every) == 10 and project.facts["spent_code"] in every
    assert set(every) - {project.facts["spent_code"]} == set(project.facts["unused_codes"])


def test_the_security_key_carries_as_registered(project: Project, tmp_path: Path) -> None:
    (key,) = users_of(read(project.copy(tmp_path)))["wendy"].factors
    assert isinstance(key, WebAuthnCredential)
    assert key.credential_id == project.key.credential_id
    assert key.sign_count == 0 and key.transports == ("usb",) and key.label == "Security key"
    assert key.use is WebAuthnUse.SECONDARY and key.discoverable is False and key.user_handle is None


def test_groups_become_roles_with_their_permissions_when_asked(project: Project, tmp_path: Path) -> None:
    data = read(project.copy(tmp_path), AllauthReader(groups_as_roles=True))
    assert {(r.name, r.permissions) for r in data.roles} == {
        ("admins", ("auth.change_user", "auth.view_user")),
        ("editors", ("auth.view_user",)),
    }
    users = users_of(data)
    assert (users["paula"].roles, users["bea"].roles, users["max"].roles) == (
        ("admins",),
        ("editors",),
        ("editors",),
    )
    assert read(project.copy(tmp_path)).roles == []


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("totp", {"secret": "gAAAAABlZ2VuY3J5cHRlZC1ieS10aGUtYWRhcHRlcg=="}),  # a Fernet token
        ("totp", {"secret": "JBSWY3DPEHPK3PXP1"}),  # not base32
        ("totp", {}),
        ("recovery_codes", {"seed": "Z0FBQUFBQmxaMlZ1WTNKNWNIUmxaQT09", "used_mask": 0}),
        ("recovery_codes", {"seed": "ab" * 40, "used_mask": "0"}),
        ("recovery_codes", {"migrated_codes": ["gAAAAAB-encrypted=="]}),
        ("webauthn", {"name": "key", "credential": {"id": "x", "response": {}}}),
        ("webauthn", {"name": "key"}),
        ("sms", {"phone": "+4912345"}),
    ],
)
def test_a_secret_not_in_allauths_form_is_unreadable_never_dropped(
    project: Project, tmp_path: Path, kind: str, data: dict[str, Any]
) -> None:
    url = project.copy(tmp_path)
    change(url, "delete from mfa_authenticator where user_id = 8")
    change(
        url,
        "insert into mfa_authenticator (user_id, type, data, created_at) values (8, ?, ?, '2026-01-01')",
        kind,
        json.dumps(data),
    )
    max_ = users_of(read(url))["max"]
    assert max_.factors == ()
    ours = {"recovery_codes": "recovery_code"}.get(kind, kind)
    assert [u.kind for u in max_.unreadable] == [ours]


def test_authenticator_data_that_is_no_object_is_unreadable(project: Project, tmp_path: Path) -> None:
    url = project.copy(tmp_path)
    change(url, "update mfa_authenticator set data = '[1, 2]' where user_id = 8 and type = 'totp'")
    max_ = users_of(read(url))["max"]
    assert [u.kind for u in max_.unreadable] == ["totp"]
    assert [type(f) for f in max_.factors] == [RecoveryCodes]


def test_codes_given_to_allauth_by_an_earlier_migration_carry(project: Project, tmp_path: Path) -> None:
    url = project.copy(tmp_path)
    change(
        url,
        "update mfa_authenticator set data = ? where type = 'recovery_codes'",
        json.dumps({"migrated_codes": ["abc123", "def456"]}),
    )
    (_, codes) = users_of(read(url))["max"].factors
    assert isinstance(codes, RecoveryCodes) and codes.codes == ("abc123", "def456")


def test_spent_recovery_codes_leave_nothing_to_carry(project: Project, tmp_path: Path) -> None:
    url = project.copy(tmp_path)
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
        (data,) = conn.execute("select data from mfa_authenticator where type = 'recovery_codes'").fetchone()
    change(
        url,
        "update mfa_authenticator set data = ? where type = 'recovery_codes'",
        json.dumps({**json.loads(data), "used_mask": 1023}),
    )
    max_ = users_of(read(url))["max"]
    assert [type(f) for f in max_.factors] == [TotpFactor] and max_.unreadable == ()


def test_a_user_without_a_usable_password_or_a_name(project: Project, tmp_path: Path) -> None:
    url = project.copy(tmp_path)
    change(url, "update auth_user set password = '!unusable' where username = 'sofia'")
    change(url, "update auth_user set username = '' where username = 'bert'")
    change(url, "update auth_user set username = ' ', email = '' where username = 'arne'")
    change(url, "delete from account_emailaddress where user_id = 2")
    data = read(url)
    users = {u.identifier: u for u in data.users if isinstance(u, ImportedUser)}
    assert users["sofia"].password_hash is None and users["sofia"].links  # a social login only
    assert "bert@example.com" in users  # the e-mail address names a user without a username
    (refused,) = [u for u in data.users if isinstance(u, SourceRefusal)]
    assert refused.label == "auth_user id 2" and "no username" in refused.reason


def test_an_address_allauth_never_saw_is_unverified(project: Project, tmp_path: Path) -> None:
    url = project.copy(tmp_path)
    change(url, "delete from account_emailaddress where user_id = 1")
    paula = users_of(read(url))["paula"]
    assert [(e.address, e.verified) for e in paula.emails] == [("paula@example.com", False)]


def test_other_databases_are_not_taken_for_allauths(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    change(url, "create table user (id integer primary key, email text, password text)")
    engine = create_engine(url)
    with engine.connect() as conn:
        assert not AllauthReader().recognises(conn, inspect(conn).get_table_names())
    engine.dispose()
    change(url, "create table auth_user (id integer primary key, name text)")
    change(url, "create table account_emailaddress (id integer primary key)")
    engine = create_engine(url)
    with engine.connect() as conn, pytest.raises(CommandFailed, match="auth_user"):
        AllauthReader().read(conn, {})
    engine.dispose()


# --- imported into a flask-authflow app, then signed in ----------------------------------------


def migrated_app(
    app_factory: AppFactory, tmp_path: Path, provider: TestOpenIDProvider, authflow: AuthFlow
) -> Flask:
    """The new application: SQL store, Django's hashers, WebAuthn on the project's RP id, the
    project's OpenID Connect provider under the same name, and views guarded as the project's
    groups guarded them."""
    app = app_factory(
        authflow=authflow,
        mail_sender=Outbox(),
        http_client=RequestsHttpClient(adapters=provider.http_adapters()),
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'authflow.db'}",
        AUTHFLOW_LEGACY_PASSWORD_SCHEMES=list(HASHERS.values()),
        AUTHFLOW_WEBAUTHN_RP_ID=RP_ID,
        AUTHFLOW_WEBAUTHN_ORIGINS=[ORIGIN],
        AUTHFLOW_OAUTH_PROVIDERS={
            PROVIDER: {
                "discovery_url": provider.discovery_url,
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uri": REDIRECT_URI,
                "post_login_redirect": "/private",
            }
        },
    )

    @app.get("/users/edit")
    @roles_required("admins")
    def edit_users() -> str:
        return "edit users"

    @app.get("/users")
    @permissions_required("auth.view_user")
    def list_users() -> str:
        return "users"

    @app.get("/private")
    @login_required
    def private() -> str:
        return "private page"

    return app


def run_import(app: Flask, url: str, *args: str) -> Any:
    return app.test_cli_runner().invoke(
        args=["authflow", "users", "import", "--from-url", url, "--json", *args]
    )


@dataclass
class Imported:
    app: Flask
    report: dict[str, Any]
    provider: TestOpenIDProvider
    authflow: AuthFlow

    def client(self) -> FlaskClient:
        return self.app.test_client()

    def user_id(self, identifier: str) -> str:
        with self.app.app_context():
            found = get_state(self.app).backend.find_user("default", identifier)
        assert found is not None, identifier
        return str(found.user_id)


@pytest.fixture
def imported(
    app_factory: AppFactory, tmp_path: Path, project: Project, oidc_provider: TestOpenIDProvider
) -> Imported:
    authflow = AuthFlow()
    app = migrated_app(app_factory, tmp_path, oidc_provider, authflow)
    result = run_import(app, project.copy(tmp_path), "--django-groups-as-roles")
    assert result.exit_code == 0, result.output
    return Imported(app, json.loads(result.output), oidc_provider, authflow)


def totp_code(secret: str, clock: MockClock) -> str:
    """The code the user's authenticator app shows now, from the key allauth stored."""
    import pyotp

    return str(pyotp.TOTP(secret).at(clock.now()))


@pytest.mark.authflow_stores("sql")
def test_the_report_says_what_carries_for_each_user(imported: Imported) -> None:
    report = imported.report
    assert report["source"] == "django-allauth" and report["refused"] == []
    assert report["imported"] == 9 and report["summary"]["lowered"] == 0
    users = {u["identifier"]: u for u in report["users"]}
    assert "authenticator app (TOTP)" in users["max"]["carried"]
    assert "recovery codes (9 unused)" in users["max"]["carried"]
    assert "security key (second factor)" in users["wendy"]["carried"]
    assert "disabled" in users["ines"]["carried"]
    assert users["ulla"]["asked"] == ["confirm the e-mail address"]
    assert "role admins" in users["paula"]["carried"] and "role editors" in users["bea"]["carried"]
    assert any(item.startswith("identity link") for item in users["sofia"]["carried"])
    assert any("paula@old.example.com" in item for item in users["paula"]["not_carried"])


@pytest.mark.slow  # Django's hashes at their real costs (pbkdf2 1,000,000 rounds, bcrypt 12)
@pytest.mark.authflow_stores("sql")
def test_every_hash_signs_in_once_and_is_replaced_by_argon2id(imported: Imported) -> None:
    backend = get_state(imported.app).backend
    for name in HASHERS:
        with imported.app.app_context():
            before = str(backend.get_password_hash("default", imported.user_id(name)))
        wrong = imported.client()
        assert login(wrong, name, "not " + PASSWORD).status_code == 401
        client = imported.client()
        assert login(client, name, PASSWORD).location == "/account", name
        assert client.get("/private").text == "private page"
        with imported.app.app_context():
            after = str(backend.get_password_hash("default", imported.user_id(name)))
        assert after != before and after.startswith("$argon2id$"), name
        assert login(imported.client(), name, PASSWORD).location == "/account"  # natively now


@pytest.mark.authflow_stores("sql")
def test_groups_guard_the_same_views_as_roles(imported: Imported) -> None:
    paula, bea, arne = imported.client(), imported.client(), imported.client()
    for client, name in ((paula, "paula"), (bea, "bea"), (arne, "arne")):
        assert login(client, name, PASSWORD).location == "/account"
    assert paula.get("/users/edit").status_code == 200 and bea.get("/users/edit").status_code == 403
    assert paula.get("/users").status_code == 200 and bea.get("/users").status_code == 200
    assert arne.get("/users").status_code == 403 and arne.get("/users/edit").status_code == 403


@pytest.mark.authflow_stores("sql")
def test_the_unverified_and_the_inactive_are_refused_as_in_allauth(imported: Imported) -> None:
    ulla = imported.client()
    assert login(ulla, "ulla", PASSWORD).status_code == 403 and ulla.get("/private").status_code != 200
    ines = imported.client()
    assert login(ines, "ines", PASSWORD).status_code == 401 and ines.get("/private").status_code != 200


@pytest.mark.authflow_stores("sql")
def test_the_totp_user_needs_the_same_code_from_the_same_secret(imported: Imported, project: Project) -> None:
    clock = get_state(imported.app).clock
    assert isinstance(clock, MockClock)
    max_ = imported.client()
    assert login(max_, "max", PASSWORD).location.startswith("/login/factor")
    assert max_.get("/private").status_code != 200  # the password alone is not enough
    code = totp_code(project.facts["totp_secret"], clock)
    assert factor_step(max_, f"{(int(code) + 1) % 1_000_000:06d}").status_code == 401
    login(max_, "max", PASSWORD)
    assert factor_step(max_, code).location == "/account"
    assert max_.get("/private").text == "private page"


@pytest.mark.authflow_stores("sql")
def test_an_unused_recovery_code_works_once_and_a_spent_one_never(
    imported: Imported, project: Project
) -> None:
    spent = imported.client()
    login(spent, "max", PASSWORD)
    assert factor_step(spent, project.facts["spent_code"], kind="recovery_code").status_code == 401
    code = project.facts["unused_codes"][0]
    first = imported.client()
    login(first, "max", PASSWORD)
    assert factor_step(first, code, kind="recovery_code").location == "/account"
    assert first.get("/private").text == "private page"
    again = imported.client()
    login(again, "max", PASSWORD)
    assert factor_step(again, code, kind="recovery_code").status_code == 401


@pytest.mark.authflow_stores("sql")
def test_the_webauthn_user_signs_in_with_the_same_key(imported: Imported, project: Project) -> None:
    wendy = imported.client()
    assert login(wendy, "wendy", PASSWORD).location.startswith("/login/factor")
    assert wendy.get("/private").status_code != 200
    token = csrf_of(wendy.get("/login/factor").text)
    options = wendy.post("/login/factor/webauthn-options", data={"csrf_token": token})
    assert options.status_code == 200 and options.json is not None
    credential = project.authenticator.assert_(options.json["publicKey"])
    done = wendy.post(
        "/login/factor", data={"kind": "webauthn", "credential": credential, "csrf_token": token}
    )
    assert done.location == "/account" and wendy.get("/private").text == "private page"


@pytest.mark.authflow_stores("sql")
def test_the_social_account_signs_in_into_the_same_account(imported: Imported) -> None:
    state = get_state(imported.app)
    parts = (state.backend, state.session_store, imported.provider, state.clock)
    fed = FederatedApp(imported.app, imported.authflow, *parts)  # type: ignore[arg-type]
    imported.provider.login_as("sofia-sub", email="sofia@example.com", email_verified=True)
    client = fed.client()
    assert fed.sign_in(client).location == "/private"
    assert client.get("/private").text == "private page"
    with imported.app.app_context():
        link = state.backend.find_link(imported.provider.issuer, "sofia-sub")
        assert link is not None and link.user_id == imported.user_id("sofia")
        assert [u.identifier for u in state.backend.list_users("default")].count("sofia") == 1


# --- identity links: what is not carried, and never moved ----------------------------------------


def imported_with(
    app_factory: AppFactory, tmp_path: Path, url: str, provider: TestOpenIDProvider, *args: str
) -> Imported:
    authflow = AuthFlow()
    app = migrated_app(app_factory, tmp_path, provider, authflow)
    result = run_import(app, url, *args)
    assert result.exit_code == 0, result.output
    return Imported(app, json.loads(result.output), provider, authflow)


def sign_in_with_provider(imported: Imported, subject: str) -> FlaskClient:
    state = get_state(imported.app)
    parts = (state.backend, state.session_store, imported.provider, state.clock)
    fed = FederatedApp(imported.app, imported.authflow, *parts)  # type: ignore[arg-type]
    imported.provider.login_as(subject, email=f"{subject}@provider.example", email_verified=True)
    client = fed.client()
    assert fed.sign_in(client).location == "/private"
    return client


@pytest.mark.authflow_stores("sql")
def test_a_link_to_a_provider_the_app_lacks_is_not_carried_and_said_so(
    app_factory: AppFactory, tmp_path: Path, project: Project, oidc_provider: TestOpenIDProvider
) -> None:
    url = project.copy(tmp_path)
    change(url, "update socialaccount_socialaccount set provider = 'google'")
    imported = imported_with(app_factory, tmp_path, url, oidc_provider)
    sofia = next(u for u in imported.report["users"] if u["identifier"] == "sofia")
    assert sofia["not_carried"] == ["identity link google (no provider of that name in this app)"]
    assert not any(item.startswith("identity link") for item in sofia["carried"])
    with imported.app.app_context():
        assert get_state(imported.app).backend.links_of_user("default", imported.user_id("sofia")) == []


@pytest.mark.authflow_stores("sql")
def test_a_social_only_user_is_imported_without_a_password(
    app_factory: AppFactory, tmp_path: Path, project: Project, oidc_provider: TestOpenIDProvider
) -> None:
    url = project.copy(tmp_path)
    change(url, "update auth_user set password = '!' || password where username = 'sofia'")
    change(url, "update auth_user set password = '!' || password where username = 'arne'")
    imported = imported_with(app_factory, tmp_path, url, oidc_provider)
    refused = dict((r["identifier"], r["reason"]) for r in imported.report["refused"])
    assert refused == {"arne": "no password hash"}  # no password and no link: no way in
    assert login(imported.client(), "sofia", PASSWORD).status_code == 401
    client = sign_in_with_provider(imported, "sofia-sub")
    assert client.get("/private").text == "private page"
    with imported.app.app_context():
        link = get_state(imported.app).backend.find_link(imported.provider.issuer, "sofia-sub")
    assert link is not None and link.user_id == imported.user_id("sofia")


@pytest.mark.authflow_stores("sql")
def test_an_identity_linked_to_another_account_stays_with_it(
    app_factory: AppFactory, tmp_path: Path, project: Project, oidc_provider: TestOpenIDProvider
) -> None:
    authflow = AuthFlow()
    app = migrated_app(app_factory, tmp_path, oidc_provider, authflow)
    first = Imported(app, {}, oidc_provider, authflow)
    sign_in_with_provider(first, "sofia-sub")  # a new account, linked, before the import
    backend = get_state(app).backend
    with app.app_context():
        before = backend.find_link(oidc_provider.issuer, "sofia-sub")
    assert before is not None
    result = run_import(app, project.copy(tmp_path))
    assert result.exit_code == 0, result.output
    sofia = next(u for u in json.loads(result.output)["users"] if u["identifier"] == "sofia")
    assert f"identity link {oidc_provider.issuer} (another account's already)" in sofia["not_carried"]
    with app.app_context():
        after = backend.find_link(oidc_provider.issuer, "sofia-sub")
        assert after is not None and after.user_id == before.user_id != first.user_id("sofia")
        assert backend.links_of_user("default", first.user_id("sofia")) == []


@pytest.mark.authflow_stores("sql")
def test_parallel_links_of_one_identity_give_it_to_one_account(
    app_factory: AppFactory, tmp_path: Path, oidc_provider: TestOpenIDProvider
) -> None:
    from flask_authflow._cli.importing.links import write_links

    app = migrated_app(app_factory, tmp_path, oidc_provider, AuthFlow())
    backend = get_state(app).backend
    with app.app_context():
        ids = [backend.create_user("default", name).user_id for name in ("one", "two", "three", "four")]

    def link(user_id: str) -> list[str]:
        with app.app_context():
            unit = backend.begin_unit()
            try:
                taken = write_links(backend, "default", user_id, [("https://op.test", "shared-sub")])
            except BaseException:
                unit.rollback()
                raise
            unit.commit()
            return taken

    results = run_together([lambda user_id=user_id: link(user_id) for user_id in ids])
    assert sorted(len(taken) for taken in results) == [0, 1, 1, 1]
    with app.app_context():
        owner = backend.find_link("https://op.test", "shared-sub")
    assert owner is not None and owner.user_id == ids[results.index([])]


def test_a_passwordless_key_carries_as_a_passkey_named_by_allauths_user_handle(
    project: Project, tmp_path: Path
) -> None:
    url = project.copy(tmp_path)
    options = {"rp": {"id": RP_ID}, "user": {"id": b64url(b"9")}, "challenge": b64url(b"passkey-challenge")}
    registration, key = SoftAuthenticator(origin=ORIGIN).register(
        options, discoverable=True, backup_eligible=True
    )
    data = {"name": "Phone", "credential": json.loads(registration)}
    change(url, "update mfa_authenticator set data = ? where user_id = 9", json.dumps(data))
    (passkey,) = users_of(read(url))["wendy"].factors
    assert isinstance(passkey, WebAuthnCredential)
    assert passkey.credential_id == key.credential_id and passkey.label == "Phone"
    assert passkey.use is WebAuthnUse.FIRST and passkey.discoverable is True
    assert passkey.user_handle == b"9"  # allauth's handle: the user's pk in base 36
    assert passkey.backup_eligible is True


@pytest.mark.authflow_stores("sql")
def test_an_encrypted_totp_key_refuses_the_run_unless_reenrollment_is_accepted(
    app_factory: AppFactory, tmp_path: Path, project: Project, oidc_provider: TestOpenIDProvider
) -> None:
    url = project.copy(tmp_path)
    sealed = {"secret": "gAAAAABlZ2VuY3J5cHRlZC1ieS10aGUtcHJvamVjdHMtYWRhcHRlcg=="}
    change(url, "update mfa_authenticator set data = ? where type = 'totp'", json.dumps(sealed))
    app = migrated_app(app_factory, tmp_path, oidc_provider, AuthFlow())
    backend = get_state(app).backend
    dry = run_import(app, url, "--dry-run")
    assert dry.exit_code == 0, dry.output
    max_ = next(u for u in json.loads(dry.output)["users"] if u["identifier"] == "max")
    assert [item.split(":")[0] for item in max_["lowered"]] == ["totp"]
    refused = run_import(app, url)
    assert refused.exit_code == 1 and json.loads(refused.output)["error"] == "would_lower"
    with app.app_context():
        assert backend.list_users("default") == []
    accepted = run_import(app, url, "--accept-reenrollment")
    assert accepted.exit_code == 0, accepted.output
    max_ = next(u for u in json.loads(accepted.output)["users"] if u["identifier"] == "max")
    assert max_["asked"] == ["set up totp again"]
    client = app.test_client()
    assert login(client, "max", PASSWORD).location == "/account/factors"
    assert client.get("/private").status_code != 200  # not authenticated before the enrollment


@pytest.mark.authflow_stores("sql")
def test_a_project_on_postgresql_reads_the_same(
    postgres_server: Any, tmp_path: Path, project: Project
) -> None:
    """allauth's JSON on PostgreSQL is ``jsonb`` (decoded by the driver), on SQLite text."""
    url = postgres_server.new_database()
    on_postgres = build_project(tmp_path, url)
    users = users_of(read(url, AllauthReader(groups_as_roles=True)))
    on_sqlite = users_of(read(project.copy(tmp_path), AllauthReader(groups_as_roles=True)))
    assert set(users) == set(on_sqlite)
    (totp, codes) = users["max"].factors
    assert isinstance(totp, TotpFactor) and totp.secret == base64.b32decode(on_postgres.facts["totp_secret"])
    assert isinstance(codes, RecoveryCodes) and list(codes.codes) == on_postgres.facts["unused_codes"]
    (key,) = users["wendy"].factors
    assert isinstance(key, WebAuthnCredential) and key.credential_id == on_postgres.key.credential_id
    for name, user in users.items():
        same = on_sqlite[name]
        assert (user.emails, user.disabled, user.roles, user.links) == (
            same.emails,
            same.disabled,
            same.roles,
            same.links,
        ), name


CLAIM_ROUNDS = 8
CLAIMING_PROCESSES = 4


def _claimer(url: str, worker: int, user_id: str, barrier: Any, out: Any) -> None:
    """Every round, with the other processes at once: link the round's identity to this
    worker's user through the import's writer, in a unit of work. Reports who holds each."""
    from flask_authflow._cli.importing.links import write_links
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend = SqlAlchemyBackend(url, create_tables=False)
    held: list[bool] = []
    try:
        for round_ in range(CLAIM_ROUNDS):
            barrier.wait(60)
            unit = backend.begin_unit()
            try:
                taken = write_links(backend, "default", user_id, [("https://op.test", f"sub-{round_}")])
            except BaseException:
                unit.rollback()
                raise
            unit.commit()
            held.append(taken == [])
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put((worker, repr(exc)))
    else:
        out.put((worker, held))
    finally:
        backend.close()


@pytest.mark.multiprocess
def test_an_identity_linked_by_several_processes_at_once_has_one_owner(postgres_server: Any) -> None:
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend
    from tests.parts import child_processes

    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        ids = [backend.create_user("default", f"user{n}").user_id for n in range(CLAIMING_PROCESSES)]
        spawn = child_processes()
        barrier, out = spawn.Barrier(CLAIMING_PROCESSES), spawn.Queue()
        processes = [
            spawn.Process(target=_claimer, args=(url, worker, ids[worker], barrier, out))
            for worker in range(CLAIMING_PROCESSES)
        ]
        for process in processes:
            process.start()
        reports = dict(out.get(timeout=120) for _ in processes)
        for process in processes:
            process.join(30)
            assert process.exitcode == 0
        assert all(isinstance(held, list) for held in reports.values()), reports
        for round_ in range(CLAIM_ROUNDS):
            winners = [worker for worker, held in reports.items() if held[round_]]
            assert len(winners) == 1, (round_, reports)  # one owner, the others told it is taken
            link = backend.find_link("https://op.test", f"sub-{round_}")
            assert link is not None and link.user_id == ids[winners[0]]  # and it stayed the winner's
    finally:
        backend.close()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_claiming_an_identity_never_moves_its_link(store: str, tmp_path: Path) -> None:
    from flask_authflow.storage._memory import InMemoryBackend
    from flask_authflow.storage._sql.backend import SqlAlchemyBackend

    backend: Any = (
        InMemoryBackend() if store == "memory" else SqlAlchemyBackend(f"sqlite:///{tmp_path / 'l.db'}")
    )
    try:
        first = backend.claim_identity("https://op.test", "sub", "default", "u1")
        again = backend.claim_identity("https://op.test", "sub", "default", "u2")
        assert (first.user_id, again.user_id) == ("u1", "u1")
        assert backend.find_link("https://op.test", "sub").user_id == "u1"
        other = backend.claim_identity("https://op.test", "another-sub", "acme", "u2")
        assert (other.tenant, other.user_id) == ("acme", "u2")
    finally:
        if store == "sqlite":
            backend.close()


def test_a_django_bcrypt_hash_of_a_long_password_matches_as_django_checked_it() -> None:
    """Django's BCryptPasswordHasher handed bcrypt the whole password, which read 72 bytes."""
    from passlib.hash import django_bcrypt  # type: ignore[import-untyped]

    from flask_authflow.login._legacy_hashes import LegacyHashes, LegacyResult

    long = ("horse battery staple " * 5).encode()
    stored = str(django_bcrypt.using(rounds=4).hash(long[:72]))
    legacy = LegacyHashes(["django_bcrypt"])
    assert legacy.verify(stored, long) is LegacyResult.MATCH
    assert legacy.verify(stored, long[:71]) is LegacyResult.MISMATCH
