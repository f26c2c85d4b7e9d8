"""The provider's own browser session: who is signed in at the provider (``login_as``), its
``sid``, and the tamper options waiting for the next authorization code."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._provider._tamper import TAMPERS


@dataclass(frozen=True, slots=True)
class Consent:
    """What an authorize request consumes: the signed-in subject (``None``: nobody), the
    session's ``sid`` and the tamper options for the code it issues."""

    subject: tuple[str, dict[str, Any]] | None
    sid: str
    tamper: frozenset[str]


class ProviderSession:
    """Guarded by the provider's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._subject: tuple[str, dict[str, Any]] | None = None
        self._next_tamper: frozenset[str] = frozenset()
        self._sid = secrets.token_urlsafe(16)

    @property
    def sid(self) -> str:
        return self._sid

    def login_as(self, sub: str, claims: dict[str, Any]) -> None:
        if not isinstance(sub, str) or not sub:
            raise ConfigurationError("sub must be a non-empty string")
        with self._lock:
            self._subject = (sub, dict(claims))
            self._sid = secrets.token_urlsafe(16)  # a new login, a new provider session

    def logout(self) -> None:
        with self._lock:
            self._subject = None

    def tamper_next(self, tamper: Iterable[str]) -> None:
        options = frozenset(tamper)
        unknown = sorted(options - TAMPERS)
        if unknown:
            raise ConfigurationError(f"unknown tamper options {unknown!r}")
        with self._lock:
            self._next_tamper = options

    def pending_tamper(self) -> frozenset[str]:
        """The options for the next code, left in place (the authorization response reads them)."""
        with self._lock:
            return self._next_tamper

    def consent(self) -> Consent:
        """The subject and ``sid`` to grant to, and the pending tamper options, now spent."""
        with self._lock:
            tamper, self._next_tamper = self._next_tamper, frozenset()
            return Consent(self._subject, self._sid, tamper)
