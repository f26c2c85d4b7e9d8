"""The application's own user rows, kept with the library's accounts: the hook pair.

An application with its own ``User`` table registers two hooks on the extension:
``@authflow.user_created`` makes its row for a new account and ``@authflow.user_deleted``
removes it. Every path that creates or deletes an account runs them: the command line
(``create-user``, ``users delete``), sign-up, a federated first sign-in, the pytest
plugin's fixtures and :class:`~flask_authflow.login._accounts.AccountAdmin`.

Both run in one transaction with the library's write when the application uses
Flask-SQLAlchemy on the backend's database, and **the library never ends a transaction
of the application**:

* When the application's ``db.session`` already holds work of its own (a view that added
  or flushed rows, then called ``create_user``), the account and the hook's rows join that
  transaction and stay pending: the application's ``commit()`` keeps them with its own
  rows, its ``rollback()`` drops them too. A refusing hook undoes only the library's part
  (the hook's rows in a savepoint, the account deleted again), never the application's.
* When the session holds nothing of the application (the command line, sign-up, a
  federated first sign-in, a fixture), the library owns the transaction it opens on the
  session (:meth:`AppUserHooks.owned`): the account, the hook's rows and the rest of the
  flow (its token and audit rows, through the unit of work that joins it) commit once at
  its end, or are rolled back together.

Elsewhere (another database, the memory store) the account is removed again when the
creation hook fails, so no account is left without its application row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from flask_authflow import signals
from flask_authflow._core.ports import IdentityStore, UserRecord

__all__ = [
    "APP_OWNED",
    "APP_WROTE",
    "AppTransaction",
    "AppUserHooks",
    "NewAccount",
    "UserCreatedHook",
    "UserDeletedHook",
    "app_pending",
    "join_account_writes",
]

#: Set in a Flask-SQLAlchemy session's ``info`` while its transaction holds rows of the
#: application: the SQL backend's account writes then join that transaction.
APP_WROTE = "authflow_transaction_wrote"
#: Set in a Flask-SQLAlchemy session's ``info`` while the library owns its transaction (see
#: :meth:`AppUserHooks.owned`): a unit of work of the SQL backend then runs in it.
APP_OWNED = "authflow_transaction_owned"


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
    """The application's database transaction (Flask-SQLAlchemy's ``db.session``)."""

    def pending(self) -> bool:
        """Whether it holds work of the application (rows added, changed or flushed)."""
        ...

    def owned(self) -> bool:
        """Whether a library flow owns it now (inside :meth:`own`)."""
        ...

    def join(self) -> None:
        """Let the library's next account writes run in this transaction."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A block whose writes are undone on an exception, the rest of the transaction kept."""
        ...

    def own(self) -> AbstractContextManager[None]:
        """A block in which the library owns the transaction (nothing of the application is
        pending): committed at its end, rolled back on an exception."""
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
        signals.send_after_commit(signals.user_created, self._sender, user=account, source=source)
        return account

    def _run(
        self,
        store: IdentityStore,
        make_account: Callable[[], UserRecord],
        hook: UserCreatedHook,
        source: str,
        claims: Mapping[str, Any],
    ) -> UserRecord:
        new = _Creation(make_account, hook, source, claims)
        transaction = self._transaction()
        if transaction is None:  # another database: undo the account if the hook refuses
            account = make_account()
            try:
                hook(NewAccount(account, source, dict(claims)))
            except BaseException:
                _remove_if_kept(store, account)
                raise
            return account
        if transaction.owned():  # a library flow's transaction: its owner rolls back on failure
            return new.run(transaction)
        if transaction.pending():  # the application's: a refusal undoes only what ran here
            with transaction.savepoint():
                return new.run(transaction)
        with transaction.own():  # nothing of the application's: the library's transaction
            return new.run(transaction)

    @contextmanager
    def owned(self, *, deleting: bool = False) -> Iterator[None]:
        """Run a library flow that may create an account (sign-up), or that deletes one
        (``deleting``: an operator's audited delete), in ONE transaction with the
        application's hook: when that ``user_created`` (``user_deleted``) hook is set and
        the application's session holds nothing of its own, the library owns that session's
        transaction for the block (the backend's unit of work runs in it, one commit at the
        end); otherwise the block runs as it is."""
        hook = self._deleted() if deleting else self._created()
        transaction = self._transaction() if hook is not None else None
        if transaction is None or transaction.pending() or transaction.owned():
            yield
            return
        with transaction.own():
            yield

    def delete(self, account: UserRecord, remove_account: Callable[[], object]) -> None:
        """The ``user_deleted`` hook and ``remove_account()``, kept together or not at all
        (the account stays when the hook fails). The application's own pending work is
        never committed or rolled back here."""
        hook = self._deleted()
        transaction = self._transaction() if hook is not None else None

        def run() -> None:
            if hook is not None:
                hook(account)
            if transaction is not None:
                transaction.join()
            remove_account()

        if transaction is None or transaction.owned():
            run()
        elif transaction.pending():
            with transaction.savepoint():
                run()
        else:
            with transaction.own():
                run()
        # Sent at once, or inside ``signals.held_until_commit`` once the flow committed.
        signals.send_after_commit(signals.user_deleted, self._sender, user=account)


@dataclass(frozen=True)
class _Creation:
    """An account and its ``user_created`` hook, run in the application's transaction."""

    make_account: Callable[[], UserRecord]
    hook: UserCreatedHook
    source: str
    claims: Mapping[str, Any]

    def run(self, transaction: AppTransaction) -> UserRecord:
        transaction.join()
        account = self.make_account()
        self.hook(NewAccount(account, self.source, dict(self.claims)))
        return account


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


def app_pending(session: Any) -> bool:
    """Whether the session's transaction holds work of the application (or the library's
    joined account writes): rows added, changed, deleted or flushed."""
    return bool(session.info.get(APP_WROTE) or session.new or session.dirty or session.deleted)
