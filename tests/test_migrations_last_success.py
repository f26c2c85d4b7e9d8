"""Revision 0011: a success is the counter row's ``last_success_at`` instead of a row of the
attempt log. The upgrade backfills it from the newest success row of each key (creating the
counter where a key had only successes); the downgrade logs a success row wherever the
column is newer than the log, so the older code reads the same last success. Locks, counts
and the failures since the last success read the same through both (on SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from flask_authflow._core.ports import AttemptKey
from flask_authflow.storage._sql import migrations
from flask_authflow.storage._sql.backend import SqlAlchemyBackend
from flask_authflow.storage._sql.schema import attempts_table, lockouts_table, metadata

pytestmark = pytest.mark.authflow_stores("sql")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SINCE = T0 - timedelta(days=1)
PAIR = "ann\x1f@192.0.2.1"
ANN, ANN_PAIR = AttemptKey("acme", "ann", "password"), AttemptKey("acme", PAIR, "password")
BOB, BOB_TOTP = AttemptKey("acme", "bob", "password"), AttemptKey("acme", "bob", "totp")
OTHER_TENANT = AttemptKey("globex", "ann", "password")
KEYS = [ANN, ANN_PAIR, BOB, BOB_TOTP, OTHER_TENANT]
WINDOW = {"window": timedelta(hours=1), "max_failures": 5, "lock_duration": timedelta(minutes=15)}


def minutes(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


#: What revision 0010's code had written: the counters (no ``last_success_at``) ...
COUNTERS = [
    {"tenant": "acme", "subject": "ann", "factor": "password", "failures": 2, "window_start": minutes(4)},
    {"tenant": "acme", "subject": "bob", "factor": "password", "failures": 0, "locked_until": minutes(60)},
]
#: ... and the attempt log: (key, minute, success).
LOG = [
    (ANN, 0, False),
    (ANN, 1, True),
    (ANN, 3, True),  # ann's last success; two failures after it
    (ANN, 4, False),
    (ANN, 5, False),
    (ANN_PAIR, 3, True),  # a success on a level that never failed: no counter row
    *((BOB, minute, False) for minute in range(5)),  # locked, never a success
    (BOB_TOTP, 2, True),  # another factor of bob: its own key
    (OTHER_TENANT, 10, True),
]
#: Per key: the failures since its last success, and that success (by the older code's log).
SINCE_SUCCESS = {ANN: 2, ANN_PAIR: 0, BOB: 5, BOB_TOTP: 0, OTHER_TENANT: 0}
LAST_SUCCESS = {
    ANN: minutes(3),
    ANN_PAIR: minutes(3),
    BOB: None,
    BOB_TOTP: minutes(2),
    OTHER_TENANT: minutes(10),
}


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    made = sa.create_engine(database_url)
    migrations.upgrade(made, "0010")
    with made.begin() as conn:
        for row in COUNTERS:  # (only the columns revision 0010 has)
            conn.execute(sa.insert(lockouts_table).values(row))
        conn.execute(
            sa.insert(attempts_table),
            [
                {**_key(key), "at": minutes(minute), "success": success, "client_ip": "192.0.2.1"}
                for key, minute, success in LOG
            ],
        )
    yield made
    made.dispose()


def _key(key: AttemptKey) -> dict[str, str]:
    return {"tenant": key.tenant, "subject": key.subject, "factor": key.factor}


def logged_last_success(conn: sa.Connection, key: AttemptKey) -> datetime | None:
    """The last success as the code of revision 0010 reads it: the newest success row."""
    t = attempts_table.c
    query = sa.select(sa.func.max(t.at)).where(
        t.tenant == key.tenant, t.subject == key.subject, t.factor == key.factor, t.success.is_(sa.true())
    )
    found = conn.execute(query).scalar()
    return None if found is None else found.replace(tzinfo=UTC)


def lock_state(conn: sa.Connection) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """What the locks and counts decide on (a missing counter reads as a zero one)."""
    t = lockouts_table.c
    rows = conn.execute(sa.select(t.tenant, t.subject, t.factor, t.failures, t.window_start, t.locked_until))
    return {
        (r.tenant, r.subject, r.factor): (r.failures, r.window_start, r.locked_until)
        for r in rows
        if (r.failures, r.window_start, r.locked_until) != (0, None, None)
    }


def as_0010_reads(engine: sa.Engine) -> tuple[Any, ...]:
    with engine.connect() as conn:
        return lock_state(conn), {key: logged_last_success(conn, key) for key in KEYS}


def test_the_upgrade_backfills_the_last_success_and_changes_no_lock_or_count(engine: sa.Engine) -> None:
    before = as_0010_reads(engine)
    assert before[1] == LAST_SUCCESS
    migrations.upgrade(engine)
    backend = SqlAlchemyBackend(engine, create_tables=False)
    t = lockouts_table.c
    with engine.connect() as conn:
        assert lock_state(conn) == before[0]
        rows = conn.execute(sa.select(t.tenant, t.subject, t.factor, t.last_success_at)).all()
    stored = {(r.tenant, r.subject, r.factor): r.last_success_at for r in rows}
    assert {key: stored.get((key.tenant, key.subject, key.factor)) for key in KEYS} == LAST_SUCCESS
    assert {key: backend.failures_since_success(key, since=SINCE) for key in KEYS} == SINCE_SUCCESS
    assert backend.locked_until("acme", "bob", T0) == minutes(60)
    assert backend.locked_until_any("acme", ["ann", PAIR], T0) is None
    assert [backend.failure_count(key) for key in KEYS] == [2, 0, 0, 0, 0]
    # The schema is exactly the models'.
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


def test_the_downgrade_logs_the_successes_settled_since_and_changes_no_lock_or_count(
    engine: sa.Engine,
) -> None:
    migrations.upgrade(engine)
    backend = SqlAlchemyBackend(engine, create_tables=False)
    # Under revision 0011: a failure, then ann's login settles a success (no log row) ...
    backend.register_failure(ANN, now=minutes(20), **WINDOW)
    assert backend.settle_success([ANN_PAIR, ANN], now=minutes(21)) is None
    # ... and the first success of a key that had none.
    backend.register_success(BOB, now=minutes(6))
    with engine.connect() as conn:
        settled = lock_state(conn)
    migrations.downgrade(engine, "0010")
    with engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("authflow_lockouts")}
        assert "last_success_at" not in columns
        # The older code reads the last successes the column held, and the same counters.
        last = {key: logged_last_success(conn, key) for key in KEYS}
        assert lock_state(conn) == settled
    assert last == {**LAST_SUCCESS, ANN: minutes(21), ANN_PAIR: minutes(21), BOB: minutes(6)}
    # Up again: the same last successes (the restored rows are not counted twice).
    migrations.upgrade(engine)
    assert {key: backend.failures_since_success(key, since=SINCE) for key in KEYS} == {
        **SINCE_SUCCESS,
        ANN: 0,
        BOB: 0,  # bob's five failures were all before minute 6
    }


def test_a_downgrade_without_new_successes_adds_no_row(engine: sa.Engine) -> None:
    before = as_0010_reads(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(attempts_table)).scalar_one()
    migrations.upgrade(engine)
    migrations.downgrade(engine, "0010")
    assert as_0010_reads(engine) == before
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(attempts_table)).scalar_one() == rows
