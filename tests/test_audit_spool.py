"""A logout always ends the session; its audit row survives an audit-store outage in the spool."""

from __future__ import annotations

import os
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask import Flask

from flask_authflow import AuthFlow, login_required
from flask_authflow._clock import MockClock
from flask_authflow._web.state import get_state
from flask_authflow.audit._sinks import AuditRecord, MemoryAuditSink
from flask_authflow.audit._spool import SpoolAuditSink
from flask_authflow.errors import AuditWriteError
from flask_authflow.login._password import PasswordHasher
from flask_authflow.sessions._stores import MemorySessionStore
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.testing._pytest_plugin import login_test_client
from tests.appfactory import AppFactory

ROW = AuditRecord(
    time=datetime(2026, 1, 1, tzinfo=UTC), event="logout", status="success", tenant="t", user_id="u1"
)


def test_spool_round_trip_is_durable_and_private(tmp_path: Path) -> None:
    spool = SpoolAuditSink(tmp_path / "spool" / "audit.jsonl")
    spool.write(ROW)
    spool.write(AuditRecord(time=ROW.time, event="logout", status="success", reason="line\u2028break"))
    assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o600
    rows = spool.records()
    assert rows[0] == ROW and rows[1].reason == "line\\u2028break"
    assert spool.path.read_text().count("\n") == 2


def test_replay_moves_rows_and_keeps_what_the_sink_refuses(tmp_path: Path) -> None:
    spool = SpoolAuditSink(tmp_path / "audit.jsonl")
    for i in range(3):
        spool.write(AuditRecord(time=ROW.time, event="logout", status="success", request_id=f"r{i}"))
    sink = MemoryAuditSink()
    sink.fail_next(1)
    with pytest.raises(Exception, match="audit"):
        spool.replay(sink)
    assert [r.request_id for r in spool.records()] == ["r0", "r1", "r2"]  # nothing lost
    sink.fail_next(0)
    assert spool.replay(sink) == 3
    assert [r.request_id for r in sink.records] == ["r0", "r1", "r2"]
    assert spool.records() == [] and spool.replay(sink) == 0  # nothing written twice


def test_parallel_writers_lose_no_row(tmp_path: Path) -> None:
    spool = SpoolAuditSink(tmp_path / "audit.jsonl")
    threads = [
        threading.Thread(
            target=lambda n=n: [
                spool.write(
                    AuditRecord(time=ROW.time, event="logout", status="success", request_id=f"{n}-{i}")
                )
                for i in range(20)
            ]
        )
        for n in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.request_id for r in spool.records()}) == 100


@pytest.fixture
def app(app_factory: AppFactory, mock_clock: MockClock, authflow_hasher: PasswordHasher) -> Flask:
    # Its own in-memory stores, also for the test of the spool's default place (unwired).
    authflow = AuthFlow()
    app = app_factory(
        authflow=authflow,
        backend=InMemoryBackend(clock=mock_clock),
        session_store=MemorySessionStore(clock=mock_clock),
    )

    @app.post("/logout")
    def logout() -> str:
        authflow.login.logout()
        return "logged out"

    @app.get("/dashboard")
    @login_required
    def dashboard() -> str:
        return "dashboard"

    return app


@pytest.mark.authflow_stores("app")  # the spool's default place: the instance folder
def test_logout_with_the_audit_store_down_ends_the_session_and_spools_the_row(app: Flask) -> None:
    client = login_test_client(app, "alice")
    state = get_state(app)
    backend: InMemoryBackend = state.backend  # type: ignore[assignment]
    backend.fail_next_write()
    response = client.post("/logout")
    assert response.status_code == 200 and response.text == "logged out"
    assert client.get("/dashboard").status_code == 401  # the session is gone
    spool = state.service.audit_fallback
    assert isinstance(spool, SpoolAuditSink)
    assert spool.path == Path(app.instance_path) / "authflow-audit-spool.jsonl"
    [row] = spool.records()
    assert (row.event, row.status) == ("logout", "success") and row.user_id is not None
    assert state.counters.snapshot()["audit_fallback_writes"] == 1
    # The store is back: the CLI moves the row where it belongs.
    result = app.test_cli_runner().invoke(args=["authflow", "audit", "replay-spool"])
    assert result.exit_code == 0 and "1 audit row(s) moved" in result.output
    assert backend.audit_rows[-1] == row and spool.records() == []


def test_logout_with_both_the_store_and_the_spool_down_still_logs_out(app: Flask, tmp_path: Path) -> None:
    client = login_test_client(app, "alice")
    state = get_state(app)
    backend: InMemoryBackend = state.backend  # type: ignore[assignment]
    spool = state.service.audit_fallback
    assert isinstance(spool, SpoolAuditSink)
    spool.path.mkdir(parents=True)  # a directory where the spool file should be: writes fail
    backend.fail_next_write()
    assert client.post("/logout").status_code == 200
    assert client.get("/dashboard").status_code == 401
    assert state.counters.snapshot()["audit_lost_writes"] == 1


def test_a_failed_audit_write_still_fails_a_login(app: Flask) -> None:
    backend: InMemoryBackend = get_state(app).backend  # type: ignore[assignment]
    backend.fail_next_write()
    with pytest.raises(AuditWriteError):
        login_test_client(app, "bob")
