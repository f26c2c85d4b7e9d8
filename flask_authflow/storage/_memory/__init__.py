"""Everything the login service stores, in process memory (tests and development).

:class:`InMemoryBackend` combines one module per aggregate, as the SQL adapter does
(:mod:`~flask_authflow.storage._memory.users`, ``factors``, ``attempts``, ``audit``,
``identity_links``, ``one_time``, ``roles``, ``account_tokens``, ``api_tokens``,
``provider_tokens``, ``devices``), each working on the one shared state of
:mod:`~flask_authflow.storage._memory.state`. One lock guards all state, so every counter
update is atomic across threads. A unit of work (:meth:`InMemoryBackend.begin_unit`) holds
that lock until it ends and journals every change it makes, so its rollback puts the state
back as it was: the same contract as the SQL store's transaction. Nothing survives a
restart: use :class:`~flask_authflow.storage._sql.backend.SqlAlchemyBackend` for anything
real.
"""

from __future__ import annotations

from flask_authflow.storage._memory.attempts import count_failure
from flask_authflow.storage._memory.backend import InMemoryBackend
from flask_authflow.storage._memory.state import AttemptLogEntry, LockState
from flask_authflow.storage._memory.uow import MemoryUnit

__all__ = ["AttemptLogEntry", "InMemoryBackend", "LockState", "MemoryUnit", "count_failure"]
