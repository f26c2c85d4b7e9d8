"""Back-channel logout delivery (OpenID Connect Back-Channel Logout 1.0): the provider POSTs
a logout token to a client's ``backchannel_logout_uri``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask.testing import FlaskClient

from flask_authflow.errors import ConfigurationError
from flask_authflow.testing._provider._clients import RegisteredClient

if TYPE_CHECKING:
    import requests


@dataclass(frozen=True, slots=True)
class BackchannelLogoutResult:
    """What the app answered to a back-channel logout POST, and the token sent."""

    status_code: int
    body: str
    headers: Mapping[str, str]
    logout_token: str


def deliver(
    client: RegisteredClient,
    token: str,
    target: FlaskClient | str | None,
    session: requests.Session | None,
) -> BackchannelLogoutResult:
    """POST ``token`` for ``client``: through the Flask test client ``target`` (to the path of
    the registered URI), to the URL ``target``, or to the registered URI (with ``requests``, or
    ``session`` when given)."""
    body = {"logout_token": token}
    if isinstance(target, FlaskClient):
        if client.backchannel_logout_uri is None:
            raise ConfigurationError(f"client {client.client_id!r} has no backchannel_logout_uri")
        parts = urlsplit(client.backchannel_logout_uri)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        resp = target.post(path, data=body, base_url=f"{parts.scheme}://{parts.netloc}")
        return BackchannelLogoutResult(
            resp.status_code, resp.get_data(as_text=True), dict(resp.headers), token
        )
    url = target if target is not None else client.backchannel_logout_uri
    if url is None:
        raise ConfigurationError(f"client {client.client_id!r} has no backchannel_logout_uri")
    import requests as requests_module  # only needed here

    poster = session if session is not None else requests_module.Session()
    answer = poster.post(url, data=body, timeout=10, allow_redirects=False)
    return BackchannelLogoutResult(answer.status_code, answer.text, dict(answer.headers), token)
