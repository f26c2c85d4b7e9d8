"""Builds an app's federation from its configuration (``AuthFlow.init_app`` calls it).

Imported only when providers are configured, so apps without federation never import
``requests`` and ``authlib`` (dependencies of flask-authflow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask, has_request_context, request, url_for

from flask_authflow import signals
from flask_authflow._clock import Clock
from flask_authflow._extras import require_extra
from flask_authflow._web.app_transaction import app_transaction
from flask_authflow._web.federation_views import (
    OAUTH_BLUEPRINT,
    backchannel_logout,
    build_oauth_blueprint,
    form_post_callback,
)
from flask_authflow._web.next_url import safe_next
from flask_authflow._web.state import EXTENSION_KEY, AuthFlowHooks, AuthFlowState, app_user_hooks, get_state
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._http import HttpClient, RequestsHttpClient
from flask_authflow.federation._login import FederationService
from flask_authflow.federation._presets import provider_config
from flask_authflow.federation._provider import ProviderRegistry, check_provider_name
from flask_authflow.federation._provider_tokens import ProviderTokens, TokenAudit
from flask_authflow.federation._settings import FederationSettings

__all__ = ["build_federation", "register_oauth_blueprint"]


def _provider_links() -> dict[str, Any]:
    """``authflow_oauth_providers`` in templates: ``[(name, login URL)]``, for "Sign in with" buttons
    (the ready login page shows them). Listing needs no discovery."""
    federation = get_state().federation
    if federation is None:
        return {"authflow_oauth_providers": []}
    target = safe_next(request.args.get("next")) if has_request_context() else None
    links = [
        (name, url_for("authflow_oauth.login", provider=name, next=target))
        for name in federation.registry.names()
    ]
    return {"authflow_oauth_providers": links}


def _token_audit(state: AuthFlowState) -> TokenAudit:
    """The audit rows of provider tokens, with the request's context when there is one."""

    def write(event: str, status: str, tenant: str, user_id: str, provider: str, reason: str | None) -> None:
        row = audit_context().row(
            state.clock.now(),
            event,
            status,
            tenant=tenant,
            user_id=user_id,
            factor=f"oidc:{provider}"[:32],
            reason=reason,
        )
        state.service.audit_sink.write(row)

    return write


def _provider_tokens(state: AuthFlowState, registry: ProviderRegistry) -> ProviderTokens | None:
    """The keeper of provider tokens, when the backend declares a port for them and factor
    sealing (``AUTHFLOW_FACTOR_ENCRYPTION_KEY``) is configured."""
    store = state.ports.provider_tokens
    if store is None or state.sealer is None:
        return None
    return ProviderTokens(store, registry, state.sealer, state.clock, _token_audit(state))


def _forget_deleted_user(sender: Any, **fields: Any) -> None:
    """A user being deleted (their sessions end first, with reason ``user_deleted``, while
    the account still exists): revoke and delete their provider tokens."""
    tenant, user_id = fields.get("tenant"), fields.get("user_id")
    if fields.get("reason") != "user_deleted" or not isinstance(sender, Flask):
        return
    if not isinstance(tenant, str) or not isinstance(user_id, str):
        return
    state: AuthFlowState | None = sender.extensions.get(EXTENSION_KEY)  # what init_app put there
    federation = state.federation if state is not None else None
    if federation is not None and federation.tokens is not None:
        federation.tokens.forget_user(tenant, user_id)


signals.session_revoked.connect(_forget_deleted_user)


def build_federation(
    app: Flask,
    settings: FederationSettings,
    *,
    backend: Any,
    session_store: Any,
    clock: Clock,
    hooks: AuthFlowHooks,
    definitions: Mapping[str, Any],
    http_client: HttpClient | None,
) -> FederationService:
    """The app's :class:`FederationService` with every provider of ``AUTHFLOW_OAUTH_PROVIDERS``
    and of ``definitions`` (``authflow.register_provider``) registered, not yet discovered.

    :raises ConfigurationError: a provider entry is malformed, or the backend declares no
        identity links (its ``store_ports().identity_links`` is ``None``).
    """
    require_extra("oidc", "federated login")  # a provider registered in code after init_app
    state = get_state(app)
    links = state.ports.identity_links
    if links is None:  # init_app refused configured providers; this is one registered later
        raise ConfigurationError(
            f"{type(backend).__name__} cannot store identity links: federated login needs a backend "
            "whose store_ports() declares identity_links (InMemoryBackend, SqlAlchemyBackend)"
        )
    counters = state.counters  # every JWKS fetch shows in the app's /metrics
    registry = ProviderRegistry(
        http=http_client or RequestsHttpClient(),
        clock=clock,
        on_key_fetch=counters.jwks_fetched,
        redirect_rule=safe_next,  # post_login_redirect obeys the rule of next
    )
    for name, entry in settings.providers.items():
        check_provider_name(name)
        what = f"AUTHFLOW_OAUTH_PROVIDERS[{name!r}]"
        registry.register(name, provider_config(entry, what))
    for name, definition in definitions.items():
        registry.register(name, definition)
    accounts: Any = backend  # an AuthBackend: users are created there
    return FederationService(
        registry,
        links=links,
        accounts=accounts,
        factors=state.ports.login,  # unlink counts the user's other ways in (password, passkey)
        session_store=session_store,
        clock=clock,
        default_tenant=settings.default_tenant,
        claims_mapper=lambda: hooks.claims_mapper,
        sender=app,
        provision_user=lambda: hooks.provision_user,
        app_transaction=app_transaction,
        app_users=app_user_hooks(app),
        tokens=_provider_tokens(state, registry),
        begin_unit=lambda: get_state(app).service.store.begin_unit(),
        session_join=lambda: get_state(app).service.session_writer,
    )


def register_oauth_blueprint(app: Flask, url_prefix: str) -> None:
    """Register the ``authflow_oauth`` blueprint once; exempt the back-channel route (the
    provider posts it, server to server) and the ``form_post`` callback (the login's
    ``state`` protects it) from Flask-WTF's CSRF check."""
    if OAUTH_BLUEPRINT in app.blueprints:
        return
    blueprint = build_oauth_blueprint()
    app.register_blueprint(blueprint, url_prefix=url_prefix or None)
    app.context_processor(_provider_links)
    csrf = app.extensions.get("csrf")
    exempt = getattr(csrf, "exempt", None)
    if callable(exempt):  # Flask-WTF names exempt views by "module.function"
        exempt(f"{backchannel_logout.__module__}.{backchannel_logout.__name__}")
        # The provider's form_post of code and state: its state is the CSRF check.
        exempt(f"{form_post_callback.__module__}.{form_post_callback.__name__}")
