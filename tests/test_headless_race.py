"""One app session token raced during its rotation: 20 parallel factor steps posted with
the token of one Authenticating session (the right code each time) complete the login
exactly once; the other 19 get refusals, never a 500, and none of them holds a session.

On SQLite (threads in one process) and PostgreSQL (threads, then several processes, each
its own app on the same database). The race is decided by the session store (a save that
replaces an id which another request already replaced is refused), not by a Python lock.
"""

from __future__ import annotations

import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from flask_authflow._outcomes import FactorKind
from flask_authflow._web.headless import CLIENT_HEADER, TOKEN_HEADER
from flask_authflow._web.state import get_state
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._users import add_user
from tests.appfactory import make_app
from tests.authn_support import fast_hasher
from tests.concurrency import run_together
from tests.headless_support import BASE, ApiClient
from tests.parts import child_processes
from tests.test_views import PASSWORD, FixedCode

pytestmark = pytest.mark.authflow_stores("sql")

RACERS = 20
PROCESSES = 2
AGENT = "RaceApp/1.0"


def race_app(url: str, key: bytes, instance: str) -> Flask:
    """An app on ``url`` whose TOTP step takes 123456 (any number of times: only the
    session's rotation can decide the race)."""
    app = make_app(
        AUTHFLOW_DATABASE_URL=url, AUTHFLOW_SIGNING_KEY=key, AUTHFLOW_HEADLESS=True, AUTHFLOW_THROTTLE=False,
        hasher=fast_hasher(), instance_path=instance,
    )  # fmt: skip
    get_state(app).service.register_factor(FixedCode("123456"))
    return app


def authenticating_token(app: Flask) -> str:
    state = get_state(app)
    user = add_user(state.backend, "default", "alice", PASSWORD)
    state.backend.enroll_factor("default", user.user_id, FactorKind.TOTP, "seed")
    api = ApiClient(app, "app", user_agent=AGENT)
    assert (
        api.post("/login/password", {"username": "alice", "password": PASSWORD}).json["status"]
        == "factor_required"
    )
    assert api.token is not None
    return api.token


def post_step(app: Flask, token: str) -> tuple[int, str, str | None]:
    client = app.test_client(use_cookies=False)
    answer = client.post(
        BASE + "/login/factor",
        json={"code": "123456"},
        headers={CLIENT_HEADER: "app", "Authorization": f"Session {token}", "User-Agent": AGENT},
    )
    body = answer.get_json(silent=True) or {}
    return answer.status_code, str(body.get("status") or body.get("error")), answer.headers.get(TOKEN_HEADER)


def check_outcome(app: Flask, results: list[tuple[int, str, str | None]], token: str) -> None:
    statuses = Counter((status, what) for status, what, _ in results)
    assert statuses[(200, "authenticated")] == 1, statuses
    assert all(status in (401, 409) for status, what, _ in results if what != "authenticated"), statuses
    assert all(not new for _, what, new in results if what != "authenticated")  # no token for a loser
    [winner] = [new for _, what, new in results if what == "authenticated"]
    assert winner and winner != token
    state = get_state(app)
    user = state.backend.find_user("default", "alice")
    assert user is not None
    sessions = state.session_store.list_user_sessions("default", user.user_id)
    assert [record.state.value for record in sessions] == ["authenticated"]
    api = ApiClient(app, "app", user_agent=AGENT)
    api.token = winner
    assert api.get("/session").json["state"] == "authenticated"
    api.token = token
    assert api.get("/session").json["state"] == "guest"  # the raced token is worthless now


def _threads(url: str, tmp_path: Path) -> None:
    app = race_app(url, secrets.token_bytes(32), str(tmp_path / "instance"))
    try:
        token = authenticating_token(app)
        results = run_together([lambda: post_step(app, token) for _ in range(RACERS)])
        check_outcome(app, results, token)
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]


def test_twenty_steps_with_one_app_token_on_sqlite_complete_once(tmp_path: Path) -> None:
    _threads(f"sqlite:///{tmp_path / 'race.db'}", tmp_path)


@pytest.mark.postgres
def test_twenty_steps_with_one_app_token_on_postgresql_complete_once(
    postgres_server: Any, tmp_path: Path
) -> None:
    url = postgres_server.new_database()
    upgrade(url)  # the operator's `flask authflow db upgrade`
    _threads(url, tmp_path)


SPAWN = child_processes()


def _racer(url: str, key: bytes, instance: str, token: str, barrier: Any, out: Any) -> None:
    app = race_app(url, key, instance)
    try:
        barrier.wait(60)
        out.put(run_together([lambda: post_step(app, token) for _ in range(RACERS // PROCESSES)]))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put([(0, f"error {exc!r}", None)])
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_twenty_steps_from_two_processes_with_one_app_token_complete_once(
    postgres_server: Any, tmp_path: Path
) -> None:
    url, key = postgres_server.new_database(), secrets.token_bytes(32)
    upgrade(url)
    instance = str(tmp_path / "instance")
    app = race_app(url, key, instance)
    try:
        token = authenticating_token(app)
        barrier, out = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
        processes = [
            SPAWN.Process(target=_racer, args=(url, key, instance, token, barrier, out))
            for _ in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        results = [result for _ in processes for result in out.get(timeout=120)]
        for process in processes:
            process.join(30)
        check_outcome(app, results, token)
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]
