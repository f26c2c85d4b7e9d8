"""The token endpoint: the authorization code (with PKCE) and refresh grants, DPoP-bound
tokens when the request carries a proof."""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from flask import Response, jsonify, request

from flask_authflow.testing._provider._client_auth import Authenticate
from flask_authflow.testing._provider._dpop import DpopChecker
from flask_authflow.testing._provider._grants import Grant, GrantStore, pkce_holds
from flask_authflow.testing._provider._http import error
from flask_authflow.testing._provider._issuer import IssuerNames
from flask_authflow.testing._provider._tokens import TokenMinter


class TokenScript(Protocol):
    """What a test may change about the token endpoint's answers."""

    token_answer_overrides: dict[str, Any]


class TokenEndpoint:
    def __init__(
        self,
        grants: GrantStore,
        minter: TokenMinter,
        dpop: DpopChecker,
        names: IssuerNames,
        lifetime: int,
        script: TokenScript,
    ) -> None:
        self._grants = grants
        self._minter = minter
        self._dpop = dpop
        self._names = names
        self._lifetime = lifetime
        self._script = script

    def token(self, authenticate: Authenticate) -> Response:
        client = authenticate()
        if isinstance(client, Response):
            return client
        jkt, dpop_error = self._dpop.check("POST", self._names.endpoint("token"), None)
        if dpop_error is not None or (client.dpop_bound and jkt is None):
            return self._dpop.refusal(dpop_error or "invalid_dpop_proof")
        grant_type = request.form.get("grant_type")
        if grant_type == "refresh_token":
            return self._refresh(client.client_id, jkt)
        if grant_type != "authorization_code":
            return error(400, "unsupported_grant_type", "authorization_code or refresh_token")
        return self._code(client.client_id, jkt)

    def _refresh(self, client_id: str, jkt: str | None) -> Response:
        grant, bound = self._grants.refresh_grant(request.form.get("refresh_token", ""))
        if grant is None or grant.client_id != client_id:
            return error(400, "invalid_grant", "unknown refresh token")
        if bound != jkt:
            return error(400, "invalid_grant", "the refresh token is bound to another DPoP key")
        return self._answer(grant, jkt)

    def _code(self, client_id: str, jkt: str | None) -> Response:
        grant = self._grants.redeem_code(request.form.get("code", ""))
        if grant is None:
            return error(400, "invalid_grant", "unknown, used or expired code")
        if grant.client_id != client_id:
            return error(400, "invalid_grant", "code issued to another client")
        if request.form.get("redirect_uri") != grant.redirect_uri:
            return error(400, "invalid_grant", "redirect_uri differs from the authorize request")
        if not pkce_holds(request.form.get("code_verifier", ""), grant.code_challenge):
            return error(400, "invalid_grant", "PKCE verification failed")
        if grant.dpop_jkt is not None and grant.dpop_jkt != jkt:
            return error(400, "invalid_grant", "dpop_jkt of the authorization request differs")
        return self._answer(grant, jkt)

    def _answer(self, grant: Grant, jkt: str | None) -> Response:
        """The tokens for ``grant`` (an ID token every time), bound to ``jkt`` when given."""
        access = secrets.token_urlsafe(32)
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "DPoP" if jkt is not None else "Bearer",
            "expires_in": self._lifetime,
            "scope": " ".join(grant.scope),
        }
        for name, value in self._script.token_answer_overrides.items():
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        body["id_token"] = self._minter.id_token(
            grant.client_id,
            grant.sub,
            nonce=grant.nonce,
            claims=grant.claims,
            sid=grant.sid,
            auth_time=grant.auth_time,
            tamper=grant.tamper,
            access_token=access,
        )
        refresh = self._grants.issue(grant, access, jkt)
        if refresh is not None:
            body["refresh_token"] = refresh
        resp = jsonify(body)
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["Pragma"] = "no-cache"
        return resp
