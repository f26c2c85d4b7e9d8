"""``authflow.federation``: federated login as an application calls it itself (its own
login buttons and callback), and the signed-in user's provider tokens.

The work is :class:`~flask_authflow.federation._login.FederationService`'s; the app wires in
its service (``None`` until a provider is configured) and the current request's login
handle and session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from flask_authflow._core.ports import LoginRecorder
from flask_authflow._core.session import AuthSession, AuthState
from flask_authflow.errors import ConfigurationError, Unauthenticated

if TYPE_CHECKING:
    from flask_authflow.federation._login import FederationService

__all__ = ["Federation"]


class Federation:
    """Begin and finish a federated login; a provider; the user's provider access token.

    :param service: the app's federation service, or ``None`` without providers.
    :param here: the login handle and session of the current request.
    """

    def __init__(
        self,
        service: FederationService | None,
        *,
        here: Callable[[], tuple[LoginRecorder, AuthSession]],
    ) -> None:
        self._service = service
        self._here = here

    @property
    def service(self) -> FederationService:
        """The app's :class:`FederationService`.
        :raises ~flask_authflow.errors.ConfigurationError: no provider is configured."""
        if self._service is None:
            raise ConfigurationError(
                "no OpenID provider is configured: set AUTHFLOW_OAUTH_PROVIDERS "
                "or call authflow.register_provider"
            )
        return self._service

    def provider(self, name: str) -> Any:
        """The provider ``name`` (discovered on first use)."""
        return self.service.registry.get(name)

    def begin(self, provider_name: str, options: Any = None, *, session: AuthSession | None = None) -> str:
        """Start a federated login on ``session`` (default: the current request's); the
        authorize URL to send the browser to (see :meth:`FederationService.begin`)."""
        if session is None:
            _, session = self._here()
        return str(self.service.begin(session, provider_name, options))

    def finish(
        self,
        provider_name: str,
        code: str,
        state: str,
        *,
        iss: str | None = None,
        session: AuthSession | None = None,
    ) -> Any:
        """Complete the federated login of ``session`` (default: the current request's)
        from the callback's ``code`` and ``state``; raises an ``OAuthError`` variant on
        failure. Audited with the current request's context."""
        handle, current = self._here()
        return self.service.finish(
            handle, session if session is not None else current, provider_name, code, state, iss=iss
        )

    def token(self, provider: str, *, scopes: Iterable[str] | None = None) -> Any:
        """A valid access token of ``provider`` for the signed-in user, to call the
        provider's APIs (the provider needs ``store_tokens``); an expired one is refreshed
        first. It is a ``str`` with ``token_type``, ``auth`` (a ``requests`` auth object:
        Bearer, or DPoP proofs), ``cert`` and ``verify``:
        ``requests.get(url, auth=t.auth, cert=t.cert, verify=t.verify)``. See
        :doc:`/federation` ("Calling the provider's APIs").

        :raises Unauthenticated: no user is signed in.
        :raises CertificateChanged: the token is bound to a certificate since replaced.
        :raises NoProviderToken, NoRefreshToken, RefreshTokenExpired, InsufficientScope:
            sign in with the provider again (granting ``scopes``).
        :raises ProviderUnreachable, TokenExchange, TokenRefreshBusy: the refresh failed for now.
        """
        service = self.service
        _, session = self._here()
        if session.state is not AuthState.AUTHENTICATED or session.tenant is None or session.user_id is None:
            raise Unauthenticated("sign in to use the provider's tokens")
        if service.tokens is None:
            raise ConfigurationError("the backend cannot store provider tokens (see ProviderTokenStore)")
        return service.tokens.access_token(session.tenant, session.user_id, provider, scopes=scopes)
