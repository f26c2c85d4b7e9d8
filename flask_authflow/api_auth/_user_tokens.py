"""``authflow.tokens``: a user's personal API tokens, created, listed and revoked in the
shape of :mod:`flask_authflow._core.service`.

The work is :class:`~flask_authflow.api_auth._service.ApiTokenService`'s (the token
format, the limits, the unit of work and its audit rows); this object adds the
convention (``user_id`` first, ``tenant=`` keyword) and audits with the request's
context (``ip_source="unknown"`` on the command line).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from flask_authflow._core.ports import ApiTokenRecord
from flask_authflow._core.service import TenantScoped
from flask_authflow.api_auth._service import DEFAULT_EXPIRY, ApiTokenService, CreatedToken, DefaultExpiry
from flask_authflow.api_auth._tokens import check_token_name
from flask_authflow.audit._context import audit_context

__all__ = ["Tokens"]


class Tokens(TenantScoped):
    """Create, list, get and revoke a user's personal API tokens (see :doc:`/api_tokens`).

    :param service: the app's token service (it also verifies presented tokens).
    """

    def __init__(self, service: ApiTokenService, *, default_tenant: str) -> None:
        super().__init__(default_tenant=default_tenant)
        self.service = service

    def create(
        self,
        user_id: str,
        name: str,
        scopes: Sequence[str] = (),
        *,
        tenant: str | None = None,
        expires_in: timedelta | DefaultExpiry | None = DEFAULT_EXPIRY,
    ) -> CreatedToken:
        """Create a token for the user (audited ``api_token_created``); its value is in the
        result and nowhere else: show it once.

        :raises ~flask_authflow.errors.InvalidInput: a bad name, scope or lifetime, or the
            user has too many tokens.
        :raises ~flask_authflow.errors.ApiTokenNameTaken: the user has a token of that name.
        :raises ~flask_authflow.errors.UserNotFound: no such user in the tenant."""
        return self.service.create(
            self._tenant(tenant), user_id, name, tuple(scopes), expires_in=expires_in, context=audit_context()
        )

    def list(self, user_id: str, *, tenant: str | None = None) -> list[ApiTokenRecord]:
        """The user's tokens, by name (their hashes, never their values)."""
        return self.service.list(self._tenant(tenant), user_id)

    def get(self, user_id: str, name: str, *, tenant: str | None = None) -> ApiTokenRecord | None:
        """The user's token called ``name``, or ``None``."""
        wanted = check_token_name(name)
        return next((record for record in self.list(user_id, tenant=tenant) if record.name == wanted), None)

    def revoke(self, user_id: str, name: str, *, tenant: str | None = None) -> bool:
        """Delete the user's token called ``name`` (audited ``api_token_revoked``); false if
        there was none. Once this returns, no request is authenticated with it."""
        return self.service.revoke(self._tenant(tenant), user_id, name, context=audit_context())

    def revoke_all(self, user_id: str, *, tenant: str | None = None) -> int:
        """Delete every token of the user (audited ``api_tokens_revoked`` when there were
        any); how many there were."""
        return self.service.revoke_all(self._tenant(tenant), user_id, context=audit_context())
