"""How the pytest plugin wires the apps a test initialises (see :doc:`/testing`).

While a test runs, :meth:`PluginWiring.applied` wraps ``AuthFlow.init_app`` so that every
call is passed the test's clock, fast hasher and (by default) in-memory stores as keyword
arguments; values the application passes to ``AuthFlow(...)`` or ``init_app(...)`` itself
win. The library knows nothing of this: it is given adapters, as any application could
give them.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask

from flask_authflow._clock import Clock
from flask_authflow._web.extension import AuthFlow
from flask_authflow._web.state import Adapters, get_state
from flask_authflow.errors import ConfigurationError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["PluginWiring"]

#: The ``init_app`` wrappers of :meth:`PluginWiring.applied`, so that a nested block wraps the
#: extension's own ``init_app`` rather than the wiring around it.
_WRAPPERS: weakref.WeakSet[Callable[..., None]] = weakref.WeakSet()


@dataclass(frozen=True, eq=False)
class PluginWiring:
    """What the pytest plugin passes to ``init_app`` for apps built during a test.

    ``stores="memory"`` (the default) puts users and sessions in memory (and anything that
    still wants SQL, such as the issuer's key store, in a private in-memory SQLite);
    ``"sql"`` keeps the configured SQL stores but refuses a SQLite file outside ``tmp_path``
    (and uses one inside it when no database is configured). Either way an explicit backend
    on a SQLite file outside ``tmp_path`` is refused, and the audit spool lives in ``tmp_path``.
    """

    clock: Clock
    hasher: PasswordHasher
    tmp_path: Path
    stores: str = "memory"

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Wrap ``AuthFlow.init_app`` with this wiring until the block ends.

        Inside a test the plugin already wired (or another ``applied()`` block), this wiring
        replaces the one around it for the block instead of being layered under it: what it
        leaves to the application's configuration stays the configuration's."""
        original = inspect.unwrap(AuthFlow.init_app, stop=lambda f: f not in _WRAPPERS)
        wiring = self

        @functools.wraps(original)
        def init_app(extension: AuthFlow, app: Flask, **given: Any) -> None:
            original(extension, app, **wiring.adapters_for(extension, app, given))
            wiring.refuse_outside(get_state(app).backend.database_engine())

        _WRAPPERS.add(init_app)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(AuthFlow, "init_app", init_app)
            yield

    def adapters_for(self, extension: AuthFlow, app: Flask, given: Mapping[str, Any]) -> dict[str, Any]:
        """``init_app``'s keyword arguments for ``app``: what the application gave, the test's
        clock and hasher, and the test's stores; the app's config is pointed into ``tmp_path``."""
        mine = Adapters(**given).over(extension.adapters)
        clock = mine.clock if mine.clock is not None else self.clock
        hasher = mine.hasher if mine.hasher is not None else self.hasher
        backend, store = mine.backend, mine.session_store
        if self.stores == "memory":
            app.config["AUTHFLOW_DATABASE_URL"] = "sqlite://"
            backend = backend if backend is not None else InMemoryBackend(clock=clock)
            store = store if store is not None else MemorySessionStore(clock=clock)
        else:
            self._sql_database(app)
        app.config.setdefault("AUTHFLOW_AUDIT_SPOOL_PATH", str(self.tmp_path / "authflow-audit-spool.jsonl"))
        return {
            "clock": clock,
            "hasher": hasher,
            "backend": backend,
            "session_store": store,
            "http_client": mine.http_client,
            "mail_sender": mine.mail_sender,
        }

    def _sql_database(self, app: Flask) -> None:
        """The configured database, unless it is a SQLite file outside ``tmp_path`` (refused);
        none configured: a file in ``tmp_path``."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        url = app.config.get("AUTHFLOW_DATABASE_URL")
        if url is None:
            app.config["AUTHFLOW_DATABASE_URL"] = f"sqlite:///{self.tmp_path / 'authflow.db'}"
            return
        try:
            parsed = make_url(url)
        except (ArgumentError, TypeError, ValueError):
            return  # not a URL: init_app's own check refuses it, with its message
        path = self._sqlite_file_outside(parsed)
        if path is not None:
            raise ConfigurationError(
                f"AUTHFLOW_DATABASE_URL points at {path}, outside this test's temporary folder "
                f"({self.tmp_path}): the test would write into that database. Use "
                "f\"sqlite:///{tmp_path}/test.db\" in the test's config, or the plugin's default "
                "in-memory stores (remove the authflow_stores marker)"
            )

    def refuse_outside(self, engine: Engine | None) -> None:
        """An explicit SQL backend on a SQLite file outside the test's temporary folder is
        refused (the test would write into a development database). ``engine``: what the
        backend's ``database_engine()`` declares (``None``: it keeps no database)."""
        path = self._sqlite_file_outside(engine.url if engine is not None else None)
        if path is not None:
            raise ConfigurationError(
                f"the backend's database is {path}, outside this test's temporary folder ({self.tmp_path}): "
                "the test would write into that database. Configure an in-memory database for tests "
                '(SQLALCHEMY_DATABASE_URI="sqlite://") or one under tmp_path'
            )

    def _sqlite_file_outside(self, url: Any) -> Path | None:
        """The SQLite file ``url`` (a SQLAlchemy URL) names, if it lies outside ``tmp_path``;
        ``None`` for other databases, in-memory ones and files inside it."""
        if url is None or url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        path = Path(str(url.database)).expanduser().resolve()
        return None if path.is_relative_to(self.tmp_path.resolve()) else path
