"""The authorization request: the authorize URL of a ceremony (through Authlib's OAuth 2
client), or, with PAR (RFC 9126), the request pushed first and a URL that carries only
``client_id`` and ``request_uri``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flask_authflow.errors import MissingExtraError
from flask_authflow.federation._ceremony import Ceremony
from flask_authflow.federation._errors import Discovery
from flask_authflow.federation._par import authorize_url_for, request_uri_of
from flask_authflow.federation._provider._exchange import ProviderClient

__all__ = ["authorization_url"]


def _oauth2_session(**kwargs: Any) -> Any:
    try:
        from authlib.integrations.requests_client import OAuth2Session
    except ModuleNotFoundError as exc:  # pragma: no cover - a dependency; init_app checks it
        raise MissingExtraError("oidc", exc.name or "authlib") from exc
    return OAuth2Session(**kwargs)


def authorization_url(
    client: ProviderClient,
    ceremony: Ceremony,
    *,
    push: bool,
    scopes: Iterable[str] | None,
    extra: Mapping[str, str],
) -> str:
    """See :meth:`~flask_authflow.federation._provider._oidc.OAuthProvider.authorization_url`; ``push``:
    send the request to the pushed authorization request endpoint first."""
    config = client.config
    scope = " ".join(scopes if scopes is not None else config.scopes)
    if config.response_mode == "form_post":
        extra = {**extra, "response_mode": "form_post"}
    if client.dpop is not None and ceremony.dpop_kid is not None:
        extra = {**extra, "dpop_jkt": client.dpop.thumbprint(ceremony.dpop_kid)}
    if push:
        return _pushed_authorization_url(client, ceremony, scope, extra)
    oauth = _oauth2_session(
        client_id=config.client_id,
        redirect_uri=config.redirect_uri,
        code_challenge_method="S256",
        scope=scope,
    )
    try:
        url, _state = oauth.create_authorization_url(
            client.metadata.authorization_endpoint,
            state=ceremony.state,
            nonce=ceremony.nonce,
            code_verifier=ceremony.code_verifier,
            **extra,
        )
    finally:
        oauth.close()
    return str(url)


def _pushed_authorization_url(
    client: ProviderClient, ceremony: Ceremony, scope: str, extra: Mapping[str, str]
) -> str:
    endpoint = client.endpoint("pushed_authorization_request_endpoint")
    if endpoint is None:  # pragma: no cover - uses_par is only set with an endpoint
        raise Discovery("the provider has no pushed_authorization_request_endpoint")
    fields = {
        **extra,
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": client.config.redirect_uri,
        "scope": scope,
        "state": ceremony.state,
        "nonce": ceremony.nonce,
        "code_challenge": ceremony.code_challenge,
        "code_challenge_method": "S256",
    }
    request_uri = request_uri_of(client.client_request(endpoint, fields))
    return authorize_url_for(client.metadata.authorization_endpoint, client.client_id, request_uri)
