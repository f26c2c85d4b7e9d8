"""Authenticated GETs per second: flask-authflow beside the peers, in one run.

Each contender serves one protected view; a session is logged in once (with the
User-Agent and address replayed later, so no contender sees a "new client"), then the
same WSGI environ (carrying the cookie) is replayed straight into the app, so the harness
costs the same for everyone. Every contender's answer is checked on every request. The
contenders take turns in every round (interleaved); each one's per-round rates are kept.
Prints requests/s (best round, median round, spread), how many rounds, and for each of
ours against each peer the ratio of the bests, the median of the per-round ratios and
their range. The "current_user" pair loads the user through the same dict-lookup loader
on both sides; "Flask-Login + Flask-SQLAlchemy user loader (SQLite)" reads the user from
SQLite on every request as Flask-Login's docs recommend, beside our SQLite session store.

The networked stores (PostgreSQL, Redis) each get a floor beside them: our memory-store
contender followed by one bare round trip to the same server (a PostgreSQL ``SELECT 1``
on a psycopg connection in autocommit, a Redis ``PING``), the best a store that needs
one round trip per request and does no work at all could do on this machine. Their
ratios to our SQLite store are printed next to the stores' own. SQLite has one too: our
memory-store request and the SQLite contender's own read of its session rows by key
through SQLAlchemy (no decrypt, no decode), against Flask-Security-Too. PostgreSQL has a
second floor, the same ``SELECT 1`` through SQLAlchemy (a pooled connection of an AUTOCOMMIT
engine and a Core statement, as a store on the library's public API must run it): its
ratio to the bare floor is what the library layer alone leaves of the "0.85x of its
floor" target.

``--sessions N`` is the realistic case: every contender holds N distinct logged-in
sessions (distinct cookies) and its requests take them round-robin, so no cache sees the
same cookie twice in a row and, with N larger than the requests of a round, no cookie
twice in one round. The peers log in N distinct users (a cookie session would otherwise
repeat the same cookie within a second); ours log in once through the real password
login and the store then holds N copies of that record under new session ids, each
with its own signed cookie (what N logins of one user leave behind, without N password
hashes). Flask-Login + Flask-Session (Redis, and SQLAlchemy on SQLite) join the peers,
configured as their docs say (permanent sessions refreshed on every request, their
defaults). With ``--sessions 1`` (the default) one cookie is replayed.

``--touch-only`` keeps our stores' read-only and touch rounds and nothing else (the touch
part of ``run_all.py --touch``): the ratio of the two, per store, within one run.

    .venv/bin/python benchmarks/protected_request.py [--requests 2000] [--rounds 5] [--postgres URL]
        [--no-redis] [--sessions 10000] [--touch-only]
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from werkzeug.test import EnvironBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.login import bench_workdir  # importable once the path above is set

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]
UA = "flask-authflow-tests/1.0"  # the user agent login_test_client binds the session to
#: What a contender builder returns: the app and, per session, the environ of a GET of the
#: protected view carrying that session's cookie and the body the view must answer.
Built = tuple[Flask, list[tuple[dict[str, Any], bytes]]]
FLOOR = "floor: memory store + one"


def _environ_for(app: Flask, path: str, cookie_header: str | None) -> dict[str, Any]:
    headers = {"User-Agent": UA}
    if cookie_header:
        headers["Cookie"] = cookie_header
    builder = EnvironBuilder(path=path, headers=headers, environ_base={"REMOTE_ADDR": "127.0.0.1"})
    try:
        return builder.get_environ()
    finally:
        builder.close()


def _cookie_header(client: Any) -> str:
    return "; ".join(f"{c.key}={c.value}" for c in client._cookies.values())


def replayer(app: Flask, requests: list[tuple[dict[str, Any], bytes]]) -> Callable[[], None]:
    """One request of a contender, taking its sessions round-robin; checks every response
    is the protected one of that session."""
    status_seen: list[str] = []
    turns = itertools.cycle(requests)

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Callable[[bytes], None]:
        status_seen.append(status)
        return lambda data: None

    def one() -> None:
        status_seen.clear()
        environ, expect = next(turns)
        body = b"".join(app.wsgi_app(dict(environ), start_response))
        if not status_seen[0].startswith("200") or body != expect:
            raise RuntimeError(f"contender answered {status_seen[0]} {body[:80]!r}")

    return one


def log_in_each(
    app: Flask, count: int, login_path: str, expect: Callable[[int], bytes]
) -> list[tuple[dict[str, Any], bytes]]:
    """``count`` logins through ``login_path`` (``{}`` is the user's number), each from a
    new client with the replayed User-Agent and address; checks the cookies are distinct."""
    requests = []
    for number in range(1, count + 1):
        client = app.test_client()
        client.get(
            login_path.format(number), headers={"User-Agent": UA}, environ_base={"REMOTE_ADDR": "127.0.0.1"}
        )
        requests.append((_environ_for(app, "/p", _cookie_header(client)), expect(number)))
    if len({environ.get("HTTP_COOKIE") for environ, _ in requests}) != count:
        raise RuntimeError(f"{app.name}: {count} logins did not give {count} distinct cookies")
    return requests


def measure_interleaved(
    contenders: dict[str, tuple[Callable[[], None], int]], rounds: int
) -> dict[str, list[float]]:
    """Requests per second of each contender in each of ``rounds`` rounds.

    The contenders take turns within every round (A B C ... then A B C ... again), so a
    slow phase of the machine (another process, a thermal dip) hits all of them alike
    instead of whichever ran during it. The per-round rates are kept: the ratio of two
    contenders within one round is what :func:`ratio_line` takes the median of.
    """
    for one, _ in contenders.values():
        for _ in range(200):  # warm up
            one()
    per_round: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (one, requests) in contenders.items():
            started = time.perf_counter()
            for _ in range(requests):
                one()
            per_round[name].append(requests / (time.perf_counter() - started))
    return per_round


def spread(rates: list[float]) -> str:
    """How far the rounds of one contender lie apart: (worst - best) / best."""
    return f"±{(max(rates) - min(rates)) / max(rates) * 100:.0f}%" if rates else "-"


def ratio_line(ours: list[float], peer: list[float]) -> str:
    """Ours / peer as the ratio of the bests, the median of per-round ratios and their range."""
    per_round = sorted(o / p for o, p in zip(ours, peer, strict=True))
    return (
        f"best {max(ours) / max(peer):5.2f}x  median {statistics.median(per_round):5.2f}x  "
        f"(rounds {per_round[0]:.2f}-{per_round[-1]:.2f}x)"
    )


# --- contenders ----------------------------------------------------------------------------------


def bare_flask(sessions: int) -> Built:
    app = Flask("bare")

    @app.get("/p")
    def protected() -> str:
        return "ok"

    return app, [(_environ_for(app, "/p", None), b"ok")]


def flask_cookie_session(sessions: int) -> Built:
    from flask import abort, request, session

    app = Flask("cookie")
    app.secret_key = secrets.token_bytes(32)
    users = {str(number) for number in range(1, sessions + 1)}

    @app.get("/login")
    def login() -> str:
        session["user_id"] = request.args["u"]
        return "in"

    @app.get("/p")
    def protected() -> str:
        if session.get("user_id") not in users:
            abort(401)
        return "ok"

    return app, log_in_each(app, sessions, "/login?u={}", lambda number: b"ok")


def flask_login(sessions: int, *, use_current_user: bool = False, flask_session: Any = None) -> Built:
    """Flask-Login with ``sessions`` users, each logged in once; ``flask_session`` configures
    Flask-Session on the app (its session interface replaces Flask's cookie session)."""
    from flask import request
    from flask_login import LoginManager, UserMixin, current_user, login_required, login_user

    class User(UserMixin):
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    users = {str(number): User(str(number)) for number in range(1, sessions + 1)}
    app = Flask("flask_login")
    app.secret_key = secrets.token_bytes(32)
    if flask_session is not None:
        flask_session(app)
    manager = LoginManager(app)
    manager.user_loader(users.get)

    @app.get("/login")
    def login() -> str:
        login_user(users[request.args["u"]])
        return "in"

    @app.get("/p")
    @login_required
    def protected() -> str:
        return f"ok {current_user.id}" if use_current_user else "ok"

    # Logged in with the User-Agent and address the benchmark replays: Flask-Login's
    # session protection would otherwise see a new client and rewrite the cookie each time.
    def expect(number: int) -> bytes:
        return f"ok {number}".encode() if use_current_user else b"ok"

    return app, log_in_each(app, sessions, "/login?u={}", expect)


def flask_session_redis(redis_url: str) -> Callable[[Flask], None]:
    """Flask-Session's Redis backend, as its docs configure it."""

    def configure(app: Flask) -> None:
        import redis
        from flask_session import Session

        app.config.update(SESSION_TYPE="redis", SESSION_REDIS=redis.Redis.from_url(redis_url))
        Session(app)

    return configure


def flask_session_sqlalchemy(database_url: str) -> Callable[[Flask], None]:
    """Flask-Session's SQLAlchemy backend on a Flask-SQLAlchemy ``db``, as its docs configure it."""

    def configure(app: Flask) -> None:
        from flask_session import Session
        from flask_sqlalchemy import SQLAlchemy

        app.config["SQLALCHEMY_DATABASE_URI"] = database_url
        app.config.update(SESSION_TYPE="sqlalchemy", SESSION_SQLALCHEMY=SQLAlchemy(app))
        Session(app)

    return configure


def flask_login_sqlalchemy(database_url: str, sessions: int) -> Built:
    """Flask-Login whose user loader reads the user from SQLite through Flask-SQLAlchemy.

    As Flask-Login's docs recommend (``db.session.get(User, int(user_id))``): one real
    database read per request, which is what our SQL store does for the session.
    """
    from flask import request
    from flask_login import LoginManager, UserMixin, login_required, login_user
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("flask_login_sqlalchemy")
    app.secret_key = secrets.token_bytes(32)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url
    db = SQLAlchemy(app)

    class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
        id = db.Column(db.Integer, primary_key=True)
        name = db.Column(db.String(80), unique=True, nullable=False)

    manager = LoginManager(app)
    loads: list[int] = []  # counts the database reads, to check the loader really runs

    @manager.user_loader
    def load_user(user_id: str) -> User | None:
        loads.append(1)
        return db.session.get(User, int(user_id))

    with app.app_context():
        db.create_all()
        db.session.add_all(User(id=number, name=f"user{number}") for number in range(1, sessions + 1))
        db.session.commit()

    @app.get("/login")
    def login() -> str:
        user = db.session.get(User, int(request.args["u"]))
        assert user is not None
        login_user(user)
        return "in"

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"

    requests = log_in_each(app, sessions, "/login?u={}", lambda number: b"ok")
    before = len(loads)
    replayer(app, requests)()
    if len(loads) != before + 1:
        raise RuntimeError("the Flask-SQLAlchemy user loader did not run once per request")
    return app, requests


def flask_security_too(database_url: str, sessions: int) -> Built:
    from flask import request
    from flask_security import Security, SQLAlchemyUserDatastore, auth_required, login_user
    from flask_security.models import fsqla_v3 as fsqla
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("flask_security")
    app.config.update(
        SECRET_KEY=secrets.token_urlsafe(32),
        SECURITY_PASSWORD_SALT=secrets.token_urlsafe(16),
        SQLALCHEMY_DATABASE_URI=database_url,
        WTF_CSRF_ENABLED=False,
    )
    db = SQLAlchemy(app)
    fsqla.FsModels.set_db_info(db)

    class Role(db.Model, fsqla.FsRoleMixin):  # type: ignore[name-defined,misc]
        pass

    class User(db.Model, fsqla.FsUserMixin):  # type: ignore[name-defined,misc]
        pass

    class WebAuthn(db.Model, fsqla.FsWebAuthnMixin):  # type: ignore[name-defined,misc]
        pass  # FsUserMixin's relationship names it: the mapper needs it defined

    datastore = SQLAlchemyUserDatastore(db, User, Role)
    Security(app, datastore)
    with app.app_context():
        db.create_all()
        for number in range(1, sessions + 1):
            datastore.create_user(email=f"user{number}@example.com", password="not-used-here", active=True)
        db.session.commit()

    @app.get("/login-bench")
    def login() -> str:
        login_user(datastore.find_user(email=f"user{request.args['u']}@example.com"))
        db.session.commit()
        return "in"

    @app.get("/p")
    @auth_required("session")
    def protected() -> str:
        return "ok"

    return app, log_in_each(app, sessions, "/login-bench?u={}", lambda number: b"ok")


def authflow(
    store: str,
    database_url: str | None,
    sessions: int,
    *,
    use_current_user: bool = False,
    redis_url: str | None = None,
) -> Built:
    from flask_authflow import AuthFlow, current_user, login_required
    from flask_authflow.login._password import PasswordHasher
    from flask_authflow.testing._pytest_plugin import login_test_client

    app = Flask(f"authflow_{store}")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE=store,
        AUTHFLOW_DATABASE_URL=database_url or "sqlite://",
        AUTHFLOW_REDIS_URL=redis_url,
    )
    if store == "memory":
        from flask_authflow.storage._memory import InMemoryBackend

        hasher = PasswordHasher.fast_for_tests()
        extension = AuthFlow(app, backend=InMemoryBackend(), hasher=hasher)
    else:
        extension = AuthFlow(app, hasher=PasswordHasher.fast_for_tests())

    if use_current_user:
        # The same loader as the Flask-Login contender: a dict lookup.
        users: dict[str, Any] = {}
        extension.user_loader(lambda tenant, user_id: users.get(user_id))

    @app.get("/p")
    @login_required
    def protected() -> str:
        return f"ok {current_user.id}" if use_current_user else "ok"

    client = login_test_client(app, "alice")  # a real password login, bound to TEST_USER_AGENT
    if use_current_user:
        from types import SimpleNamespace

        user_id = get_user_id(app)
        users[user_id] = SimpleNamespace(id="1")  # the body then matches Flask-Login's "ok 1"
    cookie = client.get_cookie("authflow_session")
    assert cookie is not None
    expect = b"ok 1" if use_current_user else b"ok"
    return app, [
        (_environ_for(app, "/p", f"authflow_session={value}"), expect)
        for value in copies_of_session(app, cookie.value, sessions)
    ]


#: Suffix of a contender whose every request falls due for the last-seen touch.
TOUCHING = ", every request touches"


def touching(built: Built) -> Built:
    """``built`` with a touch interval and jitter of 0: every request is the one, every few
    minutes of a session, that refreshes its stored last-seen time (the touch round)."""
    from datetime import timedelta

    from flask_authflow.sessions._interface import AuthFlowSessionInterface

    app, requests = built
    interface = app.session_interface
    assert isinstance(interface, AuthFlowSessionInterface)
    interface.touch_interval = interface.touch_jitter = timedelta(0)
    return app, requests


def copies_of_session(app: Flask, cookie_value: str, count: int) -> list[str]:
    """``cookie_value`` and the cookies of ``count - 1`` copies of its session record under
    new session ids, saved in the app's store as a login saves them (a new id, nothing
    replaced): what ``count`` logins of the user leave in the store."""
    from dataclasses import replace

    from flask_authflow._core.session import AuthState, new_session_id
    from flask_authflow.sessions._interface import AuthFlowSessionInterface

    interface = app.session_interface
    assert isinstance(interface, AuthFlowSessionInterface)
    record = interface.store.load(cookie_value.rpartition(".")[0])
    if record is None or record.state is not AuthState.AUTHENTICATED:
        raise RuntimeError(f"{app.name}: the logged-in session is not in the store")
    values = [cookie_value]
    for _ in range(count - 1):
        copy = replace(record, sid=new_session_id())
        if not interface.store.save(copy, interface.expires_at(copy)):
            raise RuntimeError(f"{app.name}: a copy of the session was not saved")
        values.append(interface.sign_sid(copy.sid))
    return values


def get_user_id(app: Flask) -> str:
    from flask_authflow import get_state

    user = get_state(app).backend.find_user("default", "alice")
    assert user is not None
    return user.user_id


def window_of(one: Callable[[], None], requests: int) -> int:
    """Requests per round of a contender: ``requests``, or as many as it serves in about a
    second when it is much slower (Flask-Session's SQLAlchemy backend writes on every
    request), so that one slow contender does not make the run last an hour."""
    started = time.perf_counter()
    for _ in range(20):
        one()
    rate = 20 / (time.perf_counter() - started)
    return max(50, min(requests, int(rate)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="requests per contender per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--sessions",
        type=int,
        default=1,
        help="distinct logged-in sessions per contender, requested round-robin (10000: the realistic case)",
    )
    parser.add_argument(
        "--postgres",
        default="auto",
        help="PostgreSQL URL for our SQL store on PostgreSQL; 'auto' starts a throwaway server "
        "with initdb/pg_ctl (as the tests do); 'off' leaves it out",
    )
    parser.add_argument(
        "--no-redis",
        dest="redis",
        action="store_false",
        help="leave out our Redis store (by default a throwaway redis-server is started, as the tests do)",
    )
    parser.add_argument(
        "--touch-only",
        action="store_true",
        help="only our stores' read-only and touch rounds (the touch part of run_all.py --touch)",
    )
    args = parser.parse_args()
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    return args


def contenders_of(workdir: Path, n: int) -> dict[str, Callable[[], Built]]:
    """The contenders that need no server, each building its app with ``n`` sessions."""
    return {
        "bare Flask": lambda: bare_flask(n),
        "Flask cookie session": lambda: flask_cookie_session(n),
        "Flask-Login (cookie session)": lambda: flask_login(n),
        "Flask-Login current_user (loader)": lambda: flask_login(n, use_current_user=True),
        "Flask-Login + Flask-SQLAlchemy user loader (SQLite)": lambda: flask_login_sqlalchemy(
            f"sqlite:///{workdir / 'fl.db'}", n
        ),
        "Flask-Login + Flask-Session (SQLAlchemy, SQLite)": lambda: flask_login(
            n, flask_session=flask_session_sqlalchemy(f"sqlite:///{workdir / 'fs.db'}")
        ),
        "Flask-Security-Too (SQLite)": lambda: flask_security_too(f"sqlite:///{workdir / 'fst.db'}", n),
        "authflow (memory store)": lambda: authflow("memory", None, n),
        "authflow current_user (loader, memory store)": lambda: authflow(
            "memory", None, n, use_current_user=True
        ),
        "authflow (SQLite store)": lambda: authflow("sql", f"sqlite:///{workdir / 'af.db'}", n),
        f"authflow (SQLite store){TOUCHING}": lambda: touching(
            authflow("sql", f"sqlite:///{workdir / 'af-touch.db'}", n)
        ),
    }


def start_servers(args: argparse.Namespace) -> tuple[Any, str | None, Any, str | None]:
    """(PostgreSQL server, its URL, Redis server, its URL); a server that cannot start is left out."""
    server = None
    postgres_url = None if args.postgres == "off" else args.postgres
    if args.postgres == "auto":
        from tests.parts import start_postgres

        try:
            server = start_postgres()
            postgres_url = server.new_database(migrated=True)
        except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
            print(f"(PostgreSQL left out: {exc})")
            postgres_url = None
    redis_server = None
    if args.redis:
        from tests.parts import start_redis

        try:
            redis_server = start_redis()
        except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
            print(f"(Redis left out: {exc})")
    return server, postgres_url, redis_server, None if redis_server is None else redis_server.url()


def main() -> None:
    args = parse_args()
    workdir = bench_workdir()
    n = args.sessions
    contenders = contenders_of(workdir, n)
    server, postgres_url, redis_server, redis_url = start_servers(args)
    if postgres_url:
        contenders["authflow (PostgreSQL store)"] = lambda: authflow("sql", postgres_url, n)
    if server is not None:  # a database of its own (the users of the other one exist)
        touch_url = server.new_database(migrated=True)
        contenders[f"authflow (PostgreSQL store){TOUCHING}"] = lambda: touching(authflow("sql", touch_url, n))
    if redis_url:
        contenders["Flask-Login + Flask-Session (Redis)"] = lambda: flask_login(
            n,
            flask_session=flask_session_redis(redis_server.url(1)),  # a database of its own
        )
        # Sessions in Redis, users in SQLite (as an app configures it).
        contenders["authflow (Redis store)"] = lambda: authflow(
            "redis", f"sqlite:///{workdir / 'ar.db'}", n, redis_url=redis_url
        )
        contenders[f"authflow (Redis store){TOUCHING}"] = lambda: touching(
            authflow("redis", f"sqlite:///{workdir / 'ar-touch.db'}", n, redis_url=redis_url)
        )

    if args.touch_only:
        contenders = {name: build for name, build in contenders.items() if name.startswith(TOUCH_ROUNDS)}
    built: dict[str, tuple[Callable[[], None], int]] = {}
    sqlite_built: Built | None = None
    for name, build in contenders.items():
        started = time.perf_counter()
        app, requests = build()
        if name == "authflow (SQLite store)":
            sqlite_built = (app, requests)
        one = replayer(app, requests)
        built[name] = (one, window_of(one, args.requests))
        print(
            f"built {name} with {len(requests)} session(s) in {time.perf_counter() - started:.1f}s",
            flush=True,
        )
    if not args.touch_only:
        floors = round_trip_floors(built["authflow (memory store)"][0], postgres_url, redis_url)
        floors[SQLITE_FLOOR] = sqlite_read_floor(built["authflow (memory store)"][0], sqlite_built)
        built.update((name, (one, window_of(one, args.requests))) for name, one in floors.items())
    per_round = measure_interleaved(built, args.rounds)
    if server is not None:
        server.stop()
    if redis_server is not None:
        redis_server.stop()
    windows = {name: requests for name, (_, requests) in built.items()}
    if args.touch_only:
        report_rates(per_round, windows, args)
        report_touch(per_round)
        return
    report(per_round, windows, args)


#: The contenders of ``--touch-only``: each of our persistent stores, read-only and touching.
TOUCH_ROUNDS = tuple(f"authflow ({store} store)" for store in ("SQLite", "PostgreSQL", "Redis"))


def report_rates(
    per_round: dict[str, list[float]], windows: dict[str, int], args: argparse.Namespace
) -> None:
    print(
        f"{args.rounds} interleaved rounds of up to {args.requests} requests per contender, "
        f"{args.sessions} distinct session(s) per contender requested round-robin "
        "(best round, median round, spread of the rounds)"
    )
    for name, rates in per_round.items():
        print(
            f"{name:<52} {max(rates):>8.0f} req/s  median {statistics.median(rates):>8.0f}  {spread(rates)}"
            f"  ({windows[name]} requests a round)",
            flush=True,
        )
    print()


def report_touch(per_round: dict[str, list[float]]) -> None:
    print("the touch round (every request refreshes its last-seen time) / the read-only round:")
    for store in ("SQLite", "PostgreSQL", "Redis"):
        read_only, touch = f"authflow ({store} store)", f"authflow ({store} store){TOUCHING}"
        if read_only in per_round and touch in per_round:
            print(f"    {store:<12} {ratio_line(per_round[touch], per_round[read_only])}")
    print_targets(per_round)


def report(per_round: dict[str, list[float]], windows: dict[str, int], args: argparse.Namespace) -> None:
    report_rates(per_round, windows, args)
    peers = [n for n in per_round if not n.startswith(("authflow", FLOOR))]
    for ours in (n for n in per_round if n.startswith("authflow")):
        print(f"{ours} vs")
        for peer in peers:
            print(f"    {peer:<52} {ratio_line(per_round[ours], per_round[peer])}")
    pair = ratio_line(
        per_round["authflow current_user (loader, memory store)"],
        per_round["Flask-Login current_user (loader)"],
    )
    print(f"\ncurrent_user with the same loader, authflow / Flask-Login: {pair}")
    sqlite = per_round["authflow (SQLite store)"]
    for store, floor in (("PostgreSQL", f"{FLOOR} PostgreSQL SELECT 1"), ("Redis", f"{FLOOR} Redis PING")):
        ours = f"authflow ({store} store)"
        if ours in per_round and floor in per_round:
            print(f"\n{store}: against our SQLite store, and against its floor")
            print(f"    {ours + ' / SQLite store':<62} {ratio_line(per_round[ours], sqlite)}")
            print(f"    {floor + ' / SQLite store':<62} {ratio_line(per_round[floor], sqlite)}")
            print(f"    {ours + ' / its floor':<62} {ratio_line(per_round[ours], per_round[floor])}")
            library = floor + THROUGH_SQLALCHEMY
            if library in per_round:  # what the library layer alone leaves of the target
                print(
                    f"    {'the floor through SQLAlchemy / the floor':<62} "
                    f"{ratio_line(per_round[library], per_round[floor])}"
                )
                print(
                    f"    {ours + ' / the floor through SQLAlchemy':<62} "
                    f"{ratio_line(per_round[ours], per_round[library])}"
                )
    if SQLITE_FLOOR in per_round:
        fst = per_round["Flask-Security-Too (SQLite)"]
        print("\nSQLite: the floor of a store on SQLAlchemy, against Flask-Security-Too")
        print(f"    {SQLITE_FLOOR + ' / Flask-Security-Too':<62} {ratio_line(per_round[SQLITE_FLOOR], fst)}")
        print(
            f"    {'authflow (SQLite store) / that floor':<62} {ratio_line(sqlite, per_round[SQLITE_FLOOR])}"
        )
    print()
    report_touch(per_round)


#: The targets with 10,000 sessions: (ours, the contender it is compared with, the least ratio).
TARGETS = (
    ("authflow (memory store)", "bare Flask", 0.6),
    ("authflow (SQLite store)", "Flask-Security-Too (SQLite)", 4.0),
    ("authflow (SQLite store)", "Flask-Login + Flask-SQLAlchemy user loader (SQLite)", 1.5),
    ("authflow (Redis store)", "Flask-Login + Flask-Session (Redis)", 1.5),
    ("authflow (PostgreSQL store)", "Flask-Security-Too (SQLite)", 1.5),
    ("authflow (PostgreSQL store)", f"{FLOOR} PostgreSQL SELECT 1", 0.85),
    ("authflow (Redis store)", f"{FLOOR} Redis PING", 0.85),
    (f"authflow (SQLite store){TOUCHING}", "authflow (SQLite store)", 0.8),
    (f"authflow (PostgreSQL store){TOUCHING}", "authflow (PostgreSQL store)", 0.8),
    (f"authflow (Redis store){TOUCHING}", "authflow (Redis store)", 0.8),
)


def print_targets(per_round: dict[str, list[float]]) -> None:
    print("\ntargets (median of the per-round ratios):")
    for ours, other, least in TARGETS:
        if ours in per_round and other in per_round:
            ratios = [o / p for o, p in zip(per_round[ours], per_round[other], strict=True)]
            median = statistics.median(ratios)
            verdict = "met" if median >= least else f"MISSED by {(least - median) / least * 100:.0f}%"
            print(f"    {ours} / {other}: {median:.2f}x, target >= {least}x: {verdict}")


#: Our memory-store request and one read of a session row by key through SQLAlchemy, on
#: the SQLite store's own file and rows (see sqlite_read_floor).
SQLITE_FLOOR = f"{FLOOR} SQLite row read through SQLAlchemy"


def sqlite_read_floor(memory_request: Callable[[], None], sqlite_built: Built | None) -> Callable[[], None]:
    """The least a SQLite session store on SQLAlchemy's public API can add to a request: our
    memory-store request, then the SQLite contender's own read of a row of
    ``authflow_sessions`` by key (a pooled connection of its engine, a Core statement, the
    row fetched), taking its sessions round-robin as its requests do; no decrypt, no decode,
    no check."""
    from sqlalchemy import bindparam, select
    from werkzeug.http import parse_cookie

    from flask_authflow._core.session import sid_hash
    from flask_authflow._web.state import get_state
    from flask_authflow.storage._sql.engine import sqlite_touch_engine
    from flask_authflow.storage._sql.schema import sessions_table

    if sqlite_built is None:
        raise RuntimeError("the SQLite floor needs the SQLite contender")
    app, requests = sqlite_built
    store: Any = get_state(app).session_store
    engine = sqlite_touch_engine(store.engine) or store.engine  # the engine our reads use
    keys = [sid_hash(parse_cookie(environ)["authflow_session"].rpartition(".")[0]) for environ, _ in requests]
    columns = sessions_table.c
    read = select(columns.data, columns.updated_at, columns.expires_at).where(
        columns.sid_hash == bindparam("k")
    )
    turns = itertools.cycle(keys)

    def one() -> None:
        memory_request()
        with engine.connect() as conn:
            if conn.execute(read, {"k": next(turns)}).one_or_none() is None:
                raise RuntimeError("the session row is gone")

    return one


#: Suffix of the floor that reaches PostgreSQL through SQLAlchemy's public API, as our store must.
THROUGH_SQLALCHEMY = " through SQLAlchemy"


def _through_sqlalchemy(memory_request: Callable[[], None], postgres_url: str) -> Callable[[], None]:
    """The same floor with the ``SELECT 1`` run the way any store on SQLAlchemy runs it: a
    pooled connection of an engine that is AUTOCOMMIT from the start, checked out and back
    in, and a Core statement: what the library layer costs over the bare driver."""
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    statement = text("SELECT 1")

    def select_one() -> None:
        memory_request()
        with engine.connect() as conn:
            if conn.execute(statement).scalar_one() != 1:
                raise RuntimeError("SELECT 1 answered something else")

    return select_one


def round_trip_floors(
    memory_request: Callable[[], None], postgres_url: str | None, redis_url: str | None
) -> dict[str, Callable[[], None]]:
    """Our memory-store request followed by one bare round trip to each server."""
    floors: dict[str, Callable[[], None]] = {}
    if postgres_url:
        import psycopg
        from sqlalchemy.engine import make_url

        url = make_url(postgres_url).set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)

        def select_one() -> None:
            memory_request()
            if conn.execute("SELECT 1").fetchone() != (1,):
                raise RuntimeError("SELECT 1 answered something else")

        floors[f"{FLOOR} PostgreSQL SELECT 1"] = select_one
        floors[f"{FLOOR} PostgreSQL SELECT 1{THROUGH_SQLALCHEMY}"] = _through_sqlalchemy(
            memory_request, postgres_url
        )
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)

        def ping() -> None:
            memory_request()
            if client.ping() is not True:
                raise RuntimeError("PING answered something else")

        floors[f"{FLOOR} Redis PING"] = ping
    return floors


if __name__ == "__main__":
    main()
