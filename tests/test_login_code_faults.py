"""Sign-in by code, all or nothing (issue 31, point 1): each write of asking for a code and
of passing it fails in turn, on SQLite; the answer is typed (never a 500), nothing of the
step is kept (no mail for a refused request, no code used up, no session signed in) and the
same request sent again works."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_authflow._web.state import get_state
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.migrations import upgrade
from flask_authflow.testing._pytest_plugin import Outbox
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.faults import BROWSER, Faults, snapshot
from tests.test_views import csrf_of

pytestmark = pytest.mark.authflow_stores("sql")

ALICE = "alice@example.com"


@pytest.fixture
def app(app_factory: AppFactory, tmp_path: Path) -> Iterator[Flask]:
    url = f"sqlite:///{tmp_path / 'faults.db'}"
    upgrade(url)
    made = app_factory(
        AUTHFLOW_DATABASE_URL=url,
        AUTHFLOW_VIEWS=True,
        AUTHFLOW_THROTTLE=False,
        AUTHFLOW_LOGIN_BY_CODE=True,
        AUTHFLOW_EXTERNAL_URL="https://app.example.com",
    )
    get_state(made).mail_sender = Outbox()
    backend = get_state(made).backend
    assert isinstance(backend, SqlAlchemyBackend)
    add_user(
        backend,
        "default",
        "carol",
        "carols long passphrase",
        email=ALICE,
        email_verified_at=datetime.now(UTC),
    )
    yield made


def client(app: Flask) -> FlaskClient:
    made = app.test_client()
    made.environ_base["HTTP_USER_AGENT"] = BROWSER
    return made


OUTBOXES: dict[int, Outbox] = {}


def outbox(app: Flask) -> Outbox:
    """The app's outbox (the fault injector wraps the app's sender while it runs)."""
    sender = get_state(app).mail_sender
    if isinstance(sender, Outbox):
        OUTBOXES[id(app)] = sender
    return OUTBOXES[id(app)]


def ask(browser: FlaskClient, token: str | None = None) -> int:
    token = token or csrf_of(browser.get("/login/code").text)
    answer = browser.post("/login/code", data={"username": "carol", "csrf_token": token})
    answer.close()
    return answer.status_code


def enter(browser: FlaskClient, code: str, token: str | None = None) -> Any:
    token = token or csrf_of(browser.get("/login/factor").text)
    return browser.post("/login/factor", data={"kind": "login_code", "code": code, "csrf_token": token})


def last_code(app: Flask) -> str:
    found = re.search(r"code: ([0-9]{8})", outbox(app).messages[-1].body)
    assert found is not None
    return found.group(1)


def engine(app: Flask) -> Any:
    backend = get_state(app).backend
    assert isinstance(backend, SqlAlchemyBackend)
    return backend.engine


def test_each_write_of_asking_for_a_code_fails_alone(app: Flask) -> None:
    outbox(app)
    with Faults(engine(app)) as faults:
        browser = client(app)
        token = csrf_of(browser.get("/login/code").text)
        with faults.trace(app) as trace:
            assert ask(browser, token) == 200
        assert trace.mails == 1 and trace.commits_writing(besides={"authflow_sessions"}) <= 1
        for fault in trace.faults(mail=False):
            browser = client(app)
            token = csrf_of(browser.get("/login/code").text)
            before, sent = snapshot(engine(app)), len(outbox(app).messages)
            with faults.inject(fault, app):
                assert ask(browser, token) == 503, fault
            assert snapshot(engine(app)) == before, fault
            assert len(outbox(app).messages) == sent, fault  # a refused request mails nothing
            assert ask(browser) == 200  # the retry
            assert enter(browser, last_code(app)).location == "/account", fault


def test_each_write_of_passing_the_code_fails_alone(app: Flask) -> None:
    outbox(app)
    with Faults(engine(app)) as faults:
        browser = client(app)
        ask(browser)
        token = csrf_of(browser.get("/login/factor").text)
        with faults.trace(app) as trace:
            assert enter(browser, last_code(app), token).location == "/account"
        # One transaction: the reservation's settlement, the code used up, the audit row and
        # the session; then the web layer's device record, its row and a later save.
        step = trace.transactions[0]
        # (The success is the counters' latest success: no row of the attempt log.)
        assert {"authflow_lockouts", "authflow_logout_jtis", "authflow_audit", "authflow_sessions"} <= step
        committed = next(n for n, w in enumerate(trace.writes, 1) if w.table == "authflow_devices") - 1
        step_rows = sum(1 for w in trace.writes[:committed] if w.table == "authflow_audit")
        for fault in trace.faults(mail=False):
            browser = client(app)
            ask(browser)
            code = last_code(app)
            token = csrf_of(browser.get("/login/factor").text)
            with faults.inject(fault, app):
                refused = enter(browser, code, token)
            if fault.n > (committed if fault.kind == "store" else step_rows):  # after the step: it stands
                assert refused.status_code in (302, 503), fault
                continue
            assert refused.status_code in (401, 503) and browser.get("/account").status_code != 200, fault
            if browser.get("/login/factor").status_code == 200:  # the login still waits: the code works
                assert enter(browser, code).location == "/account", fault
