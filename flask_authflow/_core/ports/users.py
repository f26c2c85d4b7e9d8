"""Users: the local accounts and the identity port."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["IdentityStore", "UserRecord"]


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A local account. ``identifier`` is normalised; ``user_id`` never changes."""

    user_id: str
    tenant: str
    identifier: str
    created_at: datetime
    disabled: bool = False
    #: The account's e-mail address (``flask_authflow._core.identifiers.normalise_email``),
    #: unique per tenant; ``None`` when it has none.
    email: str | None = None
    #: When the owner proved they read mail at ``email`` (``None``: not verified).
    email_verified_at: datetime | None = None

    # What Flask-Login's UserMixin answers, so ``current_user`` works the same without a
    # user loader (then ``current_user`` is this record).
    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_active(self) -> bool:
        return not self.disabled

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return self.user_id


class IdentityStore(Protocol):
    """Users, looked up by (tenant, normalised identifier)."""

    def find_user(self, tenant: str, identifier: str) -> UserRecord | None: ...

    def get_user(self, tenant: str, user_id: str) -> UserRecord | None: ...

    def create_user(
        self,
        tenant: str,
        identifier: str,
        *,
        password_hash: str | None = None,
        email: str | None = None,
        email_verified_at: datetime | None = None,
    ) -> UserRecord:
        """Add a user, with a password factor holding ``password_hash`` when given (the
        store receives hashes: ``login/`` hashes, the store never does);
        :class:`~flask_authflow.errors.UserExists` if the identifier or the e-mail address
        is taken in the tenant."""
        ...

    def list_users(self, tenant: str | None = None) -> list[UserRecord]: ...

    def delete_user(self, tenant: str, identifier: str) -> UserRecord:
        """Remove the user and what is theirs (factors, counters, links, roles); audit rows
        stay. :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...

    def find_user_by_email(self, tenant: str, email: str) -> UserRecord | None:
        """The user of ``tenant`` whose address is ``email`` (in its normalised form)."""
        ...

    def set_email(
        self, tenant: str, user_id: str, email: str | None, *, verified_at: datetime | None
    ) -> UserRecord:
        """Replace the user's address and its verification time;
        :class:`~flask_authflow.errors.UserExists` if another user of the tenant has that
        address, :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...

    def set_identifier(self, tenant: str, user_id: str, identifier: str) -> UserRecord:
        """Rename the user to ``identifier`` (normalised by the caller); one statement, so
        of two parallel renames to one name exactly one wins:
        :class:`~flask_authflow.errors.UserExists` if another user of the tenant has it,
        :class:`~flask_authflow.errors.UserNotFound` without the user."""
        ...
