"""One SET pushed many times at once is handled once: the shared one-time store decides
(its primary key, in the push's unit of work), not a Python lock. On SQLite (threads in one
process) and on PostgreSQL (two processes, each its own app on the same database)."""

from __future__ import annotations

import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, jsonify

from flask_authflow._clock import SystemClock
from flask_authflow._web.state import get_state
from flask_authflow.federation._http import RequestsHttpClient
from flask_authflow.federation._ssf import RISC
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._provider import TestOpenIDProvider, wsgi_adapter
from flask_authflow.testing._users import add_user
from tests.appfactory import make_app
from tests.authn_support import fast_hasher
from tests.concurrency import run_together
from tests.parts import child_processes

pytestmark = pytest.mark.authflow_stores("sql")

ISSUER = "https://tx.test"
PUSH_TOKEN = "race-push-secret-" + "y" * 32
PUSHES = 10


def receiver_app(url: str, key: bytes, instance: str, jwks: dict[str, Any]) -> Flask:
    """An app on ``url`` receiving the SETs of ``ISSUER``, whose keys are ``jwks``."""
    keys = Flask("transmitter_keys")
    keys.add_url_rule("/jwks", "jwks", lambda: jsonify(jwks))
    transmitter = {
        "issuer": ISSUER,
        "jwks_uri": f"{ISSUER}/jwks",
        "audience": "https://rp.test",
        "algorithms": ["ES256"],
        "push_token": PUSH_TOKEN,
    }
    return make_app(
        AUTHFLOW_DATABASE_URL=url, AUTHFLOW_SIGNING_KEY=key, AUTHFLOW_SSF_TRANSMITTERS={"tx": transmitter},
        hasher=fast_hasher(), instance_path=instance,
        http_client=RequestsHttpClient(adapters={ISSUER: wsgi_adapter(keys)}),
    )  # fmt: skip


def signed_set() -> tuple[str, dict[str, Any]]:
    """An account-disabled SET for alice, and the transmitter's JWKS."""
    transmitter = TestOpenIDProvider(ISSUER, clock=SystemClock(), algorithm="ES256")
    claims = {
        "iss": ISSUER,
        "aud": "https://rp.test",
        "iat": int(SystemClock().now().timestamp()),
        "jti": secrets.token_hex(8),
        "sub_id": {"format": "opaque", "id": "alice-sub"},
        "events": {f"{RISC}account-disabled": {}},
    }
    return transmitter.sign(claims, typ="secevent+jwt"), transmitter.jwks()


def push(app: Flask, token: str) -> int:
    headers = {"Content-Type": "application/secevent+jwt", "Authorization": f"Bearer {PUSH_TOKEN}"}
    return app.test_client().post("/auth/ssf/push/tx", data=token, headers=headers).status_code


def add_alice(app: Flask) -> None:
    backend = get_state(app).backend
    user = add_user(backend, "default", "alice", "a long enough password here")
    backend.link_identity(ISSUER, "alice-sub", "default", user.user_id)  # type: ignore[attr-defined]


def check_handled_once(app: Flask, statuses: list[int]) -> None:
    assert Counter(statuses) == {202: 1, 400: len(statuses) - 1}, Counter(statuses)
    backend = get_state(app).backend
    rows = [(r.event, r.status) for r in backend.audit_rows if r.event.startswith("ssf_")]  # type: ignore[attr-defined]
    assert rows.count(("ssf_account_disabled", "success")) == 1
    assert rows.count(("ssf_refused", "failure")) == len(statuses) - 1
    user = backend.find_user("default", "alice")
    assert user is not None and user.disabled


def test_one_set_pushed_ten_times_at_once_on_sqlite_is_handled_once(tmp_path: Path) -> None:
    token, jwks = signed_set()
    app = receiver_app(f"sqlite:///{tmp_path / 'ssf.db'}", secrets.token_bytes(32), str(tmp_path), jwks)
    try:
        add_alice(app)
        check_handled_once(app, run_together([lambda: push(app, token) for _ in range(PUSHES)]))
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]


SPAWN = child_processes()


def _pusher(
    url: str, key: bytes, instance: str, jwks: dict[str, Any], token: str, barrier: Any, out: Any
) -> None:
    app = receiver_app(url, key, instance, jwks)
    try:
        barrier.wait(60)
        out.put(run_together([lambda: push(app, token) for _ in range(PUSHES // 2)]))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put([f"error {exc!r}"])
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_one_set_pushed_from_three_processes_on_postgresql_is_handled_once(
    postgres_server: Any, tmp_path: Path
) -> None:
    """The test's process and two children, each its own app on one database, push at once."""
    url, key = postgres_server.new_database(), secrets.token_bytes(32)
    upgrade(url)
    token, jwks = signed_set()
    app = receiver_app(url, key, str(tmp_path), jwks)
    try:
        add_alice(app)
        barrier, out = SPAWN.Barrier(3), SPAWN.Queue()
        children = [
            SPAWN.Process(target=_pusher, args=(url, key, str(tmp_path), jwks, token, barrier, out))
            for _ in range(2)
        ]
        for child in children:
            child.start()
        barrier.wait(60)
        statuses = run_together([lambda: push(app, token) for _ in range(PUSHES // 2)])
        for _ in children:
            statuses += out.get(timeout=120)
        for child in children:
            child.join(30)
            assert child.exitcode == 0
        check_handled_once(app, statuses)
    finally:
        get_state(app).backend.close()  # type: ignore[attr-defined]
