"""Security notices: a mail to the account's owner when something that guards the account
changed, so that a change they did not make does not go unnoticed.

One function, :func:`notify`, maps a security event to its notice; a view calls it with one
line once its flow has committed, and the notice goes out after the answer did:

* ``email_changed``: the previous address (``email_change_notice``) and the new one, once
  confirmed (``email_added_notice``);
* ``factor_added``, ``factor_removed`` (TOTP, HOTP, e-mail codes, a security key or passkey,
  recovery codes), ``provider_linked``, ``provider_unlinked``, ``username_changed``: the
  account's address (``<event>_notice``).

(The password change's notice, which lists what ended with it, is
:func:`~flask_authflow._web.views.account_mail.notify_recovery`; the same switch applies.)

Each template is ``authflow/mail/<template>.txt`` (first line ``Subject: ...``) and
``.html``, overridable like every page, translated in the request's locale. Their one link
(the account page or its sign-in methods) is built by
:func:`~flask_authflow._web.external_url.mailed_url` on the configured origin; without one
the notice goes without a link.

``AUTHFLOW_SECURITY_NOTICES`` (default ``True``) turns them all off (``False``) or names the
events to send (``["email_changed", "factor_removed"]``). A notice that cannot be sent
never undoes the change, which is committed: no sender, no address or a failing sender is
logged (logger ``flask_authflow.notices``: ``info`` when there is nowhere to send it,
``error`` when sending failed). Notices are not throttled: only the signed-in owner's own
changes send them, one per change, and strangers cannot spend a budget they would share.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from flask import current_app
from jinja2 import TemplateError
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._core.ports import UserRecord
from flask_authflow._web.external_url import mailed_url
from flask_authflow._web.outgoing_mail import compose_mail, mail_sender, send_mail
from flask_authflow._web.state import get_state
from flask_authflow.errors import AuthFlowError, MailDeliveryError

__all__ = ["NOTICES", "notice_enabled", "notify", "notify_now"]

R = TypeVar("R", bound=BaseResponse)

log = logging.getLogger("flask_authflow.notices")

#: event -> (template, endpoint of its link); ``email_changed`` also mails ``email_added_notice``
#: to the new address.
NOTICES: Mapping[str, tuple[str, str]] = {
    "email_changed": ("email_change_notice", "authflow_views.account"),
    "factor_added": ("factor_added_notice", "authflow_views.factors"),
    "factor_removed": ("factor_removed_notice", "authflow_views.factors"),
    "provider_linked": ("provider_linked_notice", "authflow_views.account"),
    "provider_unlinked": ("provider_unlinked_notice", "authflow_views.account"),
    # the command line's set-password (the views send theirs through notify_recovery)
    "password_changed": ("password_changed_notice", "authflow_views.account"),
    "username_changed": ("username_changed_notice", "authflow_views.account"),
}
_NEW_ADDRESS_TEMPLATE = "email_added_notice"


def notice_enabled(event: str) -> bool:
    """Whether ``AUTHFLOW_SECURITY_NOTICES`` lets the notice of ``event`` go out."""
    return event in get_state().config.web.security_notices


def notify(event: str, tenant: str, user_id: str, response: R, **details: Any) -> R:
    """Mail the owner of ``user_id`` the notice of ``event`` once ``response`` went out.

    ``details`` go to the template (``kind`` of a factor, ``provider``, ``previous`` address
    of an e-mail change). Never raises: the change is committed whatever happens here.
    """
    mails = _mails(event, tenant, user_id, details)
    if mails:
        app = current_app._get_current_object()  # type: ignore[attr-defined]

        def deliver() -> None:
            with app.app_context():
                _deliver(event, user_id, mails)

        response.call_on_close(deliver)
    return response


def notify_now(event: str, tenant: str, user_id: str, **details: Any) -> None:
    """:func:`notify` for a change made outside a request (an operator's command): the
    notice is composed in the default language and sent at once. Never raises."""
    with current_app.test_request_context():
        mails = _mails(event, tenant, user_id, details)
    _deliver(event, user_id, mails)


def _mails(
    event: str, tenant: str, user_id: str, details: Mapping[str, Any]
) -> list[tuple[str, str, str, str]]:
    """The mails of ``event``'s notice (none when it is off or there is nowhere to send it)."""
    template, endpoint = NOTICES[event]
    if not notice_enabled(event):
        return []
    try:
        user = get_state().service.store.get_user(tenant, user_id)
        mails = _compose(event, template, endpoint, user, details) if user is not None else []
    except (AuthFlowError, OSError, RuntimeError, TemplateError) as exc:  # a store, a template: logged
        log.error("the %s notice of user %s could not be composed: %s", event, user_id, exc)
        return []
    if not mails:
        log.info("no %s notice for user %s: the account has no e-mail address", event, user_id)
    return mails


def _deliver(event: str, user_id: str, mails: list[tuple[str, str, str, str]]) -> None:
    for to, subject, text, html in mails:
        _send(event, user_id, to, subject, text, html)


def _compose(
    event: str, template: str, endpoint: str, user: UserRecord, details: Mapping[str, Any]
) -> list[tuple[str, str, str, str]]:
    """``(to, subject, text, html)`` of each mail of ``event`` for ``user``."""
    context = {"identifier": user.identifier, "link": _link(endpoint), **details}
    mails: list[tuple[str, str, str, str]] = []
    previous = details.get("previous")
    if event == "email_changed":  # the new address learns of it, and the old one
        if user.email:
            mails.append((user.email, *compose_mail(_NEW_ADDRESS_TEMPLATE, **context)))
        if isinstance(previous, str) and previous:
            mails.append((previous, *compose_mail(template, **context)))
        return mails
    if user.email:
        mails.append((user.email, *compose_mail(template, **context)))
    return mails


def _link(endpoint: str) -> str | None:
    """The notice's link on the configured origin; none without an origin or the views."""
    if endpoint not in current_app.view_functions:
        return None
    try:
        return mailed_url(endpoint)
    except MailDeliveryError:
        return None


def _send(event: str, user_id: str, to: str, subject: str, text: str, html: str) -> None:
    if mail_sender() is None:
        log.info("no %s notice for user %s: no mail sender is configured", event, user_id)
        return
    try:
        send_mail(to, subject, text, html)
    except MailDeliveryError as exc:  # logged: the change is committed and stays
        log.error("the %s notice of user %s could not be sent: %s", event, user_id, exc)
