"""The package's mails, composed from overridable templates and handed to the app's sender.

A mail ``name`` is ``authflow/mail/<name>.txt`` (its first line is ``Subject: ...``) and
``authflow/mail/<name>.html``: the application's templates first (an override of the same
name wins), then the package's own, so a mail composes the same whether or not the ready
views are registered (a provider linked through ``authflow_oauth`` alone). Mail goes to
``AUTHFLOW_MAIL_OUTBOX`` when it is set (a folder, for development), else to the app's
sender; an :class:`~flask_authflow._mail.HtmlMailSender` gets both parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from flask import current_app, render_template
from jinja2 import ChoiceLoader, Environment, FileSystemLoader

from flask_authflow._i18n import template_context
from flask_authflow._mail import FolderSender, HtmlMailSender, MailSender
from flask_authflow._web.state import get_state
from flask_authflow.errors import MailDeliveryError

__all__ = ["compose_mail", "mail_sender", "send_mail"]

#: The package's templates (the ready views' folder).
_TEMPLATES = str(Path(__file__).resolve().parent / "templates")


def compose_mail(name: str, **context: Any) -> tuple[str, str, str]:
    """``(subject, text, html)`` of mail ``name`` in the request's locale.

    :raises MailDeliveryError: the text template does not begin with ``Subject:``."""
    context.setdefault("site_name", get_state().service.site_name)
    env = _environment()  # rendered by Flask: the app's context processors and signals apply
    text = render_template(
        env.get_template(f"authflow/mail/{name}.txt"), **template_context(html=False), **context
    )
    first, _, body = text.lstrip().partition("\n")
    if not first.startswith("Subject:"):
        raise MailDeliveryError(f"the template authflow/mail/{name}.txt must begin with 'Subject: '")
    html = render_template(env.get_template(f"authflow/mail/{name}.html"), **template_context(), **context)
    return first.removeprefix("Subject:").strip(), body.lstrip("\n"), html


#: The mail environment of each app's Jinja environment: made once, so that its templates are
#: compiled once (an overlay made per mail had a loader of its own, and compiled every mail anew).
_ENVIRONMENTS: WeakKeyDictionary[Environment, Environment] = WeakKeyDictionary()


def _environment() -> Environment:
    """The app's template loader (its overrides, its blueprints'), then the package's folder."""
    env = current_app.jinja_env
    overlay = _ENVIRONMENTS.get(env)
    if overlay is None:
        loaders = [loader for loader in (env.loader, FileSystemLoader(_TEMPLATES)) if loader is not None]
        overlay = _ENVIRONMENTS[env] = env.overlay(loader=ChoiceLoader(loaders))
    return overlay


def mail_sender() -> MailSender | None:
    """Where the app's mail goes: the ``AUTHFLOW_MAIL_OUTBOX`` folder when set, else the
    app's sender; ``None`` when there is neither."""
    state = get_state()
    outbox = state.config.accounts.mail_outbox
    return FolderSender(outbox) if outbox is not None else state.mail_sender


def send_mail(to: str, subject: str, text: str, html: str) -> None:
    """Deliver one composed mail.

    :raises MailDeliveryError: no sender, or it failed."""
    sender = mail_sender()
    if sender is None:
        raise MailDeliveryError("no mail sender is configured (AUTHFLOW_SMTP_HOST or AUTHFLOW_MAIL_OUTBOX)")
    try:
        if isinstance(sender, HtmlMailSender):
            sender.send_html(to, subject, text, html)
        else:
            sender.send(to, subject, text)
    except MailDeliveryError:
        raise
    except Exception as exc:
        raise MailDeliveryError() from exc
