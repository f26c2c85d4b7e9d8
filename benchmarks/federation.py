"""Federation benchmarks: the provider key cache under pressure.

Everything runs against the in-process :class:`~flask_authflow.testing._provider.TestOpenIDProvider`
through :class:`~flask_authflow.federation._http.RequestsHttpClient`; an adapter in front of the
provider counts the JWKS requests that reach it (and adds ``--latency-ms`` to each, as a network
would, so concurrent callers really do overlap with the fetch).

(a) single-flight: ``--threads`` threads validate one ID token signed with a key the cache has not
    seen, all released at once; prints the JWKS fetches per burst (expected: exactly 1).
(c) ID-token validations per second: ``OAuthProvider.validate_id_token`` beside PyJWT's
    ``jwt.decode`` with a ``PyJWKClient`` (the same checks, nonce included), RS256 and ES256,
    interleaved rounds; prints the ratio of bests, the median of per-round ratios and the spread.
(b) debounce: ``--tokens`` tokens with random ``kid`` values, spread over ``--seconds`` of real
    time by ``--workers`` threads, against a cold cache with the default 1 s floor and token
    bucket (3 in a row, then one per 20 s); prints the fetches and the floor windows touched
    (expected: at most 1 per window). Then the same tokens spread over 60 s of mock-clock time,
    where the bucket bounds the fetches to a few per minute.

    .venv/bin/python benchmarks/federation.py [--threads 64] [--tokens 10000] [--seconds 1]
"""

from __future__ import annotations

import argparse
import math
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_authflow._clock import Clock, MockClock, SystemClock
from flask_authflow.errors import TokenVerificationError, UnknownKeyId
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._jwks_cache import ProviderKeyCache
from flask_authflow.testing._provider import TestOpenIDProvider

CLIENT = "bench-client"
ALGORITHMS = ("ES256", "RS256")


class CountingAdapter(requests.adapters.BaseAdapter):
    """Passes requests to the provider's adapter; counts (and delays) the JWKS ones."""

    def __init__(self, inner: requests.adapters.BaseAdapter, latency: float) -> None:
        super().__init__()
        self.inner = inner
        self.latency = latency
        self.jwks_requests = 0
        self._lock = threading.Lock()

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if urlsplit(request.url or "").path.endswith("/jwks"):
            with self._lock:
                self.jwks_requests += 1
            time.sleep(self.latency)
        return self.inner.send(request, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


def connect(provider: TestOpenIDProvider, latency: float) -> tuple[RequestsHttpClient, CountingAdapter]:
    ((prefix, adapter),) = provider.http_adapters().items()
    counter = CountingAdapter(adapter, latency)
    adapters: Mapping[str, requests.adapters.BaseAdapter] = {prefix: counter}
    return RequestsHttpClient(adapters=adapters), counter


def key_cache(provider: TestOpenIDProvider, http: RequestsHttpClient, clock: Clock) -> ProviderKeyCache:
    jwks_uri = http.get(provider.discovery_url).json_object()["jwks_uri"]
    return ProviderKeyCache(jwks_uri, http, clock=clock)


def validate(cache: ProviderKeyCache, token: str, issuer: str) -> str:
    """The key part of ID-token validation, as the provider object does it: verify; on an
    unknown ``kid`` refresh once (single-flight, debounced) and verify again."""
    try:
        cache.verifier(ALGORITHMS).verify(token, CLIENT, issuer=issuer)
        return "verified"
    except UnknownKeyId as exc:
        if not cache.refresh_for_unknown_kid(exc.kid):
            return "unknown kid"
    try:
        cache.verifier(ALGORITHMS).verify(token, CLIENT, issuer=issuer)
        return "verified after refresh"
    except TokenVerificationError as exc:
        return f"refused ({exc.reason})"


# --- (a) single-flight -----------------------------------------------------------------------------


def one_burst(threads: int, latency: float) -> tuple[int, list[str]]:
    """One burst of (a): the JWKS fetches it caused and each thread's outcome."""
    clock = MockClock(datetime.now(UTC))
    provider = TestOpenIDProvider(algorithm="ES256", clock=clock)
    http, counter = connect(provider, latency)
    cache = key_cache(provider, http, clock)
    cache.load()
    provider.rotate_key()  # the provider signs with a key the cache has not seen
    token = provider.id_token(CLIENT, "alice")
    clock.advance(cache.debounce)  # past the debounce window of the load
    before = counter.jwks_requests
    start = threading.Barrier(threads)
    results: list[str] = [""] * threads

    def meet(index: int) -> None:
        start.wait()
        results[index] = validate(cache, token, provider.issuer)

    workers = [threading.Thread(target=meet, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return counter.jwks_requests - before, results


def single_flight_burst(args: argparse.Namespace) -> None:
    print(f"(a) single-flight: {args.threads} threads meet one unknown kid at once, {args.rounds} bursts")
    fetches: list[int] = []
    outcomes: Counter[str] = Counter()
    for _ in range(args.rounds):
        made, results = one_burst(args.threads, args.latency_ms / 1000)
        fetches.append(made)
        outcomes.update(results)
    if set(outcomes) - {"verified", "verified after refresh"}:
        raise RuntimeError(f"every thread should verify the token (after the one refresh): {dict(outcomes)}")
    print(f"    JWKS fetches per burst: {fetches} (expected exactly 1 each)")
    print(f"    outcomes: {dict(outcomes)}")


# --- (b) debounce ----------------------------------------------------------------------------------


def random_kid_tokens(provider: TestOpenIDProvider, count: int) -> list[str]:
    now = int(time.time())
    claims = {"iss": provider.issuer, "sub": "mallory", "aud": CLIENT, "iat": now, "exp": now + 3600}
    return [provider.sign(claims, header={"kid": secrets.token_urlsafe(12)}) for _ in range(count)]


def random_kid_flood(args: argparse.Namespace) -> None:
    provider = TestOpenIDProvider(algorithm="ES256")
    tokens = random_kid_tokens(provider, args.tokens)
    http, counter = connect(provider, args.latency_ms / 1000)
    cache = key_cache(provider, http, SystemClock())  # cold: the first unknown kid fetches
    debounce = cache.debounce.total_seconds()
    print(
        f"(b) debounce: {len(tokens)} tokens with random kids over {args.seconds:g} s of real time, "
        f"{args.workers} threads, debounce {debounce:g} s, cold cache"
    )
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    started = time.perf_counter()

    def work(share: list[str]) -> None:
        spacing = args.seconds / max(len(share), 1)
        seen: Counter[str] = Counter()
        for i, token in enumerate(share):
            ahead = started + i * spacing - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            seen[validate(cache, token, provider.issuer)] += 1
        with lock:
            outcomes.update(seen)

    workers = [threading.Thread(target=work, args=(tokens[w :: args.workers],)) for w in range(args.workers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    if outcomes != Counter({"unknown kid": len(tokens)}):
        raise RuntimeError(f"every random kid should stay unknown: {dict(outcomes)}")
    windows = max(1, math.ceil(elapsed / debounce))
    print(
        f"    JWKS fetches: {counter.jwks_requests} in {elapsed:.2f} s = {windows} debounce window(s) "
        f"(bound: <= 1 per window); {outcomes['unknown kid']} tokens refused as unknown kid"
    )

    # The same stream over 60 s of mock-clock time: one fetch per window, not one per token.
    clock = MockClock(datetime.now(UTC))
    http, counter = connect(provider, 0.0)
    cache = key_cache(provider, http, clock)
    span = timedelta(seconds=60)
    step = span / len(tokens)
    outcomes.clear()
    for token in tokens:
        outcomes[validate(cache, token, provider.issuer)] += 1
        clock.advance(step)
    if outcomes != Counter({"unknown kid": len(tokens)}):
        raise RuntimeError(f"every random kid should stay unknown: {dict(outcomes)}")
    windows = math.ceil(span / cache.debounce)
    print(
        f"    the same tokens over {span.total_seconds():g} s of mock-clock time: "
        f"{counter.jwks_requests} JWKS fetches in {windows} debounce windows"
    )


# --- (c) ID-token validation per second ------------------------------------------------------------


def _serve(app: Any, port: int) -> Callable[[], None]:
    """Serve a WSGI app on 127.0.0.1 (PyJWKClient fetches with urllib, outside requests)."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def id_token_validation(args: argparse.Namespace) -> None:
    """Ours (``OAuthProvider.validate_id_token``: signature on the cached keys, iss, aud, azp,
    exp, iat bound, nonce, sub) beside PyJWT (``PyJWKClient`` + ``jwt.decode`` with
    audience, issuer and required claims, plus the same nonce comparison), RS256 and ES256."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log lines in the output
    print(f"(c) ID-token validations per second, {args.rounds} interleaved rounds of {args.validations}")
    for algorithm in ("RS256", "ES256"):
        _compare_validation(algorithm, args)


def _compare_validation(algorithm: str, args: argparse.Namespace) -> None:
    import hmac

    import jwt

    from flask_authflow.federation._provider import OAuthProviderConfig

    port = _free_port()
    provider = TestOpenIDProvider(f"http://127.0.0.1:{port}", algorithm=algorithm)
    stop = _serve(provider.app, port)
    try:
        http = RequestsHttpClient()
        ours = OAuthProviderConfig.discover(
            provider.discovery_url,
            CLIENT,
            "secret",
            "http://127.0.0.1/cb",
            name="bench",
            http=http,
            id_token_signed_response_alg=algorithm,  # the one algorithm the client accepts
        )
        nonce = secrets.token_urlsafe(16)
        token = provider.id_token(CLIENT, "user-1", nonce=nonce)
        jwks_client = jwt.PyJWKClient(f"{provider.issuer}/jwks", cache_keys=True)

        def run_ours() -> str:
            return str(ours.validate_id_token(token, nonce).sub)

        def run_pyjwt() -> str:
            key = jwks_client.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=CLIENT,
                issuer=provider.issuer,
                leeway=60,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
            if not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
                raise RuntimeError("nonce")
            return str(claims["sub"])

        contenders = {"authflow": run_ours, "PyJWT + PyJWKClient": run_pyjwt}
        for name, run in contenders.items():  # correctness first, and warm caches
            if run() != "user-1":
                raise RuntimeError(f"{name} returned the wrong subject")
            for _ in range(200):
                run()
        best = dict.fromkeys(contenders, 0.0)
        ratios: list[float] = []
        for _ in range(args.rounds):
            rates = {}
            for name, run in contenders.items():
                started = time.perf_counter()
                for _ in range(args.validations):
                    run()
                rates[name] = args.validations / (time.perf_counter() - started)
                best[name] = max(best[name], rates[name])
            ratios.append(rates["authflow"] / rates["PyJWT + PyJWKClient"])
        ratios.sort()
        median = ratios[len(ratios) // 2]
        for name, rate in best.items():
            print(f"    {algorithm} {name:<22} {rate:>9.0f} /s")
        print(
            f"    {algorithm} authflow / PyJWT: "
            f"{best['authflow'] / best['PyJWT + PyJWKClient']:.2f}x (bests), "
            f"median of rounds {median:.2f}x, spread {ratios[0]:.2f}x-{ratios[-1]:.2f}x"
        )
    finally:
        stop()


SECTIONS: list[Callable[[argparse.Namespace], None]] = [
    single_flight_burst,
    random_kid_flood,
    id_token_validation,
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=64, help="threads meeting one unknown kid in (a)")
    parser.add_argument("--rounds", type=int, default=5, help="bursts in (a)")
    parser.add_argument("--tokens", type=int, default=10_000, help="tokens with random kids in (b)")
    parser.add_argument("--seconds", type=float, default=1.0, help="real time the tokens of (b) span")
    parser.add_argument("--workers", type=int, default=8, help="threads sending the tokens of (b)")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="added to each JWKS request")
    parser.add_argument(
        "--validations", type=int, default=2000, help="ID tokens per contender per round in (c)"
    )
    args = parser.parse_args()
    for section in SECTIONS:
        section(args)
        print(flush=True)


if __name__ == "__main__":
    main()
