"""The local issuer: mints JWTs with a locally held key and publishes its JWKS.

It is not an OAuth 2.0 authorization server (no code flow, no consent, no user
store): an application calls :meth:`LocalIdp.mint` for tokens it decides to issue,
and relying parties verify them against ``/jwks.json``.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from flask_authflow._clock import Clock, SystemClock
from flask_authflow._core.encoding import b64url_encode
from flask_authflow.errors import ConfigurationError, IssuanceError, KeyStoreError, RotationRefused
from flask_authflow.issuer._claims import MintClaims
from flask_authflow.issuer._keys import LoadedKeys, LocalIdpSigningKey
from flask_authflow.issuer._keystores import LocalIdpKeyStore, RotationState, StagedRotationStore
from flask_authflow.issuer._views import make_blueprint
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle
from flask_authflow.jose._keys import VerificationKey, parse_public_jwk
from flask_authflow.jose._verify import MAX_TOKEN_LENGTH
from flask_authflow.signals import key_rotated, token_minted

if TYPE_CHECKING:
    from flask import Blueprint

__all__ = [
    "CORE_METADATA_FIELDS",
    "DEFAULT_MAX_LIFETIME",
    "DEFAULT_RELOAD_INTERVAL",
    "LocalIdp",
    "MintedToken",
]

log = logging.getLogger("flask_authflow.issuer")

#: Longest token lifetime :meth:`LocalIdp.mint` accepts unless configured otherwise.
DEFAULT_MAX_LIFETIME: Final = timedelta(hours=1)
#: How long relying parties may cache the JWKS and discovery documents.
DEFAULT_JWKS_MAX_AGE: Final = timedelta(minutes=5)
#: Extra time a retired key stays published, for verifiers whose clocks run behind.
PRUNE_SKEW: Final = timedelta(seconds=60)
#: How often a LocalIdp re-reads its key store to see rotations made by other processes.
DEFAULT_RELOAD_INTERVAL: Final = timedelta(seconds=5)
#: Discovery fields the issuer owns; ``with_metadata_field`` cannot replace them.
CORE_METADATA_FIELDS: Final = frozenset(
    {
        "issuer",
        "jwks_uri",
        "id_token_signing_alg_values_supported",
        "response_types_supported",
        "subject_types_supported",
    }
)
_FORBIDDEN_HEADER_FIELDS: Final = frozenset({"crit", "b64", "jwk", "jku", "x5u", "x5c", "zip", "enc"})
_MAX_HEADER_BYTES: Final = 1024
_JSON_SEPARATORS: Final = (",", ":")


def _check_url(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what} must be a non-empty URL string")
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        raise ConfigurationError(f"{what} must be an http(s) URL without query or fragment, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class MintedToken:
    """A minted token with what went into it (for listeners and audit)."""

    token: str = field(repr=False)
    claims: Mapping[str, Any]
    key_id: str
    algorithm: str


@dataclass(frozen=True, slots=True)
class _KeyState:
    loaded: LoadedKeys
    checked_at: float


class LocalIdp:
    """An in-process token issuer backed by a :class:`LocalIdpKeyStore`.

    Build it with :meth:`from_key_store` and configure it with the ``with_*``
    methods: each returns a new issuer and leaves this one unchanged. The copies
    share the key store; they share the JWK set handle only when one was passed
    in (``jwks_handle``: an explicit publication point), else each has its own.
    Minting is thread-safe; rotation publishes the new JWKS *before* the new key
    signs anything, so every minted token always verifies.
    """

    def __init__(
        self,
        issuer: str,
        store: LocalIdpKeyStore,
        loaded: LoadedKeys,
        *,
        jwks_handle: JwksHandle | None = None,
    ) -> None:
        self._issuer = _check_url(issuer, "issuer")
        self._store = store
        self._clock: Clock = SystemClock()
        self._base_url = issuer.rstrip("/")
        self._metadata: dict[str, Any] = {}
        self._max_lifetime: timedelta | None = DEFAULT_MAX_LIFETIME
        self._jwks_max_age = DEFAULT_JWKS_MAX_AGE
        self._reload_interval: float | None = DEFAULT_RELOAD_INTERVAL.total_seconds()
        self._extra_keys: list[VerificationKey] = []
        self._shared_handle = jwks_handle is not None
        self._handle = jwks_handle if jwks_handle is not None else JwksHandle()
        self._lock = threading.Lock()  # serialises rotation, reload and reconfiguration
        self._state = _KeyState(loaded, self._ticks())
        self._install(loaded)

    @classmethod
    def from_key_store(
        cls, issuer: str, store: LocalIdpKeyStore, *, jwks_handle: JwksHandle | None = None
    ) -> LocalIdp:
        """Load the keys from ``store`` (raising :class:`KeyStoreError` if unusable).

        ``jwks_handle`` lets several components share one handle that rotation
        updates in place; by default the issuer makes its own.
        """
        return cls(issuer, store, store.load_all(), jwks_handle=jwks_handle)

    # -- configuration -----------------------------------------------------------------------------

    def _copy(self) -> LocalIdp:
        """A new issuer with this one's settings (the builders change the copy)."""
        clone = object.__new__(LocalIdp)
        clone.__dict__.update(self.__dict__)
        clone._metadata = dict(self._metadata)
        clone._extra_keys = list(self._extra_keys)
        clone._lock = threading.Lock()
        if not self._shared_handle:
            clone._handle = JwksHandle()
            clone._install(self._state.loaded)
        return clone

    def with_base_url(self, url: str) -> LocalIdp:
        """Advertise ``jwks_uri`` under ``url`` (where the blueprint is mounted, e.g. behind a proxy).

        The request's ``Host`` or ``X-Forwarded-Host`` is never used: an attacker
        controls those and could point relying parties at their own keys.
        """
        clone = self._copy()
        clone._base_url = _check_url(url, "base URL").rstrip("/")
        return clone

    def with_metadata_field(self, name: str, value: Any) -> LocalIdp:
        """Append an adopter field to the discovery document (core fields are fixed)."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError("metadata field names must be non-empty strings")
        if name in CORE_METADATA_FIELDS:
            raise ConfigurationError(
                f"discovery field {name!r} is set by the issuer and cannot be overridden"
            )
        try:
            copied = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"metadata field {name!r} is not JSON-serialisable") from exc
        clone = self._copy()
        clone._metadata[name] = copied
        return clone

    def with_clock(self, clock: Clock) -> LocalIdp:
        """Read ``iat``/``exp`` checks and reload timing from ``clock`` (a MockClock in tests)."""
        clone = self._copy()
        clone._clock = clock
        clone._state = _KeyState(clone._state.loaded, clone._ticks())
        return clone

    def with_max_lifetime(self, lifetime: timedelta | None) -> LocalIdp:
        """Refuse tokens living longer than ``lifetime`` (default 1 hour; ``None``: no cap)."""
        if lifetime is not None and (not isinstance(lifetime, timedelta) or lifetime <= timedelta(0)):
            raise ConfigurationError("max lifetime must be a positive timedelta or None")
        clone = self._copy()
        clone._max_lifetime = lifetime
        return clone

    def with_jwks_max_age(self, max_age: timedelta) -> LocalIdp:
        """How long relying parties may cache the JWKS and discovery documents (default 5 min)."""
        if not isinstance(max_age, timedelta) or max_age < timedelta(0):
            raise ConfigurationError("the JWKS max-age must be a timedelta of zero or more")
        clone = self._copy()
        clone._jwks_max_age = max_age
        return clone

    @property
    def jwks_max_age(self) -> timedelta:
        """The ``Cache-Control: max-age`` of the JWKS and discovery responses."""
        return self._jwks_max_age

    def with_reload_interval(self, interval: timedelta | None) -> LocalIdp:
        """Re-read the store at most this often (default 5 s; ``None``: only on :meth:`reload`).

        This is how several processes sharing one store pick up a rotation made
        by any of them.
        """
        if interval is not None and (not isinstance(interval, timedelta) or interval < timedelta(0)):
            raise ConfigurationError("reload interval must be a non-negative timedelta or None")
        clone = self._copy()
        clone._reload_interval = None if interval is None else interval.total_seconds()
        return clone

    def with_extra_public_jwk(self, jwk: Mapping[str, Any]) -> LocalIdp:
        """Also publish a public key that is not in the store (e.g. a pre-announced next key)."""
        try:
            key = parse_public_jwk(jwk)
        except ValueError as exc:
            raise ConfigurationError(f"extra JWK is unusable: {exc}") from exc
        if key.kid is None:
            raise ConfigurationError("extra JWKs need a kid")
        with self._lock:
            taken = {*self._state.loaded.kids(), *(k.kid for k in self._extra_keys)}
            if key.kid in taken:
                raise ConfigurationError(f"kid {key.kid!r} is already published")
            clone = self._copy()
        clone._extra_keys.append(key)
        clone._install(clone._state.loaded)
        return clone

    # -- accessors ---------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return self._issuer

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def key_store(self) -> LocalIdpKeyStore:
        return self._store

    @property
    def max_lifetime(self) -> timedelta | None:
        return self._max_lifetime

    @property
    def current_kid(self) -> str:
        return self._current_state().loaded.current.kid

    @property
    def algorithm(self) -> str:
        return self._current_state().loaded.current.algorithm

    def loaded_keys(self) -> LoadedKeys:
        return self._current_state().loaded

    def jwks_handle(self) -> JwksHandle:
        """The shared handle rotation updates in place (hand it to a :class:`JwtVerifier`)."""
        return self._handle

    def verifier(self) -> JwtVerifier:
        """A verifier over this issuer's JWKS accepting the algorithms it publishes."""
        return JwtVerifier(self._handle, clock=self._clock).with_algorithms(self.signing_algorithms())

    def signing_algorithms(self) -> list[str]:
        """The algorithms of the current and historical keys, current first."""
        algs: dict[str, None] = {}
        for key in self._current_state().loaded.all_keys:
            algs.setdefault(key.algorithm, None)
        for extra in self._extra_keys:
            if extra.alg is not None:
                algs.setdefault(extra.alg, None)
        return list(algs)

    def jwks(self) -> dict[str, Any]:
        """The public JWK set: current, historical and extra keys; never private members."""
        self._current_state()
        return self._handle.as_dict()

    @property
    def jwks_uri(self) -> str:
        return f"{self._base_url}/jwks.json"

    def discovery_document(self) -> dict[str, Any]:
        """RFC 8414 / OIDC discovery metadata, plus adopter fields."""
        doc: dict[str, Any] = {
            "issuer": self._issuer,
            "jwks_uri": self.jwks_uri,
            "id_token_signing_alg_values_supported": self.signing_algorithms(),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
        }
        for name, value in self._metadata.items():
            doc[name] = json.loads(json.dumps(value))
        return doc

    def blueprint(self, url_prefix: str | None = None) -> Blueprint:
        """A Flask blueprint ``authflow_issuer`` serving discovery and ``/jwks.json``."""
        return make_blueprint(self, url_prefix=url_prefix)

    # -- minting -----------------------------------------------------------------------------------

    def mint(self, claims: MintClaims) -> str:
        """Sign ``claims`` with the current key and return the compact JWT.

        ``iss`` is the issuer, ``iat`` the clock's now and ``jti`` 128 random bits
        unless the claims set them. Raises :class:`IssuanceError` for a past
        ``exp``, ``nbf`` after ``exp`` or a lifetime over the cap.
        """
        return self._mint(claims, None).token

    def mint_with_header(self, claims: MintClaims, header: Mapping[str, Any]) -> str:
        """Like :meth:`mint` with extra JWS header fields (``typ`` may be replaced).

        ``alg`` and ``kid``, when given, must equal the current key's; the
        ``crit``, ``b64``, ``zip``, ``enc`` and key-carrying fields (``jwk``,
        ``jku``, ``x5u``, ``x5c``) are refused.
        """
        return self._mint(claims, header).token

    def mint_with_details(self, claims: MintClaims, header: Mapping[str, Any] | None = None) -> MintedToken:
        """Mint and also return the final claims, ``kid`` and algorithm."""
        return self._mint(claims, header)

    def _mint(self, claims: MintClaims, header: Mapping[str, Any] | None) -> MintedToken:
        if not isinstance(claims, MintClaims):
            raise IssuanceError("mint() needs MintClaims")
        key = self._current_state().loaded.current
        now = math.floor(self._clock.now().timestamp())
        payload = claims.payload(self._issuer, now, secrets.token_urlsafe(16), self._max_lifetime)
        header_segment = key.header_segment if header is None else self._header_segment(key, header)
        try:
            body = json.dumps(payload, separators=_JSON_SEPARATORS, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise IssuanceError("claims are not JSON-serialisable") from exc
        signing_input = f"{header_segment}.{b64url_encode(body)}"
        token = f"{signing_input}.{b64url_encode(key.sign(signing_input.encode('ascii')))}"
        if len(token) > MAX_TOKEN_LENGTH:
            raise IssuanceError(f"the token would be longer than {MAX_TOKEN_LENGTH} characters")
        if token_minted.receivers:
            token_minted.send(self, kid=key.kid, algorithm=key.algorithm, claims=dict(payload))
        return MintedToken(token=token, claims=payload, key_id=key.kid, algorithm=key.algorithm)

    @staticmethod
    def _header_segment(key: LocalIdpSigningKey, extra: Mapping[str, Any]) -> str:
        if not isinstance(extra, Mapping):
            raise IssuanceError("the header must be a mapping")
        header: dict[str, Any] = {"alg": key.algorithm, "kid": key.kid, "typ": "JWT"}
        for name, value in extra.items():
            if not isinstance(name, str) or not name:
                raise IssuanceError("header names must be non-empty strings")
            if name in _FORBIDDEN_HEADER_FIELDS:
                raise IssuanceError(f"header field {name!r} is not allowed")
            if name == "alg" and value != key.algorithm:
                raise IssuanceError(f"header alg {value!r} differs from the current key's {key.algorithm!r}")
            if name == "kid" and value != key.kid:
                raise IssuanceError("header kid differs from the current key's kid")
            if name == "typ" and (not isinstance(value, str) or not value):
                raise IssuanceError("header typ must be a non-empty string")
            header[name] = value
        try:
            raw = json.dumps(header, separators=_JSON_SEPARATORS, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise IssuanceError("the header is not JSON-serialisable") from exc
        if len(raw) > _MAX_HEADER_BYTES:
            raise IssuanceError(f"the header is longer than {_MAX_HEADER_BYTES} bytes")
        return b64url_encode(raw)

    # -- keys --------------------------------------------------------------------------------------

    def rotate_signing_key(self, new_key: LocalIdpSigningKey) -> None:
        """Make ``new_key`` current: persist through the store, publish, then sign with it.

        The store refuses a duplicate ``kid`` (:class:`DuplicateKeyId`) and nothing
        changes. The previous key stays in the JWKS as historical.
        """
        if not isinstance(new_key, LocalIdpSigningKey):
            raise ConfigurationError("rotate_signing_key() needs a LocalIdpSigningKey")
        with self._lock:
            previous = self._state.loaded
            self._store.rotate(new_key)  # persist first: a crash now loses nothing
            try:
                loaded = self._store.load_all()
            except KeyStoreError:
                log.warning("key store unreadable right after rotation; using the rotated set in memory")
                loaded = LoadedKeys(new_key, previous.all_keys)
            self._install(loaded)
        log.info(
            "issuer %s rotated its signing key from %s to %s", self._issuer, previous.current.kid, new_key.kid
        )
        key_rotated.send(self, previous_kid=previous.current.kid, new_kid=loaded.current.kid)

    # -- staged rotation (what relying parties caching the JWKS can follow) --------------------------

    def _staged_store(self) -> StagedRotationStore:
        staged = self._store.staged_rotation()  # what the store declares it keeps
        if staged is None:
            raise KeyStoreError(f"{type(self._store).__name__} does not support staged rotation")
        return staged

    def rotation_state(self) -> RotationState:
        """The staged key (if any) and when each former key stopped signing."""
        return self._staged_store().rotation_state()

    def stage_signing_key(self, next_key: LocalIdpSigningKey) -> None:
        """Publish ``next_key`` in the JWKS without signing with it (step 1 of a rotation).

        Relying parties pick it up within :attr:`jwks_max_age`; :meth:`activate_staged_key`
        then switches signing to it. One key can be staged at a time.
        """
        if not isinstance(next_key, LocalIdpSigningKey):
            raise ConfigurationError("stage_signing_key() needs a LocalIdpSigningKey")
        store = self._staged_store()
        with self._lock:
            store.stage(next_key, self._clock.now())  # persist first
            self._install(self._store.load_all())
        log.info("issuer %s staged key %s", self._issuer, next_key.kid)

    def activate_staged_key(self, *, force: bool = False) -> str:
        """Sign with the staged key from now on (step 2); returns its ``kid``.

        Refused while the staged key has been published for less than
        :attr:`jwks_max_age` (a relying party could still hold a JWKS without it),
        unless ``force``. The previous key stays published, with its retirement time.
        """
        store = self._staged_store()
        now = self._clock.now()
        with self._lock:
            state = store.rotation_state()
            if state.staged_kid is None or state.staged_at is None:
                raise RotationRefused("no staged key: publish one first (flask authflow rotate-key --stage)")
            ready = state.staged_at + self._jwks_max_age
            if now < ready and not force:
                raise RotationRefused(
                    f"key {state.staged_kid} was staged at {state.staged_at.isoformat()}; relying "
                    f"parties may cache the JWKS for {self._jwks_max_age}, so activate it at or after "
                    f"{ready.isoformat()} (or force it)"
                )
            previous = self._state.loaded.current.kid
            kid = store.activate(now)
            loaded = self._store.load_all()
            self._install(loaded)
        log.info("issuer %s activated key %s (previous %s)", self._issuer, kid, previous)
        key_rotated.send(self, previous_kid=previous, new_kid=kid)
        return kid

    def prune_retired_keys(self) -> list[str]:
        """Unpublish retired keys whose longest token has expired (step 3); returns their kids.

        A key retired at ``t`` signed tokens living at most :attr:`max_lifetime`, so it is
        kept until ``t + max_lifetime + 60 s`` (the verifier's clock skew). Without a
        lifetime cap, or without a recorded retirement time, a key is never pruned.
        """
        store = self._staged_store()
        lifetime = self._max_lifetime
        if lifetime is None:
            return []
        now = self._clock.now()
        with self._lock:
            state = store.rotation_state()
            current = self._store.load_all()
            expired = [
                kid
                for kid, at in state.retired_at.items()
                if kid in current.kids() and kid != current.current.kid and at + lifetime + PRUNE_SKEW <= now
            ]
            if expired:
                store.prune(expired)
                self._install(self._store.load_all())
        if expired:
            log.info("issuer %s pruned retired keys %s", self._issuer, ", ".join(expired))
        return expired

    def reload(self) -> bool:
        """Re-read the store now; returns whether the key set changed.

        Raises :class:`KeyStoreError` when the store is unusable (the keys in
        memory stay in use).
        """
        with self._lock:
            return self._reload_locked()

    def _reload_locked(self) -> bool:
        loaded = self._store.load_all()
        if loaded.kids() == self._state.loaded.kids():
            self._state = _KeyState(self._state.loaded, self._ticks())
            return False
        self._install(loaded)
        return True

    def _current_state(self) -> _KeyState:
        state = self._state
        interval = self._reload_interval
        if interval is None or self._ticks() - state.checked_at < interval:
            return state
        # One thread re-reads; the others keep minting with the keys they have.
        if not self._lock.acquire(blocking=False):
            return state
        try:
            if self._ticks() - self._state.checked_at >= interval:
                self._reload_locked()
        except KeyStoreError as exc:
            log.warning("issuer %s could not re-read its key store: %s", self._issuer, exc.message)
            self._state = _KeyState(self._state.loaded, self._ticks())
        finally:
            self._lock.release()
        return self._state

    def _ticks(self) -> float:
        """Seconds on the injected clock: reload timing follows a MockClock in tests."""
        return self._clock.now().timestamp()

    def _install(self, loaded: LoadedKeys) -> None:
        """Publish ``loaded`` in the JWKS, then make its current key the signer (lock held)."""
        keys = [parse_public_jwk(key.public_jwk()) for key in loaded.all_keys]
        own = set(loaded.kids())
        keys.extend(k for k in self._extra_keys if k.kid not in own)
        self._handle.replace_keys(keys)
        self._state = _KeyState(loaded, self._ticks())

    def __repr__(self) -> str:
        return f"<LocalIdp issuer={self._issuer!r} kid={self._state.loaded.current.kid!r}>"
