"""A user to import, as a source reads it: everything another application stores that can
carry (or that cannot, and must be said so).

A *source* (Flask-Security-Too's database, django-allauth's, a CSV/JSON file) implements
:class:`SourceReader`: it reads its storage into a :class:`SourceData` of plain values and
decides nothing. The plan (:mod:`.plan`) then says per user what carries, what is refused
and what the user will be asked at the next sign-in; the writer (:mod:`.write`) carries it
in one unit of work per user. A source never writes, and never drops what it cannot read:
a factor whose secret it cannot open is reported as :class:`Unreadable`, so the plan can
turn it into a required enrollment instead of silently lowering the account.

Secrets are raw: a TOTP key as its bytes (not base32), recovery codes in clear when the
source has them so; WebAuthn ids and keys as bytes. Nothing here is sealed yet.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from sqlalchemy import Connection

__all__ = [
    "EmailFactor",
    "HotpFactor",
    "IdentityLink",
    "ImportedEmail",
    "ImportedFactor",
    "ImportedRole",
    "ImportedUser",
    "RecoveryCodes",
    "SourceData",
    "SourceReader",
    "SourceRefusal",
    "TotpFactor",
    "Unreadable",
    "WebAuthnCredential",
    "WebAuthnUse",
]


@dataclass(frozen=True, slots=True)
class ImportedEmail:
    """One e-mail address of the user; at most one is ``primary`` (the one our account keeps;
    with none marked, the first verified one, else the first)."""

    address: str
    verified: bool = False
    primary: bool = False


@dataclass(frozen=True, slots=True)
class TotpFactor:
    """A TOTP authenticator: the raw key (bytes, not base32) and its parameters."""

    secret: bytes = field(repr=False)
    digits: int = 6
    period: int = 30
    algorithm: str = "SHA1"
    label: str | None = None


@dataclass(frozen=True, slots=True)
class HotpFactor:
    """An HOTP authenticator: the raw key and the next counter the source expects."""

    secret: bytes = field(repr=False)
    counter: int = 0
    digits: int = 6
    label: str | None = None


@dataclass(frozen=True, slots=True)
class EmailFactor:
    """One-time codes by e-mail; ``address`` ``None`` means the user's primary address."""

    address: str | None = None


@dataclass(frozen=True, slots=True)
class RecoveryCodes:
    """Unused recovery codes: in clear (``codes``; carried, re-digested under our key), or
    only as the source's hashes (``hashes``, with ``scheme`` naming how they were made): those
    cannot be checked by us, so the plan asks the user for a new set."""

    codes: tuple[str, ...] = field(default=(), repr=False)
    hashes: tuple[str, ...] = field(default=(), repr=False)
    scheme: str | None = None


class WebAuthnUse(enum.StrEnum):
    """How the source let the credential be used: as the first factor (a passkey, signing in
    without a password) or as a second factor after the password."""

    FIRST = "first"
    SECONDARY = "secondary"


@dataclass(frozen=True, slots=True)
class WebAuthnCredential:
    """A registered WebAuthn credential, as the relying party stored it.

    :param credential_id: the raw credential id.
    :param public_key: the COSE public key (bytes) as returned at registration.
    :param sign_count: the last signature counter seen.
    :param transports: ``"usb"``, ``"nfc"``, ``"ble"``, ``"internal"``, ``"hybrid"`` ...
    :param discoverable: a resident (discoverable) credential, when the source knows.
    :param use: first or secondary factor (see :class:`WebAuthnUse`).
    :param user_handle: the user handle the authenticator holds for a discoverable
        credential (the source's; a passkey assertion names the user by it), if stored.
    """

    credential_id: bytes = field(repr=False)
    public_key: bytes = field(repr=False)
    sign_count: int = 0
    transports: tuple[str, ...] = ()
    discoverable: bool | None = None
    use: WebAuthnUse = WebAuthnUse.SECONDARY
    label: str | None = None
    user_handle: bytes | None = field(default=None, repr=False)
    backup_eligible: bool | None = None
    backed_up: bool | None = None


ImportedFactor: TypeAlias = TotpFactor | HotpFactor | EmailFactor | RecoveryCodes | WebAuthnCredential


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A factor the user has in the source whose secret the source could not open (no key
    given, a wrong key, a damaged value). ``kind`` is our factor kind's name (``"totp"``,
    ``"hotp"``, ``"email_otp"``, ``"recovery_code"``, ``"webauthn"``); ``reason`` is for the
    report. The plan makes it a required enrollment (``--accept-reenrollment``) or refuses."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class IdentityLink:
    """A federated identity: ``provider`` is the name of one of our configured providers
    (the source maps its own names), ``subject`` the provider's stable user id."""

    provider: str
    subject: str
    email: str | None = None


@dataclass(frozen=True, slots=True)
class ImportedRole:
    """A role with the permissions it grants (names as the source spells them)."""

    name: str
    description: str | None = None
    permissions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ImportedUser:
    """One user of the source.

    :param identifier: the login name (our identifier); normalised by the plan.
    :param password_hash: the stored hash as it is (``None``: the user has no password,
        e.g. only a social login).
    :param tenant: ``None``: the import's default tenant.
    :param emails: every address, with its verified/primary state.
    :param disabled: refused sign-in in the source (FST ``active`` false, Django
        ``is_active`` false).
    :param roles: the role names the user holds (defined in :attr:`SourceData.roles`).
    :param factors: the factors carried with their secrets.
    :param unreadable: the factors present whose secrets could not be opened.
    :param links: federated identities.
    :param attributes: source values kept on the account for the application
        (``fs_uniquifier``, a Django ``pk``): text keys and values.
    :param source_ref: how the source names the row, for reports (a primary key).
    """

    identifier: str
    password_hash: str | None = field(default=None, repr=False)
    tenant: str | None = None
    emails: tuple[ImportedEmail, ...] = ()
    disabled: bool = False
    roles: tuple[str, ...] = ()
    factors: tuple[ImportedFactor, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    links: tuple[IdentityLink, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=dict)
    source_ref: str | None = None


@dataclass(frozen=True, slots=True)
class SourceRefusal:
    """A row the source could not turn into a user at all (``label`` names it, ``reason``
    says why): reported as refused, never imported half."""

    label: str
    reason: str


@dataclass(frozen=True, slots=True)
class SourceData:
    """All a source read: its roles, its users (or rows it refused), and notices for the
    operator (e.g. "no password salt configured")."""

    users: Sequence[ImportedUser | SourceRefusal]
    roles: Sequence[ImportedRole] = ()
    notices: Sequence[str] = ()


class SourceReader(Protocol):
    """A database source for ``users import --from-url``.

    ``name`` is shown in reports (``"flask-security-too"``, ``"django-allauth"``).
    ``recognises`` looks at the database's table names (and may look at columns through the
    connection) and says whether this is its schema. ``read`` reads everything; ``config``
    is the running application's configuration (where e.g. ``SECURITY_TOTP_SECRETS`` are).
    It raises ``CommandFailed`` (``flask_authflow._cli.base``) when the database cannot be
    read as this source (a missing table, a key that refuses to be used).
    """

    name: str

    def recognises(self, conn: Connection, tables: Collection[str]) -> bool: ...

    def read(self, conn: Connection, config: Mapping[str, object]) -> SourceData: ...
