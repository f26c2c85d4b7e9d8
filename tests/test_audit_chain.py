"""The tamper-evident audit chain (issue 32, point 5).

Rows of a chained store carry ``seq`` and an HMAC-SHA256 over the previous row's MAC;
``verify`` finds an edited, a deleted and two swapped rows, a forged checkpoint, and rows
MACed with a key the app does not have; key rotation mid-chain verifies; a purge drops a
verified prefix behind a checkpoint; a fault at the head's update leaves nothing and the
retry works; writers racing (threads on SQLite here, processes on PostgreSQL in
``test_audit_chain_races.py``) never fork the chain. The memory store behaves the same.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from flask import Flask, request
from sqlalchemy import Engine, event, select, text

from flask_authflow import AuthFlow
from flask_authflow._clock import MockClock
from flask_authflow._core.ports import one_unit
from flask_authflow.audit._chain import AuditChain, ChainReport, Checkpoint, purge_chained, verify_chains
from flask_authflow.audit._sinks import AuditRecord
from flask_authflow.errors import AuditWriteError, ConfigurationError
from flask_authflow.storage._memory import InMemoryBackend
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import audit_chain_heads_table, audit_table
from flask_authflow.testing._users import add_user
from tests.appfactory import AppFactory
from tests.concurrency import run_together

KEY = b"k" * 32
NEW_KEY = b"n" * 32
PASSWORD = "correct horse battery staple"


def row(clock: MockClock, event: str, tenant: str | None = "acme") -> AuditRecord:
    return AuditRecord(time=clock.now(), event=event, status="success", tenant=tenant, user_id="u1")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'authflow.db'}"


def chained_backend(url: str) -> SqlAlchemyBackend:
    backend = SqlAlchemyBackend(url)
    backend.use_audit_chain(AuditChain(KEY))
    return backend


@pytest.fixture
def chained() -> Iterator[SqlAlchemyBackend]:
    backend = chained_backend("sqlite://")  # in memory: one connection, this thread's
    yield backend
    backend.close()


def write_rows(backend: Any, clock: MockClock, count: int, tenant: str | None = "acme") -> None:
    for n in range(count):
        backend.write(row(clock, f"event{n}", tenant))
        clock.advance(timedelta(seconds=1))


def only(reports: list[ChainReport], tenant: str | None = "acme") -> ChainReport:
    [found] = [report for report in reports if report.tenant == tenant]
    return found


def fault_of(report: ChainReport) -> tuple[str, int, int | None] | None:
    return None if report.fault is None else (report.fault.kind, report.fault.seq, report.fault.row_id)


def sql(backend: SqlAlchemyBackend, statement: str, **params: Any) -> None:
    with backend.engine.begin() as conn:
        conn.execute(text(statement), params)


# --- the chain on SQLite: what verify finds ------------------------------------------------------


def test_rows_of_each_tenant_form_their_own_numbered_chain_and_verify(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 3)
    with one_unit(chained.begin_unit):  # a unit's rows: one INSERT, the same chain
        write_rows(chained, mock_clock, 2)
        write_rows(chained, mock_clock, 2, tenant="globex")
    write_rows(chained, mock_clock, 1, tenant=None)
    rows = chained.audit_rows
    assert [(r.tenant, r.seq) for r in rows] == [
        *[("acme", n) for n in range(1, 6)],
        ("globex", 1),
        ("globex", 2),
        (None, 1),
    ]
    reports = verify_chains(chained, AuditChain(KEY))
    assert [(r.tenant, r.ok, r.verified, r.last_seq) for r in reports] == [
        (None, True, 1, 1),
        ("acme", True, 5, 5),
        ("globex", True, 2, 2),
    ]


def test_verify_finds_a_row_edited_in_the_database(chained: SqlAlchemyBackend, mock_clock: MockClock) -> None:
    write_rows(chained, mock_clock, 5)
    sql(chained, "UPDATE authflow_audit SET status = 'failure' WHERE seq = 3")
    [edited_id] = [r.id for r in chained.read_audit_chain("acme").rows if r.record.seq == 3]
    assert fault_of(only(verify_chains(chained, AuditChain(KEY)))) == ("broken", 3, edited_id)


def test_verify_finds_a_deleted_row_and_a_deleted_last_row(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 5)
    ids = {r.record.seq: r.id for r in chained.read_audit_chain("acme").rows}
    sql(chained, "DELETE FROM authflow_audit WHERE seq = 5")
    assert fault_of(only(verify_chains(chained, AuditChain(KEY)))) == ("missing", 5, None)
    sql(chained, "DELETE FROM authflow_audit WHERE seq = 2")
    assert fault_of(only(verify_chains(chained, AuditChain(KEY)))) == ("missing", 2, ids[3])


def test_verify_finds_two_swapped_rows(chained: SqlAlchemyBackend, mock_clock: MockClock) -> None:
    write_rows(chained, mock_clock, 5)
    ids = {r.record.seq: r.id for r in chained.read_audit_chain("acme").rows}
    columns = [c.name for c in audit_table.c if c.name != "id"]
    with chained.engine.begin() as conn:  # every column but the id changes place
        by_id = {r.id: r for r in conn.execute(select(audit_table)).all()}
        first, second = by_id[ids[2]], by_id[ids[3]]
        for target, source in ((ids[2], second), (ids[3], first)):
            values = {name: getattr(source, name) for name in columns}
            conn.execute(audit_table.update().where(audit_table.c.id == target).values(**values))
    assert fault_of(only(verify_chains(chained, AuditChain(KEY)))) == ("reordered", 3, ids[2])


def test_verify_refuses_rows_of_a_key_it_does_not_have(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 2)
    first = chained.read_audit_chain("acme").rows[0].id
    assert fault_of(only(verify_chains(chained, AuditChain(NEW_KEY)))) == ("broken", 1, first)


def test_a_new_key_takes_over_mid_chain_and_both_verify(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 2)
    rotated = AuditChain(NEW_KEY, previous_keys=[KEY])
    chained.use_audit_chain(rotated)
    write_rows(chained, mock_clock, 2)
    assert [r.key_id for r in chained.audit_rows] == [AuditChain.id_of(KEY)] * 2 + [rotated.key_id] * 2
    assert only(verify_chains(chained, rotated)).verified == 4


def test_rows_written_before_the_chain_are_an_unchained_prefix_not_a_break(
    sqlite_url: str, mock_clock: MockClock
) -> None:
    backend = SqlAlchemyBackend(sqlite_url)
    try:
        write_rows(backend, mock_clock, 2)  # the chain is off
        backend.use_audit_chain(AuditChain(KEY))
        write_rows(backend, mock_clock, 3)
        report = only(verify_chains(backend, AuditChain(KEY)))
        assert (report.ok, report.unchained_prefix, report.verified) == (True, 2, 3)
        backend.use_audit_chain(None)  # switched off again: a later row is outside the chain
        write_rows(backend, mock_clock, 1)
        assert fault_of(only(verify_chains(backend, AuditChain(KEY))))[:2] == ("unchained", 4)  # type: ignore[index]
    finally:
        backend.close()


# --- purge and checkpoints ----------------------------------------------------------------------


def test_a_purge_drops_the_verified_prefix_behind_a_checkpoint_that_verify_starts_from(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 4)
    cutoff = mock_clock.now()
    write_rows(chained, mock_clock, 2)
    assert purge_chained(chained, AuditChain(KEY), cutoff) == (4, [])
    assert [r.seq for r in chained.audit_rows] == [5, 6]
    report = only(verify_chains(chained, AuditChain(KEY)))
    assert (report.ok, report.checkpoint_seq, report.verified) == (True, 4, 2)
    write_rows(chained, mock_clock, 1)  # the chain goes on after a purge
    assert only(verify_chains(chained, AuditChain(KEY))).verified == 3


def test_a_forged_checkpoint_is_reported(chained: SqlAlchemyBackend, mock_clock: MockClock) -> None:
    write_rows(chained, mock_clock, 3)
    cutoff = mock_clock.now()
    write_rows(chained, mock_clock, 3)
    purge_chained(chained, AuditChain(KEY), cutoff)
    # Hiding a deleted row behind a moved checkpoint: its MAC no longer verifies.
    sql(chained, "DELETE FROM authflow_audit WHERE seq = 4")
    sql(chained, "UPDATE authflow_audit_chain_heads SET checkpoint_seq = 4")
    assert fault_of(only(verify_chains(chained, AuditChain(KEY)))) == ("checkpoint", 4, None)


def test_a_purge_keeps_a_prefix_that_does_not_verify(
    chained: SqlAlchemyBackend, mock_clock: MockClock
) -> None:
    write_rows(chained, mock_clock, 3)
    cutoff = mock_clock.now()
    sql(chained, "UPDATE authflow_audit SET event = 'nothing' WHERE seq = 2")
    deleted, kept = purge_chained(chained, AuditChain(KEY), cutoff)
    assert deleted == 0 and [fault_of(r)[:2] for r in kept] == [("broken", 2)]  # type: ignore[index]
    assert len(chained.audit_rows) == 3


# --- the write path: faults, retries, racing writers ---------------------------------------------


@pytest.fixture
def fail_head_update() -> Iterator[list[int]]:
    """While the list holds a number, that many head updates raise (then it empties)."""
    armed: list[int] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if armed and statement.lstrip().startswith(f"UPDATE {audit_chain_heads_table.name}"):
            armed.pop()
            raise conn.dialect.loaded_dbapi.OperationalError("injected fault at the chain's head update")

    event.listen(Engine, "before_cursor_execute", before)
    yield armed
    event.remove(Engine, "before_cursor_execute", before)


def test_a_fault_at_the_head_update_writes_nothing_and_the_retry_works(
    chained: SqlAlchemyBackend, mock_clock: MockClock, fail_head_update: list[int]
) -> None:
    write_rows(chained, mock_clock, 1)
    fail_head_update.append(1)
    with pytest.raises(AuditWriteError), one_unit(chained.begin_unit):
        write_rows(chained, mock_clock, 2)
    assert [r.seq for r in chained.audit_rows] == [1]
    assert chained.read_audit_chain("acme").head.seq == 1  # type: ignore[union-attr]
    with one_unit(chained.begin_unit):  # the retry: its cached head is right, the swap matches
        write_rows(chained, mock_clock, 2)
    assert only(verify_chains(chained, AuditChain(KEY))).verified == 3


def test_a_stale_head_of_another_writer_is_read_again_and_never_forks(
    sqlite_url: str, mock_clock: MockClock
) -> None:
    chained = chained_backend(sqlite_url)
    other = chained_backend(sqlite_url)  # a second process: a head cache of its own
    try:
        write_rows(chained, mock_clock, 2)
        write_rows(other, mock_clock, 2)  # reads the head: 2
        write_rows(chained, mock_clock, 2)  # its head (2) is stale: the swap fails, read, retried
        writers: list[Callable[[], Any]] = [
            functools.partial(write_rows, b, mock_clock, 3) for b in (chained, other) * 3
        ]
        run_together(writers)
        assert sorted(r.seq for r in chained.audit_rows) == list(range(1, 25))  # type: ignore[type-var]
        assert only(verify_chains(chained, AuditChain(KEY))).ok
    finally:
        other.close()
        chained.close()


# --- the memory store ----------------------------------------------------------------------------


def test_the_memory_store_chains_verifies_and_finds_an_edited_row(mock_clock: MockClock) -> None:
    backend = InMemoryBackend(clock=mock_clock)
    backend.use_audit_chain(AuditChain(KEY))
    write_rows(backend, mock_clock, 2)
    unit = backend.begin_unit()
    write_rows(backend, mock_clock, 2)
    unit.rollback()  # its rows and its move of the head are undone
    write_rows(backend, mock_clock, 2)
    assert [r.seq for r in backend.audit_rows] == [1, 2, 3, 4]
    assert only(verify_chains(backend, AuditChain(KEY))).verified == 4
    stored = backend._audit[1]
    edited = AuditRecord(**{**stored.record.to_dict(), "status": "failure"})
    backend._audit[1] = type(stored)(stored.id, edited)
    assert fault_of(only(verify_chains(backend, AuditChain(KEY)))) == ("broken", 2, stored.id)


def test_the_memory_store_purges_behind_a_checkpoint(mock_clock: MockClock) -> None:
    backend = InMemoryBackend(clock=mock_clock)
    backend.use_audit_chain(AuditChain(KEY))
    write_rows(backend, mock_clock, 3)
    cutoff = mock_clock.now()
    write_rows(backend, mock_clock, 1)
    assert purge_chained(backend, AuditChain(KEY), cutoff) == (3, [])
    assert only(verify_chains(backend, AuditChain(KEY))).checkpoint_seq == 3
    checkpoint = backend._checkpoints["acme"]
    backend._checkpoints["acme"] = Checkpoint("acme", 2, checkpoint.mac, checkpoint.key_id, checkpoint.sig)
    assert fault_of(only(verify_chains(backend, AuditChain(KEY))))[0] == "checkpoint"  # type: ignore[index]


# --- configuration and the commands ------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({}, "AUTHFLOW_AUDIT_CHAIN_KEY is not set"),
        ({"AUTHFLOW_AUDIT_CHAIN_KEY": "short"}, "at least 32"),
        ({"AUTHFLOW_AUDIT_CHAIN_KEY": KEY, "AUTHFLOW_SIGNING_KEY": KEY}, "is the signing key"),
    ],
)
def test_the_chain_is_refused_without_a_key_of_its_own(
    app_factory: AppFactory, config: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        app_factory(AUTHFLOW_AUDIT_CHAIN=True, **config)


def chained_app(app_factory: AppFactory, url: str, **config: Any) -> Flask:
    backend = SqlAlchemyBackend(url)
    authflow = AuthFlow()
    settings = {"AUTHFLOW_AUDIT_CHAIN": True, "AUTHFLOW_AUDIT_CHAIN_KEY": KEY, **config}
    app = app_factory(authflow=authflow, backend=backend, AUTHFLOW_DATABASE_URL=url, **settings)
    with app.app_context():
        add_user(authflow.state.backend, "default", "alice", PASSWORD)

    @app.post("/login")
    def login_view() -> str:
        return type(authflow.login.password(request.get_json()["user"], PASSWORD)).__name__

    return app


def run(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["authflow", *args])


@pytest.mark.authflow_stores("sql")
def test_logins_are_chained_and_audit_verify_reports_an_edited_row(
    app_factory: AppFactory, sqlite_url: str, fail_head_update: list[int]
) -> None:
    app = chained_app(app_factory, sqlite_url)
    assert app.test_client().post("/login", json={"user": "alice"}).text == "Authenticated"
    fail_head_update.append(1)  # the login's one transaction fails at the head: nothing kept
    assert app.test_client().post("/login", json={"user": "alice"}).status_code == 503
    assert app.test_client().post("/login", json={"user": "alice"}).text == "Authenticated"
    result = run(app, "audit", "verify")
    assert result.exit_code == 0, result.output
    assert "ok" in result.output
    document = json.loads(run(app, "audit", "verify", "--json").output)
    [chain] = document["chains"]
    assert document["ok"] and chain["tenant"] == "default" and chain["verified"] == chain["last_seq"] > 0

    backend = app.extensions["authflow"].backend
    sql(backend, "UPDATE authflow_audit SET user_id = 'someone' WHERE seq = 2")
    result = run(app, "audit", "verify", "--json")
    assert result.exit_code == 1
    [chain] = json.loads(result.output)["chains"]
    assert chain["break"]["kind"] == "broken" and chain["break"]["seq"] == 2


@pytest.mark.authflow_stores("sql")
def test_audit_purge_with_the_chain_leaves_a_checkpoint_and_verify_passes(
    app_factory: AppFactory, sqlite_url: str, mock_clock: MockClock
) -> None:
    app = chained_app(app_factory, sqlite_url, AUTHFLOW_AUDIT_RETENTION=timedelta(days=30))
    assert app.test_client().post("/login", json={"user": "alice"}).text == "Authenticated"
    mock_clock.advance(timedelta(days=31))
    assert app.test_client().post("/login", json={"user": "alice"}).text == "Authenticated"
    result = run(app, "audit", "purge", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["deleted"] > 0
    [chain] = json.loads(run(app, "audit", "verify", "--json").output)["chains"]
    assert chain["ok"] and chain["checkpoint_seq"] > 0


def test_audit_verify_without_a_key_is_refused(app_factory: AppFactory) -> None:
    result = run(app_factory(), "audit", "verify")
    assert result.exit_code == 1 and "AUTHFLOW_AUDIT_CHAIN_KEY" in result.output
