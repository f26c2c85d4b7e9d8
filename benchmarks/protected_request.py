"""Authenticated GETs per second: flask-authflow beside the peers, in one run.

Each contender serves one protected view; a session is logged in once, then the same
WSGI environ (carrying the cookie) is replayed straight into the app, so the harness
costs the same for everyone. Prints requests/s and the ratio of each of ours to each
peer.

    .venv/bin/python benchmarks/protected_request.py [--requests 4000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from werkzeug.test import EnvironBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]
UA = "flask-authflow-tests/1.0"  # the user agent login_test_client binds the session to


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


def measure(app: Flask, environ: dict[str, Any], requests: int, expect: bytes) -> float:
    """Best of three runs, in requests per second; checks every response is the protected one."""
    status_seen: list[str] = []

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Callable[[bytes], None]:
        status_seen.append(status)
        return lambda data: None

    def one() -> bytes:
        status_seen.clear()
        body = b"".join(app.wsgi_app(dict(environ), start_response))
        if not status_seen[0].startswith("200") or body != expect:
            raise RuntimeError(f"contender answered {status_seen[0]} {body[:80]!r}")
        return body

    for _ in range(200):  # warm up
        one()
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(requests):
            one()
        best = max(best, requests / (time.perf_counter() - started))
    return best


# --- contenders ----------------------------------------------------------------------------------


def bare_flask() -> tuple[Flask, dict[str, Any]]:
    app = Flask("bare")

    @app.get("/p")
    def protected() -> str:
        return "ok"

    return app, _environ_for(app, "/p", None)


def flask_cookie_session() -> tuple[Flask, dict[str, Any]]:
    from flask import abort, session

    app = Flask("cookie")
    app.secret_key = secrets.token_bytes(32)

    @app.get("/login")
    def login() -> str:
        session["user_id"] = "1"
        return "in"

    @app.get("/p")
    def protected() -> str:
        if session.get("user_id") != "1":
            abort(401)
        return "ok"

    client = app.test_client()
    client.get("/login")
    return app, _environ_for(app, "/p", _cookie_header(client))


def flask_login() -> tuple[Flask, dict[str, Any]]:
    from flask_login import LoginManager, UserMixin, login_required, login_user

    class User(UserMixin):
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    users = {"1": User("1")}
    app = Flask("flask_login")
    app.secret_key = secrets.token_bytes(32)
    manager = LoginManager(app)
    manager.user_loader(users.get)

    @app.get("/login")
    def login() -> str:
        login_user(users["1"])
        return "in"

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"

    client = app.test_client()
    client.get("/login")
    return app, _environ_for(app, "/p", _cookie_header(client))


def flask_security_too(database_url: str) -> tuple[Flask, dict[str, Any]]:
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

    datastore = SQLAlchemyUserDatastore(db, User, Role)
    Security(app, datastore)
    with app.app_context():
        db.create_all()
        datastore.create_user(email="alice@example.com", password="not-used-here", active=True)
        db.session.commit()

    @app.get("/login-bench")
    def login() -> str:
        login_user(datastore.find_user(email="alice@example.com"))
        db.session.commit()
        return "in"

    @app.get("/p")
    @auth_required("session")
    def protected() -> str:
        return "ok"

    client = app.test_client()
    client.get("/login-bench", headers={"User-Agent": UA})
    return app, _environ_for(app, "/p", _cookie_header(client))


def authflow(store: str, database_url: str | None) -> tuple[Flask, dict[str, Any]]:
    from flask_authflow import AuthFlow, PasswordHasher, login_required
    from flask_authflow.testing.pytest_plugin import login_test_client

    app = Flask(f"authflow_{store}")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE=store,
        AUTHFLOW_DATABASE_URL=database_url or "sqlite://",
    )
    if store == "memory":
        from flask_authflow import InMemoryBackend

        hasher = PasswordHasher.fast_for_tests()
        AuthFlow(app, backend=InMemoryBackend(hasher=hasher), hasher=hasher)
    else:
        AuthFlow(app, hasher=PasswordHasher.fast_for_tests())

    @app.get("/p")
    @login_required
    def protected() -> str:
        return "ok"

    client = login_test_client(app, "alice")  # a real password login, bound to TEST_USER_AGENT
    return app, _environ_for(app, "/p", _cookie_header(client))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument(
        "--postgres",
        default="auto",
        help="PostgreSQL URL for our SQL store on PostgreSQL; 'auto' starts a throwaway server "
        "with initdb/pg_ctl (as the tests do); 'off' leaves it out",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="authflow-bench-"))

    contenders: dict[str, Callable[[], tuple[Flask, dict[str, Any]]]] = {
        "bare Flask": bare_flask,
        "Flask cookie session": flask_cookie_session,
        "Flask-Login (cookie session)": flask_login,
        "Flask-Security-Too (SQLite)": lambda: flask_security_too(f"sqlite:///{workdir / 'fst.db'}"),
        "authflow (memory store)": lambda: authflow("memory", None),
        "authflow (SQLite store)": lambda: authflow("sql", f"sqlite:///{workdir / 'af.db'}"),
    }
    server = None
    postgres_url = None if args.postgres == "off" else args.postgres
    if args.postgres == "auto":
        from tests.parts import start_postgres

        try:
            server = start_postgres()
            postgres_url = server.new_database()
        except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
            print(f"(PostgreSQL left out: {exc})")
            postgres_url = None
    if postgres_url:
        contenders["authflow (PostgreSQL store)"] = lambda: authflow("sql", postgres_url)

    results: dict[str, float] = {}
    for name, build in contenders.items():
        app, environ = build()
        results[name] = measure(app, environ, args.requests, b"ok")
        print(f"{name:<32} {results[name]:>10.0f} req/s", flush=True)

    if server is not None:
        server.stop()
    print()
    peers = [n for n in results if not n.startswith("authflow")]
    for ours in (n for n in results if n.startswith("authflow")):
        ratios = "  ".join(f"{results[ours] / results[p]:.2f}x {p}" for p in peers)
        print(f"{ours}: {ratios}")


if __name__ == "__main__":
    main()
