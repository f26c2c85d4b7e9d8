"""One-time tokens in memory: the logout replay cache and single-use values by scope."""

from __future__ import annotations

from datetime import datetime

from flask_authflow.storage._memory.state import MemoryState

__all__ = ["MemoryOneTime"]


class MemoryOneTime(MemoryState):
    """The one-time tokens of :class:`~flask_authflow.storage._memory.InMemoryBackend`."""

    def remember_jti(self, issuer: str, jti: str, expires_at: datetime) -> bool:
        now = self.clock.now()
        with self._lock:
            for key in [k for k, until in self._jtis.items() if until <= now]:
                self._remove(self._jtis, key)
            if (issuer, jti) in self._jtis:
                return False
            self._put(self._jtis, (issuer, jti), expires_at)
            return True

    def use_once(self, scope: str, token: str, *, expires_at: datetime) -> bool:
        return self.remember_jti(f"one-time:{scope}", token, expires_at)
