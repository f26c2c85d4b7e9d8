"""``flask authflow users import``: users of another application, with their password hashes.

The users come from a CSV file (a header row naming the columns), a JSON file (a list of
objects, or ``{"users": [...]}``), or straight from a Flask-Security-Too database
(``--from-url``: its ``user`` table, read by SQLAlchemy reflection). The fields are
``identifier``, ``email``, ``hash``, ``tenant``, ``disabled`` and ``confirmed``; only
``identifier`` and ``hash`` are required.

Each user is created in one unit of work with the stored hash as it is (nothing is
re-hashed: the first login replaces it with Argon2id). A user whose hash could never log
in is refused with the reason: a scheme that ``AUTHFLOW_LEGACY_PASSWORD_SCHEMES`` does not
enable, a malformed hash, a stored cost over the ceilings. A user who is already there is
left as it is, so a second run imports nothing and refuses nothing new.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, cast

import click
from sqlalchemy.exc import SQLAlchemyError

from flask_authflow.cli.base import CommandFailed, emit, json_option, tenant_or_default
from flask_authflow.cli.users import users
from flask_authflow.core.app_users import AppUserHooks
from flask_authflow.core.identifiers import check_tenant, normalise_email, normalise_identifier
from flask_authflow.core.ports import IdentityStore, UnitOfWork, UserRecord
from flask_authflow.errors import AuthFlowError, UserExists
from flask_authflow.login.legacy_hashes import LegacyHashes, LegacyResult, identify
from flask_authflow.login.password import PasswordHasher
from flask_authflow.web.state import account_admin, get_state

__all__ = [
    "ImportReport",
    "ImportRow",
    "ImportStore",
    "ImportTarget",
    "import_rows",
    "read_file",
    "read_fst_database",
]

#: Largest import file read (a user list, not a database dump).
MAX_FILE_BYTES = 64 * 1024 * 1024
_TRUE = frozenset({"1", "true", "yes", "y", "t"})
_FALSE = frozenset({"", "0", "false", "no", "n", "f"})


@dataclass(frozen=True, slots=True)
class ImportRow:
    """One user to import, as read from the source (nothing checked yet)."""

    identifier: Any
    hash: Any
    tenant: Any = None
    email: Any = None
    disabled: Any = False
    confirmed: Any = False


@dataclass(slots=True)
class ImportReport:
    """What an import did: the identifiers imported, those already present, and those refused
    with the reason."""

    imported: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "imported": len(self.imported),
            "already_present": len(self.present),
            "refused": [{"identifier": who, "reason": why} for who, why in self.refused],
        }


class ImportStore(IdentityStore, Protocol):
    """What an import writes to (both backends are one)."""

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None: ...

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None: ...

    def set_disabled(self, tenant: str, identifier: str, disabled: bool = True) -> None: ...

    def begin_unit(self) -> UnitOfWork: ...


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _Refused(f"{name} is not a yes/no value")


def _hash_refusal(stored: str, hasher: PasswordHasher, legacy: LegacyHashes) -> str | None:
    """Why ``stored`` could never log in, or ``None``."""
    if stored.startswith("$argon2id$"):
        if hasher.over_ceiling(stored):
            return "the Argon2 hash is over the AUTHFLOW_ARGON2_MAX_* ceilings"
        return None
    scheme = identify(stored)
    if scheme is None:
        return "the hash is of no scheme flask-authflow verifies"
    if scheme not in legacy.schemes:
        return f"the hash scheme {scheme!r} is not in AUTHFLOW_LEGACY_PASSWORD_SCHEMES"
    found = legacy.inspect(stored)
    if found is LegacyResult.OVER_CEILING:
        return f"the {scheme} hash's stored cost is over the ceilings"
    if found is not None:
        return f"the {scheme} hash is malformed"
    return None


def _checked(
    row: ImportRow, default_tenant: str, hasher: PasswordHasher, legacy: LegacyHashes
) -> tuple[str, str, str | None]:
    """``(tenant, identifier, e-mail)`` of a row that may be imported; :class:`_Refused`
    otherwise."""
    if not isinstance(row.identifier, str) or not row.identifier.strip():
        raise _Refused("no identifier")
    tenant = row.tenant if row.tenant not in (None, "") else default_tenant
    try:
        identifier = normalise_identifier(row.identifier)
        tenant = check_tenant(str(tenant))
    except AuthFlowError as error:
        raise _Refused(error.message) from None
    if not isinstance(row.hash, str) or not row.hash:
        raise _Refused("no password hash")
    refusal = _hash_refusal(row.hash, hasher, legacy)
    if refusal is not None:
        raise _Refused(refusal)
    _flag(row.disabled, "disabled")
    _flag(row.confirmed, "confirmed")
    return tenant, identifier, _email(row.email)


def _email(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Refused("the e-mail address is not text")
    try:
        return normalise_email(value)
    except AuthFlowError:
        raise _Refused("the e-mail address is malformed") from None


def _write(
    store: ImportStore, row: ImportRow, tenant: str, identifier: str, email: str | None, now: datetime
) -> UserRecord:
    """Create the account with its hash and flags (the caller keeps it together)."""
    verified_at = now if email is not None and _flag(row.confirmed, "confirmed") else None
    user = store.create_user(tenant, identifier, None, email=email, email_verified_at=verified_at)
    store.set_password_hash(tenant, user.user_id, row.hash)
    if _flag(row.disabled, "disabled"):
        store.set_disabled(tenant, identifier, True)
    return user


def _in_unit(store: ImportStore, write: Callable[[], UserRecord]) -> UserRecord:
    unit = store.begin_unit()
    try:
        user = write()
    except BaseException:
        unit.rollback()
        raise
    unit.commit()
    return user


def _create(target: ImportTarget, row: ImportRow, tenant: str, identifier: str, email: str | None) -> bool:
    """Create the user, its hash and flags together, with the application's ``user_created``
    hook (source ``"import"``) when it has one; ``False`` if the identifier or the e-mail
    is taken in the tenant."""
    store = target.store
    if store.find_user(tenant, identifier) is not None:
        return False
    if email is not None and store.find_user_by_email(tenant, email) is not None:
        raise _Refused("the e-mail address belongs to another user already")

    def make() -> UserRecord:
        return _in_unit(store, lambda: _write(store, row, tenant, identifier, email, target.now))

    try:
        if target.app_users is None:
            make()
        else:  # with the application's hook: the account is removed again if it fails
            _with_hook(target.app_users, store, make)
    except UserExists:
        if store.find_user(tenant, identifier) is not None:
            return False  # a parallel import made it
        raise _Refused("the e-mail address belongs to another user already") from None
    return True


def _with_hook(app_users: AppUserHooks, store: ImportStore, make: Callable[[], UserRecord]) -> None:
    """``make()`` with the ``user_created`` hook; a failure of the application's own code
    refuses the row (the account is gone again), while the library's and the database's
    errors end the import."""
    try:
        app_users.create(store, make, source="import")
    except (AuthFlowError, SQLAlchemyError, OSError):
        raise
    except Exception as error:  # noqa: BLE001 - the application's hook: reported per row
        raise _Refused(f"the application's user_created hook failed ({type(error).__name__})") from None


@dataclass(frozen=True, slots=True)
class ImportTarget:
    """Where an import writes: the store, the application-user hooks (``None``: none), the
    hasher and legacy schemes that decide which hashes can log in, and the time verified
    e-mail addresses are stamped with."""

    store: ImportStore
    hasher: PasswordHasher
    legacy: LegacyHashes
    now: datetime
    app_users: AppUserHooks | None = None


def import_rows(target: ImportTarget, rows: Iterable[ImportRow], *, default_tenant: str) -> ImportReport:
    """Import ``rows`` (see the module's documentation)."""
    report = ImportReport()
    for row in rows:
        label = row.identifier if isinstance(row.identifier, str) else repr(row.identifier)
        try:
            tenant, identifier, email = _checked(row, default_tenant, target.hasher, target.legacy)
            created = _create(target, row, tenant, identifier, email)
        except _Refused as refused:
            report.refused.append((label[:200], refused.reason))
            continue
        (report.imported if created else report.present).append(identifier)
    return report


# --- sources -------------------------------------------------------------------------------


def _row(item: Mapping[str, Any]) -> ImportRow:
    return ImportRow(
        identifier=item.get("identifier"),
        hash=item.get("hash"),
        tenant=item.get("tenant"),
        email=item.get("email"),
        disabled=item.get("disabled", False),
        confirmed=item.get("confirmed", False),
    )


def read_file(path: Path) -> list[ImportRow]:
    """The rows of a CSV or JSON file (by its suffix; ``.json`` is JSON, anything else CSV).

    :raises CommandFailed: the file is unreadable, too large or not of that shape."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise CommandFailed(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB", "invalid_input")
    try:
        text = path.read_text("utf-8-sig")
    except UnicodeDecodeError:
        raise CommandFailed(f"{path} is not UTF-8 text", "invalid_input") from None
    if path.suffix.lower() == ".json":
        return _json_rows(text, path)
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "identifier" not in reader.fieldnames or "hash" not in reader.fieldnames:
        raise CommandFailed(f"{path}: the CSV header must name at least identifier and hash", "invalid_input")
    try:
        return [_row(item) for item in reader]
    except csv.Error as error:
        raise CommandFailed(f"{path}: {error}", "invalid_input") from None


def _json_rows(text: str, path: Path) -> list[ImportRow]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandFailed(
            f"{path} is not JSON: {error.msg} (line {error.lineno})", "invalid_input"
        ) from None
    if isinstance(document, dict):
        document = document.get("users")
    if not isinstance(document, list) or not all(isinstance(item, dict) for item in document):
        raise CommandFailed(
            f'{path}: expected a list of user objects, or {{"users": [...]}}', "invalid_input"
        )
    return [_row(item) for item in document]


def read_fst_database(url: str, table: str = "user") -> Iterator[ImportRow]:
    """The users of a Flask-Security-Too database: ``username`` (or ``email`` when the app has
    no usernames) as the identifier, ``password`` as the hash, ``active`` as not disabled,
    ``confirmed_at`` as confirmed."""
    from sqlalchemy import MetaData, Table, create_engine, select
    from sqlalchemy.exc import ArgumentError, NoSuchTableError, SQLAlchemyError

    try:
        engine = create_engine(url)
    except (ArgumentError, ValueError) as error:
        raise CommandFailed(f"not a database URL: {error}", "invalid_input") from None
    try:
        with engine.connect() as conn:
            users_table = Table(table, MetaData(), autoload_with=conn)
            names = set(users_table.c.keys())
            if not {"email", "password"} <= names:
                raise CommandFailed(f"table {table!r} has no email and password columns", "invalid_input")
            rows = [dict(row._mapping) for row in conn.execute(select(users_table))]
    except NoSuchTableError:
        raise CommandFailed(f"the database has no table {table!r}", "invalid_input") from None
    except SQLAlchemyError as error:
        raise CommandFailed(
            f"the database could not be read: {error.__class__.__name__}", "store_unavailable"
        ) from None
    finally:
        engine.dispose()
    for item in rows:
        username = item.get("username")
        yield ImportRow(
            identifier=username if username else item.get("email"),
            hash=item.get("password"),
            email=item.get("email"),
            disabled=item.get("active") is False,
            confirmed=item.get("confirmed_at") is not None,
        )


@users.command("import")
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from-url", "url", help="Read a Flask-Security-Too database at this SQLAlchemy URL.")
@click.option("--table", default="user", show_default=True, help="The users table of --from-url.")
@click.option("--tenant", help="The tenant of rows that name none (default: AUTHFLOW_DEFAULT_TENANT).")
@json_option
def users_import(file: Path | None, url: str | None, table: str, tenant: str | None, as_json: bool) -> None:
    """Import users with their password hashes from FILE (CSV or JSON) or --from-url; users
    already present are left as they are."""
    if (file is None) == (url is None):
        raise click.UsageError("give a FILE or --from-url, not both")
    state = get_state()
    rows: Iterable[ImportRow] = read_file(file) if file is not None else read_fst_database(str(url), table)
    hashing = state.config.hashing
    legacy = LegacyHashes(
        hashing.legacy_schemes, salt=hashing.legacy_salt, argon2_over_ceiling=state.hasher.over_ceiling
    )
    target = ImportTarget(
        store=cast(ImportStore, state.backend),
        hasher=state.hasher,
        legacy=legacy,
        now=state.clock.now(),
        app_users=account_admin().app_users,
    )
    report = import_rows(target, rows, default_tenant=tenant_or_default(tenant))
    lines = [
        f"{len(report.imported)} imported, {len(report.present)} already present, "
        f"{len(report.refused)} refused",
        *(f"refused {who!r}: {why}" for who, why in report.refused),
    ]
    emit(as_json, report.document(), "\n".join(lines))
