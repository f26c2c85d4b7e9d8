"""The in-process OpenID provider, composed of one part per flow (see the package's docstring)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from flask import Flask, Response
from flask.testing import FlaskClient

from flask_authflow._clock import Clock, SystemClock
from flask_authflow.jose import JwtVerifier
from flask_authflow.testing._provider._authorize import AuthorizationEndpoint
from flask_authflow.testing._provider._backchannel import BackchannelLogoutResult, deliver
from flask_authflow.testing._provider._client_auth import ClientAuthentication
from flask_authflow.testing._provider._clients import ClientRegistry, RegisteredClient, checked_registration
from flask_authflow.testing._provider._discovery import DiscoveryEndpoints, discovery_document
from flask_authflow.testing._provider._dpop import DpopChecker
from flask_authflow.testing._provider._end_session import EndSessionEndpoint, LogoutState
from flask_authflow.testing._provider._grants import GrantStore
from flask_authflow.testing._provider._http import invalid_client
from flask_authflow.testing._provider._issuer import IssuerNames
from flask_authflow.testing._provider._keys import KeyRing, SigningKey
from flask_authflow.testing._provider._session import ProviderSession
from flask_authflow.testing._provider._tamper import Tamper
from flask_authflow.testing._provider._token import TokenEndpoint
from flask_authflow.testing._provider._tokens import TokenMinter
from flask_authflow.testing._provider._userinfo import UserinfoEndpoint
from flask_authflow.testing._provider._wsgi import wsgi_adapter

if TYPE_CHECKING:
    import requests
    import requests.adapters

_TOKEN_LIFETIME: Final = 300


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
        self._names = IssuerNames.parse(issuer, trailing_slash=trailing_slash)
        self.publish_alg = True
        self.discovery_overrides: dict[str, Any] = {}
        self.discovery_cache_control: str | None = None
        self.logout_state: LogoutState = "echo"
        self.token_issuer: str | None = None
        #: The token endpoint and userinfo answer ``use_dpop_nonce`` to proofs without the current nonce.
        self.require_dpop_nonce = False
        self.token_answer_overrides: dict[str, Any] = {}
        self.dpop_challenge_scheme = "DPoP"
        self.par_answer: tuple[int, dict[str, Any]] | None = None
        self.token_requests: list[str] = []
        self.userinfo_requests = 0
        self.discovery_requests = 0
        self.end_session_requests: list[dict[str, str]] = []
        self.par_requests: list[dict[str, str]] = []
        self.dpop_proofs: list[dict[str, Any]] = []
        self.client_assertions: list[dict[str, Any]] = []
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._compose(algorithm, token_lifetime)
        self.app = self._build_app()

    def _compose(self, algorithm: str, token_lifetime: int) -> None:
        """The parts, one per flow, sharing the lock, the clock and the stores they meet at.

        Each part reads the scriptable attributes above from the provider itself (through a
        protocol of its own), so a test changes them here at any time; ``discovery_document``,
        ``jwks`` and ``verifier`` are looked up at each request, so a test may replace them.
        """
        names, clock, lock = self._names, self._clock, self._lock
        seen_jtis: set[str] = set()  # client assertions and DPoP proofs: each jti once
        grants = GrantStore(lock)
        self._keys = KeyRing(algorithm, lock)
        self._clients = ClientRegistry(lock)
        self._session = ProviderSession(lock)
        self._client_auth = ClientAuthentication(self._clients, names, clock, lock, seen_jtis, self)
        self._dpop = DpopChecker(clock, lock, seen_jtis, self)
        self._minter = TokenMinter(self._keys, names, clock, self._session, token_lifetime, self)
        self._discovery = DiscoveryEndpoints(
            lambda: self.discovery_document(), lambda: self.jwks(), lock, self
        )
        self._authorization = AuthorizationEndpoint(
            self._clients, self._session, grants, names, clock, lock, self
        )
        self._token = TokenEndpoint(grants, self._minter, self._dpop, names, token_lifetime, self)
        self._userinfo = UserinfoEndpoint(grants, self._dpop, names, lock, self)
        self._end_session = EndSessionEndpoint(
            lambda: self.verifier(), self._clients, self._session, names, lock, self
        )

    # -- set-up ------------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        """The issuer as the provider names it (with the final ``/`` of ``trailing_slash``)."""
        return self._names.iss

    @property
    def base_url(self) -> str:
        """Where to mount :meth:`requests_adapter` (scheme and host, with a trailing slash)."""
        return self._names.origin

    @property
    def discovery_url(self) -> str:
        return f"{self._names.base}/.well-known/openid-configuration"

    @property
    def current_kid(self) -> str:
        return self._keys.current.kid

    @property
    def algorithm(self) -> str:
        return self._keys.current.algorithm

    @property
    def session_id(self) -> str:
        """The ``sid`` of the provider's current browser session (put into ID tokens)."""
        return self._session.sid

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
        uris, keys = checked_registration(client_id, client_secret, redirect_uris, jwks)
        return self._clients.register(
            RegisteredClient(
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
        )

    def login_as(self, sub: str, **claims: Any) -> None:
        """Sign in ``sub`` with ``claims`` at the provider: the following authorize requests consent for them.

        A new login starts a new provider session (a new ``sid``).
        """
        self._session.login_as(sub, claims)

    def logout(self) -> None:
        """End the provider session: authorize answers ``error=login_required`` until :meth:`login_as`."""
        self._session.logout()

    def tamper_next(self, *tamper: Tamper) -> None:
        """Spoil the tokens (ID token, userinfo) of the next authorization code issued."""
        self._session.tamper_next(tamper)

    def rotate_dpop_nonce(self) -> str:
        """A new DPoP nonce (RFC 9449 §8, §9): proofs carrying the old one are answered
        ``use_dpop_nonce`` while :attr:`require_dpop_nonce` is on. Returns the new nonce."""
        return self._dpop.rotate_nonce()

    def rotate_key(self, algorithm: str | None = None, *, keep_old: bool = True) -> str:
        """Sign with a fresh key from now on; the old one stays in the JWKS unless ``keep_old=False``.

        Returns the new ``kid``.
        """
        return self._keys.rotate(algorithm, keep_old=keep_old)

    # -- tokens ------------------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        return self._keys.jwks(publish_alg=self.publish_alg)

    def verifier(self) -> JwtVerifier:
        """A :class:`JwtVerifier` over a JWKS snapshot; allows RS256, ES256 and the keys' algorithms."""
        return self._keys.verifier(self.jwks(), self._clock)

    def discovery_document(self) -> dict[str, Any]:
        return discovery_document(self._names, self._clients.auth_methods(), self.discovery_overrides)

    def sign(
        self,
        claims: Mapping[str, Any],
        *,
        typ: str = "JWT",
        tamper: Iterable[Tamper] = (),
        header: Mapping[str, Any] | None = None,
    ) -> str:
        """Sign ``claims`` as a compact JWS with the current key, spoiled as ``tamper`` says."""
        return self._keys.sign(claims, typ=typ, tamper=tamper, header=header)

    def at_hash(self, access_token: str) -> str:
        """The ``at_hash`` of ``access_token`` for the current algorithm (left half of its hash)."""
        return self._keys.at_hash(access_token)

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
        return self._minter.id_token(
            client_id,
            sub,
            nonce=nonce,
            claims=claims,
            sid=sid,
            auth_time=auth_time,
            tamper=tamper,
            access_token=access_token,
        )

    def logout_token(
        self,
        client_id: str,
        *,
        sub: str | None = None,
        sid: str | None = None,
        tamper: Iterable[Tamper] = (),
    ) -> str:
        """A back-channel logout token (typ ``logout+jwt``) for ``client_id``, naming ``sub``/``sid``."""
        return self._minter.logout_token(client_id, sub=sub, sid=sid, tamper=tamper)

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
        client = self._clients.named(client_id)
        token = (
            logout_token
            if logout_token is not None
            else self.logout_token(client.client_id, sub=sub, sid=sid, tamper=tamper)
        )
        return deliver(client, token, target, session)

    def client(self, client_id: str | None = None) -> RegisteredClient:
        """A registered client (``client_id`` may be left out when there is exactly one)."""
        return self._clients.named(client_id)

    # -- HTTP --------------------------------------------------------------------------------------

    def requests_adapter(self) -> requests.adapters.BaseAdapter:
        """A ``requests`` adapter serving this provider in-process (mount it on :attr:`base_url`)."""
        return wsgi_adapter(self.app)

    def http_adapters(self) -> dict[str, requests.adapters.BaseAdapter]:
        """``{base_url: adapter}``: what an ``HttpClient(adapters=...)`` or ``Session.mount`` needs."""
        return {self.base_url: self.requests_adapter()}

    def _build_app(self) -> Flask:
        app = Flask(f"{__name__}.{id(self)}")
        routes = (
            ("/.well-known/openid-configuration", "discovery", self._discovery.discovery, ["GET"]),
            ("/authorize", "authorize", self._authorization.authorize, ["GET"]),
            ("/token", "token", self._token_view, ["POST"]),
            ("/par", "par", self._par_view, ["POST"]),
            ("/jwks", "jwks", self._discovery.jwks, ["GET"]),
            ("/userinfo", "userinfo", self._userinfo.userinfo, ["GET", "POST"]),
            ("/end_session", "end_session", self._end_session.end_session, ["GET", "POST"]),
        )
        for path, name, view, methods in routes:
            app.add_url_rule(self._names.prefix + path, name, view, methods=methods)
        return app

    def _token_view(self) -> Response:
        return self._token.token(self._authenticate_client)

    def _par_view(self) -> Response:
        return self._authorization.par(self._authenticate_client)

    # -- seams for emulations of providers that authenticate clients their own way ------------------

    def _authenticate_client(self) -> RegisteredClient | Response:
        """The client of the current token or PAR request, or the error to answer.

        A subclass emulating a provider with another client authentication (Apple's signed
        client secret) overrides it, with :attr:`_clients`, :attr:`_clock` and
        :meth:`_invalid_client` at hand.
        """
        return self._client_auth.authenticate()

    _invalid_client = staticmethod(invalid_client)

    @property
    def _key(self) -> SigningKey:
        """The current signing key."""
        return self._keys.current

    def __repr__(self) -> str:
        return f"<TestOpenIDProvider issuer={self._names.base!r} kid={self._keys.current.kid!r}>"
