"""The everyday services of an app, built from its state: what ``authflow.accounts``,
``.roles``, ``.tokens``, ``.sessions``, ``.devices``, ``.factors``, ``.login`` and
``.federation`` return, and what the ready views and the command line call.

Each is a small object of its feature package (see :mod:`flask_authflow._core.service` for
the shape they share); this module only hands each one the app's stores, its unit of work,
its audit sink and, for the steps of a signed-in user, the current request's session and
audit context. They are cheap to build: nothing is cached between calls, so a service
always acts on the app of the current application context (or the ``app`` given).
"""

from __future__ import annotations

from flask import Flask, current_app, has_request_context

from flask_authflow._core.session import AuthSession
from flask_authflow._web.api_auth import token_service
from flask_authflow._web.devices import remember_session, request_trust, user_devices
from flask_authflow._web.state import account_admin, current_auth_session, get_state
from flask_authflow.api_auth import Tokens
from flask_authflow.audit._context import audit_context
from flask_authflow.authz import Roles
from flask_authflow.devices import Devices
from flask_authflow.federation import Federation
from flask_authflow.login import Accounts, Factors, Login
from flask_authflow.login._recovery import Ended
from flask_authflow.login._service import AuthnRequest
from flask_authflow.sessions import Sessions

__all__ = ["accounts", "devices", "factors", "federation", "login", "roles", "sessions", "tokens"]


def _app(app: Flask | None) -> Flask:
    return app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]


def _here() -> tuple[AuthnRequest, AuthSession]:
    """The current request's login handle (its audit context) and session."""
    return get_state().service.with_audit_context(audit_context()), current_auth_session()


def accounts(app: Flask | None = None) -> Accounts:
    """``authflow.accounts`` of ``app`` (default: the current app)."""
    target = _app(app)
    return Accounts(account_admin(target), default_tenant=get_state(target).config.default_tenant)


def roles(app: Flask | None = None) -> Roles:
    """``authflow.roles`` of ``app``."""
    target = _app(app)
    state = get_state(target)
    return Roles(
        state.backend,
        begin_unit=state.service.store.begin_unit,
        audit_sink=state.service.audit_sink,
        clock=state.clock,
        sender=target,
        default_tenant=state.config.default_tenant,
    )


def tokens(app: Flask | None = None) -> Tokens:
    """``authflow.tokens`` of ``app``."""
    target = _app(app)
    return Tokens(token_service(target), default_tenant=get_state(target).config.default_tenant)


def sessions(app: Flask | None = None) -> Sessions[Ended]:
    """``authflow.sessions`` of ``app``: one session ends by the account feature's
    ``revoke_session``, all of them by its "log out everywhere" (in a request, audited with
    its context and its session as the asking one)."""
    target = _app(app)
    state = get_state(target)
    admin = account_admin(target)

    def revoke_all(tenant: str, user_id: str, keep_sid: str | None) -> Ended:
        asking = current_auth_session() if has_request_context() else None
        return admin.logout_everywhere(
            tenant, user_id, keep_sid=keep_sid, context=audit_context(), session=asking
        )

    return Sessions(
        state.session_store,
        revoke_one=lambda tenant, user_id, session_hash, reason: admin.revoke_session(
            tenant, user_id, session_hash, reason=reason
        ),
        revoke_all=revoke_all,
        default_tenant=state.config.default_tenant,
    )


def devices(app: Flask | None = None) -> Devices:
    """``authflow.devices`` of ``app``."""
    return user_devices(get_state(_app(app)))


def factors(app: Flask | None = None) -> Factors:
    """``authflow.factors`` of ``app``."""
    target = _app(app)
    return Factors(
        account_admin(target),
        here=_here,
        trust_device=request_trust,
        default_tenant=get_state(target).config.default_tenant,
    )


def login(app: Flask | None = None) -> Login:
    """``authflow.login`` of ``app``."""
    config = get_state(_app(app)).config

    def remember(session: AuthSession) -> None:
        remember_session(session)

    return Login(
        here=_here,
        remember=remember,
        workflow_expiry=config.login.workflow_expiry,
        default_tenant=config.default_tenant,
    )


def federation(app: Flask | None = None) -> Federation:
    """``authflow.federation`` of ``app``."""
    return Federation(get_state(_app(app)).federation, here=_here)
