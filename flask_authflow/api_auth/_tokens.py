"""The personal API token format: what is generated, what is stored, what is accepted.

A token reads ``afp_<id>_<secret>``: the recognisable prefix (secret scanners and people
can tell an authflow personal token at a glance), a 16-hex-digit lookup id (public: it
finds the one stored row) and 43 characters of URL-safe base64 carrying 256 random bits.
Only the SHA-256 of the whole token is stored; a guess needs the 256-bit secret, so a
fast hash is enough (no password hashing: the token is not something a person chose).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from flask_authflow.errors import InvalidInput

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_SCOPES",
    "TOKEN_LENGTH",
    "TOKEN_PREFIX",
    "NewToken",
    "check_scopes",
    "check_token_name",
    "hash_token",
    "hashes_match",
    "new_token",
    "token_id_of",
]

TOKEN_PREFIX = "afp_"  # noqa: S105 - the public prefix, not a secret
_ID_HEX = 16
_SECRET_BYTES = 32
#: ``afp_`` + 16 hex digits + ``_`` + 43 base64url characters.
TOKEN_LENGTH = len(TOKEN_PREFIX) + _ID_HEX + 1 + 43
_TOKEN = re.compile(rf"{TOKEN_PREFIX}([0-9a-f]{{{_ID_HEX}}})_[A-Za-z0-9_-]{{43}}")
_SCOPE = re.compile(r"[a-z0-9][a-z0-9:._-]{0,63}")
MAX_SCOPES = 32
MAX_NAME_LENGTH = 64


@dataclass(frozen=True, slots=True)
class NewToken:
    """A freshly generated token: the value to show once, its id and the hash to store."""

    value: str
    token_id: str
    token_hash: str

    def __repr__(self) -> str:  # the value never lands in a log through repr
        return f"NewToken(token_id={self.token_id!r})"


def hash_token(value: str) -> str:
    """The stored form of a token: the hex SHA-256 of its text."""
    return hashlib.sha256(value.encode("ascii")).hexdigest()


def hashes_match(stored: str, value: str) -> bool:
    """Whether ``value`` hashes to ``stored`` (compared in constant time)."""
    return hmac.compare_digest(stored, hash_token(value))


def new_token() -> NewToken:
    """A new random token (256 bits of secret, 64 bits of lookup id)."""
    token_id = secrets.token_hex(_ID_HEX // 2)
    value = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    return NewToken(value, token_id, hash_token(value))


def token_id_of(value: str) -> str | None:
    """The lookup id of a well-formed token, ``None`` for anything else (wrong prefix,
    length or alphabet): such a value is refused without a store read."""
    if len(value) != TOKEN_LENGTH:
        return None
    match = _TOKEN.fullmatch(value)
    return match.group(1) if match else None


def check_token_name(name: str) -> str:
    """A token's name, stripped: 1 to 64 printable characters."""
    if not isinstance(name, str):
        raise InvalidInput("a token name must be text")
    name = name.strip()
    if not name or len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise InvalidInput(f"a token name has 1 to {MAX_NAME_LENGTH} printable characters")
    return name


def check_scopes(scopes: Iterable[str], allowed: Iterable[str] = ()) -> tuple[str, ...]:
    """Scopes, each once and sorted: lower-case words of ``a-z 0-9 : . _ -`` (at most 64
    characters, at most 32 scopes), and among ``allowed`` when that is not empty."""
    found = sorted({scope.strip() for scope in scopes if isinstance(scope, str) and scope.strip()})
    if len(found) > MAX_SCOPES:
        raise InvalidInput(f"a token has at most {MAX_SCOPES} scopes")
    permitted = frozenset(allowed)
    for scope in found:
        if not _SCOPE.fullmatch(scope):
            raise InvalidInput("a scope is a lower-case word of a-z, 0-9, ':', '.', '_' and '-'")
        if permitted and scope not in permitted:
            raise InvalidInput(f"unknown scope {scope!r}")
    return tuple(found)
