"""Change of e-mail: behind a fresh login, the new address is confirmed by a mailed link
before it replaces the old one; the old address then gets a notice (no link, no code).

``request_email_change`` needs a session that authenticated within the service's
freshness with the user's strongest step (as changing a factor does:
:class:`~flask_authflow.errors.StepUpNeeded` otherwise). It mails a token of kind
``email_change`` carrying the new address to that address; an address that belongs to
another account gets the same answer and no mail (a signed-in user learns nothing about
other accounts' addresses). ``confirm_email_change`` uses the token (single use, one
conditional statement) and sets the address, confirmed, in the same unit of work; if
another account took the address meanwhile, nothing changes
(:class:`~flask_authflow.errors.UserExists`).

**Transactions** (the manual's Security page): the request commits its token and audit row once,
the confirmation uses the token, sets the address and writes its row in one unit of work;
a store failure keeps nothing (503, recorded as an ``error`` row) and the link stays
usable. Mails go out after the commit; a failing sender is logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask_authflow._core.ports import UserRecord
from flask_authflow._core.session import AuthSession
from flask_authflow.audit._context import AuditContext
from flask_authflow.errors import AuthFlowError, StoreUnavailable, UserExists
from flask_authflow.login import _account_tokens as account_tokens
from flask_authflow.login._account_tokens import AccountTokenInvalid, IssuedToken
from flask_authflow.login._enrollment import _fresh_user
from flask_authflow.login._operation import LoginServices, Operation, guard_store
from flask_authflow.login._signup import check_address

__all__ = [
    "DEFAULT_CHANGE_TTL",
    "KIND",
    "EmailChange",
    "EmailChanged",
    "confirm_email_change",
    "mask",
    "request_email_change",
]

#: The account token kind of a change of e-mail.
KIND = "email_change"
#: How long the confirmation link to the new address works.
DEFAULT_CHANGE_TTL = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class EmailChange:
    """A requested change: the token for the mail and the new address (``to`` is ``None``
    when the address belongs to another account: send nothing)."""

    issued: IssuedToken
    to: str | None
    identifier: str

    def __repr__(self) -> str:
        return f"<EmailChange deliver={self.to is not None}>"


@dataclass(frozen=True, slots=True)
class EmailChanged:
    """A confirmed change: the account as it is now, and the address it had (for the notice)."""

    user: UserRecord
    previous: str | None


def mask(address: str) -> str:
    """``c***@example.com``: enough for its owner to recognise, not to copy."""
    local, _, domain = address.partition("@")
    return f"{local[:1]}***@{domain}"


def request_email_change(
    svc: LoginServices,
    ctx: AuditContext,
    session: AuthSession,
    new_email: object,
    *,
    ttl: timedelta = DEFAULT_CHANGE_TTL,
) -> EmailChange:
    """Mail a confirmation link to ``new_email`` for the session's user.

    :raises StepUpNeeded: the login is not fresh (or not of the strongest step).
    :raises InvalidInput: not an address."""
    op = Operation(svc, ctx, session, "email_change_requested", user_id=session.user_id)
    try:
        fresh = _fresh_user(svc, session, "changing the e-mail address")
        address = check_address(new_email)
        user = guard_store(lambda: svc.store.get_user(fresh.tenant, fresh.user_id))
        if user is None:
            raise AccountTokenInvalid()
        owner = guard_store(lambda: svc.store.find_user_by_email(fresh.tenant, address))
    except AuthFlowError as exc:
        op.refuse(exc, "refused")
        raise
    free = owner is None
    store = account_tokens.token_store(svc.account_tokens)
    fields: dict[str, Any] = {"tenant": user.tenant, "user_id": user.user_id, "identifier": user.identifier}
    with Operation(svc, ctx, session, "email_change_requested", **fields) as op:
        op.unit()
        issued = account_tokens.issue(
            store,
            kind=KIND,
            tenant=user.tenant,
            user_id=user.user_id,
            now=op.now,
            ttl=ttl,
            payload={"email": address},
            persist=free,
        )
        op.audit("sent" if free else "skipped", None if free else "address_taken")
    return EmailChange(issued, address if free else None, user.identifier)


def confirm_email_change(
    svc: LoginServices, ctx: AuditContext, session: AuthSession, token: object
) -> EmailChanged:
    """Set the new address of a confirmation link (confirmed now).

    :raises InvalidInput, AccountTokenInvalid, AccountTokenUsed, AccountTokenExpired: the
        token cannot be used. :raises UserExists: another account has the address now."""
    store = account_tokens.token_store(svc.account_tokens)
    with Operation(svc, ctx, session, "email_changed") as op:
        op.unit()
        try:
            used = account_tokens.use_token(store, token, KIND, op.now)
            user = guard_store(lambda: svc.store.get_user(used.tenant, used.user_id))
            address = used.payload.get("email")
            if user is None or user.disabled or not isinstance(address, str):
                raise AccountTokenInvalid()
            guard_store(lambda: svc.store.set_email(user.tenant, user.user_id, address, verified_at=op.now))
        except (AuthFlowError, UserExists) as exc:
            if isinstance(exc, StoreUnavailable):
                raise  # the template drops the unit and records the failure as an error
            op.refuse(exc, "refused")
            raise
        op.audit("success", tenant=user.tenant, user_id=user.user_id, identifier=user.identifier)
        op.signal("email_changed", user_id=user.user_id, tenant=user.tenant)
    changed = guard_store(lambda: svc.store.get_user(user.tenant, user.user_id))
    return EmailChanged(changed if changed is not None else user, user.email)
