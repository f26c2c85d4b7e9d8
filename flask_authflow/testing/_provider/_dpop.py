"""DPoP (RFC 9449): the proofs the token and userinfo endpoints check, and the server nonce."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from typing import Any, Final, Protocol

from flask import Response, request

from flask_authflow._clock import Clock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.testing._provider._http import error

DPOP_ALGS: Final = ("ES256", "Ed25519", "EdDSA")
_DPOP_MAX_AGE: Final = 60


class DpopScript(Protocol):
    """What a test may change (``require_dpop_nonce``) and observe (``dpop_proofs``)."""

    require_dpop_nonce: bool
    dpop_proofs: list[dict[str, Any]]


def _verified_proof(proof: str) -> tuple[dict[str, Any], str]:
    """The claims of a DPoP proof whose header (``typ`` ``dpop+jwt``, an allowed ``alg``, a
    public ``jwk``) and signature hold, and the key's RFC 7638 thumbprint (by joserfc)."""
    from joserfc import jws
    from joserfc.jwk import ECKey, OKPKey

    segment = proof.split(".")[0]
    head = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    jwk = head["jwk"]
    if head.get("typ") != "dpop+jwt" or head.get("alg") not in DPOP_ALGS or "d" in jwk:
        raise ValueError("not a DPoP proof header")
    key = ECKey.import_key(jwk) if jwk.get("kty") == "EC" else OKPKey.import_key(jwk)
    payload = jws.deserialize_compact(proof, key, algorithms=[head["alg"]]).payload
    claims = json.loads(payload)
    if not isinstance(claims, dict):
        raise ValueError("not a JSON object")
    return claims, str(key.thumbprint())


class DpopChecker:
    """Checks the ``DPoP`` header of the current request; guarded by the provider's lock."""

    def __init__(self, clock: Clock, lock: threading.Lock, seen_jtis: set[str], script: DpopScript) -> None:
        self._clock = clock
        self._lock = lock
        self._seen_jtis = seen_jtis  # shared with client assertions: a jti is used once
        self._script = script
        self._nonce = secrets.token_urlsafe(16)

    @property
    def nonce(self) -> str:
        return self._nonce

    def rotate_nonce(self) -> str:
        with self._lock:
            self._nonce = secrets.token_urlsafe(16)
            return self._nonce

    def check(self, htm: str, htu: str, access_token: str | None) -> tuple[str | None, str | None]:
        """``(jkt, None)`` for a valid DPoP proof, ``(None, None)`` without one, ``(None,
        error)`` for a bad one (``invalid_dpop_proof``, or ``use_dpop_nonce`` when
        ``require_dpop_nonce`` is on and the proof lacks the current nonce)."""
        proof = request.headers.get("DPoP")
        if proof is None:
            return None, None
        try:
            claims, jkt = _verified_proof(proof)
        except Exception:  # noqa: BLE001 - any malformed proof is a refused proof
            return None, "invalid_dpop_proof"
        error_code = None if self._claims_hold(claims, htm, htu, access_token) else "invalid_dpop_proof"
        jti = claims.get("jti")
        with self._lock:
            if error_code is None and jti in self._seen_jtis:
                error_code = "invalid_dpop_proof"  # replayed
            if error_code is None:
                self._seen_jtis.add(str(jti))
                if self._script.require_dpop_nonce and claims.get("nonce") != self._nonce:
                    error_code = "use_dpop_nonce"
            self._script.dpop_proofs.append({**claims, "jkt": jkt, "error": error_code})
        return (None, error_code) if error_code is not None else (jkt, None)

    def _claims_hold(self, claims: dict[str, Any], htm: str, htu: str, access_token: str | None) -> bool:
        iat, jti = claims.get("iat"), claims.get("jti")
        ath = None if access_token is None else b64url_encode(hashlib.sha256(access_token.encode()).digest())
        return (
            claims.get("htm") == htm
            and claims.get("htu") == htu
            and isinstance(iat, int)
            and abs(int(self._clock.now().timestamp()) - iat) <= _DPOP_MAX_AGE
            and isinstance(jti, str)
            and claims.get("ath") == ath
        )

    def refusal(self, error_code: str) -> Response:
        """400 ``error_code`` at the token endpoint, with the current nonce."""
        resp = error(400, error_code, "DPoP proof refused")
        resp.headers["DPoP-Nonce"] = self._nonce
        return resp
