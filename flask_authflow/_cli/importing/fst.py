"""Flask-Security-Too's database as an import source: everything it stores about a user.

Read by SQLAlchemy reflection (no Flask-Security-Too needed), from its default tables
``user``, ``role``, ``roles_users`` and ``webauthn`` (or ``web_authn``):

* ``password`` as it is (verified under ``AUTHFLOW_LEGACY_PASSWORD_SALT``, its
  ``SECURITY_PASSWORD_SALT``; a run without that salt is refused unless the application
  declares ``SECURITY_PASSWORD_SINGLE_HASH = True``, i.e. its hashes are of the password
  itself); ``username`` (or ``email``) as the identifier; ``confirmed_at`` as a verified
  address; ``active`` false as disabled; ``fs_uniquifier`` and ``id`` as attributes.
* roles with their permissions (``role.permissions``, comma separated).
* ``tf_totp_secret`` for ``tf_primary_method`` ``authenticator``: passlib's TOTP JSON,
  opened with ``SECURITY_TOTP_SECRETS`` when it is encrypted; ``email`` as e-mail codes;
  ``sms`` (not offered here) as a factor to set up again.
* ``mf_recovery_codes``, decrypted with ``SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS`` when
  they are encrypted; the ``webauthn`` table (credential id, public key, sign count,
  transports, ``usage`` first or secondary) with the user's ``fs_webauthn_user_handle``;
  ``us_totp_secrets``' authenticator key (unified sign-in) when there is no other.

A factor whose secret cannot be opened is reported as unreadable, never dropped: the plan
makes it a required enrollment or refuses the run. The keys come from the running
application's configuration (the same keys as the old application's).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import Connection, MetaData, Table, inspect, select

from flask_authflow._cli.base import CommandFailed
from flask_authflow._cli.importing.model import (
    EmailFactor,
    ImportedEmail,
    ImportedFactor,
    ImportedRole,
    ImportedUser,
    RecoveryCodes,
    SourceData,
    TotpFactor,
    Unreadable,
    WebAuthnCredential,
    WebAuthnUse,
)

__all__ = ["FstReader"]

_ROLES, _ROLES_USERS = "role", "roles_users"
#: FST's WebAuthn table: ``webauthn`` as FST names it, ``web_authn`` as Flask-SQLAlchemy
#: names the ``WebAuthn`` model of FST's documented example.
_WEBAUTHN = ("webauthn", "web_authn")
#: The start of a Fernet token (version byte 0x80, base64url): an encrypted recovery code.
_FERNET_PREFIX = "gAAAAA"


class FstReader:
    """The :class:`~.model.SourceReader` of a Flask-Security-Too database (see the module)."""

    name = "flask-security-too"

    def __init__(self, table: str = "user") -> None:
        self.table = table

    def recognises(self, conn: Connection, tables: Collection[str]) -> bool:
        if self.table not in tables:
            return False
        columns = {column["name"] for column in inspect(conn).get_columns(self.table)}
        return {"email", "password", "fs_uniquifier"} <= columns

    def read(self, conn: Connection, config: Mapping[str, object]) -> SourceData:
        notices = _salt_notices(config)
        opener = _Opener(config)
        tables = set(inspect(conn).get_table_names())
        users = _rows(conn, self.table)
        roles, held = _roles(conn, tables)
        keys = _credentials(conn, tables)
        read = [_user(item, held.get(item["id"], ()), keys.get(item["id"], ()), opener) for item in users]
        return SourceData(users=read, roles=roles, notices=[*notices, *opener.notices])


def _salt_notices(config: Mapping[str, object]) -> list[str]:
    """Flask-Security-Too hashes an HMAC of the password under its salt: without the salt no
    user could sign in, so the run is refused, unless the app declares single hashes."""
    if config.get("AUTHFLOW_LEGACY_PASSWORD_SALT"):
        return []
    if config.get("SECURITY_PASSWORD_SINGLE_HASH") is True:
        return ["SECURITY_PASSWORD_SINGLE_HASH is True: hashes are verified against the password itself"]
    raise CommandFailed(
        "this is a Flask-Security-Too database, and AUTHFLOW_LEGACY_PASSWORD_SALT is not set: its hashes "
        "are of an HMAC under SECURITY_PASSWORD_SALT, so no user could sign in. Set "
        "AUTHFLOW_LEGACY_PASSWORD_SALT to the old application's SECURITY_PASSWORD_SALT (or, if it hashed "
        "the passwords themselves, declare SECURITY_PASSWORD_SINGLE_HASH = True)",
        "invalid_input",
    )


def _rows(conn: Connection, name: str) -> list[dict[str, Any]]:
    table = Table(name, MetaData(), autoload_with=conn)
    return [dict(row._mapping) for row in conn.execute(select(table))]


def _roles(conn: Connection, tables: set[str]) -> tuple[list[ImportedRole], dict[Any, tuple[str, ...]]]:
    """The roles, and the role names each user id holds."""
    if _ROLES not in tables:
        return [], {}
    by_id: dict[Any, ImportedRole] = {}
    for item in _rows(conn, _ROLES):
        permissions = tuple(p.strip() for p in str(item.get("permissions") or "").split(",") if p.strip())
        by_id[item["id"]] = ImportedRole(str(item["name"]), item.get("description"), permissions)
    held: dict[Any, list[str]] = {}
    if _ROLES_USERS in tables:
        for link in _rows(conn, _ROLES_USERS):
            role = by_id.get(link.get("role_id"))
            if role is not None:
                held.setdefault(link.get("user_id"), []).append(role.name)
    return list(by_id.values()), {user: tuple(sorted(names)) for user, names in held.items()}


def _credentials(conn: Connection, tables: set[str]) -> dict[Any, list[dict[str, Any]]]:
    """The ``webauthn`` rows by user id."""
    found: dict[Any, list[dict[str, Any]]] = {}
    for name in (t for t in _WEBAUTHN if t in tables):
        for item in _rows(conn, name):
            found.setdefault(item.get("user_id"), []).append(item)
    return found


class _Opener:
    """Opens Flask-Security-Too's secrets with the application's keys."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self.totp_secrets = config.get("SECURITY_TOTP_SECRETS")
        self.recovery_keys = config.get("SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS")
        self.notices: list[str] = []

    def totp(self, stored: str) -> TotpFactor | Unreadable:
        """A passlib TOTP JSON document (encrypted under ``SECURITY_TOTP_SECRETS`` or not)."""
        totp = importlib.import_module("passlib.totp").TOTP  # libpass, as for the legacy hashes
        try:
            encrypted = "enckey" in json.loads(stored)
        except (ValueError, TypeError):
            return Unreadable("totp", "the stored TOTP secret is not passlib's JSON")
        if encrypted and not isinstance(self.totp_secrets, dict):
            return Unreadable("totp", "encrypted with SECURITY_TOTP_SECRETS, which is not configured here")
        factory = totp.using(secrets=self.totp_secrets) if isinstance(self.totp_secrets, dict) else totp
        try:
            opened = factory.from_json(stored)
        except Exception:  # noqa: BLE001 - passlib raises several kinds for a key that does not fit
            return Unreadable("totp", "SECURITY_TOTP_SECRETS does not open the stored TOTP secret")
        return TotpFactor(bytes(opened.key), digits=opened.digits, period=opened.period, algorithm=opened.alg)

    def recovery(self, codes: Sequence[str]) -> RecoveryCodes | Unreadable:
        """The unused codes in clear (decrypted with the recovery-code keys when encrypted)."""
        if not any(code.startswith(_FERNET_PREFIX) for code in codes):
            return RecoveryCodes(codes=tuple(codes))
        keys = self.recovery_keys
        if not isinstance(keys, list | tuple) or not keys:
            return Unreadable(
                "recovery_code",
                "encrypted with SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS, not configured here",
            )
        try:
            cryptor = MultiFernet([Fernet(key) for key in keys])
            return RecoveryCodes(
                codes=tuple(cryptor.decrypt(code.encode("ascii")).decode() for code in codes)
            )
        except (InvalidToken, ValueError, UnicodeError):
            return Unreadable(
                "recovery_code", "SECURITY_MULTI_FACTOR_RECOVERY_CODES_KEYS do not open the codes"
            )


def _user(
    item: Mapping[str, Any], roles: Sequence[str], keys: Sequence[Mapping[str, Any]], opener: _Opener
) -> ImportedUser:
    email = item.get("email")
    username = item.get("username")
    factors, unreadable = _factors(item, keys, opener)
    attributes = {"fs_uniquifier": str(item.get("fs_uniquifier") or ""), "fst_id": str(item.get("id"))}
    return ImportedUser(
        identifier=str(username or email or ""),
        password_hash=item.get("password"),
        emails=(ImportedEmail(email, verified=item.get("confirmed_at") is not None, primary=True),)
        if email
        else (),
        disabled=not item.get("active", True),
        roles=tuple(roles),
        factors=tuple(factors),
        unreadable=tuple(unreadable),
        attributes=attributes,
        source_ref=str(item.get("id")),
    )


def _factors(
    item: Mapping[str, Any], keys: Sequence[Mapping[str, Any]], opener: _Opener
) -> tuple[list[ImportedFactor], list[Unreadable]]:
    found: list[ImportedFactor | Unreadable] = []
    method, secret = item.get("tf_primary_method"), item.get("tf_totp_secret")
    if method == "authenticator":
        found.append(opener.totp(secret) if isinstance(secret, str) else Unreadable("totp", "no TOTP secret"))
    elif method == "email":
        found.append(EmailFactor())
    elif method:
        found.append(
            Unreadable("totp", f"{method} codes are not offered here; an authenticator app replaces them")
        )
    unified = _unified_totp(item.get("us_totp_secrets"), opener)
    if unified is not None and not any(isinstance(f, TotpFactor) for f in found):
        found.append(unified)
    codes = item.get("mf_recovery_codes")
    if codes:
        found.append(opener.recovery([c for c in str(codes).split(",") if c]))
    handle = item.get("fs_webauthn_user_handle")
    found.extend(_credential(key, handle) for key in keys)
    factors = [f for f in found if not isinstance(f, Unreadable)]
    return factors, [f for f in found if isinstance(f, Unreadable)]


def _unified_totp(stored: object, opener: _Opener) -> TotpFactor | None:
    """The authenticator key of unified sign-in, if there is one that opens (a sign-in by
    code alone there; a second factor after the password here, which is not weaker)."""
    if not isinstance(stored, str) or not stored:
        return None
    try:
        methods = json.loads(stored)
    except ValueError:
        return None
    secret = methods.get("authenticator") if isinstance(methods, dict) else None
    opened = opener.totp(secret) if isinstance(secret, str) else None
    return opened if isinstance(opened, TotpFactor) else None


def _credential(key: Mapping[str, Any], handle: object) -> WebAuthnCredential:
    transports = key.get("transports")
    return WebAuthnCredential(
        credential_id=bytes(key["credential_id"]),
        public_key=bytes(key["public_key"]),
        sign_count=int(key.get("sign_count") or 0),
        transports=tuple(t for t in str(transports or "").split(",") if t),
        use=WebAuthnUse.FIRST if key.get("usage") == "first" else WebAuthnUse.SECONDARY,
        label=str(key.get("name") or "") or None,
        user_handle=handle.encode("utf-8") if isinstance(handle, str) and handle else None,
        backup_eligible=key.get("device_type") == "multi_device",
        backed_up=bool(key.get("backup_state")),
    )
