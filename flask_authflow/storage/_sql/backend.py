"""Users, factors, attempt counters, audit rows, identity links and one-time tokens in a
SQL database (SQLAlchemy 2.x Core): :class:`SqlAlchemyBackend`.

The backend is a thin composite: each aggregate lives in a module of its own
(:mod:`~flask_authflow.storage._sql.users`, :mod:`~flask_authflow.storage._sql.factors`,
:mod:`~flask_authflow.storage._sql.attempts`, :mod:`~flask_authflow.storage._sql.audit`,
:mod:`~flask_authflow.storage._sql.identity_links`, :mod:`~flask_authflow.storage._sql.one_time`,
:mod:`~flask_authflow.storage._sql.roles`, :mod:`~flask_authflow.storage._sql.account_tokens`,
:mod:`~flask_authflow.storage._sql.api_tokens`, :mod:`~flask_authflow.storage._sql.provider_tokens`,
:mod:`~flask_authflow.storage._sql.devices`),
every table in :mod:`~flask_authflow.storage._sql.schema`, and the one connection per unit
of work in :mod:`~flask_authflow.storage._sql.uow`. Every database error becomes
:class:`~flask_authflow.errors.StoreUnavailable` (or
:class:`~flask_authflow.errors.AuditWriteError` for audit rows): a login is refused,
never waved through.
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from flask import has_app_context
from sqlalchemy import Engine

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.ports import SessionHandoff, StorePorts, write_session_in_unit
from flask_authflow.errors import ConfigurationError
from flask_authflow.storage._sql.account_tokens import SqlAccountTokens
from flask_authflow.storage._sql.api_tokens import SqlApiTokens
from flask_authflow.storage._sql.attempts import SqlAttempts
from flask_authflow.storage._sql.audit import AUDIT_PURGE_BATCH, SqlAudit
from flask_authflow.storage._sql.devices import SqlDevices
from flask_authflow.storage._sql.engine import EngineSource, is_flask_sqlalchemy, resolve_engine
from flask_authflow.storage._sql.factors import SqlFactors
from flask_authflow.storage._sql.identity_links import SqlIdentityLinks
from flask_authflow.storage._sql.one_time import SqlOneTime
from flask_authflow.storage._sql.provider_tokens import SqlProviderTokens
from flask_authflow.storage._sql.roles import SqlRoles
from flask_authflow.storage._sql.schema import (
    BACKEND_TABLES,
    add_tables_to,
    attempts_table,
    audit_table,
    factors_table,
    identity_links_table,
    lockouts_table,
    logout_jtis_table,
    metadata,
    reservations_table,
    users_table,
)
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore
from flask_authflow.storage._sql.uow import LOCK_TIMEOUT, UnitOfWork, watch_writes
from flask_authflow.storage._sql.users import SqlUsers

if TYPE_CHECKING:
    from flask_authflow._core.session import AuthSession

__all__ = [
    "AUDIT_PURGE_BATCH",
    "LOCK_TIMEOUT",
    "SqlAlchemyBackend",
    "UnitOfWork",
    "attempts_table",
    "audit_table",
    "factors_table",
    "identity_links_table",
    "lockouts_table",
    "logout_jtis_table",
    "reservations_table",
    "session_writer",
    "users_table",
]


class SqlAlchemyBackend(
    SqlUsers,
    SqlFactors,
    SqlAttempts,
    SqlAudit,
    SqlIdentityLinks,
    SqlOneTime,
    SqlRoles,
    SqlAccountTokens,
    SqlApiTokens,
    SqlProviderTokens,
    SqlDevices,
):
    """Identity, factor, attempt and audit store on SQLite or PostgreSQL.

    :param engine_source: an ``Engine``, a database URL, or a Flask-SQLAlchemy ``db``.
    :param create_tables: create the ``authflow_*`` tables if missing (use migrations in production).
    :param lock_timeout: how long a login step waits for a lock on its account's attempt
        counter before it is answered :class:`~flask_authflow.errors.StoreBusy` (try again).
    """

    def __init__(
        self,
        engine_source: EngineSource,
        *,
        clock: Clock | None = None,
        create_tables: bool = True,
        lock_timeout: timedelta = LOCK_TIMEOUT,
    ) -> None:
        self._owns_engine = isinstance(engine_source, str)
        if not isinstance(lock_timeout, timedelta) or lock_timeout <= timedelta(0):
            raise ConfigurationError(f"lock_timeout must be a positive timedelta, got {lock_timeout!r}")
        #: How long a login step waits for its account's lock (2 s by default).
        self.lock_timeout = lock_timeout
        self.clock: Clock = clock or SystemClock()
        self._clock_given = clock is not None
        self._create_tables = create_tables
        self._engine: Engine | None = None
        self._reader: tuple[Engine, Engine] | None = None
        self._db: Any = None
        #: The Flask-SQLAlchemy ``db`` whose open transaction account writes join (see _account_tx).
        self._app_db: Any = engine_source if is_flask_sqlalchemy(engine_source) else None
        if self._app_db is not None:
            watch_writes(self._app_db.session)
        if is_flask_sqlalchemy(engine_source) and not has_app_context():
            # SqlAlchemyBackend(db) at import time, as with Flask-SQLAlchemy's own models:
            # the tables join db.metadata now (so db.create_all() and Alembic /
            # Flask-Migrate autogenerate see them); the engine is db.engine of the app
            # that AuthFlow.init_app binds (bind_app), inside that app's context.
            self._db = engine_source
            add_tables_to(engine_source.metadata)
            return
        if is_flask_sqlalchemy(engine_source):
            add_tables_to(engine_source.metadata)
        self._bind_engine(resolve_engine(engine_source))
        if create_tables:
            metadata.create_all(self.engine, tables=BACKEND_TABLES)

    def bind_app(self, app: Any) -> SqlAlchemyBackend:
        """The backend to use for ``app`` (``AuthFlow.init_app`` calls it; no application
        context is needed). On a Flask-SQLAlchemy ``db``: a copy bound to ``db.engine`` of
        that app, so one ``SqlAlchemyBackend(db)`` built at import time serves every app
        the factory creates (each test's app has its own database). Otherwise ``self``."""
        if self._db is None:
            return self
        if "sqlalchemy" not in app.extensions:
            raise ConfigurationError(
                "SqlAlchemyBackend(db): Flask-SQLAlchemy is not initialised on this app; call "
                "db.init_app(app) before authflow.init_app(app)"
            )
        bound = copy.copy(self)
        with app.app_context():
            bound._bind_engine(resolve_engine(self._db))
        bound._db = None
        if self._create_tables:
            metadata.create_all(bound.engine, tables=BACKEND_TABLES)
        return bound

    def adopt_clock(self, clock: Clock) -> None:
        """Use the app's clock unless one was given at construction (``AuthFlow.init_app``
        calls it, so a backend built at import time follows the app, and a test's
        ``mock_clock``)."""
        if not self._clock_given:
            self.clock = clock

    def join_sessions(self, store: SqlAlchemySessionStore) -> None:
        """Let ``store`` (a session store on this backend's engine) write a login step's
        session in this backend's units of work (:meth:`UnitOfWork.save_session`): the
        session and the step's other writes then commit once (``init_app`` decides it).
        Each app that shares the backend joins its own store (held weakly)."""
        if self._unit_sessions is None:
            self._unit_sessions = weakref.WeakKeyDictionary()
        self._unit_sessions[store] = weakref.WeakMethod(store.save_on)

    def store_ports(self) -> StorePorts:
        """Every aggregate: this backend keeps them all."""
        return StorePorts(login=self, account_tokens=self, identity_links=self, provider_tokens=self)

    def database_engine(self) -> Engine:
        """The engine holding this backend's tables (:attr:`engine`)."""
        return self.engine

    def close(self) -> None:
        """Dispose of the engine if this backend created it from a URL."""
        if self._owns_engine:
            self.engine.dispose()

    def __repr__(self) -> str:
        if self._engine is None:
            return "<SqlAlchemyBackend (Flask-SQLAlchemy db, not bound yet)>"
        return f"<SqlAlchemyBackend {self._engine.url.render_as_string(hide_password=True)}>"


def session_writer(
    backend: SqlAlchemyBackend, store: SqlAlchemySessionStore, handoff: SessionHandoff
) -> Callable[[AuthSession, Any], Callable[[], None] | None] | None:
    """The writer a login service uses to keep a passed step's session in the step's unit
    of work (``AuthnService.session_writer``), when the SQL session store ``store`` is on
    the backend's own engine (what its ``database_engine()`` declares: its units of work
    are then this adapter's SQL units on that engine): the store then joins the backend's
    units (the unit writes the session, ``handoff`` only prepares it and sends the
    cookie); else ``None`` (the session is written with the response)."""
    if store.engine is not backend.database_engine():
        return None
    backend.join_sessions(store)
    return functools.partial(write_session_in_unit, handoff, store)
