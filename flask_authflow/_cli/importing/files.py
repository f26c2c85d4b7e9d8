"""A CSV or JSON file of users as an import source.

CSV: a header row naming the columns; JSON: a list of objects, or ``{"users": [...]}``. The
fields are ``identifier``, ``email``, ``hash``, ``tenant``, ``disabled`` and ``confirmed``;
only ``identifier`` and ``hash`` are required. A row whose flags are not yes/no values is
refused as it is read.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask_authflow._cli.base import CommandFailed
from flask_authflow._cli.importing.model import ImportedEmail, ImportedUser, SourceData, SourceRefusal

__all__ = ["MAX_FILE_BYTES", "read_file"]

#: Largest import file read (a user list, not a database dump).
MAX_FILE_BYTES = 64 * 1024 * 1024
_TRUE = frozenset({"1", "true", "yes", "y", "t"})
_FALSE = frozenset({"", "0", "false", "no", "n", "f"})


class _BadFlag(Exception):
    pass


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
    raise _BadFlag(f"{name} is not a yes/no value")


def _user(item: Mapping[str, Any]) -> ImportedUser | SourceRefusal:
    identifier = item.get("identifier")
    label = identifier if isinstance(identifier, str) else repr(identifier)
    if not isinstance(identifier, str):
        return SourceRefusal(label[:200], "no identifier")
    try:
        disabled = _flag(item.get("disabled", False), "disabled")
        confirmed = _flag(item.get("confirmed", False), "confirmed")
    except _BadFlag as bad:
        return SourceRefusal(label[:200], str(bad))
    email = item.get("email")
    if email is not None and email != "" and not isinstance(email, str):
        return SourceRefusal(label[:200], "the e-mail address is not text")
    stored = item.get("hash")
    tenant = item.get("tenant")
    return ImportedUser(
        identifier=identifier,
        password_hash=stored if isinstance(stored, str) else None,
        tenant=str(tenant) if tenant not in (None, "") else None,
        emails=(ImportedEmail(email, verified=confirmed, primary=True),) if email else (),
        disabled=disabled,
    )


def read_file(path: Path) -> SourceData:
    """The users of a CSV or JSON file (by its suffix; ``.json`` is JSON, anything else CSV).

    :raises CommandFailed: the file is unreadable, too large or not of that shape."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise CommandFailed(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB", "invalid_input")
    try:
        text = path.read_text("utf-8-sig")
    except UnicodeDecodeError:
        raise CommandFailed(f"{path} is not UTF-8 text", "invalid_input") from None
    if path.suffix.lower() == ".json":
        return SourceData(users=[_user(item) for item in _json_items(text, path)])
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "identifier" not in reader.fieldnames or "hash" not in reader.fieldnames:
        raise CommandFailed(f"{path}: the CSV header must name at least identifier and hash", "invalid_input")
    try:
        return SourceData(users=[_user(item) for item in reader])
    except csv.Error as error:
        raise CommandFailed(f"{path}: {error}", "invalid_input") from None


def _json_items(text: str, path: Path) -> list[dict[str, Any]]:
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
    return document
