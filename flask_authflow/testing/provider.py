"""An in-process OpenID Connect provider for tests (no network, no real provider).

:class:`TestOpenIDProvider` is a small Flask app that answers like an OpenID
provider: discovery, ``/authorize`` (automatic consent for the subject chosen with
:meth:`~TestOpenIDProvider.login_as`), ``/token``, ``/jwks``, ``/userinfo`` and
``/end_session``. It can rotate its signing key, send a back-channel logout token
to your app, and produce faulty tokens on purpose (:data:`Tamper`) for negative
tests. It is scriptable to emulate what real providers and certification suites do:
keys published without ``alg`` (``publish_alg``), discovery members and headers changed
(``discovery_overrides``, ``discovery_cache_control``), an issuer ending in ``/``
(``trailing_slash=True``), a client held to one ``token_endpoint_auth_method``, the
``state`` it returns after logout (``logout_state``), and keys
for RS/PS 256/384/512, ES256/384/512, EdDSA and ``Ed25519``. Mount
:meth:`~TestOpenIDProvider.requests_adapter` on a ``requests`` session (or pass it to
the federation ``HttpClient``) to reach it in-process::

    provider = TestOpenIDProvider()
    provider.register_client("app", "secret", ["https://app.test/auth/callback/op"])
    provider.login_as("alice", email="alice@example.com", email_verified=True)
    session = requests.Session()
    session.mount(provider.base_url, provider.requests_adapter())

Tokens are signed with :class:`~flask_authflow.issuer.keys.LocalIdpSigningKey`
(the library's own signing path); nothing here is meant for production.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, get_args
from urllib.parse import parse_qsl, unquote_plus, urlencode, urlsplit, urlunsplit

from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from flask import Flask, Response, jsonify, request
from flask.testing import FlaskClient

from flask_authflow.clock import Clock, SystemClock
from flask_authflow.errors import ConfigurationError, SigningKeyError, TokenVerificationError
from flask_authflow.issuer.keys import LocalIdpSigningKey
from flask_authflow.jose import JwksHandle, JwtVerifier, b64url_encode, parse_public_jwk
from flask_authflow.jose.keys import jwk_thumbprint, public_jwk

if TYPE_CHECKING:
    import requests
    import requests.adapters

__all__ = [
    "BACKCHANNEL_LOGOUT_EVENT",
    "BackchannelLogoutResult",
    "RegisteredClient",
    "Tamper",
    "TestOpenIDProvider",
]

BACKCHANNEL_LOGOUT_EVENT: Final = "http://schemas.openid.net/event/backchannel-logout"

#: Ways to spoil the next token on purpose (negative tests of a relying party).
Tamper = Literal[
    "wrong_iss",  # iss of another issuer
    "iss_trailing_slash",  # iss + "/"
    "iss_case",  # iss with the host upper-cased
    "wrong_aud",  # aud without the client id
    "aud_array_no_azp",  # aud = [client, other], no azp
    "wrong_azp",  # aud = [client, other], azp = other
    "wrong_nonce",  # nonce that the RP did not send
    "no_nonce",  # nonce left out
    "expired",  # exp one hour in the past
    "old_iat",  # iat (and auth_time) one day in the past
    "alg_none",  # unsigned, alg "none"
    "hs256_public_key",  # HS256 keyed with the provider's public key PEM (key confusion)
    "missing_kid",  # no kid in the header
    "unknown_kid",  # a kid the JWKS does not have
    "bad_signature",  # signature of other bytes
    "no_sub",  # sub left out
    "logout_nonce",  # logout token carrying a nonce (forbidden)
    "logout_no_events",  # logout token without events
    "logout_wrong_event",  # logout token with another event
    "logout_no_sub_sid",  # logout token with neither sub nor sid
    "logout_oversize",  # logout token larger than 8 KiB
    "logout_typ_jwt",  # logout token with typ "JWT" instead of "logout+jwt"
    "userinfo_wrong_sub",  # userinfo answering another sub
    "no_iat",  # iat left out
    "wrong_at_hash",  # at_hash of another access token
    "wrong_alg",  # signed with a published key of another algorithm (ES256, or RS256 for an EC key)
    "no_iss_in_response",  # the authorization response without iss (RFC 9207)
    "no_exp",  # exp left out
    "no_aud",  # aud left out
    "no_iss",  # iss left out
    "aud_as_array",  # aud = [client] (valid: a one-element array)
    "wrong_iss_in_response",  # the authorization response naming another issuer
]
_TAMPERS: Final = frozenset(get_args(Tamper))

_SIGNING_TAMPERS: Final = frozenset(
    {"alg_none", "hs256_public_key", "missing_kid", "unknown_kid", "bad_signature", "wrong_alg"}
)
#: What :attr:`TestOpenIDProvider.logout_state` may say about the ``state`` sent back after logout.
LogoutState = Literal["echo", "other", "omit"]
_RSA_BITS: Final = 2048  # fast to generate; a test provider only
_TOKEN_LIFETIME: Final = 300
_CODE_LIFETIME: Final = 60
#: PAR, client assertions and DPoP (RFC 9126, RFC 7523, RFC 9449).
_PAR_LIFETIME: Final = 60
_ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_ASSERTION_ALGS: Final = ("RS256", "PS256", "ES256", "ES384", "Ed25519", "EdDSA")
_ASSERTION_MAX_LIFETIME: Final = 60
_DPOP_ALGS: Final = ("ES256", "Ed25519", "EdDSA")
_DPOP_MAX_AGE: Final = 60
_CLIENT_AUTH_FIELDS: Final = frozenset({"client_secret", "client_assertion", "client_assertion_type"})


class _P521Key:
    """An ES512 signing key (P-521); the library signs no ES512 itself, the test provider does."""

    algorithm = "ES512"

    def __init__(self) -> None:
        self._private = ec.generate_private_key(ec.SECP521R1())
        self.kid = jwk_thumbprint(self._private)

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._private.public_key()

    def public_jwk(self) -> dict[str, Any]:
        return public_jwk(self._private.public_key(), kid=self.kid, alg=self.algorithm)

    def sign(self, signing_input: bytes) -> bytes:
        r, s = decode_dss_signature(self._private.sign(signing_input, ec.ECDSA(hashes.SHA512())))
        return r.to_bytes(66, "big") + s.to_bytes(66, "big")


class _Ed25519Named:
    """An EdDSA key that signs and publishes under the fully specified name ``Ed25519``."""

    algorithm = "Ed25519"

    def __init__(self) -> None:
        self._inner = LocalIdpSigningKey.generate_ed25519()
        self.kid = self._inner.kid

    def public_key(self) -> Any:
        return self._inner.public_key()

    def public_jwk(self) -> dict[str, Any]:
        return {**self._inner.public_jwk(), "alg": self.algorithm}

    def sign(self, signing_input: bytes) -> bytes:
        return self._inner.sign(signing_input)


_SigningKey = LocalIdpSigningKey | _P521Key | _Ed25519Named


def _new_key(algorithm: str) -> _SigningKey:
    if algorithm == "ES512":
        return _P521Key()
    if algorithm == "Ed25519":
        return _Ed25519Named()
    try:
        return LocalIdpSigningKey.generate(algorithm, rsa_bits=_RSA_BITS)
    except SigningKeyError as exc:
        raise ConfigurationError(f"the test provider cannot sign with {algorithm!r}") from exc


def _s256(verifier: str) -> str:
    return b64url_encode(hashlib.sha256(verifier.encode("ascii")).digest())


#: RFC 7636 §4.1: the verifier (and an S256 challenge) use only these characters.
_PKCE_RE: Final = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


@dataclass(frozen=True, slots=True)
class RegisteredClient:
    """A client (relying party) the provider knows."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    post_logout_redirect_uris: tuple[str, ...] = ()
    backchannel_logout_uri: str | None = None
    #: The one method the token endpoint accepts from this client (``None``: basic or post).
    token_endpoint_auth_method: str | None = None
    #: The public keys of ``private_key_jwt`` assertions (JWKs).
    jwks: tuple[Mapping[str, Any], ...] = ()
    #: Authorize refuses requests that were not pushed first (RFC 9126).
    require_par: bool = False
    #: The token endpoint refuses requests without a DPoP proof (RFC 9449).
    dpop_bound: bool = False
    #: FAPI 2.0: client assertions must name the issuer as ``aud``, and nothing else.
    fapi2: bool = False


@dataclass(frozen=True, slots=True)
class BackchannelLogoutResult:
    """What the app answered to a back-channel logout POST, and the token sent."""

    status_code: int
    body: str
    headers: Mapping[str, str]
    logout_token: str


@dataclass(slots=True)
class _Grant:
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


class TestOpenIDProvider:
    """An OpenID provider served in-process; ``TestOpenIDProvider()`` answers at ``https://op.test``.

    ``algorithm`` picks the ID-token signing algorithm (``RS256`` default, ``ES256``,
    ``PS256``, ``ES512``, ``EdDSA``, ``Ed25519``...). ``trailing_slash=True`` names the
    issuer with a terminating ``/`` (``https://op.test/``) while the discovery document
    stays at ``https://op.test/.well-known/openid-configuration``, as OpenID Connect
    Discovery maps it. All state lives in memory and is guarded by one lock.

    Scriptable attributes (set them at any time):

    * ``publish_alg`` (``True``): ``False`` publishes the keys without ``alg``;
    * ``discovery_overrides`` (``{}``): members merged into the discovery document
      (a value of ``None`` removes the member);
    * ``discovery_cache_control`` (``None``): the discovery answer's ``Cache-Control``;
    * ``logout_state`` (``"echo"``): the ``state`` sent back after RP-initiated logout:
      the one received, ``"other"`` (a random one) or ``"omit"``;
    * ``token_issuer`` (``None``): the ``iss`` of the tokens issued, when it differs from
      the discovery issuer (a multi-tenant endpoint whose discovery names the template
      ``https://login.microsoftonline.com/{tenantid}/v2.0`` issues each tenant's own).

    * ``require_dpop_nonce`` (``False``): the token endpoint and userinfo answer
      ``use_dpop_nonce`` (with a ``DPoP-Nonce``) to proofs without the current nonce
      (:meth:`rotate_dpop_nonce` makes a new one);
    * ``par_answer`` (``None``): the next answer of the PAR endpoint, ``(status, body)``;
    * ``token_answer_overrides`` (``{}``): members merged into the token endpoint's answers
      (a value of ``None`` removes the member: ``{"expires_in": None}``);
    * ``dpop_challenge_scheme`` (``"DPoP"``): the scheme of userinfo's ``WWW-Authenticate``
      DPoP challenge (``"dpop"``: another case, which clients must accept).

    Observable: ``token_requests`` (the client authentication method of each token
    request: ``client_secret_basic``, ``client_secret_post`` or ``private_key_jwt``),
    ``userinfo_requests`` and ``discovery_requests`` (counts), ``par_requests`` (the pushed
    parameters), ``client_assertions`` (their claims) and ``dpop_proofs`` (each proof's
    claims with its key's ``jkt`` and the ``error`` it was refused with, or ``None``).

    PAR (``/par``), ``private_key_jwt`` (a client registered with ``jwks``) and DPoP
    (proofs checked for ``typ``, signature, ``htm``, ``htu``, ``iat``, unique ``jti``,
    ``ath``, nonce; tokens bound to the key's thumbprint, ``dpop_jkt`` honoured) are
    supported for FAPI 2.0 tests.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(
        self,
        issuer: str = "https://op.test",
        *,
        algorithm: str = "RS256",
        clock: Clock | None = None,
        token_lifetime: int = _TOKEN_LIFETIME,
        trailing_slash: bool = False,
    ) -> None:
        parts = urlsplit(issuer)
        if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
            raise ConfigurationError("the issuer must be an absolute http(s) URL without query or fragment")
        self._issuer = (
            issuer.rstrip("/") if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}"
        )
        self._prefix = urlsplit(self._issuer).path
        self._iss = self._issuer + "/" if trailing_slash else self._issuer
        self.publish_alg = True
        self.discovery_overrides: dict[str, Any] = {}
        self.discovery_cache_control: str | None = None
        self.logout_state: LogoutState = "echo"
        self.token_issuer: str | None = None
        self.token_requests: list[str] = []
        self.userinfo_requests = 0
        self.discovery_requests = 0
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._token_lifetime = token_lifetime
        self._lock = threading.Lock()
        self._key = _new_key(algorithm)
        self._published: list[_SigningKey] = [self._key]
        self._clients: dict[str, RegisteredClient] = {}
        self._codes: dict[str, _Grant] = {}
        self._access_tokens: dict[str, _Grant] = {}
        self._refresh_tokens: dict[str, _Grant] = {}
        self._subject: tuple[str, dict[str, Any]] | None = None
        self._next_tamper: frozenset[str] = frozenset()
        self._sid = secrets.token_urlsafe(16)
        self.end_session_requests: list[dict[str, str]] = []
        #: PAR and DPoP (RFC 9126, RFC 9449), scriptable and observable.
        self.require_dpop_nonce = False
        self.token_answer_overrides: dict[str, Any] = {}
        self.dpop_challenge_scheme = "DPoP"
        self.par_answer: tuple[int, dict[str, Any]] | None = None
        self.par_requests: list[dict[str, str]] = []
        self.dpop_proofs: list[dict[str, Any]] = []
        self.client_assertions: list[dict[str, Any]] = []
        self._dpop_nonce = secrets.token_urlsafe(16)
        self._seen_jtis: set[str] = set()
        self._pushed: dict[str, tuple[dict[str, str], float]] = {}
        self._token_bindings: dict[str, str] = {}
        self.app = self._build_app()

    # -- set-up ------------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        """The issuer as the provider names it (with the final ``/`` of ``trailing_slash``)."""
        return self._iss

    @property
    def base_url(self) -> str:
        """Where to mount :meth:`requests_adapter` (scheme and host, with a trailing slash)."""
        parts = urlsplit(self._issuer)
        return f"{parts.scheme}://{parts.netloc}/"

    @property
    def discovery_url(self) -> str:
        return f"{self._issuer}/.well-known/openid-configuration"

    @property
    def current_kid(self) -> str:
        return self._key.kid

    @property
    def algorithm(self) -> str:
        return self._key.algorithm

    @property
    def session_id(self) -> str:
        """The ``sid`` of the provider's current browser session (put into ID tokens)."""
        return self._sid

    def register_client(
        self,
        client_id: str,
        client_secret: str,
        redirect_uris: Iterable[str],
        *,
        post_logout_redirect_uris: Iterable[str] = (),
        backchannel_logout_uri: str | None = None,
        token_endpoint_auth_method: str | None = None,
        jwks: Iterable[Mapping[str, Any]] = (),
        require_par: bool = False,
        dpop_bound: bool = False,
        fapi2: bool = False,
    ) -> RegisteredClient:
        """Register (or replace) a client; redirect URIs are matched exactly.

        ``token_endpoint_auth_method`` (``client_secret_basic``, ``client_secret_post`` or
        ``private_key_jwt``) makes the token endpoint refuse the other methods with
        ``invalid_client``. ``jwks``: the public keys of its ``private_key_jwt`` assertions
        (its secret may then be empty). ``require_par``, ``dpop_bound`` and ``fapi2`` (aud
        of assertions exactly the issuer) hold it to PAR, DPoP and FAPI 2.0.
        """
        keys = tuple(dict(k) for k in jwks)
        if not client_id or (not client_secret and not keys):
            raise ConfigurationError("a client needs a client_id and a client_secret (or jwks)")
        uris = tuple(redirect_uris)
        if not uris or isinstance(redirect_uris, str):
            raise ConfigurationError("redirect_uris must be a non-empty list of URLs")
        client = RegisteredClient(
            client_id,
            client_secret,
            uris,
            tuple(post_logout_redirect_uris),
            backchannel_logout_uri,
            token_endpoint_auth_method,
            keys,
            require_par,
            dpop_bound,
            fapi2,
        )
        with self._lock:
            self._clients[client_id] = client
        return client

    def login_as(self, sub: str, **claims: Any) -> None:
        """Sign in ``sub`` with ``claims`` at the provider: the following authorize requests consent for them.

        A new login starts a new provider session (a new ``sid``).
        """
        if not isinstance(sub, str) or not sub:
            raise ConfigurationError("sub must be a non-empty string")
        with self._lock:
            self._subject = (sub, dict(claims))
            self._sid = secrets.token_urlsafe(16)

    def logout(self) -> None:
        """End the provider session: authorize answers ``error=login_required`` until :meth:`login_as`."""
        with self._lock:
            self._subject = None

    def tamper_next(self, *tamper: Tamper) -> None:
        """Spoil the tokens (ID token, userinfo) of the next authorization code issued."""
        unknown = sorted(set(tamper) - _TAMPERS)
        if unknown:
            raise ConfigurationError(f"unknown tamper options {unknown!r}")
        with self._lock:
            self._next_tamper = frozenset(tamper)

    def rotate_dpop_nonce(self) -> str:
        """A new DPoP nonce (RFC 9449 §8, §9): proofs carrying the old one are answered
        ``use_dpop_nonce`` while :attr:`require_dpop_nonce` is on. Returns the new nonce."""
        with self._lock:
            self._dpop_nonce = secrets.token_urlsafe(16)
            return self._dpop_nonce

    def rotate_key(self, algorithm: str | None = None, *, keep_old: bool = True) -> str:
        """Sign with a fresh key from now on; the old one stays in the JWKS unless ``keep_old=False``.

        Returns the new ``kid``.
        """
        new = _new_key(algorithm if algorithm is not None else self._key.algorithm)
        with self._lock:
            self._published = [*self._published, new] if keep_old else [new]
            self._key = new
        return new.kid

    # -- tokens ------------------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            keys = [key.public_jwk() for key in self._published]
        if not self.publish_alg:
            keys = [{k: v for k, v in key.items() if k != "alg"} for key in keys]
        return {"keys": keys}

    def verifier(self) -> JwtVerifier:
        """A :class:`JwtVerifier` over a JWKS snapshot; allows RS256, ES256 and the keys' algorithms."""
        jwks = self.jwks()
        handle = JwksHandle()
        handle.replace_keys(parse_public_jwk(jwk) for jwk in jwks["keys"])
        with self._lock:
            algs = sorted({"RS256", "ES256"} | {key.algorithm for key in self._published})
        return JwtVerifier(handle, clock=self._clock).with_algorithms(algs)

    def _auth_methods(self) -> list[str]:
        """The client authentication methods: ``private_key_jwt`` once a client has ``jwks``."""
        with self._lock:
            keyed = any(client.jwks for client in self._clients.values())
        return ["client_secret_basic", "client_secret_post", *(["private_key_jwt"] if keyed else [])]

    def discovery_document(self) -> dict[str, Any]:
        iss = self._issuer
        document = {
            "issuer": self._iss,
            "authorization_endpoint": f"{iss}/authorize",
            "token_endpoint": f"{iss}/token",
            "jwks_uri": f"{iss}/jwks",
            "userinfo_endpoint": f"{iss}/userinfo",
            "end_session_endpoint": f"{iss}/end_session",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
            "token_endpoint_auth_methods_supported": self._auth_methods(),
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "sid", "email"],
            "backchannel_logout_supported": True,
            "backchannel_logout_session_supported": True,
            "frontchannel_logout_supported": False,
            "authorization_response_iss_parameter_supported": True,
            "pushed_authorization_request_endpoint": f"{iss}/par",
            "require_pushed_authorization_requests": False,
            "dpop_signing_alg_values_supported": list(_DPOP_ALGS),
        }
        for name, value in self.discovery_overrides.items():
            if value is None:
                document.pop(name, None)
            else:
                document[name] = value
        return document

    def sign(
        self,
        claims: Mapping[str, Any],
        *,
        typ: str = "JWT",
        tamper: Iterable[Tamper] = (),
        header: Mapping[str, Any] | None = None,
    ) -> str:
        """Sign ``claims`` as a compact JWS with the current key, spoiled as ``tamper`` says."""
        bad = frozenset(tamper)
        key = self._other_algorithm_key() if "wrong_alg" in bad else self._key
        head: dict[str, Any] = {"alg": key.algorithm, "kid": key.kid, "typ": typ}
        if "missing_kid" in bad:
            del head["kid"]
        if "unknown_kid" in bad:
            head["kid"] = "unknown-" + secrets.token_hex(6)
        if "alg_none" in bad:
            head = {"alg": "none", "typ": typ}
        elif "hs256_public_key" in bad:
            head["alg"] = "HS256"
        if header:
            head.update(header)
        signing_input = (
            b64url_encode(json.dumps(head, separators=(",", ":")).encode())
            + "."
            + b64url_encode(json.dumps(dict(claims), separators=(",", ":")).encode())
        ).encode("ascii")
        if "alg_none" in bad:
            return signing_input.decode("ascii") + "."
        if "hs256_public_key" in bad:
            pem = key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            mac = hmac.HMAC(pem, hashes.SHA256())
            mac.update(signing_input)
            signature = mac.finalize()
        elif "bad_signature" in bad:
            signature = key.sign(signing_input + b"x")
        else:
            signature = key.sign(signing_input)
        return signing_input.decode("ascii") + "." + b64url_encode(signature)

    def _other_algorithm_key(self) -> _SigningKey:
        """A published key of another algorithm family than the current one (made when missing)."""
        wanted = "RS256" if self._key.algorithm.startswith("ES") else "ES256"
        with self._lock:
            for key in self._published:
                if key.algorithm == wanted:
                    return key
        other = _new_key(wanted)
        with self._lock:
            self._published.append(other)
        return other

    def _now(self) -> int:
        return int(self._clock.now().timestamp())

    def _issuer_claim(self, bad: frozenset[str]) -> str:
        if self.token_issuer is not None and not bad & {"wrong_iss", "iss_trailing_slash", "iss_case"}:
            return self.token_issuer
        if "wrong_iss" in bad:
            return "https://evil.test"
        if "iss_trailing_slash" in bad:
            return self._iss + "/"
        if "iss_case" in bad:
            parts = urlsplit(self._iss)
            return urlunsplit((parts.scheme, parts.netloc.upper(), parts.path, "", ""))
        return self._iss

    def at_hash(self, access_token: str) -> str:
        """The ``at_hash`` of ``access_token`` for the current algorithm (left half of its hash)."""
        alg = self._key.algorithm
        name = "sha512" if alg in ("EdDSA", "Ed25519") else f"sha{alg[-3:]}"
        digest = hashlib.new(name, access_token.encode("ascii")).digest()
        return b64url_encode(digest[: len(digest) // 2])

    def id_token(
        self,
        client_id: str,
        sub: str,
        *,
        nonce: str | None = None,
        claims: Mapping[str, Any] | None = None,
        sid: str | None = None,
        auth_time: int | None = None,
        tamper: Iterable[Tamper] = (),
        access_token: str | None = None,
    ) -> str:
        """An ID token for ``client_id`` (used by ``/token``; call it directly for negative tests).

        With ``access_token`` it carries that token's ``at_hash``.
        """
        bad = frozenset(tamper)
        now = self._now()
        iat = now - 86400 if "old_iat" in bad else now
        payload: dict[str, Any] = dict(claims or {})
        payload.update(
            {
                "iss": self._issuer_claim(bad),
                "sub": sub,
                "aud": client_id,
                "iat": iat,
                "exp": now - 3600 if "expired" in bad else now + self._token_lifetime,
                "auth_time": auth_time if auth_time is not None and "old_iat" not in bad else iat,
                "sid": sid if sid is not None else self._sid,
            }
        )
        if "wrong_aud" in bad:
            payload["aud"] = "another-client"
        elif "aud_array_no_azp" in bad:
            payload["aud"] = [client_id, "another-client"]
        elif "wrong_azp" in bad:
            payload["aud"] = [client_id, "another-client"]
            payload["azp"] = "another-client"
        elif "aud_as_array" in bad:
            payload["aud"] = [client_id]
        for name in ("sub", "iat", "exp", "aud", "iss"):
            if f"no_{name}" in bad:
                del payload[name]
        if access_token is not None:
            payload["at_hash"] = self.at_hash(
                "another" + access_token if "wrong_at_hash" in bad else access_token
            )
        if "wrong_nonce" in bad:
            payload["nonce"] = secrets.token_urlsafe(16)
        elif nonce is not None and "no_nonce" not in bad:
            payload["nonce"] = nonce
        return self.sign(payload, tamper=bad & _SIGNING_TAMPERS)

    def logout_token(
        self,
        client_id: str,
        *,
        sub: str | None = None,
        sid: str | None = None,
        tamper: Iterable[Tamper] = (),
    ) -> str:
        """A back-channel logout token (typ ``logout+jwt``) for ``client_id``, naming ``sub``/``sid``."""
        bad = frozenset(tamper)
        if sub is None and sid is None and "logout_no_sub_sid" not in bad:
            raise ConfigurationError("a logout token names a sub, a sid or both")
        now = self._now()
        iat = now - 86400 if "old_iat" in bad else now
        payload: dict[str, Any] = {
            "iss": self._issuer_claim(bad),
            "aud": "another-client" if "wrong_aud" in bad else client_id,
            "iat": iat,
            "exp": now - 3600 if "expired" in bad else now + 120,
            "jti": secrets.token_urlsafe(16),
            "events": {BACKCHANNEL_LOGOUT_EVENT: {}},
        }
        if "logout_no_sub_sid" not in bad:
            if sub is not None:
                payload["sub"] = sub
            if sid is not None:
                payload["sid"] = sid
        if "logout_nonce" in bad:
            payload["nonce"] = secrets.token_urlsafe(8)
        if "logout_no_events" in bad:
            del payload["events"]
        elif "logout_wrong_event" in bad:
            payload["events"] = {"http://schemas.openid.net/event/other": {}}
        if "logout_oversize" in bad:
            payload["padding"] = "x" * 9000
        typ = "JWT" if "logout_typ_jwt" in bad else "logout+jwt"
        return self.sign(payload, typ=typ, tamper=bad & _SIGNING_TAMPERS)

    def send_backchannel_logout(
        self,
        target: FlaskClient | str | None = None,
        *,
        client_id: str | None = None,
        sub: str | None = None,
        sid: str | None = None,
        tamper: Iterable[Tamper] = (),
        logout_token: str | None = None,
        session: requests.Session | None = None,
    ) -> BackchannelLogoutResult:
        """POST a logout token to the client's ``backchannel_logout_uri``.

        ``target`` is a Flask test client of the app (the POST goes to the path of the
        registered URI), a URL (posted with ``requests``, or ``session`` when given), or
        ``None`` for the registered URI through ``requests``. ``client_id`` may be left
        out when exactly one client is registered. ``logout_token`` overrides the token.
        """
        client = self._client_for(client_id)
        token = (
            logout_token
            if logout_token is not None
            else self.logout_token(client.client_id, sub=sub, sid=sid, tamper=tamper)
        )
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
        import requests as requests_module  # optional dependency: only needed here

        poster = session if session is not None else requests_module.Session()
        answer = poster.post(url, data=body, timeout=10, allow_redirects=False)
        return BackchannelLogoutResult(answer.status_code, answer.text, dict(answer.headers), token)

    def client(self, client_id: str | None = None) -> RegisteredClient:
        """A registered client (``client_id`` may be left out when there is exactly one)."""
        return self._client_for(client_id)

    def _client_for(self, client_id: str | None) -> RegisteredClient:
        with self._lock:
            if client_id is None:
                if len(self._clients) != 1:
                    raise ConfigurationError("name the client_id: the provider has several (or no) clients")
                return next(iter(self._clients.values()))
            client = self._clients.get(client_id)
        if client is None:
            raise ConfigurationError(f"unknown client {client_id!r}")
        return client

    # -- HTTP --------------------------------------------------------------------------------------

    def requests_adapter(self) -> requests.adapters.BaseAdapter:
        """A ``requests`` adapter serving this provider in-process (mount it on :attr:`base_url`)."""
        return _make_wsgi_adapter(self.app)

    def http_adapters(self) -> dict[str, requests.adapters.BaseAdapter]:
        """``{base_url: adapter}``: what an ``HttpClient(adapters=...)`` or ``Session.mount`` needs."""
        return {self.base_url: self.requests_adapter()}

    def _build_app(self) -> Flask:
        app = Flask(f"{__name__}.{id(self)}")
        prefix = self._prefix
        app.add_url_rule(f"{prefix}/.well-known/openid-configuration", "discovery", self._discovery)
        app.add_url_rule(f"{prefix}/authorize", "authorize", self._authorize, methods=["GET"])
        app.add_url_rule(f"{prefix}/token", "token", self._token, methods=["POST"])
        app.add_url_rule(f"{prefix}/par", "par", self._par, methods=["POST"])
        app.add_url_rule(f"{prefix}/jwks", "jwks", self._jwks_view)
        app.add_url_rule(f"{prefix}/userinfo", "userinfo", self._userinfo, methods=["GET", "POST"])
        app.add_url_rule(f"{prefix}/end_session", "end_session", self._end_session, methods=["GET", "POST"])
        return app

    def _discovery(self) -> Response:
        with self._lock:
            self.discovery_requests += 1
        resp = jsonify(self.discovery_document())
        if self.discovery_cache_control is not None:
            resp.headers["Cache-Control"] = self.discovery_cache_control
        return resp

    def _jwks_view(self) -> Response:
        resp = jsonify(self.jwks())
        resp.headers["Cache-Control"] = "max-age=0"
        return resp

    @staticmethod
    def _error(status: int, error: str, description: str) -> Response:
        resp = jsonify({"error": error, "error_description": description})
        resp.status_code = status
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def _authorize_args(self) -> dict[str, str] | Response:
        """The authorize request's parameters: the query, or the pushed request it names."""
        query = request.args
        request_uri = query.get("request_uri")
        if request_uri is None:
            with self._lock:
                client = self._clients.get(query.get("client_id", ""))
            if client is not None and client.require_par:
                return self._error(400, "invalid_request", "this client must push its requests (PAR)")
            return dict(query.items())
        with self._lock:
            pushed = self._pushed.pop(request_uri, None)  # single use
        if (
            pushed is None
            or pushed[1] < time.monotonic()
            or pushed[0].get("client_id") != query.get("client_id")
        ):
            return self._error(400, "invalid_request_uri", "unknown, used or expired request_uri")
        return pushed[0]

    def _authorize(self) -> Response:
        args = self._authorize_args()
        if isinstance(args, Response):
            return args
        client_id = args.get("client_id", "")
        redirect_uri = args.get("redirect_uri", "")
        with self._lock:
            client = self._clients.get(client_id)
        if client is None:
            return self._error(400, "invalid_client", "unknown client_id")
        if redirect_uri not in client.redirect_uris:
            # Never redirect to an unregistered URI (open redirect).
            return self._error(400, "invalid_request", "redirect_uri is not registered for this client")
        state = args.get("state")
        with self._lock:
            iss_tamper = self._next_tamper

        def back(**params: str) -> Response:
            query = dict(params)
            if state is not None:
                query["state"] = state
            if "no_iss_in_response" not in iss_tamper:
                query["iss"] = "https://other.test" if "wrong_iss_in_response" in iss_tamper else self._iss
            sep = "&" if urlsplit(redirect_uri).query else "?"
            return _redirect(redirect_uri + sep + urlencode(query))

        if args.get("response_type") != "code":
            return back(error="unsupported_response_type", error_description="only response_type=code")
        scope = tuple(args.get("scope", "").split())
        if "openid" not in scope:
            return back(error="invalid_scope", error_description="scope must include openid")
        challenge = args.get("code_challenge", "")
        if args.get("code_challenge_method") != "S256" or _PKCE_RE.fullmatch(challenge) is None:
            return back(error="invalid_request", error_description="PKCE with S256 is required")
        with self._lock:
            subject = self._subject
            tamper, self._next_tamper = self._next_tamper, frozenset()
            sid = self._sid
        if subject is None:
            return back(error="login_required", error_description="call provider.login_as(sub) first")
        now = self._now()
        grant = _Grant(
            client_id=client_id,
            redirect_uri=redirect_uri,
            code_challenge=challenge,
            nonce=args.get("nonce"),
            scope=scope,
            sub=subject[0],
            claims=dict(subject[1]),
            sid=sid,
            auth_time=now,
            expires_at=time.monotonic() + _CODE_LIFETIME,
            tamper=tamper,
            dpop_jkt=args.get("dpop_jkt"),
        )
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._codes[code] = grant
        return back(code=code)

    def _assertion_client(self) -> RegisteredClient | Response:
        """``private_key_jwt``: signature by a key of the client's ``jwks``, ``iss`` = ``sub``
        = client id, ``aud`` the issuer (or, without ``fapi2``, the token or PAR endpoint),
        ``exp`` at most 60 s after ``iat`` and not past, a ``jti`` never seen before."""
        from joserfc import jwt
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        with self._lock:
            client = self._clients.get(request.form.get("client_id", ""))
            self.token_requests.append("private_key_jwt")
        if (
            client is None
            or not client.jwks
            or client.token_endpoint_auth_method not in (None, "private_key_jwt")
        ):
            return self._invalid_client()
        try:
            keys = KeySet.import_key_set({"keys": [dict(k) for k in client.jwks]})
            claims = dict(
                jwt.decode(
                    request.form.get("client_assertion", ""), keys, algorithms=list(_ASSERTION_ALGS)
                ).claims
            )
        except (JoseError, ValueError, TypeError):
            return self._invalid_client()
        audiences = (
            {self._iss} if client.fapi2 else {self._iss, f"{self._issuer}/token", f"{self._issuer}/par"}
        )
        exp, iat, jti = claims.get("exp"), claims.get("iat"), claims.get("jti")
        fine = (
            claims.get("iss") == client.client_id == claims.get("sub")
            and claims.get("aud") in audiences
            and isinstance(exp, int)
            and isinstance(iat, int)
            and exp >= self._now()
            and 0 < exp - iat <= _ASSERTION_MAX_LIFETIME
            and isinstance(jti, str)
            and bool(jti)
        )
        with self._lock:
            self.client_assertions.append(claims)
            if not fine or jti in self._seen_jtis:
                return self._invalid_client()
            self._seen_jtis.add(str(jti))
        return client

    def _authenticate_client(self) -> RegisteredClient | Response:
        if request.form.get("client_assertion_type") == _ASSERTION_TYPE:
            return self._assertion_client()
        auth = request.headers.get("Authorization", "")
        client_id: str | None
        secret: str | None
        if auth[:6].lower() == "basic ":
            try:
                decoded = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
                raw_id, sep, raw_secret = decoded.partition(":")
            except (ValueError, UnicodeDecodeError):
                return self._invalid_client()
            if not sep:
                return self._invalid_client()
            client_id, secret = unquote_plus(raw_id), unquote_plus(raw_secret)
            if "client_secret" in request.form:
                return self._error(400, "invalid_request", "one client authentication method only")
            method = "client_secret_basic"
        else:
            client_id = request.form.get("client_id")
            secret = request.form.get("client_secret")
            method = "client_secret_post"
        if not client_id or secret is None:
            return self._invalid_client()
        with self._lock:
            client = self._clients.get(client_id)
            self.token_requests.append(method)
        if client is None or not secrets.compare_digest(
            client.client_secret.encode("utf-8"), secret.encode("utf-8")
        ):
            return self._invalid_client()
        if client.token_endpoint_auth_method not in (None, method):
            return self._invalid_client()
        return client

    def _invalid_client(self) -> Response:
        resp = self._error(401, "invalid_client", "client authentication failed")
        resp.headers["WWW-Authenticate"] = 'Basic realm="op"'
        return resp

    def _dpop(self, htm: str, htu: str, access_token: str | None) -> tuple[str | None, str | None]:
        """``(jkt, None)`` for a valid DPoP proof, ``(None, None)`` without one, ``(None,
        error)`` for a bad one (``invalid_dpop_proof``, or ``use_dpop_nonce`` when
        :attr:`require_dpop_nonce` and the proof lacks the current nonce)."""
        proof = request.headers.get("DPoP")
        if proof is None:
            return None, None
        try:
            claims, jkt = _verified_proof(proof)
        except Exception:  # noqa: BLE001 - any malformed proof is a refused proof
            return None, "invalid_dpop_proof"
        iat, jti = claims.get("iat"), claims.get("jti")
        ath = None if access_token is None else b64url_encode(hashlib.sha256(access_token.encode()).digest())
        error = None
        if (
            claims.get("htm") != htm
            or claims.get("htu") != htu
            or not isinstance(iat, int)
            or abs(self._now() - iat) > _DPOP_MAX_AGE
            or not isinstance(jti, str)
            or claims.get("ath") != ath
        ):
            error = "invalid_dpop_proof"
        with self._lock:
            if error is None and jti in self._seen_jtis:
                error = "invalid_dpop_proof"  # replayed
            if error is None:
                self._seen_jtis.add(str(jti))
                if self.require_dpop_nonce and claims.get("nonce") != self._dpop_nonce:
                    error = "use_dpop_nonce"
            self.dpop_proofs.append({**claims, "jkt": jkt, "error": error})
        return (None, error) if error is not None else (jkt, None)

    def _dpop_error(self, error: str) -> Response:
        resp = self._error(400, error, "DPoP proof refused")
        resp.headers["DPoP-Nonce"] = self._dpop_nonce
        return resp

    def _par(self) -> Response:
        client = self._authenticate_client()
        if isinstance(client, Response):
            return client
        params = {k: v for k, v in request.form.items() if k not in _CLIENT_AUTH_FIELDS}
        with self._lock:
            self.par_requests.append(dict(params))
            scripted, self.par_answer = self.par_answer, None
        if scripted is not None:
            resp = jsonify(scripted[1])
            resp.status_code = scripted[0]
            return resp
        if params.get("client_id", client.client_id) != client.client_id or "request_uri" in params:
            return self._error(400, "invalid_request", "another client_id, or a request_uri pushed")
        if params.get("redirect_uri") not in client.redirect_uris:
            return self._error(400, "invalid_request", "redirect_uri is not registered for this client")
        params["client_id"] = client.client_id
        uri = "urn:ietf:params:oauth:request_uri:" + secrets.token_urlsafe(24)
        with self._lock:
            self._pushed[uri] = (params, time.monotonic() + _PAR_LIFETIME)
        resp = jsonify({"request_uri": uri, "expires_in": _PAR_LIFETIME})
        resp.status_code = 201
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def _token(self) -> Response:
        client = self._authenticate_client()
        if isinstance(client, Response):
            return client
        jkt, dpop_error = self._dpop("POST", f"{self._issuer}/token", None)
        if dpop_error is not None or (client.dpop_bound and jkt is None):
            return self._dpop_error(dpop_error or "invalid_dpop_proof")
        grant_type = request.form.get("grant_type")
        if grant_type == "refresh_token":
            refresh = request.form.get("refresh_token", "")
            with self._lock:
                grant = self._refresh_tokens.get(refresh)
                bound = self._token_bindings.get(refresh)
            if grant is None or grant.client_id != client.client_id:
                return self._error(400, "invalid_grant", "unknown refresh token")
            if bound != jkt:
                return self._error(400, "invalid_grant", "the refresh token is bound to another DPoP key")
            return self._token_response(grant, with_id_token=True, jkt=jkt)
        if grant_type != "authorization_code":
            return self._error(400, "unsupported_grant_type", "authorization_code or refresh_token")
        with self._lock:
            grant = self._codes.pop(request.form.get("code", ""), None)  # single use
        if grant is None or grant.expires_at < time.monotonic():
            return self._error(400, "invalid_grant", "unknown, used or expired code")
        if grant.client_id != client.client_id:
            return self._error(400, "invalid_grant", "code issued to another client")
        if request.form.get("redirect_uri") != grant.redirect_uri:
            return self._error(400, "invalid_grant", "redirect_uri differs from the authorize request")
        verifier = request.form.get("code_verifier", "")
        if _PKCE_RE.fullmatch(verifier) is None or not secrets.compare_digest(
            _s256(verifier).encode("ascii"), grant.code_challenge.encode("ascii")
        ):
            return self._error(400, "invalid_grant", "PKCE verification failed")
        if grant.dpop_jkt is not None and grant.dpop_jkt != jkt:
            return self._error(400, "invalid_grant", "dpop_jkt of the authorization request differs")
        return self._token_response(grant, with_id_token=True, jkt=jkt)

    def _token_response(self, grant: _Grant, *, with_id_token: bool, jkt: str | None = None) -> Response:
        access = secrets.token_urlsafe(32)
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "DPoP" if jkt is not None else "Bearer",
            "expires_in": self._token_lifetime,
            "scope": " ".join(grant.scope),
        }
        for name, value in self.token_answer_overrides.items():
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        if with_id_token:
            body["id_token"] = self.id_token(
                grant.client_id,
                grant.sub,
                nonce=grant.nonce,
                claims=grant.claims,
                sid=grant.sid,
                auth_time=grant.auth_time,
                tamper=grant.tamper,  # type: ignore[arg-type]
                access_token=access,
            )
        with self._lock:
            self._access_tokens[access] = grant
            if jkt is not None:
                self._token_bindings[access] = jkt
            if "offline_access" in grant.scope:
                refresh = secrets.token_urlsafe(32)
                self._refresh_tokens[refresh] = grant
                body["refresh_token"] = refresh
                if jkt is not None:
                    self._token_bindings[refresh] = jkt
        resp = jsonify(body)
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["Pragma"] = "no-cache"
        return resp

    def _userinfo(self) -> Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip() if scheme.lower() in ("bearer", "dpop") else ""
        with self._lock:
            grant = self._access_tokens.get(token) if token else None
            bound = self._token_bindings.get(token) if token else None
            self.userinfo_requests += 1
        if grant is not None and (bound is not None or scheme.lower() == "dpop"):
            jkt, error = self._dpop(request.method, f"{self._issuer}/userinfo", token)
            if error is not None or jkt is None or jkt != bound:
                resp = self._error(401, error or "invalid_token", "DPoP proof refused")
                scheme = self.dpop_challenge_scheme
                resp.headers["WWW-Authenticate"] = f'{scheme} error="{error or "invalid_token"}"'
                resp.headers["DPoP-Nonce"] = self._dpop_nonce
                return resp
        if grant is None:
            resp = self._error(401, "invalid_token", "missing or unknown access token")
            resp.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
            return resp
        claims = dict(grant.claims)
        claims["sub"] = "someone-else" if "userinfo_wrong_sub" in grant.tamper else grant.sub
        return jsonify(claims)

    def _end_session(self) -> Response:
        params = request.values
        hint = params.get("id_token_hint")
        post_logout = params.get("post_logout_redirect_uri")
        state = params.get("state")
        client_id = params.get("client_id")
        if hint:
            try:
                verified = self.verifier().verify(
                    hint, client_id or _unverified_aud(hint), issuer=self._iss, leeway=timedelta(days=1)
                )
            except (TokenVerificationError, ConfigurationError, ValueError):
                return self._error(400, "invalid_request", "id_token_hint does not verify")
            aud = verified.aud
            if client_id is None and len(aud) == 1:
                client_id = aud[0]
        if post_logout is not None:
            if client_id is None:
                return self._error(
                    400, "invalid_request", "post_logout_redirect_uri needs a hint or client_id"
                )
            with self._lock:
                client = self._clients.get(client_id)
            if client is None or post_logout not in client.post_logout_redirect_uris:
                return self._error(400, "invalid_request", "post_logout_redirect_uri is not registered")
        record = {k: v for k, v in params.items()}
        with self._lock:
            self.end_session_requests.append(record)
            self._subject = None
        if post_logout is None:
            return Response("signed out", mimetype="text/plain")
        if self.logout_state == "other":
            state = secrets.token_urlsafe(16)
        elif self.logout_state == "omit":
            state = None
        sep = "&" if urlsplit(post_logout).query else "?"
        target = post_logout + (sep + urlencode({"state": state}) if state is not None else "")
        return _redirect(target)

    def __repr__(self) -> str:
        return f"<TestOpenIDProvider issuer={self._issuer!r} kid={self._key.kid!r}>"


def _redirect(location: str) -> Response:
    resp = Response(status=302)
    resp.headers["Location"] = location
    resp.headers["Cache-Control"] = "no-store"
    return resp


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


class _RawBody:
    """The in-memory body as ``response.raw``: the urllib3 reading calls clients use (size caps)."""

    def __init__(self, content: bytes) -> None:
        self._buffer = io.BytesIO(content)
        self.closed = False

    def read(self, amt: int | None = None, decode_content: bool | None = None, **_: Any) -> bytes:
        return self._buffer.read(amt)

    def stream(self, amt: int = 65536, decode_content: bool | None = None) -> Iterator[bytes]:
        while chunk := self._buffer.read(amt):
            yield chunk

    def release_conn(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def _make_wsgi_adapter(app: Flask) -> requests.adapters.BaseAdapter:
    import requests
    import requests.adapters
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers

    class _WsgiAdapter(requests.adapters.BaseAdapter):
        """Serves a WSGI app in-process: the request never touches a socket."""

        def send(
            self,
            request: requests.PreparedRequest,
            stream: bool = False,
            timeout: float | tuple[float, float] | tuple[float, None] | None = None,
            verify: bool | str = True,
            cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
            proxies: Mapping[str, str] | None = None,
        ) -> requests.Response:
            url = request.url or ""
            parts = urlsplit(url)
            body = request.body
            data = body.encode("utf-8") if isinstance(body, str) else (body or b"")
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            with app.test_client() as client:
                answer = client.open(
                    parts.path or "/",
                    base_url=f"{parts.scheme}://{parts.netloc}",
                    query_string=parts.query,
                    method=request.method or "GET",
                    headers=headers,
                    data=data,
                )
                content = answer.get_data()
                status = answer.status_code
                reason = answer.status.partition(" ")[2]
                resp_headers: Sequence[tuple[str, str]] = list(answer.headers.items())
            response = requests.Response()
            response.status_code = status
            response.reason = reason
            response.headers = CaseInsensitiveDict(dict(resp_headers))
            response.encoding = get_encoding_from_headers(response.headers)
            response._content = content
            response._content_consumed = True  # type: ignore[attr-defined]
            response.raw = _RawBody(content)
            response.url = url
            response.request = request
            response.connection = self  # type: ignore[assignment]
            return response

        def close(self) -> None:
            return None

    return _WsgiAdapter()


def wsgi_adapter(app: Flask) -> requests.adapters.BaseAdapter:
    """A ``requests`` adapter serving any Flask app in-process (to emulate providers that are
    not OpenID providers, such as a plain OAuth 2.0 provider's user API)."""
    return _make_wsgi_adapter(app)


def query_params(url: str) -> dict[str, str]:
    """The query parameters of ``url`` as a dict (last one wins); handy for redirect assertions."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def _verified_proof(proof: str) -> tuple[dict[str, Any], str]:
    """The claims of a DPoP proof whose header (``typ`` ``dpop+jwt``, an allowed ``alg``, a
    public ``jwk``) and signature hold, and the key's RFC 7638 thumbprint (by joserfc)."""
    from joserfc import jws
    from joserfc.jwk import ECKey, OKPKey

    segment = proof.split(".")[0]
    head = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    jwk = head["jwk"]
    if head.get("typ") != "dpop+jwt" or head.get("alg") not in _DPOP_ALGS or "d" in jwk:
        raise ValueError("not a DPoP proof header")
    key = ECKey.import_key(jwk) if jwk.get("kty") == "EC" else OKPKey.import_key(jwk)
    payload = jws.deserialize_compact(proof, key, algorithms=[head["alg"]]).payload
    claims = json.loads(payload)
    if not isinstance(claims, dict):
        raise ValueError("not a JSON object")
    return claims, str(key.thumbprint())
