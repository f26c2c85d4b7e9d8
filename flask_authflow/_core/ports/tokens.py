"""Tokens: mailed account tokens, personal API tokens and the tokens of providers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

__all__ = [
    "AccountToken",
    "AccountTokenStore",
    "ApiTokenRecord",
    "ApiTokenStore",
    "ProviderTokenStore",
    "StoredProviderTokens",
]


@dataclass(frozen=True, slots=True)
class AccountToken:
    """A mailed single-use token, as stored: only digests of the token and of its short code.

    :param token_hash: SHA-256 (hex) of the token in the mailed link; the row's key.
    :param kind: what it proves (``signup``, ``email_verification``, ``password_reset``,
        ``email_change``).
    :param code_hash: SHA-256 (hex) of the short code mailed beside the link, salted with
        ``token_hash`` (a separate secret bound to the same row).
    :param payload: public, JSON-serialisable data of the step (a new e-mail address).
    :param code_attempts: wrong codes tried against this token so far.
    :param used_at: when it was used, or voided by a newer token of its user and kind.
    """

    token_hash: str
    kind: str
    tenant: str
    user_id: str
    code_hash: str = field(repr=False)
    created_at: datetime
    expires_at: datetime
    payload: Mapping[str, Any] = field(default_factory=dict)
    code_attempts: int = 0
    used_at: datetime | None = None


class AccountTokenStore(Protocol):
    """Mailed single-use tokens (``InMemoryBackend`` and ``SqlAlchemyBackend`` implement it).

    Using a token is one atomic step (one conditional ``UPDATE``), so of parallel uses of
    one token exactly one wins, across threads and processes.
    """

    def issue_account_token(self, token: AccountToken) -> None:
        """Insert ``token`` and, in the same transaction, void (``used_at``) every unused
        earlier token of its tenant, user and kind."""
        ...

    def find_account_token(self, token_hash: str) -> AccountToken | None:
        """The token with this digest, used or not (to tell why a use failed)."""
        ...

    def use_account_token(self, token_hash: str, kind: str, now: datetime) -> AccountToken | None:
        """Mark the unused, unexpired token of ``kind`` with this digest used at ``now`` and
        return it (used); ``None`` for every other caller. One statement."""
        ...

    def live_account_token(self, tenant: str, user_id: str, kind: str, now: datetime) -> AccountToken | None:
        """The user's unused, unexpired token of ``kind`` (issuing voids the older ones, so
        there is at most one): what a short code is checked against."""
        ...

    def use_account_code(
        self, token_hash: str, code_hash: str, now: datetime, *, max_attempts: int
    ) -> AccountToken | None:
        """Use the live token ``token_hash`` by its short code: one conditional statement
        that wins only if ``code_hash`` matches and fewer than ``max_attempts`` wrong codes
        were tried. A wrong code counts one attempt, and the attempt that reaches
        ``max_attempts`` voids the token. ``None`` unless this call used it."""
        ...

    def has_account_token(self, tenant: str, user_id: str, kind: str) -> bool:
        """Whether the user was ever issued a token of ``kind`` (used, void or live)."""
        ...

    def void_account_tokens(self, tenant: str, user_id: str, kind: str | None, now: datetime) -> int:
        """Void the user's unused tokens (of ``kind``, or every kind); returns how many."""
        ...


@dataclass(frozen=True, slots=True)
class ApiTokenRecord:
    """A personal API token as stored: never the token itself, only its SHA-256.

    ``token_id`` is the token's public lookup part (the one indexed read of a
    verification); ``name`` is unique per user; ``scopes`` are sorted.
    """

    token_id: str
    tenant: str
    user_id: str
    name: str
    token_hash: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None


class ApiTokenStore(Protocol):
    """The personal API tokens of every user (deleting a user deletes its tokens).

    A revoked token is deleted: there is nothing left to verify it against.
    """

    def add_api_token(self, record: ApiTokenRecord) -> None:
        """Store a new token; :class:`~flask_authflow.errors.ApiTokenNameTaken` when the
        user has a token of that name, :class:`~flask_authflow.errors.UserNotFound` when
        the user does not exist in the tenant."""
        ...

    def get_api_token(self, token_id: str) -> ApiTokenRecord | None:
        """The token with this lookup id (one indexed read), or ``None``."""
        ...

    def list_api_tokens(self, tenant: str, user_id: str) -> list[ApiTokenRecord]:
        """The user's tokens, by name."""
        ...

    def delete_api_token(self, tenant: str, user_id: str, name: str) -> ApiTokenRecord | None:
        """Delete the user's token called ``name``; the deleted record, or ``None``."""
        ...

    def delete_user_api_tokens(self, tenant: str, user_id: str) -> int:
        """Delete every token of the user; how many there were."""
        ...

    def touch_api_token(self, token_id: str, at: datetime, *, unless_since: datetime) -> bool:
        """Set the token's ``last_used_at`` to ``at`` unless it is already at or after
        ``unless_since`` (so a token in constant use is written at most once per interval);
        true if it was written."""
        ...


@dataclass(frozen=True, slots=True)
class StoredProviderTokens:
    """A user's tokens of one provider, as stored (federation's ``store_tokens``).

    ``sealed`` holds the access and refresh tokens, encrypted and bound to the row's key
    (tenant, user, provider); the other fields are not secret.
    """

    tenant: str
    user_id: str
    provider: str
    sealed: str = field(repr=False)
    token_type: str
    scopes: tuple[str, ...]
    expires_at: datetime | None
    updated_at: datetime


class ProviderTokenStore(Protocol):
    """The provider tokens kept per (tenant, user, provider), and the claim that lets one
    process at a time refresh a row (so two workers never both spend a rotated refresh
    token). Deleting a user removes its rows."""

    def save_provider_tokens(self, tokens: StoredProviderTokens) -> None:
        """Insert or replace the row of (tenant, user, provider); any claim on it ends."""
        ...

    def get_provider_tokens(self, tenant: str, user_id: str, provider: str) -> StoredProviderTokens | None:
        """The row, or ``None``."""
        ...

    def provider_tokens_of_user(self, tenant: str, user_id: str) -> list[StoredProviderTokens]:
        """Every row of the user, by provider."""
        ...

    def delete_provider_tokens(self, tenant: str, user_id: str, provider: str) -> bool:
        """Remove the row; ``False`` if there was none."""
        ...

    def claim_provider_tokens(
        self, tenant: str, user_id: str, provider: str, claim: str, *, now: datetime, until: datetime
    ) -> bool:
        """Take the row's refresh claim (named ``claim``) until ``until``, unless another
        claim holds it past ``now``; ``False`` when it does or the row is gone. Atomic
        across threads and, for the SQL store, across processes."""
        ...

    def replace_claimed_provider_tokens(self, tokens: StoredProviderTokens, claim: str) -> bool:
        """Replace the row with ``tokens`` and end the claim, only while ``claim`` holds
        it; ``False`` (nothing written) otherwise."""
        ...

    def release_provider_tokens(self, tenant: str, user_id: str, provider: str, claim: str) -> None:
        """End the claim ``claim`` if it still holds the row; the row stays as it is."""
        ...
