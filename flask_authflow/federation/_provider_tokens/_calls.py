"""The provider calls of kept tokens: the refresh request (RFC 6749 section 6) and the
revocation (RFC 7009), both authenticated as the login's token request."""

from __future__ import annotations

from flask_authflow._core.ports import StoredProviderTokens
from flask_authflow.federation._errors import ProviderUnreachable, TokenExchange
from flask_authflow.federation._provider import OAuthProvider, TokenSet, checked_token_type
from flask_authflow.federation._provider_tokens._errors import RefreshTokenExpired
from flask_authflow.federation._provider_tokens._sealed import TokenRows

__all__ = ["post_refresh", "revoke"]


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _checked_refresh(
    body: dict[str, object], dpop_kid: str | None = None, x5t: str | None = None
) -> TokenSet:
    """The checked parts of a successful refresh answer (no ID token is needed); a token
    bound with DPoP must come back DPoP-bound (the binding is kept: same key); one asked
    for over mutual TLS is bound to the certificate ``x5t`` presented.

    :raises TokenExchange: no access token, or a ``token_type`` other than Bearer (DPoP).
    """
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenExchange("the token endpoint answered the refresh without an access_token")
    token_type = checked_token_type(body.get("token_type", "Bearer"), dpop_kid is not None)
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return TokenSet(
        id_token="",
        access_token=access_token,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        token_type=token_type,
        expires_in=_positive_int(body.get("expires_in")),
        scope=scope if isinstance(scope, str) else None,
        dpop_kid=dpop_kid,
        x5t=x5t,
    )


def post_refresh(provider: OAuthProvider, refresh_token: str, dpop_kid: str | None = None) -> TokenSet:
    """The refresh request (RFC 6749 section 6), authenticated as the login's token request.

    :raises RefreshTokenExpired: ``invalid_grant``.
    :raises TokenExchange: another error answer, or an unusable success answer.
    :raises ProviderUnreachable: a transport failure, 5xx, or an answer that is not JSON.
    """
    response = provider.client_request(
        provider.endpoint("token_endpoint") or provider.metadata.token_endpoint,
        {"grant_type": "refresh_token", "refresh_token": refresh_token},
        dpop_kid=dpop_kid,  # the same key: the refreshed token keeps the binding
    )
    if response.status >= 500:
        raise ProviderUnreachable(f"the token endpoint answered HTTP {response.status}")
    body = response.json_object()
    if response.status == 200:  # over mTLS: bound to the certificate presented
        return _checked_refresh(body, dpop_kid, provider.tls.thumbprint if provider.tls else None)
    error = body.get("error")
    if error == "invalid_grant":
        raise RefreshTokenExpired()
    if isinstance(error, str) and error and error.isascii() and len(error) <= 64:
        raise TokenExchange(f"the token endpoint answered {error}", error=error)
    raise TokenExchange(f"the token endpoint answered HTTP {response.status}")


def revoke(provider: OAuthProvider, rows: TokenRows, row: StoredProviderTokens) -> bool:
    """RFC 7009 at the provider's ``revocation_endpoint``: the refresh token first (which
    ends its access tokens at most providers), then the access token. ``False`` when the
    provider has no revocation endpoint.

    :raises ProviderUnreachable: the endpoint did not answer 200.
    """
    endpoint = provider.endpoint("revocation_endpoint")
    if endpoint is None:
        return False
    opened = rows.open(row)
    hints = (("refresh_token", opened.refresh_token), ("access_token", opened.access_token))
    for hint, token in hints:
        if token is None:
            continue
        response = provider.client_request(endpoint, {"token": token, "token_type_hint": hint})
        if response.status != 200:
            raise ProviderUnreachable(f"the revocation endpoint answered HTTP {response.status}")
    return True
