"""An in-process token issuer for tests.

:class:`LocalIdpFixture` wraps a :class:`~flask_authflow.issuer.LocalIdp` with an
in-memory key store (so it signs exactly as production does) and adds what tests
need: a generated RSA-2048 key by default, extra or historical keys, a
:class:`~flask_authflow.jose._jwks.JwksHandle`, a lifetime cap and issuance listeners.

Like every ``with_*`` builder in flask-authflow, the fixture's builders return a new
fixture with its own ``jwks_handle()`` and leave the original unchanged: chain them
when you build the fixture, then take its handle. :meth:`LocalIdpFixture.rotate_signing_key`
is not a builder: it rotates the fixture it is called on, and that fixture's handle
follows in place.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol, runtime_checkable

from flask_authflow._clock import Clock, SystemClock
from flask_authflow.errors import ConfigurationError, IssuanceError
from flask_authflow.issuer._claims import MintClaims
from flask_authflow.issuer._idp import LocalIdp
from flask_authflow.issuer._keys import SIGNING_ALGORITHMS, LoadedKeys, LocalIdpSigningKey
from flask_authflow.issuer._keystores import MemoryLocalIdpKeyStore
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle

__all__ = ["IssuanceEvent", "IssuanceListener", "LocalIdpFixture", "MockIssuanceListener"]

_FIXTURE_RSA_BITS: Final = 2048  # fast to generate; production keys default to 3072
_TRUST_DOMAIN_RE: Final = re.compile(r"[a-z0-9._-]{1,255}")
_PATH_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,255}")


@dataclass(frozen=True, slots=True)
class IssuanceEvent:
    """One token minted by a fixture: who issued it, with which key, and its claims."""

    issuer: str
    key_id: str
    algorithm: str
    claims: Mapping[str, Any]


@runtime_checkable
class IssuanceListener(Protocol):
    """Receives an :class:`IssuanceEvent` each time the fixture mints a token."""

    def on_issuance(self, event: IssuanceEvent) -> None: ...


class MockIssuanceListener:
    """Records every :class:`IssuanceEvent`; thread-safe, for assertions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[IssuanceEvent] = []

    def on_issuance(self, event: IssuanceEvent) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[IssuanceEvent]:
        """A copy of the events so far, oldest first."""
        with self._lock:
            return list(self._events)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def __repr__(self) -> str:
        return f"<MockIssuanceListener events={len(self)}>"


class LocalIdpFixture:
    """A test issuer: ``LocalIdpFixture("https://issuer.test")`` has a fresh RSA-2048 key (RS256).

    No lifetime cap unless :meth:`with_max_ttl` sets one (then a longer mint
    raises :class:`IssuanceError`). The store is re-read only on demand. The ``with_*``
    builders return a new fixture (with its own :meth:`jwks_handle`); the original is
    unchanged.
    """

    def __init__(
        self, issuer: str, key: LocalIdpSigningKey | None = None, *, clock: Clock | None = None
    ) -> None:
        self._issuer = issuer
        self._handle = JwksHandle()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max_ttl: timedelta | None = None
        self._extra_jwks: list[Mapping[str, Any]] = []
        self._listeners: list[IssuanceListener] = []
        first = key if key is not None else LocalIdpSigningKey.generate_rsa("RS256", _FIXTURE_RSA_BITS)
        self._idp = self._build(LoadedKeys(first))

    @classmethod
    def with_algorithm(cls, issuer: str, algorithm: str, *, clock: Clock | None = None) -> LocalIdpFixture:
        """A new fixture with a fresh key for ``algorithm`` (RS256, RS384, RS512, ES256, ...)."""
        if algorithm not in SIGNING_ALGORITHMS:
            raise ConfigurationError(
                f"unsupported fixture algorithm {algorithm!r}; use one of {sorted(SIGNING_ALGORITHMS)}"
            )
        key = LocalIdpSigningKey.generate(algorithm, rsa_bits=_FIXTURE_RSA_BITS)
        return cls(issuer, key, clock=clock)

    @classmethod
    def with_signing_key(
        cls, issuer: str, key: LocalIdpSigningKey, *, clock: Clock | None = None
    ) -> LocalIdpFixture:
        """A new fixture signing with ``key`` (stable signatures across runs)."""
        return cls(issuer, key, clock=clock)

    def _build(self, loaded: LoadedKeys) -> LocalIdp:
        idp = (
            LocalIdp(self._issuer, MemoryLocalIdpKeyStore(loaded), loaded, jwks_handle=self._handle)
            .with_clock(self._clock)
            .with_max_lifetime(self._max_ttl)
            .with_reload_interval(None)
        )
        for jwk in self._extra_jwks:
            idp = idp.with_extra_public_jwk(jwk)
        return idp

    # -- builders (each returns a new fixture; the original is unchanged) --------------------------

    def _derive(
        self,
        loaded: LoadedKeys | None = None,
        *,
        max_ttl: timedelta | object | None = ...,
        extra_jwk: Mapping[str, Any] | None = None,
        listener: IssuanceListener | None = None,
        clock: Clock | None = None,
    ) -> LocalIdpFixture:
        """A copy with the given changes, its own JWKS handle and its own issuer."""
        copy = object.__new__(type(self))
        copy._issuer = self._issuer
        copy._handle = JwksHandle()
        copy._clock = clock if clock is not None else self._clock
        copy._max_ttl = self._max_ttl if max_ttl is ... else max_ttl  # type: ignore[assignment]
        copy._extra_jwks = [*self._extra_jwks, *([dict(extra_jwk)] if extra_jwk is not None else [])]
        copy._listeners = [*self._listeners, *([listener] if listener is not None else [])]
        copy._idp = copy._build(loaded if loaded is not None else self._idp.loaded_keys())
        return copy

    def with_historical_signing_key(self, key: LocalIdpSigningKey) -> LocalIdpFixture:
        """A new fixture that also publishes ``key`` as a historical key (verifies old
        tokens, never signs)."""
        loaded = self._idp.loaded_keys()
        return self._derive(LoadedKeys(loaded.current, (*loaded.historical, key)))

    def with_extra_public_jwk(self, jwk: Mapping[str, Any]) -> LocalIdpFixture:
        """A new fixture that also publishes a public JWK it has no private key for."""
        return self._derive(extra_jwk=jwk)

    def rotate_signing_key(self, new_key: LocalIdpSigningKey) -> LocalIdpFixture:
        """Sign with ``new_key`` from now on; the old key stays in the JWKS.

        Not a builder: this fixture rotates, and its :meth:`jwks_handle` is updated in
        place, so verifiers built on it follow. Returns ``self``.
        """
        self._idp.rotate_signing_key(new_key)
        return self

    def with_max_ttl(self, ttl: timedelta) -> LocalIdpFixture:
        """A new fixture that refuses to mint tokens living longer than ``ttl``
        (:class:`IssuanceError`)."""
        return self._derive(max_ttl=ttl)

    def with_issuance_listener(self, listener: IssuanceListener) -> LocalIdpFixture:
        """A new fixture that calls ``listener.on_issuance(event)`` after every mint."""
        if not isinstance(listener, IssuanceListener):
            raise ConfigurationError("a listener needs an on_issuance(event) method")
        return self._derive(listener=listener)

    def with_key_id(self, kid: str) -> LocalIdpFixture:
        """A new fixture whose current key has the ``kid`` ``kid`` (instead of its thumbprint)."""
        loaded = self._idp.loaded_keys()
        return self._derive(LoadedKeys(loaded.current.with_key_id(kid), loaded.historical))

    def with_clock(self, clock: Clock) -> LocalIdpFixture:
        """A new fixture that takes ``iat`` and expiry checks from ``clock``."""
        return self._derive(clock=clock)

    # -- use ---------------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return self._issuer

    @property
    def idp(self) -> LocalIdp:
        """The underlying :class:`LocalIdp` (e.g. to mount ``idp.blueprint()``)."""
        return self._idp

    @property
    def current_kid(self) -> str:
        return self._idp.current_kid

    @property
    def clock(self) -> Clock:
        return self._clock

    def mint(self, claims: MintClaims) -> str:
        """Sign ``claims``; listeners see the final claims (with ``iss``, ``iat``, ``jti``)."""
        minted = self._idp.mint_with_details(claims)
        if self._listeners:
            event = IssuanceEvent(
                issuer=self._issuer,
                key_id=minted.key_id,
                algorithm=minted.algorithm,
                claims=dict(minted.claims),
            )
            for listener in list(self._listeners):
                listener.on_issuance(event)
        return minted.token

    def mint_jwt_svid(
        self,
        trust_domain: str,
        service: str,
        tenant: str,
        audience: str | Iterable[str],
        ttl: timedelta,
    ) -> str:
        """A JWT-SVID for ``spiffe://<trust_domain>/<service>/<tenant>``; audience required."""
        if not isinstance(trust_domain, str) or _TRUST_DOMAIN_RE.fullmatch(trust_domain) is None:
            raise IssuanceError("trust domain must be lowercase letters, digits, '.', '-' or '_'")
        for what, segment in (("service", service), ("tenant", tenant)):
            if (
                not isinstance(segment, str)
                or _PATH_SEGMENT_RE.fullmatch(segment) is None
                or segment in (".", "..")
            ):
                raise IssuanceError(f"{what} must be a SPIFFE path segment (letters, digits, '.', '-', '_')")
        if isinstance(audience, str):
            audiences = [audience]
        elif isinstance(audience, Iterable):
            audiences = list(audience)
        else:
            audiences = []
        if not audiences or not all(isinstance(a, str) and a for a in audiences):
            raise IssuanceError("a JWT-SVID needs at least one non-empty audience")
        if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
            raise IssuanceError("ttl must be a positive timedelta")
        claims = MintClaims(f"spiffe://{trust_domain}/{service}/{tenant}", self._clock.now() + ttl)
        return self.mint(claims.with_audiences(audiences))

    def jwks_handle(self) -> JwksHandle:
        """This fixture's lock-guarded JWK set: :meth:`rotate_signing_key` updates it in
        place. A builder's new fixture has a handle of its own, so take the handle from
        the fixture you keep (after the last builder)."""
        return self._handle

    def jwks(self) -> dict[str, Any]:
        return self._idp.jwks()

    def verifier_algorithms(self) -> list[str]:
        """The algorithms a verifier of this fixture's tokens should allow."""
        algs = self._idp.signing_algorithms()
        for key in self._handle.snapshot().keys:
            if key.alg is not None and key.alg not in algs:
                algs.append(key.alg)
        return algs

    def verifier(self) -> JwtVerifier:
        """A :class:`JwtVerifier` over :meth:`jwks_handle` with :meth:`verifier_algorithms`."""
        return JwtVerifier(self._handle, clock=self._clock).with_algorithms(self.verifier_algorithms())

    def __repr__(self) -> str:
        return f"<LocalIdpFixture issuer={self._issuer!r} kid={self.current_kid!r}>"
