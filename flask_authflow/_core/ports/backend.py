"""What a backend declares and what the wiring and the command line call on it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from flask_authflow._core.ports.links import FederationStore
from flask_authflow._core.ports.login import LoginStore
from flask_authflow._core.ports.tokens import (
    AccountTokenStore,
    ProviderTokenStore,
)

__all__ = ["BackendMaintenance", "StorePorts"]


class BackendMaintenance(Protocol):
    """What ``AuthFlow.init_app`` and the ``flask authflow`` commands call on an app's
    backend, beside the storage ports. :class:`~flask_authflow.storage._memory.InMemoryBackend`
    and :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` implement it; so does
    an application's own backend."""

    def bind_app(self, app: Any) -> BackendMaintenance:
        """The backend to use for ``app`` (``self``, or a copy bound to that app's database)."""
        ...

    def adopt_clock(self, clock: Any) -> None:
        """Use the app's clock unless the backend was built with one of its own."""
        ...

    def store_ports(self) -> StorePorts:
        """The aggregates this backend keeps (``None`` for those it lacks): what the wiring
        gives the flows, and checks the configuration against."""
        ...

    def database_engine(self) -> Any:
        """The SQLAlchemy engine holding this backend's tables (the SQL session store and
        ``flask authflow db`` use it too), or ``None`` when it keeps none."""
        ...

    def purge_audit(self, before: datetime, *, unchained_only: bool = False) -> int:
        """Delete the audit rows written before ``before`` (with ``unchained_only``, only
        those outside the tamper-evident chain); returns how many went."""
        ...


@dataclass(frozen=True, slots=True)
class StorePorts:
    """The aggregates a backend keeps, declared once (its ``store_ports()``), ``None`` for
    what it lacks.

    ``init_app`` checks the app's configuration against them and refuses what a backend
    cannot carry (sign-up without ``account_tokens``, federated login without
    ``identity_links``); each flow then receives the port it needs. Nothing asks a store at
    run time what it can do. ``InMemoryBackend`` and ``SqlAlchemyBackend`` fill every field;
    an application's own backend fills what it keeps (see :doc:`/authn`, "Stores").
    """

    #: Users, factors, attempt counters and audit rows with one unit of work (always needed).
    login: LoginStore
    #: Sign-up, password reset, e-mail change and required enrollments keep their tokens here.
    account_tokens: AccountTokenStore | None = None
    #: Federated login's identity links and the logout-token replay cache.
    identity_links: FederationStore | None = None
    #: The tokens of providers configured with ``store_tokens``.
    provider_tokens: ProviderTokenStore | None = None
