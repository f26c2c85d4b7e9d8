"""The application's own database transaction, when it uses Flask-SQLAlchemy.

The hooks that create or delete the application's rows (``user_created``,
``user_deleted``, ``provision_user``) run in it, so their rows commit with the library's
account or identity link, or not at all.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, has_app_context

from flask_authflow.core.app_users import join_account_writes

__all__ = ["FlaskSqlAlchemyTransaction", "app_transaction"]


class FlaskSqlAlchemyTransaction:
    """The open transaction of a Flask-SQLAlchemy ``db.session``."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def join(self) -> None:
        join_account_writes(self.session)

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()


def app_transaction() -> FlaskSqlAlchemyTransaction | None:
    """The current app's Flask-SQLAlchemy transaction, or ``None`` when it has none."""
    db = current_app.extensions.get("sqlalchemy") if has_app_context() else None
    session = getattr(db, "session", None)
    return FlaskSqlAlchemyTransaction(session) if session is not None else None
