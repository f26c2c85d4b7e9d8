"""flask-authflow: the whole authentication layer of a Flask app, in one extension.

This module re-exports what an application uses every day: the extension, the current
user and session, every view decorator, the login outcomes and the base error. Everything
else is imported from its feature package (``flask_authflow.login``, ``.sessions``,
``.federation``, ``.issuer``, ``.storage``, ...), as the API reference shows.
"""

from flask_authflow import _moved
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow._mail import MailSender
from flask_authflow._outcomes import (
    Authenticated,
    FactorCredential,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    InvalidCredential,
    Locked,
    LoginOutcome,
    StepUpRequired,
)
from flask_authflow._web.api_auth import current_api_token
from flask_authflow._web.authz import authorize, authz_hooks, is_authorized
from flask_authflow._web.csrf import csrf_token, rotate_csrf_token
from flask_authflow._web.current_user import AnonymousUser, UserMixin, current_user
from flask_authflow._web.decorators import (
    api_scopes_required,
    fresh_login_required,
    login_required,
    permissions_accepted,
    permissions_required,
    roles_accepted,
    roles_required,
)
from flask_authflow._web.extension import AuthFlow
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.state import current_session, get_state
from flask_authflow._web.views.blueprint import register_views
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import AuthFlowError

_moved.install()  # the 0.7 module paths import until 0.9, with a warning

__version__ = "0.7.0"

__all__ = [
    "AnonymousUser",
    "AuthFlow",
    "AuthFlowError",
    "AuthSession",
    "AuthState",
    "Authenticated",
    "FactorCredential",
    "FactorKind",
    "FactorOutcome",
    "FactorRequired",
    "InvalidCredential",
    "Locked",
    "LoginOutcome",
    "MailSender",
    "StepUpRequired",
    "UserMixin",
    "__version__",
    "api_scopes_required",
    "audit_context",
    "authorize",
    "authz_hooks",
    "csrf_token",
    "current_api_token",
    "current_session",
    "current_user",
    "fresh_login_required",
    "get_state",
    "is_authorized",
    "login_required",
    "permissions_accepted",
    "permissions_required",
    "register_views",
    "roles_accepted",
    "roles_required",
    "rotate_csrf_token",
    "safe_next",
]
