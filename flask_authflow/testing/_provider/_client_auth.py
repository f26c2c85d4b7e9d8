"""Client authentication at the token and PAR endpoints: ``client_secret_basic``,
``client_secret_post`` and ``private_key_jwt`` (RFC 7523), each client held to the method
it registered."""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol
from urllib.parse import unquote_plus

from flask import Response, request

from flask_authflow._clock import Clock
from flask_authflow.testing._provider._clients import ClientRegistry, RegisteredClient
from flask_authflow.testing._provider._http import error, invalid_client
from flask_authflow.testing._provider._issuer import IssuerNames

ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_ASSERTION_ALGS: Final = ("RS256", "PS256", "ES256", "ES384", "Ed25519", "EdDSA")
_ASSERTION_MAX_LIFETIME: Final = 60
#: The form fields that authenticate a client (PAR keeps the others as the pushed request).
CLIENT_AUTH_FIELDS: Final = frozenset({"client_secret", "client_assertion", "client_assertion_type"})

#: Authenticates the client of the current request (the provider's, which a subclass may replace).
Authenticate = Callable[[], RegisteredClient | Response]


class ClientAuthLog(Protocol):
    """What the provider lets a test observe of client authentication."""

    token_requests: list[str]
    client_assertions: list[dict[str, Any]]


class ClientAuthentication:
    """Authenticates the client of the current request: the :class:`RegisteredClient`, or the
    401 ``invalid_client`` (400 ``invalid_request`` for two methods at once) to answer."""

    def __init__(
        self,
        clients: ClientRegistry,
        names: IssuerNames,
        clock: Clock,
        lock: threading.Lock,
        seen_jtis: set[str],
        log: ClientAuthLog,
    ) -> None:
        self._clients = clients
        self._names = names
        self._clock = clock
        self._lock = lock
        self._seen_jtis = seen_jtis  # shared with DPoP proofs: a jti is used once
        self._log = log

    def authenticate(self) -> RegisteredClient | Response:
        if request.form.get("client_assertion_type") == ASSERTION_TYPE:
            return self._assertion_client()
        credentials = self._secret_credentials()
        if isinstance(credentials, Response):
            return credentials
        client_id, secret, method = credentials
        client = self._clients.get(client_id)
        with self._lock:
            self._log.token_requests.append(method)
        if client is None or not secrets.compare_digest(
            client.client_secret.encode("utf-8"), secret.encode("utf-8")
        ):
            return invalid_client()
        if client.token_endpoint_auth_method not in (None, method):
            return invalid_client()
        return client

    @staticmethod
    def _secret_credentials() -> tuple[str, str, str] | Response:
        """``(client_id, secret, method)`` from HTTP Basic or the form."""
        auth = request.headers.get("Authorization", "")
        if auth[:6].lower() != "basic ":
            client_id = request.form.get("client_id")
            secret = request.form.get("client_secret")
            if not client_id or secret is None:
                return invalid_client()
            return client_id, secret, "client_secret_post"
        try:
            decoded = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
            raw_id, sep, raw_secret = decoded.partition(":")
        except (ValueError, UnicodeDecodeError):
            return invalid_client()
        if not sep:
            return invalid_client()
        if "client_secret" in request.form:
            return error(400, "invalid_request", "one client authentication method only")
        client_id = unquote_plus(raw_id)
        if not client_id:
            return invalid_client()
        return client_id, unquote_plus(raw_secret), "client_secret_basic"

    def _assertion_client(self) -> RegisteredClient | Response:
        """``private_key_jwt``: signature by a key of the client's ``jwks``, ``iss`` = ``sub``
        = client id, ``aud`` the issuer (or, without ``fapi2``, the token or PAR endpoint),
        ``exp`` at most 60 s after ``iat`` and not past, a ``jti`` never seen before."""
        from joserfc import jwt
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        client = self._clients.get(request.form.get("client_id", ""))
        with self._lock:
            self._log.token_requests.append("private_key_jwt")
        if (
            client is None
            or not client.jwks
            or client.token_endpoint_auth_method not in (None, "private_key_jwt")
        ):
            return invalid_client()
        try:
            keys = KeySet.import_key_set({"keys": [dict(k) for k in client.jwks]})
            claims = dict(
                jwt.decode(
                    request.form.get("client_assertion", ""), keys, algorithms=list(_ASSERTION_ALGS)
                ).claims
            )
        except (JoseError, ValueError, TypeError):
            return invalid_client()
        fine = self._assertion_holds(client, claims)
        jti = claims.get("jti")
        with self._lock:
            self._log.client_assertions.append(claims)
            if not fine or jti in self._seen_jtis:
                return invalid_client()
            self._seen_jtis.add(str(jti))
        return client

    def _assertion_holds(self, client: RegisteredClient, claims: dict[str, Any]) -> bool:
        names = self._names
        audiences = (
            {names.iss} if client.fapi2 else {names.iss, names.endpoint("token"), names.endpoint("par")}
        )
        exp, iat, jti = claims.get("exp"), claims.get("iat"), claims.get("jti")
        return (
            claims.get("iss") == client.client_id == claims.get("sub")
            and claims.get("aud") in audiences
            and isinstance(exp, int)
            and isinstance(iat, int)
            and exp >= int(self._clock.now().timestamp())
            and 0 < exp - iat <= _ASSERTION_MAX_LIFETIME
            and isinstance(jti, str)
            and bool(jti)
        )
