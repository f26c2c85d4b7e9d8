"""Sign-in by e-mailed code (``AUTHFLOW_LOGIN_BY_CODE``): "e-mail me a code" and its link.

``/login/code`` takes a username or an e-mail address (form, or JSON ``{"username"}``)
and answers the same whether an account matches or not: the factor page (its form posts
to ``/login/factor``), which asks for the code (then for the user's second factor, if any). The mail, with
the code and a link on the configured origin (never the request's ``Host``), is composed
for every request and delivered, for a usable account only, after the answer went out; it
spends the strangers' mail budget unless the request comes from the account's own device
or one of its networks (:mod:`flask_authflow._web.mail_budgets`).

``/login/code/link?code=...`` is the mail's link. It **signs in only the browser that asked
for the code, and only after a click**: the code is bound to the login transaction kept in
that browser's server-side session, so opened in that browser the page offers one button
that posts the code (with the CSRF token) to the factor step; opened anywhere else (the
phone that reads the mail, a mail scanner following links) it changes nothing and says to
type the code in the browser that asked. So a link cannot silently sign in the session of
whoever asked for it (an attacker who requested a code for her address gains nothing when
she opens the link), and a GET spends no try.
"""

from __future__ import annotations

import re
from typing import TypeVar

from flask import request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers.response import Response as BaseResponse

from flask_authflow._i18n import N_
from flask_authflow._outcomes import FactorKind
from flask_authflow._responses import wants_json
from flask_authflow._web.csrf import csrf_valid
from flask_authflow._web.external_url import mailed_url
from flask_authflow._web.mail_budgets import strangers
from flask_authflow._web.outgoing_mail import compose_mail
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views import signin
from flask_authflow._web.views.account_mail import deliver_later, mail_ready, not_offered
from flask_authflow._web.views.common import (
    MESSAGES,
    VIEWS_BLUEPRINT,
    error_message,
    error_status,
    form_text,
    handle,
    json_answer,
    page,
    request_next,
)
from flask_authflow._web.views.signin import FACTOR_NOTICES
from flask_authflow.errors import AuthFlowError, ConfigurationError
from flask_authflow.login._login_code import LoginCodeRequest
from flask_authflow.mfa._email_otp import EMAIL_OTP_DIGITS
from flask_authflow.mfa._login_code import LoginCodeFactor

__all__ = ["RULES", "deliver_after", "login_code", "login_code_link", "login_code_offered", "request_code"]

R = TypeVar("R", bound=BaseResponse)

_CODE = re.compile(f"[0-9]{{{EMAIL_OTP_DIGITS}}}")
_MISSING = N_("Enter your username or e-mail address.")


def login_code_offered() -> bool:
    """Sign-in by code is on (``AUTHFLOW_LOGIN_BY_CODE``) and its factor is registered."""
    state = get_state()
    return state.config.factors.login_by_code and state.service.factor(FactorKind.LOGIN_CODE) is not None


def _factor() -> LoginCodeFactor:
    factor = get_state().service.factor(FactorKind.LOGIN_CODE)
    if not isinstance(factor, LoginCodeFactor):
        raise ConfigurationError(
            "sign-in by code needs the built-in login_code factor (AUTHFLOW_LOGIN_BY_CODE)"
        )
    return factor


def login_code() -> ResponseReturnValue:
    """``GET``: the form; ``POST``: start a sign-in by code and mail the code."""
    if not login_code_offered():
        return not_offered()
    target = request_next()
    if request.method == "GET":
        return page("login_code.html", next=target, username="")
    username = form_text("username")
    if not csrf_valid():
        return page("login_code.html", 400, next=target, username=username, error=MESSAGES["csrf"])
    if not username.strip():
        return page("login_code.html", 400, next=target, username=username, error=_MISSING)
    try:
        return _request(username, target)
    except AuthFlowError as error:
        answer = page(
            "login_code.html", error_status(error), next=target, username=username, error=error_message(error)
        )
        if error.retry_after is not None:
            answer.headers["Retry-After"] = str(error.retry_after)
        return answer


def request_code(username: str) -> tuple[LoginCodeRequest, tuple[str, str, str]]:
    """Start a sign-in by code for ``username`` on the request's session and compose its mail
    (for every request: the same work whether an account matched); the pages and the
    headless API both call it, then :func:`deliver_after` their answer."""
    mail_ready()  # no way to send mail: the same error for every request, before anything is done
    tenant = get_state().config.default_tenant
    found = handle().request_login_code(username, tenant, current_auth_session(), _factor())
    mail = compose_mail(
        "login_code",
        code=found.code,
        link=mailed_url(f"{VIEWS_BLUEPRINT}.login_code_link", code=found.code),
        identifier=found.identifier or "",
        minutes=max(1, found.expires_in // 60),
    )
    return found, mail


def deliver_after(found: LoginCodeRequest, mail: tuple[str, str, str], response: R) -> R:
    """Mail the code once ``response`` went out, to a usable account only, on the strangers'
    budget unless the request is the owner's (:mod:`flask_authflow._web.mail_budgets`)."""
    return deliver_later(found.to, mail, response, strangers(found.tenant, found.identifier))


def _request(username: str, target: str | None) -> ResponseReturnValue:
    found, mail = request_code(username)
    answer: BaseResponse
    if wants_json():
        location = url_for(f"{VIEWS_BLUEPRINT}.factor", next=target)
        body = {"status": "factor_required", "kinds": [FactorKind.LOGIN_CODE.value], "location": location}
        answer = json_answer(body)
    else:  # the factor page itself, as forgot-password answers its page: no redirect to follow
        answer = signin.factor_page(target, notice=FACTOR_NOTICES["login_code_sent"])
    return deliver_after(found, mail, answer)


def login_code_link() -> ResponseReturnValue:
    """The mail's link: in the browser that asked, a button that passes the code; elsewhere,
    what to do instead (nothing is signed in, no try is spent)."""
    if not login_code_offered():
        return not_offered()
    code = request.args.get("code", "")
    if not _CODE.fullmatch(code):
        return page(
            "login_code_link.html", 400, error=N_("This sign-in link is damaged. Ask for a new code.")
        )
    session = current_auth_session()
    here = session.is_authenticating and FactorKind.LOGIN_CODE.value in session.record.next_step
    return page("login_code_link.html", code=code if here else None, elsewhere=not here)


RULES = [
    ("/login/code", "login_code", login_code, ["GET", "POST"]),
    ("/login/code/link", "login_code_link", login_code_link, ["GET"]),
]
