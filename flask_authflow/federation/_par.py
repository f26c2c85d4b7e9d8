"""Pushed authorization requests (RFC 9126): the request goes to the provider, the browser
carries only ``client_id`` and the ``request_uri`` the provider answered.

The push is authenticated as the token request is (the same client authentication method,
a fresh client assertion). An error answer of the endpoint is
:class:`PushedRequestRefused` (400: the provider refused the request: its ``error`` code is
kept), an unusable answer (5xx, not JSON, no ``request_uri``) is
:class:`~flask_authflow.federation._errors.ProviderUnreachable` (502), as for the login
route's other provider failures.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from flask_authflow.federation._errors import OAuthError, ProviderUnreachable
from flask_authflow.federation._http import HttpResponse

__all__ = ["PushedRequestRefused", "authorize_url_for", "request_uri_of"]

_MAX_REQUEST_URI: Final = 2048


class PushedRequestRefused(OAuthError):
    """The provider refused the pushed authorization request."""

    code = "par_refused"
    status = 400

    def __init__(self, message: str | None = None, error: str | None = None) -> None:
        #: The ``error`` code the endpoint answered (``invalid_request``, ``invalid_client``, ...).
        self.error = error or ""
        super().__init__(message)


def request_uri_of(response: HttpResponse) -> str:
    """The ``request_uri`` of the endpoint's answer.

    :raises PushedRequestRefused: an error answer (4xx with an ``error`` code).
    :raises ProviderUnreachable: a 5xx or another unusable answer.
    """
    if response.status >= 500:
        raise ProviderUnreachable(
            f"the pushed authorization request endpoint answered HTTP {response.status}"
        )
    body = response.json_object()
    if response.status not in (200, 201):
        error = body.get("error")
        if isinstance(error, str) and error and error.isascii() and len(error) <= 64:
            raise PushedRequestRefused(f"the pushed authorization request endpoint answered {error}", error)
        raise PushedRequestRefused(
            f"the pushed authorization request endpoint answered HTTP {response.status}"
        )
    request_uri = body.get("request_uri")
    if not isinstance(request_uri, str) or not request_uri or len(request_uri) > _MAX_REQUEST_URI:
        raise ProviderUnreachable("the pushed authorization request endpoint answered no usable request_uri")
    return request_uri


def authorize_url_for(authorization_endpoint: str, client_id: str, request_uri: str) -> str:
    """The authorize URL of a pushed request: ``client_id`` and ``request_uri`` only."""
    parts = urlsplit(authorization_endpoint)
    params = urlencode({"client_id": client_id, "request_uri": request_uri})
    query = f"{parts.query}&{params}" if parts.query else params
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
