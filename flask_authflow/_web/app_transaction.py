"""The application's own database transaction, when it uses Flask-SQLAlchemy.

The hooks that create or delete the application's rows (``user_created``,
``user_deleted``, ``provision_user``) run in it, so their rows commit with the library's
account or identity link, or not at all. The library never ends a transaction that holds
the application's own work (:meth:`FlaskSqlAlchemyTransaction.pending`): it joins it and
the application's ``commit()`` or ``rollback()`` decides. It commits only a transaction it
owns (:meth:`FlaskSqlAlchemyTransaction.own`: opened by a library flow on a session that
held nothing of the application).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import current_app, has_app_context

from flask_authflow._core.app_users import APP_OWNED, app_pending, join_account_writes
from flask_authflow.errors import StoreUnavailable

__all__ = ["FlaskSqlAlchemyTransaction", "app_transaction"]


class FlaskSqlAlchemyTransaction:
    """The transaction of a Flask-SQLAlchemy ``db.session``."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def pending(self) -> bool:
        """The session holds work of the application (rows added, changed or flushed)."""
        session = self.session()
        return not session.info.get(APP_OWNED) and app_pending(session)

    def owned(self) -> bool:
        """A library flow owns the session's transaction now (inside :meth:`own`)."""
        return bool(self.session().info.get(APP_OWNED))

    def join(self) -> None:
        join_account_writes(self.session)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A SAVEPOINT of the session: the block's rows are undone on an exception, the
        rest of the transaction (the application's work) is kept."""
        with self.session.begin_nested():
            yield

    @contextmanager
    def own(self) -> Iterator[None]:
        """The library owns the session's transaction for the block: the backend's unit of
        work runs in it (``APP_OWNED``); committed at the end, rolled back on an exception."""
        session = self.session()
        session.info[APP_OWNED] = True
        try:
            join_account_writes(session)
            yield
        except BaseException:
            session.info.pop(APP_OWNED, None)
            session.rollback()
            raise
        session.info.pop(APP_OWNED, None)
        try:
            session.commit()  # what the flow's unit of work did not commit already (often nothing)
        except Exception as exc:  # the database's error (SQLAlchemy is imported only with a SQL backend)
            session.rollback()
            raise StoreUnavailable("the application's database transaction could not be committed") from exc

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()


def app_transaction() -> FlaskSqlAlchemyTransaction | None:
    """The current app's Flask-SQLAlchemy transaction, or ``None`` when it has none."""
    db = current_app.extensions.get("sqlalchemy") if has_app_context() else None
    session = getattr(db, "session", None)
    return FlaskSqlAlchemyTransaction(session) if session is not None else None
