"""What the federation flows use of the service: :class:`FederationServices`.

Each flow (``_begin``, ``_finish``, ``_native``, ``_linking``, ``_logout``) is a module of
functions that receive the service through this protocol, as the login flows receive
:class:`~flask_authflow.login._operation.LoginServices`; only the thin service
(:mod:`._service`) imports the flows, so the package has no import cycle.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from flask_authflow._clock import Clock
from flask_authflow._core.app_users import AppUserHooks
from flask_authflow._core.ports import FactorStore, IdentityStore, SessionStore
from flask_authflow._core.session import AuthSession
from flask_authflow.federation._linking import ProvisionHook
from flask_authflow.federation._links import FederationStore
from flask_authflow.federation._login._identity import ClaimsMapper
from flask_authflow.federation._provider import ProviderRegistry
from flask_authflow.federation._provider_tokens import ProviderTokens

__all__ = ["FederationServices", "factor_of"]


def factor_of(provider_name: str) -> str:
    """The ``factor`` of a federated sign-in's audit rows: ``oidc:<provider>`` (at most 32)."""
    return f"oidc:{provider_name}"[:32]


class FederationServices(Protocol):
    """What the federation flows use of the service (``FederationService`` provides it)."""

    @property
    def registry(self) -> ProviderRegistry: ...
    @property
    def links(self) -> FederationStore: ...
    @property
    def accounts(self) -> IdentityStore: ...
    @property
    def session_store(self) -> SessionStore: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def default_tenant(self) -> str: ...
    @property
    def app_users(self) -> AppUserHooks | None: ...
    @property
    def factors(self) -> FactorStore | None: ...
    @property
    def tokens(self) -> ProviderTokens | None: ...
    @property
    def sender(self) -> object: ...

    def claims_mapper(self) -> ClaimsMapper | None: ...

    def provision_hook(self) -> ProvisionHook | None: ...

    def one_commit(
        self, session: AuthSession, *, with_session: bool = False
    ) -> AbstractContextManager[None]: ...
