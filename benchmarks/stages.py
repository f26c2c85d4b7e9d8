"""Where a protected GET's time goes: each stage of our request path timed on its own.

The stages, in the order a request meets them (the budget in ``benchmarks/README.rst``):

cookie        Werkzeug parses the ``Cookie`` header (what ``request.cookies`` does)
signature     the cookie's HMAC checked (itsdangerous, the key derived once per app)
fingerprint   the HMAC of the User-Agent the session is bound to
store read    the store's lookup of the sealed record (memory: a dict; SQL: one SELECT on a
              pooled connection; Redis: one HMGET), decrypt and decode excluded
decrypt       AES-256-GCM open of the record (persistent stores)
state         the record decoded and checked: JSON, expiry, the request's session object
user load     ``current_user`` through a dict-lookup user loader (once per request)
after hooks   Flask's ``process_response`` with our hooks for a session that was read and
              is unchanged (``Vary``, ``Cache-Control``, no write)

beside the whole request (the WSGI call, each answer checked) and a bare Flask request
(the framework's own floor). Each stage is the best of ``--repeat`` timings of
``--number`` calls with the same inputs (one session: the warm case; the 10,000-session
case is ``protected_request.py``'s). Stages overlap Flask's own work slightly, so they do
not add up exactly to the request minus bare Flask.

    .venv/bin/python benchmarks/stages.py [--number 5000] [--repeat 5] [--postgres auto|off] [--no-redis]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from werkzeug.http import parse_cookie

from benchmarks.login import bench_workdir
from benchmarks.protected_request import UA, authflow, bare_flask, replayer, start_servers


def best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def stages_of(built: Any, number: int, repeat: int, *, sealed: bool) -> dict[str, float]:
    """The stages of ``built``'s request; ``sealed``: its store keeps records encrypted."""
    from flask_authflow._core.session import sid_hash
    from flask_authflow._web.current_user import _CACHE_KEY, load_current_user
    from flask_authflow.sessions._interface import AuthFlowSessionInterface
    from flask_authflow.sessions._stores import deserialize_record, serialize_record

    app, requests = built
    environ, _ = requests[0]
    interface = app.session_interface
    assert isinstance(interface, AuthFlowSessionInterface)
    raw = parse_cookie(environ)[interface.cookie_name]
    sid = raw.rpartition(".")[0]
    store: Any = interface.store
    timings = {
        "cookie": best_us(lambda: parse_cookie(environ), number, repeat),
        "signature": best_us(lambda: interface._verify_cookie(raw), number, repeat),
        "fingerprint": best_us(lambda: interface.fingerprint(UA), number, repeat),
    }
    load = best_us(lambda: store.load(sid), number, repeat)
    if not sealed:
        timings["store read"], timings["decrypt"] = load, 0.0
        record = store.load(sid)
        timings["state"] = best_us(lambda: interface.expires_at(record), number, repeat)
    else:
        opener = store._opener  # the SQL and Redis stores' sealed-record opener
        key = sid_hash(sid)
        plain = serialize_record(store.load(sid))
        sealed = opener._crypto.encrypt(key, plain)
        timings["decrypt"] = best_us(lambda: opener._crypto.decrypt(key, sealed), number, repeat)
        timings["state"] = best_us(lambda: deserialize_record(plain), number, repeat)
        opened = best_us(lambda: opener.open(key, sealed, sid), number, repeat)
        timings["store read"] = max(0.0, load - opened)
    with app.test_request_context("/p", headers={"User-Agent": UA, "Cookie": environ["HTTP_COOKIE"]}):
        from flask import g

        def user() -> object:
            g.pop(_CACHE_KEY, None)  # as the first call of a request
            return load_current_user()

        timings["user load"] = best_us(user, number, repeat)
        response = app.make_response("ok")
        timings["after hooks"] = best_us(lambda: app.process_response(response), number, repeat)
    timings["whole request"] = best_us(replayer(app, requests), number, repeat)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres", default="auto")
    parser.add_argument("--no-redis", dest="redis", action="store_false")
    parser.add_argument("--sessions", type=int, default=1)
    args = parser.parse_args()
    workdir = bench_workdir()
    server, postgres_url, redis_server, redis_url = start_servers(args)
    stores: dict[str, Callable[[], Any]] = {
        "memory": lambda: authflow("memory", None, 1, use_current_user=True),
        "SQLite": lambda: authflow("sql", f"sqlite:///{workdir / 'stages.db'}", 1, use_current_user=True),
    }
    if postgres_url:
        stores["PostgreSQL"] = lambda: authflow("sql", postgres_url, 1, use_current_user=True)
    if redis_url:
        stores["Redis"] = lambda: authflow(
            "redis", f"sqlite:///{workdir / 'stages-r.db'}", 1, use_current_user=True, redis_url=redis_url
        )
    bare = best_us(replayer(*bare_flask(1)), args.number, args.repeat)
    table = {
        name: stages_of(build(), args.number, args.repeat, sealed=name != "memory")
        for name, build in stores.items()
    }
    if server is not None:
        server.stop()
    if redis_server is not None:
        redis_server.stop()
    names = list(table)
    print(f"µs per call, best of {args.repeat} x {args.number} (one session, in process)")
    print(f"{'stage':<16}" + "".join(f"{name:>12}" for name in names))
    for stage in next(iter(table.values())):
        print(f"{stage:<16}" + "".join(f"{table[name][stage]:>12.1f}" for name in names))
    print(f"{'bare Flask':<16}" + "".join(f"{bare:>12.1f}" for _ in names))


if __name__ == "__main__":
    main()
