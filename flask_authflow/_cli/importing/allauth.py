"""django-allauth 65: the users of a Django project's database, with everything allauth stores.

``flask authflow users import --from-url URL`` recognises a Django project by its
``auth_user`` and ``account_emailaddress`` tables and reads, by SQLAlchemy reflection (no
Django needed), Django's and allauth's tables:

==================================  ===========================================================
``auth_user``                       ``username`` (the e-mail when empty) as the identifier,
                                    ``password`` in Django's own format (``pbkdf2_sha256$``,
                                    ``argon2$``, ``bcrypt_sha256$``, ``bcrypt$``), ``is_active``
``account_emailaddress``            the primary address and whether it is verified (the others
                                    as further addresses)
``socialaccount_socialaccount``     ``provider`` + ``uid``: a link to our provider of that name
``mfa_authenticator``               ``totp`` (the base32 secret), ``recovery_codes`` (the codes
                                    derived from allauth's seed, less those its used mask marks),
                                    ``webauthn`` (credential id, public key, sign count,
                                    transports, passwordless)
``auth_group``, ``auth_user_groups`` with ``--django-groups-as-roles``: each group a role
==================================  ===========================================================

allauth's MFA adapter may encrypt the secrets it stores (``encrypt``/``decrypt``; the default
stores them as they are): a secret that is not of allauth's own form cannot be opened here
and is reported as such, so that the import asks that user to enroll again rather than
dropping the factor in silence.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, MetaData, Table, inspect, select
from sqlalchemy.exc import NoSuchTableError

from flask_authflow._cli.base import CommandFailed
from flask_authflow._cli.importing.model import (
    IdentityLink,
    ImportedEmail,
    ImportedFactor,
    ImportedRole,
    ImportedUser,
    RecoveryCodes,
    SourceData,
    SourceRefusal,
    TotpFactor,
    Unreadable,
    WebAuthnCredential,
    WebAuthnUse,
)
from flask_authflow.errors import MissingExtraError

__all__ = ["RECOVERY_CODE_COUNT", "RECOVERY_CODE_DIGITS", "AllauthReader", "allauth_recovery_codes"]

#: allauth's defaults (``MFA_RECOVERY_CODE_COUNT``, ``MFA_RECOVERY_CODE_DIGITS``).
RECOVERY_CODE_COUNT = 10
RECOVERY_CODE_DIGITS = 8
#: The tables that make a database a django-allauth project's.
_RECOGNISED = frozenset({"auth_user", "account_emailaddress"})
#: A seed as allauth makes it (``secrets.token_hex(40)``); anything else was encrypted.
_SEED = re.compile(r"[0-9a-f]{80}")
#: A TOTP key as allauth makes it (base32 of 20 random bytes); anything else was encrypted.
_BASE32 = re.compile(r"[A-Z2-7]{16,128}")
#: Django's mark of a password that can never log in (``set_unusable_password``).
_UNUSABLE = "!"
_ENCRYPTED = "not allauth's own form: encrypted by the project's MFA adapter?"


def allauth_recovery_codes(
    seed: str, *, count: int = RECOVERY_CODE_COUNT, digits: int = RECOVERY_CODE_DIGITS
) -> list[str]:
    """The recovery codes allauth derives from ``seed`` (``RecoveryCodes.generate_codes``):
    one running HMAC-SHA1 keyed by the seed, fed ``f"{i:3},"`` for code ``i``; the first
    ``digits // 2`` bytes of each digest as a number modulo ``10 ** digits``."""
    mac = hmac.new(seed.encode("ascii"), digestmod=hashlib.sha1)
    size = min(digits // 2, mac.digest_size)
    codes = []
    for i in range(count):
        mac.update(f"{i:3},".encode())
        value = int.from_bytes(mac.digest()[:size], "big") % 10**digits
        codes.append(str(value).zfill(digits))
    return codes


def _data(value: Any) -> dict[str, Any] | None:
    """An ``Authenticator.data`` JSON value (text on SQLite, already decoded on PostgreSQL)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _totp(data: dict[str, Any]) -> TotpFactor | Unreadable:
    secret = data.get("secret")
    key = secret.upper().rstrip("=") if isinstance(secret, str) else ""
    if _BASE32.fullmatch(key) is None:
        return Unreadable("totp", f"the TOTP key is {_ENCRYPTED}")
    try:
        return TotpFactor(secret=base64.b32decode(key + "=" * (-len(key) % 8)), label="allauth")
    except binascii.Error:  # a length base32 never has
        return Unreadable("totp", f"the TOTP key is {_ENCRYPTED}")


def _recovery_codes(data: dict[str, Any]) -> RecoveryCodes | Unreadable | None:
    """The unused codes (``None``: every code is spent, nothing to carry)."""
    migrated = data.get("migrated_codes")
    if migrated is not None:  # codes allauth was given by an earlier migration, kept in clear
        if not isinstance(migrated, list) or not all(isinstance(c, str) and c.isalnum() for c in migrated):
            return Unreadable("recovery_code", f"the recovery codes are {_ENCRYPTED}")
        return RecoveryCodes(codes=tuple(migrated)) if migrated else None
    seed, used = data.get("seed"), data.get("used_mask", 0)
    if not isinstance(seed, str) or _SEED.fullmatch(seed) is None or not isinstance(used, int):
        return Unreadable("recovery_code", f"the recovery-code seed is {_ENCRYPTED}")
    codes = allauth_recovery_codes(seed)
    unused = tuple(code for i, code in enumerate(codes) if not used & (1 << i))
    return RecoveryCodes(codes=unused) if unused else None


def _webauthn(data: dict[str, Any], user_handle: bytes) -> WebAuthnCredential | Unreadable:
    """The credential allauth keeps as the registration response the browser posted."""
    try:
        from webauthn.helpers import parse_attestation_object, parse_registration_credential_json
    except ImportError:
        raise MissingExtraError("webauthn", "webauthn") from None
    posted = data.get("credential")
    try:
        registration = parse_registration_credential_json(json.dumps(posted))
        auth_data = parse_attestation_object(registration.response.attestation_object).auth_data
    except Exception:  # noqa: BLE001 - py_webauthn raises many kinds for a damaged value
        return Unreadable("webauthn", "the stored registration could not be parsed")
    attested = auth_data.attested_credential_data
    if attested is None:
        return Unreadable("webauthn", "the stored registration has no credential data")
    props = posted.get("clientExtensionResults", {}).get("credProps", {}) if isinstance(posted, dict) else {}
    passwordless = isinstance(props, dict) and props.get("rk") is True
    return WebAuthnCredential(
        credential_id=attested.credential_id,
        public_key=attested.credential_public_key,
        sign_count=auth_data.sign_count,
        transports=tuple(str(t.value) for t in registration.response.transports or ()),
        discoverable=passwordless,
        use=WebAuthnUse.FIRST if passwordless else WebAuthnUse.SECONDARY,
        label=str(data.get("name") or "allauth"),
        user_handle=user_handle if passwordless else None,
        backup_eligible=auth_data.flags.be,
        backed_up=auth_data.flags.bs,
    )


def _base36(number: int) -> str:
    """Django's ``int_to_base36``: how allauth names a user in a passkey's user handle."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if number == 0:
            return text


def _factor(kind: Any, value: Any, user_pk: Any) -> ImportedFactor | Unreadable | None:
    """One ``mfa_authenticator`` row as a factor (or why it cannot be carried)."""
    data = _data(value)
    ours = {"totp": "totp", "recovery_codes": "recovery_code", "webauthn": "webauthn"}.get(str(kind))
    if ours is None:
        return Unreadable(str(kind), "an allauth authenticator type flask-authflow does not know")
    if data is None:
        return Unreadable(ours, "the authenticator's data is not a JSON object")
    if ours == "totp":
        return _totp(data)
    if ours == "recovery_code":
        return _recovery_codes(data)
    handle = _base36(user_pk).encode() if isinstance(user_pk, int) else str(user_pk).encode()
    return _webauthn(data, handle)


@dataclass(frozen=True, slots=True)
class _Rows:
    """What the project's tables hold, grouped by the user's primary key."""

    users: list[dict[str, Any]]
    emails: dict[Any, list[dict[str, Any]]]
    social: dict[Any, list[dict[str, Any]]]
    authenticators: dict[Any, list[dict[str, Any]]]
    groups: dict[Any, list[str]]
    roles: list[ImportedRole]


def _table(conn: Connection, name: str, tables: Collection[str]) -> Table | None:
    if name not in tables:
        return None
    try:
        return Table(name, MetaData(), autoload_with=conn)
    except NoSuchTableError:
        return None


def _by_user(conn: Connection, table: Table | None) -> dict[Any, list[dict[str, Any]]]:
    grouped: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    if table is not None:
        for row in conn.execute(select(table).order_by(table.c.id)):
            grouped[row._mapping["user_id"]].append(dict(row._mapping))
    return grouped


def _groups(conn: Connection, tables: Collection[str]) -> tuple[dict[Any, list[str]], list[ImportedRole]]:
    """Each user's group names, and the groups as roles with their permissions
    (``app_label.codename``, as Django's ``has_perm`` names them)."""
    group, member = _table(conn, "auth_group", tables), _table(conn, "auth_user_groups", tables)
    if group is None or member is None:
        return {}, []
    held: dict[Any, list[str]] = defaultdict(list)
    query = select(member.c.user_id, group.c.name).join(group, group.c.id == member.c.group_id)
    for user_id, name in conn.execute(query.order_by(group.c.name)):
        held[user_id].append(str(name))
    granted: dict[str, list[str]] = defaultdict(list)
    links, perm = _table(conn, "auth_group_permissions", tables), _table(conn, "auth_permission", tables)
    kinds = _table(conn, "django_content_type", tables)
    if links is not None and perm is not None and kinds is not None:
        joined = (
            select(group.c.name, kinds.c.app_label, perm.c.codename)
            .join(links, links.c.group_id == group.c.id)
            .join(perm, perm.c.id == links.c.permission_id)
            .join(kinds, kinds.c.id == perm.c.content_type_id)
        )
        for name, app_label, codename in conn.execute(joined):
            granted[str(name)].append(f"{app_label}.{codename}")
    names = [str(name) for (name,) in conn.execute(select(group.c.name).order_by(group.c.name))]
    return held, [ImportedRole(name, permissions=tuple(sorted(granted[name]))) for name in names]


def _read_rows(conn: Connection, tables: Collection[str], groups_as_roles: bool) -> _Rows:
    users = _table(conn, "auth_user", tables)
    if users is None or not {"id", "username", "password", "email", "is_active"} <= set(users.c.keys()):
        raise CommandFailed("the database has no Django auth_user table of the usual form", "invalid_input")
    held, roles = _groups(conn, tables) if groups_as_roles else ({}, [])
    return _Rows(
        users=[dict(row._mapping) for row in conn.execute(select(users).order_by(users.c.id))],
        emails=_by_user(conn, _table(conn, "account_emailaddress", tables)),
        social=_by_user(conn, _table(conn, "socialaccount_socialaccount", tables)),
        authenticators=_by_user(conn, _table(conn, "mfa_authenticator", tables)),
        groups=held,
        roles=roles,
    )


def _emails(row: Mapping[str, Any], addresses: Sequence[Mapping[str, Any]]) -> tuple[ImportedEmail, ...]:
    """allauth's addresses; without any, ``auth_user.email`` (never verified by allauth)."""
    if addresses:
        return tuple(
            ImportedEmail(str(a["email"]), verified=bool(a["verified"]), primary=bool(a["primary"]))
            for a in sorted(addresses, key=lambda a: not a["primary"])
        )
    email = row.get("email")
    return (ImportedEmail(str(email)),) if email else ()


def _factors(rows: Iterable[Mapping[str, Any]], pk: Any) -> tuple[list[ImportedFactor], list[Unreadable]]:
    carried: list[ImportedFactor] = []
    unreadable: list[Unreadable] = []
    for row in rows:
        found = _factor(row["type"], row["data"], pk)
        if isinstance(found, Unreadable):
            unreadable.append(found)
        elif found is not None:
            carried.append(found)
    return carried, unreadable


def _user(row: Mapping[str, Any], rows: _Rows) -> ImportedUser | SourceRefusal:
    pk = row["id"]
    emails = _emails(row, rows.emails.get(pk, []))
    identifier = str(row["username"] or "").strip() or (emails[0].address if emails else "")
    if not identifier:
        return SourceRefusal(f"auth_user id {pk}", "no username and no e-mail address")
    stored = row["password"]
    usable = isinstance(stored, str) and bool(stored) and not stored.startswith(_UNUSABLE)
    factors, unreadable = _factors(rows.authenticators.get(pk, []), pk)
    attributes = {"django_pk": str(pk)}
    attributes.update({f"django_{flag}": "true" for flag in ("is_staff", "is_superuser") if row.get(flag)})
    return ImportedUser(
        identifier=identifier,
        password_hash=stored if usable else None,
        emails=emails,
        disabled=not row["is_active"],
        roles=tuple(rows.groups.get(pk, [])),
        factors=tuple(factors),
        unreadable=tuple(unreadable),
        links=tuple(IdentityLink(str(s["provider"]), str(s["uid"])) for s in rows.social.get(pk, [])),
        attributes=attributes,
        source_ref=str(pk),
    )


class AllauthReader:
    """The django-allauth source (see the module's documentation). ``groups_as_roles``:
    Django's groups become roles (with their permissions) and each user holds their groups'
    roles (``users import --django-groups-as-roles``)."""

    name = "django-allauth"

    def __init__(self, *, groups_as_roles: bool = False) -> None:
        self.groups_as_roles = groups_as_roles

    def recognises(self, conn: Connection, tables: Collection[str]) -> bool:
        return _RECOGNISED <= set(tables)

    def read(self, conn: Connection, config: Mapping[str, object]) -> SourceData:
        rows = _read_rows(conn, set(inspect(conn).get_table_names()), self.groups_as_roles)
        return SourceData(users=[_user(row, rows) for row in rows.users], roles=rows.roles)
