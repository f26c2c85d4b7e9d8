"""The authorization endpoint (automatic consent for the subject of ``login_as``) and pushed
authorization requests (PAR, RFC 9126)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, Final, Protocol
from urllib.parse import urlencode, urlsplit

from flask import Response, jsonify, request

from flask_authflow._clock import Clock
from flask_authflow.testing._provider._client_auth import CLIENT_AUTH_FIELDS, Authenticate
from flask_authflow.testing._provider._clients import ClientRegistry
from flask_authflow.testing._provider._grants import PKCE_RE, Grant, GrantStore
from flask_authflow.testing._provider._http import error, redirect
from flask_authflow.testing._provider._issuer import IssuerNames
from flask_authflow.testing._provider._session import ProviderSession

_CODE_LIFETIME: Final = 60
_PAR_LIFETIME: Final = 60


class ParScript(Protocol):
    """What a test may script (``par_answer``) and observe (``par_requests``) of PAR."""

    par_answer: tuple[int, dict[str, Any]] | None
    par_requests: list[dict[str, str]]


class AuthorizationEndpoint:
    """``/authorize`` and ``/par``; guarded by the provider's lock."""

    def __init__(
        self,
        clients: ClientRegistry,
        session: ProviderSession,
        grants: GrantStore,
        names: IssuerNames,
        clock: Clock,
        lock: threading.Lock,
        script: ParScript,
    ) -> None:
        self._clients = clients
        self._session = session
        self._grants = grants
        self._names = names
        self._clock = clock
        self._lock = lock
        self._script = script
        self._pushed: dict[str, tuple[dict[str, str], float]] = {}

    def authorize(self) -> Response:
        args = self._authorize_args()
        if isinstance(args, Response):
            return args
        client = self._clients.get(args.get("client_id", ""))
        if client is None:
            return error(400, "invalid_client", "unknown client_id")
        redirect_uri = args.get("redirect_uri", "")
        if redirect_uri not in client.redirect_uris:
            # Never redirect to an unregistered URI (open redirect).
            return error(400, "invalid_request", "redirect_uri is not registered for this client")
        back = _Back(redirect_uri, args.get("state"), self._names.iss, self._session.pending_tamper())
        if args.get("response_type") != "code":
            return back(error="unsupported_response_type", error_description="only response_type=code")
        scope = tuple(args.get("scope", "").split())
        if "openid" not in scope:
            return back(error="invalid_scope", error_description="scope must include openid")
        challenge = args.get("code_challenge", "")
        if args.get("code_challenge_method") != "S256" or PKCE_RE.fullmatch(challenge) is None:
            return back(error="invalid_request", error_description="PKCE with S256 is required")
        consent = self._session.consent()
        if consent.subject is None:
            return back(error="login_required", error_description="call provider.login_as(sub) first")
        grant = Grant(
            client_id=client.client_id,
            redirect_uri=redirect_uri,
            code_challenge=challenge,
            nonce=args.get("nonce"),
            scope=scope,
            sub=consent.subject[0],
            claims=dict(consent.subject[1]),
            sid=consent.sid,
            auth_time=int(self._clock.now().timestamp()),
            expires_at=time.monotonic() + _CODE_LIFETIME,
            tamper=consent.tamper,
            dpop_jkt=args.get("dpop_jkt"),
        )
        return back(code=self._grants.new_code(grant))

    def _authorize_args(self) -> dict[str, str] | Response:
        """The authorize request's parameters: the query, or the pushed request it names."""
        query = request.args
        request_uri = query.get("request_uri")
        if request_uri is None:
            client = self._clients.get(query.get("client_id", ""))
            if client is not None and client.require_par:
                return error(400, "invalid_request", "this client must push its requests (PAR)")
            return dict(query.items())
        with self._lock:
            pushed = self._pushed.pop(request_uri, None)  # single use
        if (
            pushed is None
            or pushed[1] < time.monotonic()
            or pushed[0].get("client_id") != query.get("client_id")
        ):
            return error(400, "invalid_request_uri", "unknown, used or expired request_uri")
        return pushed[0]

    def par(self, authenticate: Authenticate) -> Response:
        client = authenticate()
        if isinstance(client, Response):
            return client
        params = {k: v for k, v in request.form.items() if k not in CLIENT_AUTH_FIELDS}
        with self._lock:
            self._script.par_requests.append(dict(params))
            scripted, self._script.par_answer = self._script.par_answer, None
        if scripted is not None:
            resp = jsonify(scripted[1])
            resp.status_code = scripted[0]
            return resp
        if params.get("client_id", client.client_id) != client.client_id or "request_uri" in params:
            return error(400, "invalid_request", "another client_id, or a request_uri pushed")
        if params.get("redirect_uri") not in client.redirect_uris:
            return error(400, "invalid_request", "redirect_uri is not registered for this client")
        params["client_id"] = client.client_id
        uri = "urn:ietf:params:oauth:request_uri:" + secrets.token_urlsafe(24)
        with self._lock:
            self._pushed[uri] = (params, time.monotonic() + _PAR_LIFETIME)
        resp = jsonify({"request_uri": uri, "expires_in": _PAR_LIFETIME})
        resp.status_code = 201
        resp.headers["Cache-Control"] = "no-store"
        return resp


class _Back:
    """The authorization response: a redirect to the client with ``state`` and the RFC 9207
    ``iss`` (left out or another issuer's, as the pending tamper options say)."""

    def __init__(self, redirect_uri: str, state: str | None, iss: str, tamper: frozenset[str]) -> None:
        self._redirect_uri = redirect_uri
        self._state = state
        self._iss = iss
        self._tamper = tamper

    def __call__(self, **params: str) -> Response:
        query = dict(params)
        if self._state is not None:
            query["state"] = self._state
        if "no_iss_in_response" not in self._tamper:
            query["iss"] = "https://other.test" if "wrong_iss_in_response" in self._tamper else self._iss
        sep = "&" if urlsplit(self._redirect_uri).query else "?"
        return redirect(self._redirect_uri + sep + urlencode(query))
