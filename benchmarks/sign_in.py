"""Sign-ins per second, in process: flask-authflow beside Flask-Security-Too, one run.

Both sign a known user in with the right password through their JSON login, users and
sessions on a SQLite file, each sign-in from a fresh client (no cookie), the response
checked. Both hash with the same Argon2id cost, the cheapest valid one (t=1, m=8 KiB,
p=1: ``PasswordHasher.fast_for_tests()`` for us, passlib's ``argon2`` scheme with those
options for Flask-Security-Too), so what is compared is everything around the hash: the
lookups, the lockout and throttling bookkeeping, the audit rows, the session write. The
contenders take turns in every round (interleaved); the output gives best and median
rounds, their spread, and the ratio of the bests and the median of per-round ratios.
Target of issue 30: authflow on SQLite at least 2x Flask-Security-Too.

    .venv/bin/python benchmarks/sign_in.py [--rounds 5] [--logins 300]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.login import bench_workdir  # importable once the path above is set
from benchmarks.protected_request import UA, ratio_line, spread
from flask_authflow.testing._users import add_user

PASSWORD = "correct horse battery staple"  # a benchmark's throwaway user
TARGET = 2.0


def authflow_sign_in(database_url: str) -> Callable[[], None]:
    from flask_authflow import AuthFlow
    from flask_authflow.login._password import PasswordHasher

    app = Flask("authflow_sign_in")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_DATABASE_URL=database_url,
    )
    authflow = AuthFlow(app, hasher=PasswordHasher.fast_for_tests())
    with app.app_context():
        add_user(authflow.state.backend, "default", "alice", PASSWORD, hasher=authflow.state.hasher)

    @app.post("/login")
    def login() -> str:
        return type(authflow.login.password("alice", PASSWORD)).__name__

    def one() -> None:
        client = app.test_client()  # a fresh browser: no cookie
        # From many networks, as real sign-ins come: the per-address and per-network
        # throttles count every sign-in (their work is part of ours) but stop none.
        address = f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"
        response = client.post(
            "/login", json={}, headers={"User-Agent": UA}, environ_base={"REMOTE_ADDR": address}
        )
        if response.text != "Authenticated" or client.get_cookie("authflow_session") is None:
            raise RuntimeError(f"authflow sign-in answered {response.status_code} {response.text[:80]!r}")

    return one


def flask_security_sign_in(database_url: str) -> Callable[[], None]:
    from flask_security import Security, SQLAlchemyUserDatastore, hash_password
    from flask_security.models import fsqla_v3 as fsqla
    from flask_sqlalchemy import SQLAlchemy

    app = Flask("flask_security_sign_in")
    app.config.update(
        SECRET_KEY=secrets.token_urlsafe(32),
        SECURITY_PASSWORD_SALT=secrets.token_urlsafe(16),
        SQLALCHEMY_DATABASE_URI=database_url,
        WTF_CSRF_ENABLED=False,
        SECURITY_PASSWORD_HASH="argon2",
        SECURITY_PASSWORD_HASH_PASSLIB_OPTIONS={
            "argon2__time_cost": 1,
            "argon2__memory_cost": 8,
            "argon2__parallelism": 1,
        },
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
        datastore.create_user(email="alice@example.com", password=hash_password(PASSWORD), active=True)
        db.session.commit()

    def one() -> None:
        client = app.test_client()
        address = f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"
        response = client.post(
            "/login",
            json={"email": "alice@example.com", "password": PASSWORD},
            headers={"User-Agent": UA},
            environ_base={"REMOTE_ADDR": address},
        )
        if response.status_code != 200 or client.get_cookie("session") is None:
            raise RuntimeError(f"Flask-Security-Too sign-in answered {response.status_code}")

    return one


def database_work(one: Callable[[], None]) -> str:
    """What one sign-in of a contender asks of its database: statements, and how many of
    them write (on SQLite a transaction that wrote is a sync of the file at its commit;
    a peer that writes nothing at sign-in pays none)."""
    from sqlalchemy import Engine, event

    seen: list[str] = []

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.lstrip().split(None, 1)[0].upper())

    event.listen(Engine, "before_cursor_execute", on_statement)
    try:
        one()
    finally:
        event.remove(Engine, "before_cursor_execute", on_statement)
    writes = sum(1 for verb in seen if verb in ("INSERT", "UPDATE", "DELETE"))
    return f"{len(seen)} statements, {writes} writing"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--logins", type=int, default=300, help="sign-ins per contender per round")
    args = parser.parse_args()
    workdir = bench_workdir()
    contenders = {
        "authflow (SQLite)": authflow_sign_in(f"sqlite:///{workdir / 'signin-af.db'}"),
        "Flask-Security-Too (SQLite)": flask_security_sign_in(f"sqlite:///{workdir / 'signin-fst.db'}"),
    }
    for one in contenders.values():
        for _ in range(20):  # warm up, and check each answers
            one()
    work = {name: database_work(one) for name, one in contenders.items()}
    per_round: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, one in contenders.items():
            started = time.perf_counter()
            for _ in range(args.logins):
                one()
            per_round[name].append(args.logins / (time.perf_counter() - started))
    print(f"{args.rounds} interleaved rounds of {args.logins} sign-ins per contender (fast Argon2id on both)")
    for name, rates in per_round.items():
        print(
            f"    {name:<32} {max(rates):>7.0f}/s  median {statistics.median(rates):>7.0f}/s  {spread(rates)}"
            f"  ({work[name]} a sign-in)"
        )
    ours, peer = per_round["authflow (SQLite)"], per_round["Flask-Security-Too (SQLite)"]
    median = statistics.median(o / p for o, p in zip(ours, peer, strict=True))
    print(f"    authflow / Flask-Security-Too: {ratio_line(ours, peer)}")
    print(f"target: sign-ins/s >= {TARGET}x Flask-Security-Too: {'met' if median >= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
