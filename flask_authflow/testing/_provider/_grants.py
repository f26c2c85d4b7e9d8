"""What the provider granted: authorization codes (with their PKCE challenge) and the access
and refresh tokens issued for them, each possibly bound to a DPoP key."""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from flask_authflow._core.encoding import b64url_encode

#: RFC 7636 §4.1: the verifier (and an S256 challenge) use only these characters.
PKCE_RE: Final = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


def pkce_holds(verifier: str, challenge: str) -> bool:
    """Whether ``verifier`` is well formed and its S256 hash is ``challenge``."""
    if PKCE_RE.fullmatch(verifier) is None:
        return False
    hashed = b64url_encode(hashlib.sha256(verifier.encode("ascii")).digest())
    return secrets.compare_digest(hashed.encode("ascii"), challenge.encode("ascii"))


@dataclass(slots=True)
class Grant:
    """One consent: to whom, for what, and how the code it was issued as is redeemed."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    nonce: str | None
    scope: tuple[str, ...]
    sub: str
    claims: dict[str, Any]
    sid: str
    auth_time: int
    expires_at: float
    tamper: frozenset[str] = field(default_factory=frozenset)
    dpop_jkt: str | None = None


class GrantStore:
    """Codes, access and refresh tokens, and the DPoP key each token is bound to; guarded by
    the provider's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._codes: dict[str, Grant] = {}
        self._access_tokens: dict[str, Grant] = {}
        self._refresh_tokens: dict[str, Grant] = {}
        self._bindings: dict[str, str] = {}

    def new_code(self, grant: Grant) -> str:
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._codes[code] = grant
        return code

    def redeem_code(self, code: str) -> Grant | None:
        """The grant of ``code``, once (a used or expired code is ``None``)."""
        with self._lock:
            grant = self._codes.pop(code, None)  # single use
        return None if grant is None or grant.expires_at < time.monotonic() else grant

    def refresh_grant(self, refresh_token: str) -> tuple[Grant | None, str | None]:
        """The grant of ``refresh_token`` and the thumbprint of the DPoP key it is bound to."""
        with self._lock:
            return self._refresh_tokens.get(refresh_token), self._bindings.get(refresh_token)

    def access_grant(self, access_token: str) -> tuple[Grant | None, str | None]:
        """The grant of ``access_token`` and the thumbprint of the DPoP key it is bound to."""
        if not access_token:
            return None, None
        with self._lock:
            return self._access_tokens.get(access_token), self._bindings.get(access_token)

    def issue(self, grant: Grant, access: str, jkt: str | None) -> str | None:
        """Record ``access`` for ``grant`` (bound to ``jkt``); a new refresh token when the scope
        has ``offline_access``, else ``None``."""
        with self._lock:
            self._access_tokens[access] = grant
            if jkt is not None:
                self._bindings[access] = jkt
            if "offline_access" not in grant.scope:
                return None
            refresh = secrets.token_urlsafe(32)
            self._refresh_tokens[refresh] = grant
            if jkt is not None:
                self._bindings[refresh] = jkt
            return refresh
