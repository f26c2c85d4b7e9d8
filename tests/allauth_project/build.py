"""Build the django-allauth project's database:
``python -m tests.allauth_project.build DATABASE [WEBAUTHN_REGISTRATION.json]``.

Migrates a new database (a SQLite file, or a PostgreSQL URL) and creates, through Django's
and allauth's own APIs, one user per case the migration test checks; prints what the test
needs to know as JSON (the TOTP secret, the recovery codes left unused and the one spent,
each user's hasher). The WebAuthn
registration (a browser's registration response, made by the test's software authenticator,
whose private key stays in the test) is stored for ``wendy`` with allauth's ``WebAuthn.add``
and read back through allauth's own parsing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

PASSWORD = "correct horse battery staple"


def _user(username: str, hasher: str, *, active: bool = True) -> Any:
    from django.contrib.auth.hashers import check_password, make_password
    from django.contrib.auth.models import User

    user = User.objects.create(
        username=username,
        email=f"{username}@example.com",
        password=make_password(PASSWORD, hasher=hasher),
        is_active=active,
    )
    assert user.password.startswith(hasher if hasher != "pbkdf2_sha256" else "pbkdf2_sha256$")
    assert check_password(PASSWORD, user.password)  # Django logs it in
    return user


def _address(user: Any, email: str, *, verified: bool, primary: bool) -> None:
    from allauth.account.models import EmailAddress

    EmailAddress.objects.create(user=user, email=email, verified=verified, primary=primary)


def _mfa(user: Any) -> dict[str, Any]:
    from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
    from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    codes = RecoveryCodes.activate(user)
    every = codes.generate_codes()
    assert codes.validate_code(every[3])  # spent in allauth: must not carry
    return {"totp_secret": secret, "unused_codes": codes.get_unused_codes(), "spent_code": every[3]}


def _webauthn(user: Any, registration: dict[str, Any]) -> None:
    from allauth.mfa.webauthn.internal.auth import WebAuthn

    key = WebAuthn.add(user, "Security key", registration)
    assert key.authenticator_data.credential_data is not None  # allauth reads it as its own


def _groups() -> tuple[Any, Any]:
    from django.contrib.auth.models import Group, Permission

    editors, admins = Group.objects.create(name="editors"), Group.objects.create(name="admins")
    view = Permission.objects.get(codename="view_user")
    change = Permission.objects.get(codename="change_user")
    editors.permissions.add(view)
    admins.permissions.add(view, change)
    return editors, admins


def build(registration: dict[str, Any] | None) -> dict[str, Any]:
    from allauth.socialaccount.models import SocialAccount
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    editors, admins = _groups()
    hashers = {"paula": "pbkdf2_sha256", "arne": "argon2", "bea": "bcrypt_sha256", "bert": "bcrypt"}
    users = {name: _user(name, hasher) for name, hasher in hashers.items()}
    users["ulla"] = _user("ulla", "pbkdf2_sha256")  # her only address is unverified
    users["ines"] = _user("ines", "pbkdf2_sha256", active=False)
    users["sofia"] = _user("sofia", "pbkdf2_sha256")
    users["max"] = _user("max", "pbkdf2_sha256")
    users["wendy"] = _user("wendy", "pbkdf2_sha256")
    for name, user in users.items():
        _address(user, user.email, verified=name != "ulla", primary=True)
    _address(users["paula"], "paula@old.example.com", verified=False, primary=False)
    SocialAccount.objects.create(user=users["sofia"], provider="test-op", uid="sofia-sub", extra_data={})
    users["paula"].groups.add(admins)
    users["bea"].groups.add(editors)
    users["max"].groups.add(editors)
    facts = _mfa(users["max"])
    if registration is not None:
        _webauthn(users["wendy"], registration)
    return {"hashers": {**hashers, "ulla": "pbkdf2_sha256", "ines": "pbkdf2_sha256"}, **facts}


def main() -> None:
    os.environ["ALLAUTH_PROJECT_DATABASE"] = sys.argv[1]
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.allauth_project.settings"
    import django

    django.setup()
    registration = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else None
    print(json.dumps(build(registration)))


if __name__ == "__main__":
    main()
