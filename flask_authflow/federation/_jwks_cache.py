"""The provider's signing keys, cached: single-flight refreshes, rate-limited, kept while it is down.

:class:`ProviderKeyCache` owns a :class:`~flask_authflow.jose._jwks.JwksHandle` filled from the
provider's ``jwks_uri``; verifiers made by :meth:`ProviderKeyCache.verifier` read it.

* **Usable keys only.** Each fetch replaces the keys with the usable ones of the set:
  keys with ``use=enc``, an unknown ``kty`` or curve, RSA under 2048 bits, malformed
  values or an ``alg`` we do not verify are skipped and counted; one bad key never
  spoils the set. A key without ``alg`` is kept: it verifies only the algorithms of its
  own key type within the verifier's allow-list (``require_alg=True`` skips it instead).
* **Hostile sets.** A key that publishes private members (``d``, ``p``, ``q``, ``dp``,
  ``dq``, ``qi``, ``oth``, or a symmetric ``k``) is skipped and logged: the provider
  leaked it, so anyone may sign with it. A ``kid`` that several keys share is refused
  (every key of it is skipped and logged), so which key checks a token is never a guess.
* **Failures keep what is known.** A fetch that fails (transport error, a status other
  than 200, a body that is not a JSON object with a ``keys`` list, or no usable key at
  all) leaves the keys in place, so logins keep working while the provider is down; it
  is counted (:attr:`~ProviderKeyCache.failure_count`) and logged.
* **Freshness.** Keys are kept for the ``max-age`` of the JWKS answer's
  ``Cache-Control``, capped at ``max_age_cap`` (1 day). ``no-store``, ``no-cache`` and
  ``max-age=0`` mean "as short as allowed", which is the floor. Without ``max-age`` the
  keys are kept for ``default_max_age`` (1 hour). ``Expires`` and ``Age`` are not read.
* **Single-flight, floor and token bucket.** At most one fetch runs at a time: callers
  arriving during a fetch wait for its result (at most ``wait_timeout``, by default the
  HTTP client's total deadline) instead of fetching again. No fetch starts within
  ``debounce`` (the floor, 1 s) of the previous one. A token with an unknown ``kid``
  also spends a token of a bucket holding ``refresh_burst`` (3) that refills one per
  ``refresh_interval`` (20 s): a genuine rotation is followed at once, while a flood
  of made-up ``kid`` values causes at most a few fetches per minute.
  :meth:`~ProviderKeyCache.load` alone ignores both limits.

* **Observable.** Listeners added with :meth:`~ProviderKeyCache.add_fetch_listener` are
  told of every fetch when it ends (``True`` for success): the app's
  ``authflow_jwks_refreshes_total`` and ``authflow_jwks_refresh_failures_total`` count them.

Times come from the injected :class:`~flask_authflow._clock.Clock`; only the wait for a
running fetch uses real time (a thread cannot sleep on a mock clock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from flask_authflow._clock import Clock
from flask_authflow.errors import ConfigurationError
from flask_authflow.federation._errors import ProviderUnreachable
from flask_authflow.federation._http import HttpClient, check_provider_url
from flask_authflow.federation._jwks_fetch import PRIVATE_MEMBERS, Fetched, cache_max_age, fetch_jwks
from flask_authflow.jose import JwtVerifier
from flask_authflow.jose._jwks import JwksHandle, JwksSnapshot

__all__ = ["PRIVATE_MEMBERS", "ProviderKeyCache", "cache_max_age"]

log = logging.getLogger("flask_authflow.federation")


def _positive(value: timedelta, name: str, *, allow_zero: bool = False) -> timedelta:
    if not isinstance(value, timedelta) or value < timedelta(0) or (not allow_zero and not value):
        raise ConfigurationError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} timedelta")
    return value


class ProviderKeyCache:
    """The signing keys of one provider (see the module docstring).

    :param jwks_uri: the provider's ``jwks_uri`` (checked with
        :func:`~flask_authflow.federation._http.check_provider_url`).
    :param http: the :class:`~flask_authflow.federation._http.HttpClient` to fetch with.
    :param clock: the time source of freshness and debounce.
    :param debounce: the floor: the least time between two fetches (except :meth:`load`);
        also the shortest time keys are considered fresh (default 1 s).
    :param default_max_age: how long keys stay fresh when the answer has no ``max-age``.
    :param max_age_cap: the longest a ``max-age`` is honoured.
    :param require_alg: skip keys without ``alg`` (default ``False``). RFC 7517 makes
        ``alg`` optional and some providers leave it out (Microsoft Entra ID); a key
        without ``alg`` verifies only the algorithms of its own key type within the
        verifier's allow-list, so keeping it is safe.
    :param refresh_burst, refresh_interval: the token bucket of unknown-``kid`` refreshes:
        at most ``refresh_burst`` in a row, then one per ``refresh_interval``.
    :param wait_timeout: the longest a caller waits for another thread's fetch
        (default: the HTTP client's connect plus read timeouts).
    """

    def __init__(
        self,
        jwks_uri: str,
        http: HttpClient,
        *,
        clock: Clock,
        debounce: timedelta = timedelta(seconds=1),
        default_max_age: timedelta = timedelta(hours=1),
        max_age_cap: timedelta = timedelta(days=1),
        require_alg: bool = False,
        refresh_burst: int = 3,
        refresh_interval: timedelta = timedelta(seconds=20),
        wait_timeout: timedelta | None = None,
    ) -> None:
        self.jwks_uri = check_provider_url(jwks_uri, "jwks_uri")
        self._http = http
        self._clock = clock
        self.debounce = _positive(debounce, "debounce", allow_zero=True)
        self.default_max_age = _positive(default_max_age, "default_max_age")
        self.max_age_cap = _positive(max_age_cap, "max_age_cap")
        self.require_alg = require_alg
        if isinstance(refresh_burst, bool) or not isinstance(refresh_burst, int) or refresh_burst < 1:
            raise ConfigurationError("refresh_burst must be a positive number of refreshes")
        self.refresh_burst = refresh_burst
        self.refresh_interval = _positive(refresh_interval, "refresh_interval")
        self._bucket = float(refresh_burst)
        self._bucket_at: datetime | None = None
        if wait_timeout is None:
            wait_timeout = timedelta(seconds=sum(http.timeout) + 1.0)
        self._wait_seconds = _positive(wait_timeout, "wait_timeout").total_seconds()
        self._handle = JwksHandle()
        self._cond = threading.Condition(threading.Lock())
        self._fetching = False
        self._generation = 0  # completed fetches
        self._waiting = 0
        self._loaded = False
        self._fresh_until: datetime | None = None
        self._last_fetch_at: datetime | None = None
        self._last_ok = False
        self._last_error: str | None = None
        self._fetch_count = 0
        self._failure_count = 0
        self._verifiers: dict[frozenset[str], JwtVerifier] = {}
        self._fetch_listeners: tuple[Callable[[bool], None], ...] = ()

    # --- reading -------------------------------------------------------------------------------------

    @property
    def handle(self) -> JwksHandle:
        """The shared key set (replaced in place by each successful fetch)."""
        return self._handle

    def snapshot(self) -> JwksSnapshot:
        """The current keys (``.skipped`` counts the unusable keys of the last good fetch)."""
        return self._handle.snapshot()

    def knows(self, kid: str | None) -> bool:
        """Whether a key with this ``kid`` is cached (``None``: a key without ``kid``)."""
        return kid in self._handle.snapshot().by_kid

    def verifier(self, algorithms: Collection[str]) -> JwtVerifier:
        """A :class:`~flask_authflow.jose.JwtVerifier` on the cached keys, accepting
        exactly ``algorithms``, reading time from the cache's clock."""
        if isinstance(algorithms, str):
            raise ConfigurationError("algorithms must be a list of names, not a string")
        allowed = frozenset(algorithms)
        verifier = self._verifiers.get(allowed)
        if verifier is None:
            verifier = JwtVerifier(self._handle, clock=self._clock).with_algorithms(algorithms)
            with self._cond:
                self._verifiers.setdefault(allowed, verifier)
        return verifier

    @property
    def loaded(self) -> bool:
        """Whether a fetch has succeeded yet."""
        return self._loaded

    @property
    def fetch_count(self) -> int:
        """HTTP fetches started so far (successful or not)."""
        return self._fetch_count

    @property
    def failure_count(self) -> int:
        """Fetches that failed (the keys already known were kept)."""
        return self._failure_count

    @property
    def last_error(self) -> str | None:
        """Why the latest fetch failed; ``None`` after a successful one."""
        return self._last_error

    @property
    def fresh_until(self) -> datetime | None:
        """When the keys become stale (``None`` before the first successful fetch)."""
        return self._fresh_until

    @property
    def last_fetch_at(self) -> datetime | None:
        """When the latest fetch started (the debounce window counts from it)."""
        return self._last_fetch_at

    @property
    def waiting(self) -> int:
        """Callers waiting right now for a running fetch (a gauge for metrics and tests)."""
        return self._waiting

    def add_fetch_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ok)`` after every fetch, successful (``True``) or not (once per
        listener, however often it is added). A listener that raises is logged and ignored."""
        with self._cond:
            if listener not in self._fetch_listeners:
                self._fetch_listeners = (*self._fetch_listeners, listener)

    def remove_fetch_listener(self, listener: Callable[[bool], None]) -> None:
        """Stop calling ``listener`` (no error when it was not added)."""
        with self._cond:
            self._fetch_listeners = tuple(known for known in self._fetch_listeners if known != listener)

    def _tell_listeners(self, ok: bool) -> None:
        for listener in self._fetch_listeners:
            try:
                listener(ok)
            except Exception:
                log.exception("a JWKS fetch listener of %s failed", self.jwks_uri)

    # --- fetching ------------------------------------------------------------------------------------

    def load(self) -> JwksSnapshot:
        """Fetch now, whatever the debounce window says (the first fetch, after discovery).

        A fetch already running is waited for instead.

        :raises ProviderUnreachable: the fetch failed (the keys known before, if any, are
            kept).
        """
        outcome = self._single_flight(lambda now: True)
        if outcome is not True:
            raise ProviderUnreachable(self._failure_message())
        return self._handle.snapshot()

    def ensure_fresh(self) -> None:
        """Refresh the keys when they are older than their ``max-age`` (single-flight,
        debounced); stale keys stay in use when the refresh fails.

        :raises ProviderUnreachable: no key has ever been fetched and fetching failed
            (now, or within the debounce window).
        """
        fresh_until = self._fresh_until
        if fresh_until is not None and self._clock.now() < fresh_until:
            return  # the common case, without the lock

        def stale(now: datetime) -> bool:
            current = self._fresh_until
            return (current is None or now >= current) and self._outside_debounce(now)

        # Stale keys still verify: only a cache without keys waits for another thread's fetch.
        self._single_flight(stale, wait_if_loaded=False)
        if not self._loaded:
            raise ProviderUnreachable(self._failure_message())

    def refresh_for_unknown_kid(self, kid: str | None) -> bool:
        """A token names ``kid``, which is not cached: fetch once, then say whether it is known.

        Many concurrent callers cause one fetch (the others wait for its result); within
        the floor of the previous fetch, or with the token bucket empty, no fetch is made
        and the answer is given at once. Never raises for a failed fetch: the answer is
        then ``False`` unless the key is known anyway.
        """

        def unknown(now: datetime) -> bool:
            return not self.knows(kid) and self._outside_debounce(now) and self._take_token(now)

        if self.knows(kid):
            return True
        self._single_flight(unknown)
        return self.knows(kid)

    def _outside_debounce(self, now: datetime) -> bool:
        last = self._last_fetch_at
        # A clock set back (last in the future) does not lock refreshes out until it catches up.
        return last is None or not (timedelta(0) <= now - last < self.debounce)

    def _take_token(self, now: datetime) -> bool:
        """Spend one token of the unknown-``kid`` bucket, refilled by elapsed time (under the lock)."""
        last = self._bucket_at
        if last is not None and now > last:
            refill = (now - last) / self.refresh_interval
            self._bucket = min(float(self.refresh_burst), self._bucket + refill)
        self._bucket_at = now if last is None or now > last else last
        if self._bucket < 1.0:
            return False
        self._bucket -= 1.0
        return True

    def _single_flight(
        self, wanted: Callable[[datetime], bool], *, wait_if_loaded: bool = True
    ) -> bool | None:
        """Fetch when ``wanted(now)`` says so and no fetch runs; wait for a running one
        (unless keys are loaded and ``wait_if_loaded`` is false).

        Returns whether the fetch made or waited for succeeded, or ``None`` when there was
        none (not wanted, not waited for, or the wait timed out). ``wanted`` runs under
        the lock.
        """
        with self._cond:
            if self._fetching:
                if self._loaded and not wait_if_loaded:
                    return None
                generation = self._generation
                self._waiting += 1
                try:
                    done = self._cond.wait_for(lambda: self._generation != generation, self._wait_seconds)
                finally:
                    self._waiting -= 1
                return self._last_ok if done else None
            started = self._clock.now()
            if not wanted(started):
                return None
            self._fetching = True
            self._last_fetch_at = started
            self._fetch_count += 1
        fetched = Fetched(error="the fetch raised an unexpected error")
        try:
            fetched = fetch_jwks(self._http, self.jwks_uri, require_alg=self.require_alg)
        finally:
            with self._cond:
                self._apply(fetched, started)
                self._fetching = False
                self._generation += 1
                self._cond.notify_all()
            self._tell_listeners(fetched.error is None)
        return fetched.error is None

    def _apply(self, fetched: Fetched, started: datetime) -> None:
        """Record a finished fetch (under the lock)."""
        self._last_ok = fetched.error is None
        if fetched.error is not None:
            self._failure_count += 1
            self._last_error = fetched.error
            log.warning(
                "JWKS fetch from %s failed (%s); %s",
                self.jwks_uri,
                fetched.error,
                "keeping the keys known" if self._loaded else "no keys yet",
            )
            return
        self._handle.replace_keys(fetched.keys, skipped=fetched.skipped)
        self._fresh_until = started + self._lifetime(fetched.max_age)
        self._loaded = True
        self._last_error = None
        if fetched.skipped:
            log.info(
                "JWKS from %s: %d usable keys, %d skipped (encryption keys, unsupported types or curves%s)",
                self.jwks_uri,
                len(fetched.keys),
                fetched.skipped,
                ", no alg" if self.require_alg else "",
            )

    def _lifetime(self, max_age: timedelta | None) -> timedelta:
        if max_age is None:
            max_age = self.default_max_age
        return max(self.debounce, min(max_age, self.max_age_cap))

    def _failure_message(self) -> str:
        reason = self._last_error or "a fetch is still running"
        return f"could not fetch the provider's keys from {self.jwks_uri}: {reason}"

    def __repr__(self) -> str:
        kids = [key.kid for key in self._handle.snapshot().keys]
        return f"<ProviderKeyCache {self.jwks_uri!r} kids={kids!r} fetches={self._fetch_count}>"
