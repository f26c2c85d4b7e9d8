"""DPoP (RFC 9449): proofs of possession for the token request and the app's resource calls.

A provider with ``dpop`` on signs a proof for every token request (the code exchange and
each refresh) with the client's DPoP key, taken from a key store (the issuer's
:class:`~flask_authflow.issuer._keystores.LocalIdpKeyStore` types fit: an ES256 or Ed25519 key,
rotated with the issuer's tooling). The authorize request (or the pushed one) carries
``dpop_jkt``, the key's RFC 7638 thumbprint, so the code is bound to the key from the start.

The key a login began with is the one its tokens stay bound to: the ceremony records its
``kid``, the stored tokens record it too, and a refresh or a resource call signs with that
key even after a rotation (historical keys stay in the store until their tokens are gone).

Every proof is built by joserfc (``typ`` ``dpop+jwt``, the public ``jwk`` in the header;
``jti``, ``htm``, ``htu``, ``iat``, and ``ath`` and ``nonce`` where they apply). A server
that answers ``use_dpop_nonce`` is asked again once with the nonce it gave; the latest
nonce of each server (by origin) is kept for the next proof.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import urlsplit, urlunsplit

import requests

from flask_authflow._clock import Clock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import OAuthError

__all__ = [
    "DPOP_ALGORITHMS",
    "BearerAuth",
    "ClientKey",
    "ClientKeyStore",
    "DpopAuth",
    "DpopKeyGone",
    "DpopNonces",
    "DpopSigner",
    "access_token_hash",
    "client_signing_key",
    "htu_of",
    "wants_nonce",
]

#: The DPoP proof algorithms we sign with (RFC 9449 asks for asymmetric ones; FAPI 2.0 for these).
DPOP_ALGORITHMS: Final = ("ES256", "Ed25519", "EdDSA")
#: The ``typ`` of a DPoP proof.
PROOF_TYPE: Final = "dpop+jwt"
_MAX_NONCE: Final = 512


class DpopKeyGone(OAuthError):
    """The DPoP key the provider tokens are bound to is no longer in the key store: sign in again."""

    code = "dpop_key_gone"
    status = 401


class ClientKey(Protocol):
    """One key of a key store (:class:`~flask_authflow.issuer.LocalIdpSigningKey` fits)."""

    @property
    def kid(self) -> str: ...

    @property
    def algorithm(self) -> str: ...

    def private_pem(self) -> bytes: ...


class _Loaded(Protocol):
    @property
    def current(self) -> ClientKey: ...

    @property
    def all_keys(self) -> tuple[ClientKey, ...]: ...


class ClientKeyStore(Protocol):
    """Where the client's own keys live (:class:`~flask_authflow.issuer._keystores.LocalIdpKeyStore` fits):
    the current key signs new things, older keys stay for what they are bound to."""

    def load_all(self) -> _Loaded: ...


def client_signing_key(key: ClientKey) -> tuple[Any, str]:
    """The joserfc key of ``key`` and the JWS algorithm it signs with (``Ed25519`` for an
    Ed25519 key, the RFC 9864 name; ``PS256`` for an RSA key configured so).

    :raises ConfigurationError: not a PEM private key joserfc can use.
    """
    from joserfc.jwk import ECKey, OKPKey, RSAKey

    algorithm = key.algorithm
    pem = key.private_pem()
    try:
        if algorithm in ("EdDSA", "Ed25519"):
            return OKPKey.import_key(pem), "Ed25519"
        if algorithm.startswith("ES"):
            return ECKey.import_key(pem), algorithm
        return RSAKey.import_key(pem), algorithm
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"key {key.kid!r} is not a usable private key ({exc})") from None


def access_token_hash(access_token: str) -> str:
    """``ath``: base64url of the SHA-256 of the access token (RFC 9449 §4.2)."""
    return b64url_encode(hashlib.sha256(access_token.encode("ascii")).digest())


def htu_of(url: str) -> str:
    """The ``htu`` of ``url``: without query and fragment (RFC 9449 §4.2)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class DpopNonces:
    """The latest ``DPoP-Nonce`` of each server (by origin): thread-safe, bounded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nonces: dict[str, str] = {}

    def get(self, url: str) -> str | None:
        with self._lock:
            return self._nonces.get(_origin(url))

    def remember(self, url: str, headers: Mapping[str, str]) -> str | None:
        """Keep the nonce of an answer of ``url`` (when it carries one); returns it."""
        nonce = headers.get("DPoP-Nonce") or headers.get("dpop-nonce")
        if not isinstance(nonce, str) or not nonce or len(nonce) > _MAX_NONCE or not nonce.isascii():
            return None
        with self._lock:
            if len(self._nonces) > 64:
                self._nonces.clear()
            self._nonces[_origin(url)] = nonce
        return nonce


def wants_nonce(status: int, headers: Mapping[str, str], body: Mapping[str, Any] | None) -> bool:
    """Whether an answer asks for a DPoP nonce: ``use_dpop_nonce`` in the token endpoint's
    400 body, or in the resource server's 401 ``WWW-Authenticate`` (RFC 9449 §8, §9)."""
    if status == 400 and body is not None:
        return body.get("error") == "use_dpop_nonce"
    if status == 401:
        challenge = headers.get("WWW-Authenticate") or headers.get("www-authenticate") or ""
        return "use_dpop_nonce" in challenge and challenge.lstrip().lower().startswith("dpop")
    return False


@dataclass(frozen=True)
class DpopSigner:
    """Signs DPoP proofs with the keys of a key store (see the module docstring)."""

    store: ClientKeyStore
    clock: Clock
    nonces: DpopNonces

    def current_kid(self) -> str:
        """The ``kid`` of the key new logins bind their tokens to."""
        return self.store.load_all().current.kid

    def _key(self, kid: str) -> tuple[Any, str]:
        for key in self.store.load_all().all_keys:
            if key.kid == kid:
                signing, algorithm = client_signing_key(key)
                if algorithm not in DPOP_ALGORITHMS:
                    raise ConfigurationError(
                        f"DPoP key {kid!r} signs {algorithm}: use an ES256 or Ed25519 key"
                    )
                return signing, algorithm
        raise DpopKeyGone(f"the DPoP key {kid[:64]!r} is no longer in the key store: sign in again")

    def thumbprint(self, kid: str) -> str:
        """``dpop_jkt``: the RFC 7638 thumbprint (SHA-256) of key ``kid``."""
        key, _alg = self._key(kid)
        return str(key.thumbprint())

    def proof(self, kid: str, method: str, url: str, *, access_token: str | None = None) -> str:
        """A fresh proof for one request (the latest nonce of ``url``'s server included)."""
        from joserfc import jws

        key, algorithm = self._key(kid)
        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(24),
            "htm": method.upper(),
            "htu": htu_of(url),
            "iat": int(self.clock.now().timestamp()),
        }
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        nonce = self.nonces.get(url)
        if nonce is not None:
            claims["nonce"] = nonce
        header = {"typ": PROOF_TYPE, "alg": algorithm, "jwk": key.as_dict(private=False)}
        payload = json.dumps(claims, separators=(",", ":")).encode("utf-8")
        return str(jws.serialize_compact(header, payload, key, algorithms=[algorithm]))


class BearerAuth(requests.auth.AuthBase):
    """``Authorization: Bearer <token>`` for the app's resource calls."""

    def __init__(self, access_token: str) -> None:
        self._token = access_token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._token}"
        return r

    def __repr__(self) -> str:
        return "<BearerAuth>"


class DpopAuth(requests.auth.AuthBase):
    """``Authorization: DPoP <token>`` plus a fresh ``DPoP`` proof (``ath`` included) for
    each of the app's resource calls; a ``use_dpop_nonce`` answer is retried once with the
    resource server's nonce, which is kept for the next call."""

    def __init__(self, signer: DpopSigner, kid: str, access_token: str) -> None:
        self._signer = signer
        self._kid = kid
        self._token = access_token

    def _sign(self, r: requests.PreparedRequest) -> None:
        url = str(r.url)
        r.headers["Authorization"] = f"DPoP {self._token}"
        r.headers["DPoP"] = self._signer.proof(self._kid, str(r.method), url, access_token=self._token)

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        self._sign(r)
        r.register_hook("response", self._answered)  # type: ignore[no-untyped-call]
        return r

    def _answered(self, response: requests.Response, **kwargs: Any) -> requests.Response:
        url = str(response.request.url)
        self._signer.nonces.remember(url, response.headers)
        if not wants_nonce(response.status_code, response.headers, None):
            return response
        # The adapter's send below runs no hooks: the retry is not retried again.
        response.content  # noqa: B018 - drain the body so the connection can be reused
        response.close()
        retry = response.request.copy()
        self._sign(retry)
        again: requests.Response = response.connection.send(retry, **kwargs)
        again.history.append(response)
        again.request = retry
        self._signer.nonces.remember(url, again.headers)
        return again

    def __repr__(self) -> str:
        return f"<DpopAuth kid={self._kid!r}>"
