"""Factors: enrolled factors, password hashes and single-use values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from flask_authflow._outcomes import FactorKind

__all__ = ["FactorConfig", "FactorRecordStore", "FactorStore", "KnownSecret"]


@dataclass(frozen=True, slots=True)
class FactorConfig:
    """An enrolled factor (or one being enrolled, ``confirmed=False``).

    :param factor_id: the factor's stable id (``secrets.token_urlsafe`` text, at most 64
        characters), unique across the store; the associated data of a sealed secret.
    :param secret: what the factor verifies against: a sealed key (TOTP, HOTP), a hash
        (password, recovery codes) or ``""``; kept out of ``repr``.
    :param counter: a number the store only moves forward atomically: the next HOTP
        counter, the next acceptable TOTP time step, a WebAuthn signature count, the
        version of a recovery-code set.
    :param data: public, JSON-serialisable metadata (a label, an e-mail address, a
        WebAuthn credential's public key and transports).
    :param lookup: an indexed value to find the factor without knowing its user (a
        WebAuthn credential id, for passkey logins), unique per kind; ``None`` otherwise.
    :param confirmed: ``False`` while an enrollment waits for proof of possession; such a
        factor is never used for a login.
    """

    user_id: str
    kind: FactorKind
    created_at: datetime
    secret: str = field(repr=False, default="")
    factor_id: str = ""
    counter: int = 0
    data: Mapping[str, Any] = field(default_factory=dict)
    lookup: str | None = None
    confirmed: bool = True
    last_used_at: datetime | None = None


class FactorStore(Protocol):
    """Enrolled factors and password hashes."""

    def get_password_hash(self, tenant: str, user_id: str) -> str | None: ...

    def set_password_hash(self, tenant: str, user_id: str, password_hash: str) -> None: ...

    def required_factors(self, tenant: str, user_id: str) -> list[FactorKind]:
        """The distinct kinds of the user's *confirmed* factors: password first, then the
        others in the order they were enrolled. The service turns them into login steps."""
        ...

    def list_factors(self, tenant: str, user_id: str) -> list[FactorConfig]:
        """The user's confirmed factors (password included), oldest first."""
        ...


class FactorRecordStore(FactorStore, Protocol):
    """Factor records with enrollment and atomic one-time use (``InMemoryBackend`` and
    ``SqlAlchemyBackend`` implement it).

    Every method checks that ``user_id`` belongs to ``tenant``: a factor of another
    tenant's user is never found, changed or deleted. Each change is one atomic step
    (one conditional statement or one transaction), so parallel requests in several
    processes see exactly one winner.
    """

    def add_factor(self, tenant: str, config: FactorConfig) -> None:
        """Insert ``config`` as given (usually ``confirmed=False``). A pending one
        (``confirmed=False``) replaces the user's other pending factors of its kind in the
        same transaction, serialised per user: at most one enrollment of a kind waits.

        :raises UserNotFound: the user is not in ``tenant``.
        :raises ValueError: ``config.factor_id`` is empty or already used, or
            ``(config.kind, config.lookup)`` is taken.
        """
        ...

    def get_factor(self, tenant: str, user_id: str, factor_id: str) -> FactorConfig | None:
        """One factor, confirmed or not."""
        ...

    def list_user_factors(
        self, tenant: str, user_id: str, *, kind: FactorKind | None = None, include_pending: bool = False
    ) -> list[FactorConfig]:
        """The user's factors, oldest first: confirmed ones, and pending ones on request."""
        ...

    def find_factor_by_lookup(self, tenant: str, kind: FactorKind, lookup: str) -> FactorConfig | None:
        """The confirmed factor of ``kind`` whose ``lookup`` is ``lookup``, among ``tenant``'s users."""
        ...

    def confirm_factor(self, tenant: str, user_id: str, factor_id: str, *, replace_kind: bool) -> bool:
        """Mark a pending factor confirmed; with ``replace_kind``, delete the user's other
        factors of the same kind (confirmed or pending) in the same transaction, so
        re-enrolling leaves exactly one. False when no such pending factor exists."""
        ...

    def delete_factor(self, tenant: str, user_id: str, factor_id: str) -> bool:
        """Remove one factor (never the password: :class:`ValueError`). False when absent."""
        ...

    def lock_user(self, tenant: str, user_id: str) -> bool:
        """Hold the user's row until the open unit of work ends (PostgreSQL's row lock; the
        unit's own lock on SQLite and in memory), so that decisions over several of the
        user's factors (the last way to sign in) take turns. False without the user."""
        ...

    def advance_factor_counter(
        self, tenant: str, user_id: str, factor_id: str, new_counter: int, *, now: datetime
    ) -> bool:
        """Set ``counter = new_counter`` and ``last_used_at = now`` only if the stored counter
        is *below* ``new_counter`` and the factor is confirmed; one conditional statement.
        True for the one caller that moved it; False for everyone else (replay, race)."""
        ...

    def swap_factor_secret(
        self,
        tenant: str,
        user_id: str,
        factor_id: str,
        *,
        expected_counter: int,
        secret: str,
        now: datetime,
    ) -> bool:
        """Compare-and-set: replace ``secret`` and set ``counter = expected_counter + 1``
        (and ``last_used_at``) only if the counter still equals ``expected_counter`` and the
        factor is confirmed. True for exactly one of several parallel callers."""
        ...

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        """Record the one-time ``token`` of ``scope`` as used until ``expires_at``: a login
        challenge or an e-mail code (its digest) kept in a session, which parallel requests
        of that session all read. One atomic statement: True for exactly one of several
        parallel callers, False for every other and for a replay until ``expires_at``."""
        ...


@dataclass(frozen=True, slots=True)
class KnownSecret:
    """A stored secret a login already read in this request: ``value`` (``None``: none is
    stored), so that the step that checks it does not read it again."""

    value: str | None = field(repr=False)
