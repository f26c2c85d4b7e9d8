"""Change of username: the signed-in user picks a new identifier, behind a fresh login.

* **A fresh login** of the user's strongest step, as a change of factors or of e-mail needs
  (:class:`~flask_authflow.errors.StepUpNeeded` otherwise).
* **The rules of sign-up**: the identifier is normalised as every identifier is (NFKC,
  case-folded, no control characters, at most 254 characters), a ``:`` is refused (it
  names accounts of providers), and an identifier with an ``@`` must be the account's own
  *verified* address (:class:`~flask_authflow.login._signup.IdentifierNotOwnAddress`):
  a username shaped like someone else's address would pass for that person's account.
* **Unique per tenant**, decided by the store in one statement (the unique constraint on
  SQL): of two parallel changes to one name exactly one wins, the other is refused with
  :class:`~flask_authflow.errors.UserExists` (409). Renaming to the name one already has is
  :class:`UsernameUnchanged` (400).
* **One transaction**: the new identifier and the ``username_changed`` audit row (the new
  identifier in ``identifier``, the previous one in ``reason``, ``from:<previous>``,
  cut at the column's 64 characters) commit once; a refusal is recorded on its own.
  Sessions stay signed in (a username is not a credential); lockout counters follow the
  identifier a login names, so the old name's counters stay with the old name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask_authflow._core.identifiers import normalise_identifier
from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow._i18n import N_
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AuthFlowError, InvalidInput, StoreUnavailable, UserNotFound
from flask_authflow.login._enrollment import _fresh_user
from flask_authflow.login._operation import LoginServices, Operation, guard_store
from flask_authflow.login._signup import IdentifierNotOwnAddress, _check_identifier

__all__ = ["EVENT", "UsernameChanged", "UsernameUnchanged", "change_username", "rename_user"]

#: The audit event (and security notice) of a change of username.
EVENT = "username_changed"


class UsernameUnchanged(InvalidInput):
    """That is your username already."""

    code = "username_unchanged"
    status = 400


@dataclass(frozen=True, slots=True)
class UsernameChanged:
    """A change made: the account as it is now, and the identifier it had."""

    user: UserRecord
    previous: str


def _checked(user: UserRecord, value: object) -> str:
    """``value`` as the user's new identifier, by sign-up's rules."""
    identifier = _check_identifier(value)
    if "@" in identifier:
        own = user.email is not None and user.email_verified_at is not None
        if not own or identifier != normalise_identifier(str(user.email)):
            raise IdentifierNotOwnAddress()
    if identifier == user.identifier:
        raise UsernameUnchanged(N_("That is your username already."))
    return identifier


def change_username(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, new_identifier: object
) -> UsernameChanged:
    """Rename the session's user to ``new_identifier`` (see the module's text).

    :raises StepUpNeeded: the login is not fresh (or not of the strongest step).
    :raises InvalidInput: a malformed or reserved identifier (``IdentifierNotOwnAddress``
        for one with an ``@`` that is not the account's verified address,
        ``UsernameUnchanged`` for the current one). :raises UserExists: the name is taken."""
    op = Operation(svc, ctx, session, EVENT, user_id=session.user_id)
    try:
        fresh = _fresh_user(svc, session, "changing the username")
        user = guard_store(lambda: svc.store.get_user(fresh.tenant, fresh.user_id))
        if user is None or user.disabled:
            raise UserNotFound()
    except AuthFlowError as exc:
        op.refuse(exc, "refused")
        raise
    return _rename(svc, ctx, session, user, new_identifier)


def rename_user(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, tenant: str, identifier: str, new: object
) -> UsernameChanged:
    """An operator's rename of ``identifier`` (``flask authflow users rename``): the same
    rules, uniqueness and audit row as :func:`change_username`, without a login (``session``
    is the operator's guest session).

    :raises UserNotFound: no such account; and what :func:`change_username` raises."""
    op = Operation(svc, ctx, session, EVENT, tenant=tenant)
    user = guard_store(lambda: svc.store.find_user(tenant, normalise_identifier(identifier)))
    if user is None:
        error = UserNotFound()
        op.refuse(error, "refused")
        raise error
    return _rename(svc, ctx, session, user, new)


def _rename(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, user: UserRecord, new_identifier: object
) -> UsernameChanged:
    """Check ``new_identifier`` for ``user`` and rename, in one unit with the audit row."""
    try:
        identifier = _checked(user, new_identifier)
    except AuthFlowError as exc:
        Operation(svc, ctx, session, EVENT, tenant=user.tenant, user_id=user.user_id).refuse(exc, "refused")
        raise
    fields: dict[str, Any] = {"tenant": user.tenant, "user_id": user.user_id, "identifier": identifier}
    with Operation(svc, ctx, session, EVENT, **fields) as op:
        op.unit()
        try:
            renamed = guard_store(lambda: svc.store.set_identifier(user.tenant, user.user_id, identifier))
        except AuthFlowError as exc:
            if isinstance(exc, StoreUnavailable):
                raise  # the template drops the unit and records the failure as an error
            op.refuse(exc, "refused")
            raise
        op.audit("success", f"from:{user.identifier}"[:64])
    return UsernameChanged(renamed, user.identifier)
