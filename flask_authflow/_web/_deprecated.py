"""The methods ``AuthFlow`` had before 0.8 that restated other objects' operations. Each
warns (:class:`DeprecationWarning`, naming what to use) and does what it did; ``AuthFlow``
inherits them from here so that its own class body keeps wiring and hooks only. Removed in
0.9 (see "Deprecated in 0.8" in :doc:`/api`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from flask_authflow._core.factors import EnrollmentStart
from flask_authflow._core.ports import FactorConfig
from flask_authflow._core.session import AuthSession
from flask_authflow._outcomes import (
    Authenticated,
    FactorKind,
    FactorOutcome,
    FactorRequired,
    LoginOutcome,
    WorkflowOutcome,
    WorkflowPending,
    WorkflowStarted,
)
from flask_authflow._web import authz, services
from flask_authflow._web.api_auth import token_service
from flask_authflow.api_auth._service import ApiTokenService

__all__ = ["DeprecatedMethods"]


def _moved(old: str, new: str) -> None:
    warnings.warn(
        f"authflow.{old} is deprecated and goes in 0.9: use authflow.{new}", DeprecationWarning, stacklevel=3
    )


class DeprecatedMethods:
    """``AuthFlow``'s pre-0.8 methods, each an alias of a service's."""

    @property
    def api_tokens(self) -> ApiTokenService:
        """Deprecated: :attr:`AuthFlow.tokens`."""
        _moved("api_tokens", "tokens (create(user_id, name, scopes, tenant=...), list, get, revoke)")
        return token_service()

    def login_with_password(
        self, identifier: str, password: str, *, tenant: str | None = None, remember: bool = False
    ) -> LoginOutcome | FactorOutcome:
        """Deprecated: ``authflow.login.password(identifier, password, ...)``."""
        _moved("login_with_password(...)", "login.password(identifier, password, tenant=..., remember=...)")
        return services.login().password(identifier, password, tenant=tenant, remember=remember)

    def login_user(
        self, user_id: str, tenant: str | None = None, *, method: str = "external", skip_factors: bool = False
    ) -> Authenticated | FactorRequired | WorkflowPending:
        """Deprecated: ``authflow.login.user(user_id, tenant=..., ...)``."""
        _moved("login_user(...)", "login.user(user_id, tenant=..., method=..., skip_factors=...)")
        return services.login().user(user_id, tenant=tenant, method=method, skip_factors=skip_factors)

    def logout(self) -> None:
        """Deprecated: ``authflow.login.logout()``."""
        _moved("logout()", "login.logout()")
        services.login().logout()

    def verify_factor(
        self, kind: FactorKind | str, secret: str | bytes, *, trust_device: bool = False
    ) -> FactorOutcome:
        """Deprecated: ``authflow.factors.verify(kind, secret, ...)``."""
        _moved("verify_factor(...)", "factors.verify(kind, secret, trust_device=...)")
        return services.factors().verify(kind, secret, trust_device=trust_device)

    def challenge_factor(self, kind: FactorKind | str) -> FactorRequired:
        """Deprecated: ``authflow.factors.challenge(kind)``."""
        _moved("challenge_factor(kind)", "factors.challenge(kind)")
        return services.factors().challenge(kind)

    def begin_enrollment(
        self, kind: FactorKind | str, params: Mapping[str, Any] | None = None
    ) -> EnrollmentStart:
        """Deprecated: ``authflow.factors.begin_enrollment(kind, params)``."""
        _moved("begin_enrollment(...)", "factors.begin_enrollment(kind, params)")
        return services.factors().begin_enrollment(kind, params)

    def confirm_enrollment(self, kind: FactorKind | str, factor_id: str, secret: str | bytes) -> FactorConfig:
        """Deprecated: ``authflow.factors.confirm_enrollment(kind, factor_id, secret)``."""
        _moved("confirm_enrollment(...)", "factors.confirm_enrollment(kind, factor_id, secret)")
        return services.factors().confirm_enrollment(kind, factor_id, secret)

    def disable_factor(self, factor_id: str) -> bool:
        """Deprecated: ``authflow.factors.revoke_current(factor_id)``."""
        _moved("disable_factor(factor_id)", "factors.revoke_current(factor_id)")
        return services.factors().revoke_current(factor_id)

    def user_factors(self) -> list[FactorConfig]:
        """Deprecated: ``authflow.factors.list_current()``."""
        _moved("user_factors()", "factors.list_current()")
        return services.factors().list_current()

    def begin_passkey_login(self, tenant: str | None = None) -> Mapping[str, Any]:
        """Deprecated: ``authflow.login.begin_passkey(tenant=...)``."""
        _moved("begin_passkey_login(...)", "login.begin_passkey(tenant=...)")
        return services.login().begin_passkey(tenant=tenant)

    def finish_passkey_login(self, credential_json: str | bytes) -> FactorOutcome:
        """Deprecated: ``authflow.login.finish_passkey(credential_json)``."""
        _moved("finish_passkey_login(...)", "login.finish_passkey(credential_json)")
        return services.login().finish_passkey(credential_json)

    def authorize(self, action: str, resource: Any, context: Mapping[str, Any] | None = None) -> bool:
        """Deprecated: :func:`flask_authflow._web.authz.is_authorized`."""
        warnings.warn(
            "authflow.authorize(...) is deprecated and goes in 0.9: use "
            "flask_authflow._web.authz.is_authorized(action, resource, context)",
            DeprecationWarning,
            stacklevel=2,
        )
        return authz.is_authorized(action, resource, context)

    def start_workflow(self, kind: str, data: Any = None, expires_in: Any = None) -> WorkflowStarted:
        """Deprecated: ``authflow.login.start_workflow(kind, data, expires_in)``."""
        _moved("start_workflow(...)", "login.start_workflow(kind, data, expires_in)")
        return services.login().start_workflow(kind, data, expires_in)

    def complete_workflow(self, token_or_kind: str) -> WorkflowOutcome:
        """Deprecated: ``authflow.login.complete_workflow(token_or_kind)``."""
        _moved("complete_workflow(...)", "login.complete_workflow(token_or_kind)")
        return services.login().complete_workflow(token_or_kind)

    def abort_workflow(self) -> WorkflowOutcome:
        """Deprecated: ``authflow.login.abort_workflow()``."""
        _moved("abort_workflow()", "login.abort_workflow()")
        return services.login().abort_workflow()

    def oauth_provider(self, name: str) -> Any:
        """Deprecated: ``authflow.federation.provider(name)``."""
        _moved("oauth_provider(name)", "federation.provider(name)")
        return services.federation().provider(name)

    def begin_oauth_login(self, session: AuthSession, provider_name: str, options: Any = None) -> str:
        """Deprecated: ``authflow.federation.begin(provider_name, options)`` (on the current
        session)."""
        _moved("begin_oauth_login(session, ...)", "federation.begin(provider_name, options)")
        return services.federation().begin(provider_name, options, session=session)

    def finish_oauth_login(
        self, session: AuthSession, provider_name: str, code: str, state: str, *, iss: str | None = None
    ) -> Any:
        """Deprecated: ``authflow.federation.finish(provider_name, code, state, iss=...)``
        (on the current session)."""
        _moved("finish_oauth_login(session, ...)", "federation.finish(provider_name, code, state, iss=...)")
        return services.federation().finish(provider_name, code, state, iss=iss, session=session)

    def provider_token(self, provider: str, *, scopes: Iterable[str] | None = None) -> Any:
        """Deprecated: ``authflow.federation.token(provider, scopes=...)``."""
        _moved("provider_token(...)", "federation.token(provider, scopes=...)")
        return services.federation().token(provider, scopes=scopes)
