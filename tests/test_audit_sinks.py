"""Audit sinks and the Prometheus counters."""

from __future__ import annotations

import hashlib
import re
import threading
from datetime import UTC, datetime

import pytest

from flask_authflow.audit.sinks import AuditRecord, AuthCounters, MemoryAuditSink, hash_session_id
from flask_authflow.errors import AuditWriteError

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
    }


def test_counters_refuse_unknown_names_and_negative_steps() -> None:
    counters = AuthCounters()
    with pytest.raises(KeyError):
        counters.increment("nope")
    with pytest.raises(ValueError):
        counters.increment("login_attempts", -1)
