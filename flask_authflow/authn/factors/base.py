"""The plug-in point for factor kinds: one :class:`FactorVerifier` per :class:`FactorKind`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..outcomes import FactorCredential, FactorKind

__all__ = ["FactorVerifier", "Refused"]


@dataclass(frozen=True, slots=True)
class Refused:
    """A failed check that tells the audit trail why (``reason``); it is falsy like ``False``.

    The caller sees the same ``InvalidCredential`` as for a wrong credential; only the
    audit row's ``reason`` differs.
    """

    reason: str

    def __bool__(self) -> bool:
        return False


@runtime_checkable
class FactorVerifier(Protocol):
    """Checks credentials of one factor kind for the login service."""

    @property
    def kind(self) -> FactorKind: ...

    def check_input(self, credential: FactorCredential) -> None:
        """Refuse malformed input (:class:`~flask_authflow.errors.InvalidInput`) before any work."""
        ...

    def verify(
        self, tenant: str, user_id: str, credential: FactorCredential, now: datetime
    ) -> bool | Refused:
        """True if ``credential`` is valid for the user; may update the store (rehash, counters).

        A failure is ``False``, or :class:`Refused` to give the audit row a specific reason."""
        ...

    def verify_unknown(self, credential: FactorCredential) -> None:
        """Spend the same effort as :meth:`verify` for a user that does not exist."""
        ...
