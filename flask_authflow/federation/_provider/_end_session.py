"""The end-session URL of RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0)."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit, urlunsplit

from flask_authflow.federation._errors import EndSessionRefused

__all__ = ["end_session_url"]


def end_session_url(
    endpoint: str | None,
    client_id: str,
    id_token_hint: str,
    post_logout_redirect_uri: str | None,
    state: str | None,
    allowed: tuple[str, ...],
) -> str:
    """The provider's ``endpoint`` with the logout parameters of this client.

    :param allowed: the redirect URIs ``post_logout_redirect_uri`` may be (none when empty).
    :raises EndSessionRefused: no ``endpoint``, or a redirect URI not on ``allowed``.
    """
    if endpoint is None:
        raise EndSessionRefused("the provider has no end_session_endpoint")
    params: dict[str, str] = {"id_token_hint": id_token_hint, "client_id": client_id}
    if post_logout_redirect_uri is not None:
        if post_logout_redirect_uri not in allowed:
            raise EndSessionRefused("post_logout_redirect_uri is not on allowed_post_logout_redirect_uris")
        params["post_logout_redirect_uri"] = post_logout_redirect_uri
    if state is not None:
        params["state"] = state
    parts = urlsplit(endpoint)
    query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
