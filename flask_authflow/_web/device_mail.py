"""The opt-in mail to a user when a sign-in comes from a device new to their account
(``AUTHFLOW_DEVICE_NEW_DEVICE_MAIL``), through the app's mail sender (or into
``AUTHFLOW_MAIL_OUTBOX``, as every account mail). It carries no link: a link in it would
have to start with the configured origin (:func:`~flask_authflow._web.external_url.mailed_url`)."""

from __future__ import annotations

import logging

from flask import render_template

from flask_authflow._core.ports import UserRecord
from flask_authflow._i18n import gettext, template_context
from flask_authflow._mail import FolderSender, HtmlMailSender
from flask_authflow._web.state import AuthFlowState
from flask_authflow.devices._labels import shown_label

__all__ = ["mail_address_of", "send_new_device_mail"]

log = logging.getLogger("flask_authflow.devices")


def mail_address_of(user: UserRecord) -> str | None:
    """Where mail for ``user`` goes: the account's e-mail address, else an identifier that
    is one, else nowhere."""
    if user.email is not None:
        return user.email
    identifier = user.identifier
    return identifier if "@" in identifier.strip("@") else None


def send_new_device_mail(state: AuthFlowState, tenant: str, user_id: str, device_id: str) -> bool:
    """Tell the user about a sign-in from a new device; false (logged) when there is no
    sender, no address or no such device. A failing sender raises: the caller logs it."""
    outbox = state.config.accounts.mail_outbox  # as the account mails: a folder wins
    sender = FolderSender(outbox) if outbox is not None else state.mail_sender
    user = state.backend.get_user(tenant, user_id)
    device = state.backend.get_device(tenant, user_id, device_id)
    address = mail_address_of(user) if user is not None else None
    if sender is None or address is None or device is None or user is None:
        log.info("no new-device mail for user %s: no mail sender or no address", user_id)
        return False
    site_name = state.config.login.site_name or "flask-authflow"
    context = {
        "identifier": user.identifier,
        "site_name": site_name,
        "device": device,
        "device_label": shown_label(device.label),
    }
    body = render_template("authflow/mail/new_device.txt", **template_context(html=False), **context)
    subject = gettext("%(site)s: sign-in from a new device", site=site_name)
    if isinstance(sender, HtmlMailSender):  # a text part and an HTML part, as every mail
        html = render_template("authflow/mail/new_device.html", **template_context(html=True), **context)
        sender.send_html(address, subject, body, html)
    else:
        sender.send(address, subject, body)
    return True
