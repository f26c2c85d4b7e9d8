"""Everything the login service stores, in process memory (tests and development):
:class:`InMemoryBackend`.

The backend is a thin composite, as the SQL one is: each aggregate lives in a module of its
own (users, factors, attempts, audit, identity links, one-time tokens, roles, account tokens,
API tokens, provider tokens, devices), each a mixin over the one shared state of
:mod:`~flask_authflow.storage._memory.state`, and the unit of work in
:mod:`~flask_authflow.storage._memory.uow`. Nothing survives a restart: use
:class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` for anything real.
"""

from __future__ import annotations

from flask_authflow._core.ports import StorePorts
from flask_authflow.storage._memory.account_tokens import MemoryAccountTokens
from flask_authflow.storage._memory.api_tokens import MemoryApiTokens
from flask_authflow.storage._memory.attempts import MemoryAttempts
from flask_authflow.storage._memory.audit import MemoryAudit
from flask_authflow.storage._memory.devices import MemoryDevices
from flask_authflow.storage._memory.factors import MemoryFactors
from flask_authflow.storage._memory.identity_links import MemoryIdentityLinks
from flask_authflow.storage._memory.one_time import MemoryOneTime
from flask_authflow.storage._memory.provider_tokens import MemoryProviderTokens
from flask_authflow.storage._memory.roles import MemoryRoles
from flask_authflow.storage._memory.uow import MemoryUnits
from flask_authflow.storage._memory.users import MemoryUsers

__all__ = ["InMemoryBackend"]


class InMemoryBackend(
    MemoryUsers,
    MemoryFactors,
    MemoryAttempts,
    MemoryAudit,
    MemoryIdentityLinks,
    MemoryOneTime,
    MemoryRoles,
    MemoryAccountTokens,
    MemoryApiTokens,
    MemoryProviderTokens,
    MemoryDevices,
    MemoryUnits,
):
    """Identity, factor, attempt and audit store in one object.

    It keeps password hashes, never hashes: :meth:`create_user` receives ``password_hash``
    (made in ``login/``; tests use :func:`flask_authflow.testing.add_user`).
    """

    def __repr__(self) -> str:
        return f"<InMemoryBackend users={len(self._users)} audit_rows={len(self._audit)}>"

    # --- maintenance (BackendMaintenance) ----------------------------------------------------

    def bind_app(self, app: object) -> InMemoryBackend:
        """``self``: the memory store serves any app as it is."""
        return self

    def store_ports(self) -> StorePorts:
        """Every aggregate: this backend keeps them all."""
        return StorePorts(login=self, account_tokens=self, identity_links=self, provider_tokens=self)

    def database_engine(self) -> None:
        """``None``: nothing of this store is in a database."""
        return None
