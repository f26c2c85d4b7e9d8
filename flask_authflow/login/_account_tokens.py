"""Mailed single-use tokens ("account tokens") of sign-up, e-mail verification, password
reset and change of e-mail: how they are made, stored and used up.

A token is ``secrets.token_urlsafe(32)`` (256 bits, 43 characters); the store keeps only
its SHA-256. Beside the link, the mail shows a **short code** for a user who reads mail on
another device: 8 characters of the RFC 4648 base32 alphabet (40 bits, shown as
``ABCD-EFGH``), a separate secret bound to the same row and stored as the SHA-256 of the
row's token digest and the code. The code alone finds nothing: it is checked only against
the one live token of a named user and kind, and that token is void after
:data:`MAX_CODE_ATTEMPTS` wrong codes. So a guesser's chance per mailed token is
``5 / 2**40`` (about 4.5e-12), and getting a new token to guess at takes a mail to the
user's own address.

Using a token (by link or by code) is one conditional ``UPDATE`` in the store: of
parallel uses exactly one wins. Issuing a token voids the user's earlier unused tokens of
its kind, so only the newest mail works.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from flask_authflow._core.ports import AccountToken, AccountTokenStore
from flask_authflow._i18n import N_, gettext
from flask_authflow.errors import AuthnError, ConfigurationError, InvalidInput

__all__ = [
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "KINDS",
    "MAX_CODE_ATTEMPTS",
    "AccountTokenExpired",
    "AccountTokenInvalid",
    "AccountTokenUsed",
    "IssuedToken",
    "check_code",
    "check_token",
    "code_digest",
    "issue",
    "peek_token",
    "token_digest",
    "token_store",
    "use_code",
    "use_token",
    "why_not",
]

#: The kinds of account token.
KINDS: Final = frozenset({"signup", "email_verification", "password_reset", "email_change"})
#: Characters of a short code (RFC 4648 base32: no 0, 1, 8 or 9 to confuse with letters).
CODE_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
#: Characters of a short code: 8 x 5 bits = 40 bits.
CODE_LENGTH: Final = 8
#: Wrong codes tried against one token before it is void.
MAX_CODE_ATTEMPTS: Final = 5
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_-]{43}")
_MAX_PAYLOAD: Final = 2048


class AccountTokenInvalid(AuthnError):
    """This link or code is not valid."""

    code = "account_token_invalid"
    status = 401


class AccountTokenUsed(AuthnError):
    """This link or code was already used, or a newer one was sent."""

    code = "account_token_used"
    status = 410


class AccountTokenExpired(AuthnError):
    """This link or code has expired: ask for a new one."""

    code = "account_token_expired"
    status = 410


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """What goes into the mail: the token (for the link) and the short code. Never logged."""

    token: str
    code: str
    expires_at: datetime
    record: AccountToken

    def __repr__(self) -> str:
        return f"<IssuedToken kind={self.record.kind} expires_at={self.expires_at.isoformat()}>"

    @property
    def display_code(self) -> str:
        """The code as the mail shows it: ``ABCD-EFGH``."""
        half = CODE_LENGTH // 2
        return f"{self.code[:half]}-{self.code[half:]}"


def token_digest(token: str) -> str:
    """The stored form of a token: SHA-256, hex."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def code_digest(token_hash: str, code: str) -> str:
    """The stored form of a short code: SHA-256 of its token's digest and the code, hex."""
    return hashlib.sha256(f"{token_hash}:{code}".encode("ascii")).hexdigest()


def check_token(token: object) -> str:
    """``token`` if it has the shape of a token (43 URL-safe base64 characters), else
    :class:`~flask_authflow.errors.InvalidInput`."""
    if not isinstance(token, str) or not _TOKEN_RE.fullmatch(token):
        raise InvalidInput(N_("a token is 43 characters of A-Z, a-z, 0-9, '-' and '_'"))
    return token


def check_code(code: object) -> str:
    """A short code as typed (any case, spaces and dashes ignored), normalised; else
    :class:`~flask_authflow.errors.InvalidInput`."""
    if not isinstance(code, str) or len(code) > 32:
        raise InvalidInput(gettext("a code is %(length)d letters and digits", length=CODE_LENGTH))
    cleaned = "".join(code.split()).replace("-", "").upper()
    if len(cleaned) != CODE_LENGTH or any(char not in CODE_ALPHABET for char in cleaned):
        raise InvalidInput(gettext("a code is %(length)d letters and digits", length=CODE_LENGTH))
    return cleaned


def token_store(store: AccountTokenStore | None) -> AccountTokenStore:
    """The app's account token port (``AuthnService.account_tokens``, what the backend
    declared in its ``store_ports()``), or :class:`~flask_authflow.errors.ConfigurationError`
    when it keeps none (``init_app`` refuses the features that need one; this is for a
    service built by hand)."""
    if store is None:
        raise ConfigurationError(
            "sign-up, password reset and change of e-mail need a store of account tokens "
            "(InMemoryBackend or SqlAlchemyBackend)"
        )
    return store


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidInput(f"unknown account token kind {kind!r}")
    return kind


def issue(
    store: AccountTokenStore,
    *,
    kind: str,
    tenant: str,
    user_id: str,
    now: datetime,
    ttl: timedelta,
    payload: Mapping[str, Any] | None = None,
    persist: bool = True,
) -> IssuedToken:
    """Make a token and its code for ``user_id`` and store their digests, voiding the
    user's earlier tokens of ``kind``. ``persist=False`` does the same work without
    storing anything (the answer to a request for an account that does not exist)."""
    _check_kind(kind)
    data = dict(payload or {})
    if len(repr(data)) > _MAX_PAYLOAD:
        raise InvalidInput("the token's payload is too large")
    token = secrets.token_urlsafe(32)
    code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    digest = token_digest(token)
    record = AccountToken(
        token_hash=digest,
        kind=kind,
        tenant=tenant,
        user_id=user_id,
        code_hash=code_digest(digest, code),
        created_at=now,
        expires_at=now + ttl,
        payload=data,
    )
    if persist:
        store.issue_account_token(record)
    return IssuedToken(token, code, record.expires_at, record)


def use_token(store: AccountTokenStore, token: object, kind: str, now: datetime) -> AccountToken:
    """Use up ``token`` (of ``kind``); the token as it was before.

    :raises InvalidInput: not the shape of a token. :raises AccountTokenInvalid: unknown,
        or of another kind. :raises AccountTokenUsed: used, voided by a newer one, or lost
        to a parallel use. :raises AccountTokenExpired: past its expiry."""
    digest = token_digest(check_token(token))
    used = store.use_account_token(digest, _check_kind(kind), now)
    if used is not None:
        return used
    raise why_not(store.find_account_token(digest), kind, now)


def use_code(
    store: AccountTokenStore,
    tenant: str,
    user_id: str,
    kind: str,
    code: object,
    now: datetime,
    *,
    max_attempts: int = MAX_CODE_ATTEMPTS,
) -> AccountToken:
    """Use up the user's live token of ``kind`` by its short code.

    :raises InvalidInput: not the shape of a code. :raises AccountTokenInvalid: no live
        token, a wrong code (counted; the token is void after ``max_attempts``), or a
        parallel use won."""
    cleaned = check_code(code)
    live = store.live_account_token(tenant, user_id, _check_kind(kind), now)
    if live is None:
        raise AccountTokenInvalid()
    digest = code_digest(live.token_hash, cleaned)
    used = store.use_account_code(live.token_hash, digest, now, max_attempts=max_attempts)
    if used is None:
        raise AccountTokenInvalid()
    return used


def peek_token(store: AccountTokenStore, token: object, kind: str, now: datetime) -> AccountToken:
    """The live token ``token`` of ``kind``, without using it (to show a form for it).

    :raises InvalidInput, AccountTokenInvalid, AccountTokenUsed, AccountTokenExpired: as
        :func:`use_token`."""
    digest = token_digest(check_token(token))
    found = store.find_account_token(digest)
    if found is not None and found.kind == kind and found.used_at is None and found.expires_at > now:
        return found
    raise why_not(found, kind, now)


def why_not(found: AccountToken | None, kind: str, now: datetime) -> AuthnError:
    """The typed error of a token that could not be used."""
    if found is None or not hmac.compare_digest(found.kind, kind):
        return AccountTokenInvalid()
    if found.used_at is not None:
        return AccountTokenUsed()
    if found.expires_at <= now:
        return AccountTokenExpired()
    return AccountTokenUsed()  # it was live a moment ago: a parallel use won
