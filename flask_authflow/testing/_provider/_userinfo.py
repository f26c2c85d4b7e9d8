"""The userinfo endpoint: the claims of the access token's grant, a DPoP proof checked when
the token is bound to a key."""

from __future__ import annotations

import threading
from typing import Protocol

from flask import Response, jsonify, request

from flask_authflow.testing._provider._dpop import DpopChecker
from flask_authflow.testing._provider._grants import GrantStore
from flask_authflow.testing._provider._http import error
from flask_authflow.testing._provider._issuer import IssuerNames


class UserinfoScript(Protocol):
    """What a test may change (``dpop_challenge_scheme``) and observe (``userinfo_requests``)."""

    dpop_challenge_scheme: str
    userinfo_requests: int


class UserinfoEndpoint:
    def __init__(
        self,
        grants: GrantStore,
        dpop: DpopChecker,
        names: IssuerNames,
        lock: threading.Lock,
        script: UserinfoScript,
    ) -> None:
        self._grants = grants
        self._dpop = dpop
        self._names = names
        self._lock = lock
        self._script = script

    def userinfo(self) -> Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip() if scheme.lower() in ("bearer", "dpop") else ""
        grant, bound = self._grants.access_grant(token)
        with self._lock:
            self._script.userinfo_requests += 1
        if grant is not None and (bound is not None or scheme.lower() == "dpop"):
            jkt, refused = self._dpop.check(request.method, self._names.endpoint("userinfo"), token)
            if refused is not None or jkt is None or jkt != bound:
                return self._dpop_refusal(refused or "invalid_token")
        if grant is None:
            resp = error(401, "invalid_token", "missing or unknown access token")
            resp.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
            return resp
        claims = dict(grant.claims)
        claims["sub"] = "someone-else" if "userinfo_wrong_sub" in grant.tamper else grant.sub
        return jsonify(claims)

    def _dpop_refusal(self, code: str) -> Response:
        resp = error(401, code, "DPoP proof refused")
        resp.headers["WWW-Authenticate"] = f'{self._script.dpop_challenge_scheme} error="{code}"'
        resp.headers["DPoP-Nonce"] = self._dpop.nonce
        return resp
