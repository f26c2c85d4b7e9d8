"""Password login with chained factors: the service, its flows (one module each, run in
the :class:`Operation` template), its outcomes, its store and lockout."""

from __future__ import annotations

from flask_authflow._core.app_users import NewAccount
from flask_authflow._core.ports import UserRecord
from flask_authflow.login._account_service import Accounts
from flask_authflow.login._factor_service import Factors
from flask_authflow.login._lockout import LockoutPolicy
from flask_authflow.login._password import PasswordHasher
from flask_authflow.login._password_policy import PasswordPolicy
from flask_authflow.login._service import AuthnService, default_login_steps
from flask_authflow.login._session_login import Login

__all__ = [
    "Accounts",
    "AuthnService",
    "Factors",
    "LockoutPolicy",
    "Login",
    "NewAccount",
    "PasswordHasher",
    "PasswordPolicy",
    "UserRecord",
    "default_login_steps",
]
