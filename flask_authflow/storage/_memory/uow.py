"""The unit of work of the memory adapter: the store's lock held, every change journaled.

A unit (:meth:`MemoryUnits.begin_unit`) holds the lock until it ends and journals every change
it makes, so its rollback puts the state back as it was: the same contract as the SQL
store's transaction.
"""

from __future__ import annotations

from collections.abc import Callable

from flask_authflow._core.ports import SessionStore, SessionWrite
from flask_authflow.storage._memory.state import MemoryState, undo

__all__ = ["MemoryUnit", "MemoryUnits"]


class MemoryUnit:
    """A unit of work of :class:`~flask_authflow.storage._memory.InMemoryBackend` (see
    :meth:`~flask_authflow.storage._memory.InMemoryBackend.begin_unit`)."""

    __slots__ = ("_end_unit", "_open")

    def __init__(self, end_unit: Callable[[bool], None]) -> None:
        """``end_unit(keep)`` ends the unit in its store: keeps or undoes its changes, and
        lets the store's lock go."""
        self._end_unit = end_unit
        self._open = True

    def commit(self) -> None:
        """Keep every change of the unit (a memory store cannot fail to keep them)."""
        self._end(keep=True)

    def rollback(self) -> None:
        """Put back every change of the unit, newest first."""
        self._end(keep=False)

    def write_audit_now(self) -> None:
        """Nothing to do: the memory store keeps each row as it is written."""

    def save_session(self, store: SessionStore, write: SessionWrite) -> bool:
        """No session store writes in a memory unit (the response writes the session)."""
        raise RuntimeError("no session store writes in the memory store's units of work")

    def _end(self, *, keep: bool) -> None:
        if self._open:
            self._open = False
            self._end_unit(keep)


class MemoryUnits(MemoryState):
    """The units of work of the memory adapter (``LoginStore.begin_unit``)."""

    def begin_unit(self) -> MemoryUnit:
        """Open a unit of work: this thread holds the store's lock until the unit's
        ``commit()`` or ``rollback()`` (other threads wait, as behind SQLite's write lock),
        and every change it makes is journaled so that ``rollback()`` undoes it.

        :raises RuntimeError: this thread has a unit open already (units do not nest)."""
        self._lock.acquire()
        if self._journal is not None:
            self._lock.release()
            raise RuntimeError("a unit of work is already open in this context")
        self._journal = []
        return MemoryUnit(self._end_unit)

    def _end_unit(self, keep: bool) -> None:
        journal, self._journal = self._journal, None
        try:
            if not keep and journal:
                for container, key, before in reversed(journal):
                    undo(container, key, before)
        finally:
            self._lock.release()
