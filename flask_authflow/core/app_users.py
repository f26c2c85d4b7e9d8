"""The application's own user rows, kept with the library's accounts: the hook pair.

An application with its own ``User`` table registers two hooks on the extension:
``@authflow.user_created`` makes its row for a new account and ``@authflow.user_deleted``
removes it. Every path that creates or deletes an account runs them: the command line
(``create-user``, ``users delete``), sign-up, a federated first sign-in, the pytest
plugin's fixtures and :class:`~flask_authflow.login.accounts.AccountAdmin`.

Both run in one transaction with the library's write when the application uses
Flask-SQLAlchemy on the backend's database: the account row joins the application's open
``db.session`` transaction, the hook adds (or deletes) its rows there, and one commit
keeps both or a failure keeps neither. Elsewhere (another database, the memory store)
the account is removed again when the creation hook fails, so no account is left without
its application row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from flask_authflow import signals
from flask_authflow.core.ports import IdentityStore, UserRecord

__all__ = [
    "APP_WROTE",
    "AppTransaction",
    "AppUserHooks",
    "NewAccount",
    "UserCreatedHook",
    "UserDeletedHook",
    "join_account_writes",
]

#: Set in a Flask-SQLAlchemy session's ``info`` while its transaction holds rows of the
#: application: the SQL backend's account writes then join that transaction.
APP_WROTE = "authflow_transaction_wrote"


@dataclass(frozen=True)
class NewAccount:
    """What the ``user_created`` hook is told about an account just created."""

    #: The library's account (its ``user_id`` is the key the application's row keeps).
    account: UserRecord
    #: What created it: ``"cli"``, ``"admin"``, ``"signup"``, ``"federation"``, ``"test"``.
    source: str
    #: The claims of the provider's ID token (a federated first sign-in), else empty.
    claims: Mapping[str, Any] = field(default_factory=dict)


#: ``user_created(new)``: create the application's row for ``new.account``; raise to
#: refuse (the account is not kept).
UserCreatedHook = Callable[[NewAccount], object]
#: ``user_deleted(account)``: delete the application's row of ``account``.
UserDeletedHook = Callable[[UserRecord], object]


class AppTransaction(Protocol):
    """The application's open database transaction (Flask-SQLAlchemy's ``db.session``)."""

    def join(self) -> None:
        """Let the library's next account write run in this transaction."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class AppUserHooks:
    """Runs the hook pair around the library's account writes.

    :param created: the ``user_created`` hook (read at each call, so a hook registered
        after ``init_app`` applies); ``None``: accounts only.
    :param deleted: the ``user_deleted`` hook.
    :param transaction: the application's transaction, if it has one on the backend's
        database (``None`` otherwise).
    :param sender: what the ``user_created`` / ``user_deleted`` signals are sent with.
    """

    def __init__(
        self,
        *,
        created: Callable[[], UserCreatedHook | None],
        deleted: Callable[[], UserDeletedHook | None],
        transaction: Callable[[], AppTransaction | None],
        sender: object,
    ) -> None:
        self._created = created
        self._deleted = deleted
        self._transaction = transaction
        self._sender = sender

    def create(
        self,
        store: IdentityStore,
        make_account: Callable[[], UserRecord],
        *,
        source: str,
        claims: Mapping[str, Any] | None = None,
    ) -> UserRecord:
        """``make_account()`` and the ``user_created`` hook, kept together or not at all."""
        hook = self._created()
        if hook is None:
            account = make_account()
        else:
            account = self._run(store, make_account, hook, source, claims or {})
        signals.user_created.send(self._sender, user=account, source=source)
        return account

    def _run(
        self,
        store: IdentityStore,
        make_account: Callable[[], UserRecord],
        hook: UserCreatedHook,
        source: str,
        claims: Mapping[str, Any],
    ) -> UserRecord:
        transaction = self._transaction()
        if transaction is not None:
            transaction.join()
        account: UserRecord | None = None
        try:
            account = make_account()
            hook(NewAccount(account, source, dict(claims)))
            if transaction is not None:
                transaction.commit()
        except BaseException:
            if transaction is not None:
                transaction.rollback()  # also a transaction the refused insert spoiled
            if account is not None:
                _remove_if_kept(store, account)
            raise
        return account

    def delete(self, account: UserRecord, remove_account: Callable[[], object]) -> None:
        """The ``user_deleted`` hook and ``remove_account()``, kept together or not at all
        (the account stays when the hook fails)."""
        hook = self._deleted()
        transaction = self._transaction() if hook is not None else None
        try:
            if hook is not None:
                hook(account)
            if transaction is not None:
                transaction.join()
            remove_account()
            if transaction is not None:
                transaction.commit()
        except BaseException:
            if transaction is not None:
                transaction.rollback()
            raise
        signals.user_deleted.send(self._sender, user=account)


def _remove_if_kept(store: IdentityStore, account: UserRecord) -> None:
    """Undo an account whose write did not run in the application's transaction."""
    if store.get_user(account.tenant, account.user_id) is not None:
        store.delete_user(account.tenant, account.identifier)


def join_account_writes(session: Any) -> None:
    """Let the next account writes of a SQL backend bound to this Flask-SQLAlchemy
    session's database run in its transaction (begun now if none is open), as if the
    application had flushed rows of its own."""
    session.connection()
    session.info[APP_WROTE] = True
