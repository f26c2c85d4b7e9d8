"""The account page's API tokens: list, create (shown once, on the answer to the form) and
revoke. Creating a token is a new credential: it needs a recent sign-in
(``AUTHFLOW_FRESHNESS``), else the user is sent to confirm it is them first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import redirect, request, url_for
from flask.typing import ResponseReturnValue

from flask_authflow._i18n import N_
from flask_authflow._web import services
from flask_authflow._web.state import current_auth_session, get_state
from flask_authflow._web.views.account_page import account_page, account_post_refused
from flask_authflow._web.views.common import VIEWS_BLUEPRINT, error_status, form_text, to_step_up
from flask_authflow.errors import AuthFlowError, InvalidInput

__all__ = ["create_api_token", "login_too_old", "revoke_api_token"]

#: What the ``expires_in_days`` field may hold (a longer lifetime is refused by the settings).
_MAX_DAYS_DIGITS = 5


def _expires_in_days() -> int | None:
    raw = form_text("expires_in_days").strip()
    if not raw:
        return None
    if not raw.isdecimal() or len(raw) > _MAX_DAYS_DIGITS or int(raw) < 1:
        raise InvalidInput("the lifetime is a whole number of days, at least 1")
    return int(raw)


def login_too_old() -> bool:
    """The login is older than ``AUTHFLOW_FRESHNESS``: a new API token needs a step-up first."""
    session = current_auth_session()
    state = get_state()
    at = session.authenticated_at
    return at is None or state.clock.now() - at > state.config.login.freshness


def create_api_token() -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    if login_too_old():
        return to_step_up(url_for(f"{VIEWS_BLUEPRINT}.account"))
    session = current_auth_session()
    scopes = [*request.form.getlist("scope"), *form_text("scopes").split()]
    options: dict[str, Any] = {"tenant": str(session.tenant)}
    try:
        days = _expires_in_days()
        if days is not None:
            options["expires_in"] = timedelta(days=days)
        created = services.tokens().create(str(session.user_id), form_text("name"), scopes, **options)
    except AuthFlowError as error:
        return account_page(error_status(error), error=error.message)
    return account_page(201, new_api_token=created.value, new_api_token_name=created.record.name)


def revoke_api_token() -> ResponseReturnValue:
    refused = account_post_refused()
    if refused is not None:
        return refused
    session = current_auth_session()
    try:
        revoked = services.tokens().revoke(
            str(session.user_id), form_text("name"), tenant=str(session.tenant)
        )
    except AuthFlowError as error:
        return account_page(error_status(error), error=error.message)
    if not revoked:
        return account_page(404, error=N_("You have no API token of that name."))
    return redirect(url_for(f"{VIEWS_BLUEPRINT}.account", notice="api_token_revoked"))
