"""The mail of the account pages and their JSON twins, and the answer they give once it is
composed.

A flow composes its mail inside its unit of work; the mail is delivered once the answer
went out (:func:`deliver_later`, :class:`MailAfter`), so its time and its failure say
nothing to the client about whether an account matched. The answer is the same for every
request of a kind (:func:`sent_answer`: 202 with a status for JSON, the page's "sent"
state for a form). A completed reset and a password change mail the account's address a
notice that lists what ended with it (:func:`notify_recovery`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypeVar

from flask import Response, current_app, jsonify, request
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._web.external_url import mail_origin
from flask_authflow._web.mail_budgets import OWNER, MailBudget, spend
from flask_authflow._web.outgoing_mail import compose_mail, mail_sender, send_mail
from flask_authflow._web.security_notices import notice_enabled
from flask_authflow._web.state import get_state
from flask_authflow._web.views.common import page
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError, MailDeliveryError
from flask_authflow.login._recovery import Ended

__all__ = [
    "MailAfter",
    "can_mail",
    "deliver_later",
    "mail_ready",
    "not_offered",
    "notify_recovery",
    "sent_answer",
]

log = logging.getLogger("flask_authflow.mail")

R = TypeVar("R", bound=BaseResponse)


def mail_ready() -> None:
    """A sender and an origin for mailed links exist, else :class:`MailDeliveryError`: the
    same error for every request, before anything is done."""
    if mail_sender() is None:
        raise MailDeliveryError("no mail sender is configured (AUTHFLOW_SMTP_HOST or AUTHFLOW_MAIL_OUTBOX)")
    mail_origin(current_app._get_current_object())  # type: ignore[attr-defined]


def deliver_later(to: str | None, mail: tuple[str, str, str], response: R, budget: MailBudget = OWNER) -> R:
    """Deliver ``mail`` once ``response`` went out (nothing for ``to=None``): its time and
    its failure say nothing to the client about whether an account matched. It spends
    ``budget`` (``flask_authflow._web.mail_budgets``); a refusal is logged, never answered."""
    if to is None:
        return response
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    ctx = audit_context()

    def deliver() -> None:
        with app.app_context():
            try:
                if spend(budget, to, ctx):
                    send_mail(to, *mail)
            except MailDeliveryError as exc:
                log.error("an account mail could not be delivered: %s", exc.message)

    response.call_on_close(deliver)
    return response


@dataclass(frozen=True, slots=True)
class MailAfter:
    """The mail a flow composed, delivered once the answer went out (:meth:`after`): the
    pages and the headless API answer differently and mail the same."""

    to: str | None
    mail: tuple[str, str, str]
    budget: MailBudget = OWNER

    def after(self, response: R) -> R:
        return deliver_later(self.to, self.mail, response, self.budget)


def sent_answer(status: str, template: str) -> Response:
    """The answer once a flow's mail is composed, the same whether an account matched: 202
    ``{"status": status}`` for a JSON request, ``template`` in its "sent" state for a form."""
    if request.is_json:
        answer = jsonify({"status": status})
        answer.status_code = 202
        return answer
    return page(template, 200, sent=True)


def not_offered() -> Response:
    """The answer of a page whose feature is off: a plain 404, as for a route that does not exist."""
    return Response("Not Found", status=404, mimetype="text/plain")


def can_mail() -> bool:
    """The app can send mail (a sender or ``AUTHFLOW_MAIL_OUTBOX``)."""
    state = get_state()
    return state.config.accounts.mail_outbox is not None or state.mail_sender is not None


def notify_recovery(
    tenant: str, user_id: str, ended: Ended, response: BaseResponse, *, reset: bool
) -> BaseResponse:
    """Mail the account's address the notice of a completed reset (``reset``) or a password
    change, listing what ended with it, once ``response`` went out. Nothing when the account
    has no address or the app sends no mail."""
    try:
        user = get_state().service.store.get_user(tenant, user_id)
    except AuthFlowError as exc:  # the change is done: the notice alone is lost
        log.error("the notice of a password change could not be composed: %s", exc.message)
        return response
    if user is None or user.email is None or not can_mail() or not notice_enabled("password_changed"):
        return response
    mail = compose_mail(
        "password_changed_notice",
        identifier=user.identifier,
        reset=reset,
        sessions=ended.sessions,
        api_tokens=ended.api_tokens,
        email_change=ended.email_change,
    )
    return deliver_later(user.email, mail, response)
