"""RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0): ``/end_session`` checks the
``id_token_hint`` and the registered ``post_logout_redirect_uri``, ends the provider session
and sends the browser back with ``state``."""

from __future__ import annotations

import base64
import json
import secrets
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Literal, Protocol
from urllib.parse import urlencode, urlsplit

from flask import Response, request

from flask_authflow.errors import ConfigurationError, TokenVerificationError
from flask_authflow.jose import JwtVerifier
from flask_authflow.testing._provider._clients import ClientRegistry
from flask_authflow.testing._provider._http import error, redirect
from flask_authflow.testing._provider._issuer import IssuerNames
from flask_authflow.testing._provider._session import ProviderSession

#: What :attr:`TestOpenIDProvider.logout_state` may say about the ``state`` sent back after logout.
LogoutState = Literal["echo", "other", "omit"]


class EndSessionScript(Protocol):
    """What a test may change (``logout_state``) and observe (``end_session_requests``)."""

    logout_state: LogoutState
    end_session_requests: list[dict[str, str]]


def _unverified_aud(token: str) -> str:
    """The first ``aud`` of a token before verification (only to choose what to verify against)."""
    payload = token.split(".")[1] if token.count(".") == 2 else ""
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("malformed id_token_hint") from exc
    aud = claims.get("aud") if isinstance(claims, dict) else None
    if isinstance(aud, list) and aud and isinstance(aud[0], str) and aud[0]:
        return aud[0]
    if isinstance(aud, str) and aud:
        return aud
    raise ValueError("id_token_hint has no aud")


class EndSessionEndpoint:
    def __init__(
        self,
        verifier: Callable[[], JwtVerifier],
        clients: ClientRegistry,
        session: ProviderSession,
        names: IssuerNames,
        lock: threading.Lock,
        script: EndSessionScript,
    ) -> None:
        self._verifier = verifier
        self._clients = clients
        self._session = session
        self._names = names
        self._lock = lock
        self._script = script

    def end_session(self) -> Response:
        params = request.values
        post_logout = params.get("post_logout_redirect_uri")
        client_id = self._hinted_client(params.get("id_token_hint"), params.get("client_id"))
        if isinstance(client_id, Response):
            return client_id
        if post_logout is not None:
            if client_id is None:
                return error(400, "invalid_request", "post_logout_redirect_uri needs a hint or client_id")
            client = self._clients.get(client_id)
            if client is None or post_logout not in client.post_logout_redirect_uris:
                return error(400, "invalid_request", "post_logout_redirect_uri is not registered")
        with self._lock:
            self._script.end_session_requests.append(dict(params.items()))
        self._session.logout()
        if post_logout is None:
            return Response("signed out", mimetype="text/plain")
        return redirect(self._back_to(post_logout, params.get("state")))

    def _hinted_client(self, hint: str | None, client_id: str | None) -> str | Response | None:
        """The client the request names: its ``client_id``, else the one audience of a valid
        ``id_token_hint`` (a hint that does not verify is answered 400)."""
        if not hint:
            return client_id
        try:
            verified = self._verifier().verify(
                hint, client_id or _unverified_aud(hint), issuer=self._names.iss, leeway=timedelta(days=1)
            )
        except (TokenVerificationError, ConfigurationError, ValueError):
            return error(400, "invalid_request", "id_token_hint does not verify")
        if client_id is None and len(verified.aud) == 1:
            return verified.aud[0]
        return client_id

    def _back_to(self, post_logout: str, state: str | None) -> str:
        """``post_logout`` with the ``state`` the scripted :class:`LogoutState` says."""
        if self._script.logout_state == "other":
            state = secrets.token_urlsafe(16)
        elif self._script.logout_state == "omit":
            state = None
        sep = "&" if urlsplit(post_logout).query else "?"
        return post_logout + (sep + urlencode({"state": state}) if state is not None else "")
