"""The audit chain under concurrent writers on PostgreSQL: 50 password logins at once,
from two processes (each with its own connections and its own cached chain head) and 25
threads in each, leave one unbroken chain: every ``seq`` once, no fork, no lost
link, and ``verify`` passes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask, request

from flask_authflow import AuthFlow
from flask_authflow.audit._chain import AuditChain, verify_chains
from flask_authflow.login._password import PasswordHasher
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.testing._users import add_user
from tests.appfactory import make_app
from tests.concurrency import run_together
from tests.parts import child_processes

pytestmark = [pytest.mark.postgres, pytest.mark.multiprocess]

KEY = b"chain key of the race test, 32+ bytes"
PASSWORD = "correct horse battery staple"
LOGINS = 50
PROCESSES = 2  # each runs its share of the logins at once, one thread each
SPAWN = child_processes()


def _app(url: str) -> tuple[Flask, SqlAlchemyBackend]:
    hasher = PasswordHasher.fast_for_tests()
    backend = SqlAlchemyBackend(url, create_tables=False)
    authflow = AuthFlow()
    app = make_app(
        authflow=authflow,
        backend=backend,
        hasher=hasher,
        AUTHFLOW_DATABASE_URL=url,
        AUTHFLOW_AUDIT_CHAIN=True,
        AUTHFLOW_AUDIT_CHAIN_KEY=KEY,
        AUTHFLOW_THROTTLE=False,  # 50 logins from one test address
        AUTHFLOW_SESSION_STORE="memory",  # the race is the audit rows'
    )

    @app.post("/login")
    def login_view() -> str:
        return type(authflow.login.password(request.get_json()["user"], PASSWORD)).__name__

    return app, backend


def _login(app: Flask, user: str) -> str:
    return app.test_client().post("/login", json={"user": user}).text


def _login_worker(url: str, users: list[str], ready: Any, start: Any, out: Any) -> None:
    app, backend = _app(url)
    ready.put(True)
    start.wait(30)
    logins: list[Callable[[], Any]] = [functools.partial(_login, app, user) for user in users]
    out.put(run_together(logins))
    backend.close()


def test_fifty_parallel_logins_from_several_processes_leave_one_unbroken_chain(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        users = [f"user{n}" for n in range(LOGINS)]
        for user in users:
            add_user(backend, "default", user, PASSWORD)
        ready, start, out = SPAWN.Queue(), SPAWN.Event(), SPAWN.Queue()
        processes = [
            SPAWN.Process(target=_login_worker, args=(url, users[n::PROCESSES], ready, start, out))
            for n in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        for _ in processes:  # every process built its app: the race starts at once
            ready.get(timeout=60)
        start.set()
        results = [result for _ in processes for result in out.get(timeout=90)]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0
        assert results == ["Authenticated"] * len(users)

        chained = [row.seq for row in backend.audit_rows if row.seq is not None]
        assert sorted(chained) == list(range(1, len(chained) + 1))  # every seq once: no fork, no gap
        assert len(chained) >= 2 * len(users)  # each login's begin and step rows
        [report] = verify_chains(backend, AuditChain(KEY))
        assert (report.ok, report.verified, report.last_seq) == (True, len(chained), len(chained))
    finally:
        backend.close()
