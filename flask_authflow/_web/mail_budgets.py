"""Which mail budget an account mail spends, and where the owner's networks are learnt.

Two budgets that never share a count (see :mod:`flask_authflow._throttle.limiter`):

* the owner's (scope ``mail``): mails a user asks for after proving something (an e-mail
  code after her password, the confirmation of a change she made signed in, a notice of a
  change she made);
* the strangers' (scope ``stranger_mail``): mails anyone can trigger for someone else's
  address (forgot-password, the sign-up link and "this address is already yours" notice,
  resend). A forgot-password request the owner makes from her device (its signed cookie
  names her account) or from a network where her account signed in within 90 days spends her
  own budget instead, so twenty strangers' requests do not keep her reset mail from her.

A mail refused by its budget is not sent and is logged (with the budget and the limit); the
answer to the request is the same as for a sent one (it went out before the mail).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Flask, has_request_context

from flask_authflow import signals
from flask_authflow._web.state import AuthFlowState, get_state
from flask_authflow.audit._context import AuditContext, audit_context
from flask_authflow.errors import AuthFlowError, Throttled

__all__ = ["OWNER", "MailBudget", "install_mail_budgets", "spend", "strangers"]

log = logging.getLogger("flask_authflow.mail")


@dataclass(frozen=True, slots=True)
class MailBudget:
    """The budget of one mail: the owner's (``stranger=False``), or the strangers' unless
    the requester is the owner of ``account`` (tenant, identifier) by device or network."""

    stranger: bool = False
    account: tuple[str, str] | None = None


#: The owner's budget: the mail follows something only the owner could do.
OWNER = MailBudget()


def strangers(tenant: str | None = None, identifier: str | None = None) -> MailBudget:
    """The strangers' budget; with the account the mail is for, its owner's own request
    (from her device or one of her networks) spends her budget."""
    account = (tenant, identifier) if tenant is not None and identifier is not None else None
    return MailBudget(stranger=True, account=account)


def spend(budget: MailBudget, to: str, ctx: AuditContext) -> bool:
    """Count one mail to ``to`` against ``budget`` for the request of ``ctx`` (after the
    answer went out); ``False`` (logged) when the budget refused it: do not send."""
    throttle = get_state().service.throttle
    try:
        if not budget.stranger:
            throttle.hit("mail", address=ctx.client_ip, recipient=to)
            return True
        account = _owner_account(budget)
        throttle.stranger_mail(to, address=ctx.client_ip, account=account, device_user=ctx.device_user)
    except Throttled as refused:
        log.warning(
            "an account mail was not sent: its budget is spent (%s; request %s)",
            refused.scope,
            ctx.request_id,
        )
        return False
    except AuthFlowError as exc:  # the limiter's storage is down: fail closed, not silently
        log.error("an account mail was not sent: %s (request %s)", exc.message, ctx.request_id)
        return False
    return True


def _owner_account(budget: MailBudget) -> tuple[str, str] | None:
    """(tenant, user id) of the account the mail is for, if it exists."""
    if budget.account is None:
        return None
    tenant, identifier = budget.account
    try:
        user = get_state().service.store.find_user(tenant, identifier)
    except Exception:  # the strangers' budget then: never more mail than without the lookup
        log.warning("the account of a mail could not be read; it spends the strangers' budget", exc_info=True)
        return None
    return (tenant, user.user_id) if user is not None else None


def install_mail_budgets(app: Flask, state: AuthFlowState) -> None:
    """Learn the networks each account signs in from (for :func:`spend`)."""
    throttle = state.service.throttle

    def signed_in(sender: Flask, *, user_id: str, tenant: str, **_: object) -> None:
        if has_request_context():
            throttle.owner_signed_in(tenant, user_id, audit_context().client_ip)

    signals.login_succeeded.connect(signed_in, sender=app, weak=False)
