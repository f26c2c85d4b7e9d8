"""The plug-in point for factor kinds: one :class:`FactorVerifier` per :class:`FactorKind`."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from ..outcomes import FactorCredential, FactorKind

__all__ = ["FactorVerifier"]


@runtime_checkable
class FactorVerifier(Protocol):
    """Checks credentials of one factor kind for the login service."""

    @property
    def kind(self) -> FactorKind: ...

    def check_input(self, credential: FactorCredential) -> None:
        """Refuse malformed input (:class:`~flask_authflow.errors.InvalidInput`) before any work."""
        ...

    def verify(self, tenant: str, user_id: str, credential: FactorCredential, now: datetime) -> bool:
        """True if ``credential`` is valid for the user; may update the store (rehash, counters)."""
        ...

    def verify_unknown(self, credential: FactorCredential) -> None:
        """Spend the same effort as :meth:`verify` for a user that does not exist."""
        ...
