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
from sqlalchemy import create_engine, inspect

from flask_authflow.cli.base import CommandFailed
from flask_authflow.cli.importing.allauth import AllauthReader, allauth_recovery_codes
from flask_authflow.cli.importing.model import (
    ImportedUser,
    RecoveryCodes,
    SourceData,
    SourceRefusal,
    TotpFactor,
    WebAuthnCredential,
    WebAuthnUse,
)
from flask_authflow.login.legacy_hashes import identify
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


def build_project(directory: Path) -> Project:
    """Migrate and fill the django-allauth project's database (in a subprocess)."""
    authenticator = SoftAuthenticator(origin=ORIGIN)
    options = {"rp": {"id": RP_ID}, "user": {"id": b64url(b"9")}, "challenge": b64url(b"allauth-challenge")}
    registration, key = authenticator.register(options, discoverable=False)
    (directory / "registration.json").write_text(registration)
    database = directory / "allauth.db"
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "tests.allauth_project.build",
            str(database),
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
    assert [(link.provider, link.subject) for link in users["sofia"].links] == [("testprovider", "sofia-sub")]
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
