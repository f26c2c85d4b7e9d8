"""The footprint of a step: how many files a request enters and what it asks the database.

For three requests of the reference app (``examples/reference/app.py``, its own
configuration, SQLite in a temporary folder) this prints:

* **files**: the distinct Python source files whose functions are called while the WSGI
  app handles the request (``sys.setprofile``, ``call`` events; C functions are not files),
  counted twice: the package's own (``flask_authflow/...``) and all of them (Flask,
  Werkzeug, SQLAlchemy, the standard library, ...). The test client and the response's
  iteration after the app returned are outside the count.
* **statements** and **commits** that reached the database (SQLAlchemy engine events, as
  ``tests/test_authn_round_trips.py`` counts them: ``before_cursor_execute``, and the
  commits of real transactions, not AUTOCOMMIT ones).

The requests, each measured once after one warm-up request of the same kind on another
session (the first request of a process imports and builds what later ones reuse):

* **password step**: ``POST /login`` with the right password of a user with no second
  factor (a fresh guest session; the step ends Authenticated);
* **TOTP step**: ``POST /login/factor`` with a valid code, for a user whose password step
  has just passed (a fresh code: a code's time step is accepted once);
* **protected GET**: ``GET /dashboard`` with the authenticated session of the first.

Beside them, for scale, **Flask-Login's protected GET**: a ``@login_required`` view of a bare
Flask app with Flask-Login and a dict-lookup user loader (Flask's signed cookie session),
counted the same way; its "package files" are Flask-Login's own.

The counts are deterministic for a given tree (never timed), so two trees compare directly:

.. code-block:: console

    $ .venv/bin/python benchmarks/footprint.py                  # this checkout
    $ .venv/bin/python benchmarks/footprint.py --root ../other  # another checkout's package
    $ .venv/bin/python benchmarks/footprint.py --list           # and the package files entered

``--root`` puts that checkout first on ``sys.path``, so its ``flask_authflow`` and its
reference app are the ones measured (the script says which package it loaded).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

PASSWORD = "correct horse battery staple"
UA = "flask-authflow-footprint/1.0"


@dataclass
class Footprint:
    """What one request did: the files it entered and the statements and commits it sent."""

    files: set[str] = field(default_factory=set)
    statements: list[str] = field(default_factory=list)
    commits: int = 0

    def package_files(self, package: Path) -> list[str]:
        return sorted(f for f in self.files if Path(f).is_relative_to(package))


@contextmanager
def database_events(found: Footprint) -> Iterator[None]:
    """Count the statements and the commits of real transactions on every engine."""
    from sqlalchemy import Engine, event

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found.statements.append(" ".join(statement.split()))

    def on_commit(conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            found.commits += 1

    listeners: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", on_statement),
        ("commit", on_commit),
    ]
    for name, listener in listeners:
        event.listen(Engine, name, listener)
    try:
        yield
    finally:
        for name, listener in listeners:
            event.remove(Engine, name, listener)


class Recorder:
    """A WSGI middleware that records, while armed, the files the app's calls enter."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.armed: Footprint | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        found = self.armed
        if found is None:
            return self.app(environ, start_response)
        files = found.files

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                files.add(frame.f_code.co_filename)

        sys.setprofile(profile)
        try:
            with database_events(found):
                return self.app(environ, start_response)
        finally:
            sys.setprofile(None)


def _load(root: Path) -> tuple[Any, Path]:
    """The reference app's module and the ``flask_authflow`` package directory, from ``root``."""
    sys.path.insert(0, str(root))
    package = importlib.import_module("flask_authflow")
    package_dir = Path(package.__file__ or "").resolve().parent
    if not package_dir.is_relative_to(root.resolve()):
        raise SystemExit(f"flask_authflow was loaded from {package_dir}, not from {root}")
    return importlib.import_module("examples.reference.app"), package_dir


def _totp_code(uri: str, used: set[str]) -> str:
    """A code of the key in ``uri`` that ``used`` does not hold (the next step's, if need be)."""
    import time

    import pyotp

    match = re.search(r"secret=([A-Z2-7]+)", uri)
    assert match is not None, uri
    totp = pyotp.TOTP(match.group(1))
    for offset in (0, 30):
        code = totp.at(time.time() + offset)
        if code not in used:
            used.add(code)
            return code
    raise AssertionError("no fresh TOTP code")


def measure(root: Path) -> tuple[dict[str, Footprint], Path]:
    """The footprint of the three requests on the reference app of ``root``."""
    reference, package_dir = _load(root)
    workdir = Path(tempfile.mkdtemp(prefix="authflow-footprint-"))
    app = reference.create_app(
        {
            "AUTHFLOW_DATABASE_URL": f"sqlite:///{workdir / 'app.db'}",
            "AUTHFLOW_MAIL_OUTBOX": str(workdir / "outbox"),
        },
        instance_path=str(workdir / "instance"),
    )
    recorder = Recorder(app.wsgi_app)
    app.wsgi_app = recorder  # type: ignore[method-assign]
    uris: dict[str, str] = {}
    with app.app_context():
        authflow = reference.authflow
        users = {
            name: authflow.accounts.create(name, PASSWORD) for name in ("alice", "alice2", "tom", "tom2")
        }
        for name in ("tom", "tom2"):
            uris[name] = authflow.factors.create_totp(users[name].user_id)
    used: set[str] = set()
    headers = {"User-Agent": UA}

    def client() -> Any:
        return app.test_client()

    def login(c: Any, name: str) -> None:
        response = c.post("/login", json={"username": name, "password": PASSWORD}, headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)

    def factor(c: Any, name: str) -> None:
        code = _totp_code(uris[name], used)
        response = c.post("/login/factor", json={"kind": "totp", "code": code}, headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)

    def dashboard(c: Any) -> None:
        response = c.get("/dashboard", headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)

    def armed(call: Callable[[], None]) -> Footprint:
        recorder.armed = found = Footprint()
        try:
            call()
        finally:
            recorder.armed = None
        return found

    results: dict[str, Footprint] = {}
    warm, measured = client(), client()
    login(warm, "alice2")  # warm-up
    results["password step"] = armed(lambda: login(measured, "alice"))
    warm_totp, measured_totp = client(), client()
    login(warm_totp, "tom2")
    factor(warm_totp, "tom2")  # warm-up
    login(measured_totp, "tom")
    results["TOTP step"] = armed(lambda: factor(measured_totp, "tom"))
    dashboard(warm)  # warm-up
    results["protected GET"] = armed(lambda: dashboard(measured))
    return results, package_dir


def flask_login_get() -> tuple[Footprint, Path]:
    """The footprint of Flask-Login's protected GET (after a warm-up GET), and its package."""
    import flask_login
    from flask import Flask

    app = Flask("flask_login_footprint")
    app.secret_key = "x" * 32
    manager = flask_login.LoginManager(app)

    class User(flask_login.UserMixin):
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    users = {"alice": User("alice")}
    manager.user_loader(users.get)

    @app.get("/login")
    def login() -> str:
        flask_login.login_user(users["alice"])
        return "ok"

    @app.get("/dashboard")
    @flask_login.login_required
    def dashboard() -> str:
        return f"hello {flask_login.current_user.id}"

    recorder = Recorder(app.wsgi_app)
    app.wsgi_app = recorder  # type: ignore[method-assign]
    client = app.test_client()
    client.get("/login")
    assert client.get("/dashboard").status_code == 200  # warm-up
    recorder.armed = found = Footprint()
    try:
        assert client.get("/dashboard").status_code == 200
    finally:
        recorder.armed = None
    return found, Path(flask_login.__file__ or "").resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose flask_authflow and reference app to measure (default: this one)",
    )
    parser.add_argument("--list", action="store_true", help="list the package files each request enters")
    args = parser.parse_args()
    results, package_dir = measure(args.root.resolve())
    print(f"flask_authflow from {package_dir}")
    print(f"{'request':<16}{'package files':>15}{'all files':>11}{'statements':>12}{'commits':>9}")
    for name, found in results.items():
        package = found.package_files(package_dir)
        print(
            f"{name:<16}{len(package):>15}{len(found.files):>11}{len(found.statements):>12}{found.commits:>9}"
        )
    peer, peer_dir = flask_login_get()
    name = "Flask-Login GET"
    package = peer.package_files(peer_dir)
    print(f"{name:<16}{len(package):>15}{len(peer.files):>11}{len(peer.statements):>12}{peer.commits:>9}")
    if args.list:
        for name, found in [*results.items(), ("Flask-Login GET", peer)]:
            print(f"\n{name}:")
            own = peer_dir if found is peer else package_dir
            for path in found.package_files(own):
                print(f"  {Path(path).relative_to(own)}")


if __name__ == "__main__":
    main()
