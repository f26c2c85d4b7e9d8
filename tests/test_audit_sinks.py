"""Audit sinks and the Prometheus counters."""

from __future__ import annotations

import hashlib
import re
import threading
from datetime import UTC, datetime

import pytest

from flask_authflow._web.state import get_state
from flask_authflow.audit._sinks import AuditRecord, AuthCounters, MemoryAuditSink, hash_session_id
from flask_authflow.errors import AuditWriteError
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory

ROW = AuditRecord(time=datetime(2026, 1, 1, tzinfo=UTC), event="logout", status="success")


def test_memory_sink_switches() -> None:
    sink = MemoryAuditSink()
    sink.write(ROW)
    sink.fail_next(2)
    for _ in range(2):
        with pytest.raises(AuditWriteError):
            sink.write(ROW)
    sink.write(ROW)
    sink.broken = True
    with pytest.raises(AuditWriteError):
        sink.write(ROW)
    assert sink.records == [ROW, ROW]
    sink.clear()
    assert sink.records == []


def test_hash_session_id() -> None:
    assert hash_session_id("abc") == hashlib.sha256(b"abc").hexdigest()
    assert hash_session_id(None) is None


def test_counters_are_thread_safe() -> None:
    counters = AuthCounters()

    def work() -> None:
        for _ in range(2000):
            counters.attempt()
            counters.failure()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = counters.snapshot()
    assert snap["login_attempts"] == 16000 and snap["login_failures"] == 16000


def test_prometheus_text_format() -> None:
    counters = AuthCounters()
    counters.attempt()
    counters.success()
    counters.lock()
    counters.binding_mismatch()
    counters.binding_mismatch()
    counters.jwks_refresh()
    text = counters.render_prometheus()
    assert text.endswith("\n")
    lines = text.splitlines()
    samples = {}
    for i, line in enumerate(lines):
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert lines[i + 1] == f"# TYPE {name} counter"
            assert lines[i + 2].startswith(name + " ")
        elif not line.startswith("#"):
            name, value = line.split(" ")
            assert re.fullmatch(r"authflow_[a-z_]+_total", name)
            samples[name] = int(value)
    assert samples == {
        "authflow_login_attempts_total": 1,
        "authflow_login_successes_total": 1,
        "authflow_login_failures_total": 0,
        "authflow_lockouts_total": 1,
        "authflow_session_binding_mismatches_total": 2,
        "authflow_jwks_refreshes_total": 1,
        "authflow_jwks_refresh_failures_total": 0,
        "authflow_audit_fallback_writes_total": 0,
        "authflow_audit_lost_writes_total": 0,
        "authflow_workflows_started_total": 0,
        "authflow_workflows_completed_total": 0,
        "authflow_workflows_aborted_total": 0,
    }


def test_jwks_fetches_count_failures_separately() -> None:
    counters = AuthCounters()
    counters.jwks_fetched(True)
    counters.jwks_fetched(False)
    counters.jwks_fetched(True)
    snapshot = counters.snapshot()
    assert (snapshot["jwks_refreshes"], snapshot["jwks_refresh_failures"]) == (3, 1)
    assert "authflow_jwks_refresh_failures_total 1\n" in counters.render_prometheus()


def test_counters_refuse_unknown_names_and_negative_steps() -> None:
    counters = AuthCounters()
    with pytest.raises(KeyError):
        counters.increment("nope")
    with pytest.raises(ValueError):
        counters.increment("login_attempts", -1)


@pytest.mark.parametrize("separator", ["\n", "\r", "\u2028", "\u2029", "\u0085", "\x0b", "\x1e", "\x00"])
def test_line_separators_are_escaped_in_audit_rows(separator: str) -> None:
    forged = f"curl/8{separator}2026-01-01 login_begin success user=admin"
    record = AuditRecord(
        time=datetime(2026, 1, 1, tzinfo=UTC),
        event="login_begin",
        status="failure",
        tenant=f"acme{separator}",
        user_agent=forged,
        reason=f"bad{separator}",
    )
    for value in (record.user_agent, record.tenant, record.reason):
        assert value is not None
        assert separator not in value and len(value.splitlines()) == 1
        assert f"\\u{ord(separator):04x}" in value
    sink = MemoryAuditSink()
    sink.write(record)
    assert (
        "\n".join(str(v) for v in sink.records[0].to_dict().values()).count("\n") == len(record.to_dict()) - 1
    )


def test_escaping_is_idempotent_and_leaves_printable_text_alone() -> None:
    plain = AuditRecord(
        time=datetime(2026, 1, 1, tzinfo=UTC), event="logout", status="success", reason="new_login"
    )
    assert plain.reason == "new_login"
    real = AuditRecord(time=plain.time, event="logout", status="success", reason="a\u2028b")
    assert real.reason == "a\\u2028b"
    # A row read back from a store is not escaped a second time.
    again = AuditRecord(**real.to_dict())
    assert again == real


def test_login_with_a_separator_in_the_user_agent_stores_an_escaped_row(app_factory: AppFactory) -> None:
    from flask_authflow import AuthFlow
    from flask_authflow.storage._memory import InMemoryBackend

    authflow = AuthFlow()
    app = app_factory(authflow=authflow)
    backend = get_state(app).backend
    assert isinstance(backend, InMemoryBackend)
    add_user(backend, "default", "alice", "correct horse battery")

    @app.post("/login")
    def login() -> str:
        authflow.login.password("alice", "wrong password")
        return "done"

    app.test_client().post("/login", headers={"User-Agent": "evil\u2028forged row"})
    rows = [r for r in backend.audit_rows if r.user_agent]
    assert rows and all("\u2028" not in r.user_agent for r in rows)
