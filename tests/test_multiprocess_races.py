"""N worker processes behave like one: revocation, key rotation and attempt counters raced
by several processes (not threads) against PostgreSQL.

Every race here is decided by the database (single conditional statements, row locks,
a table lock), never by Python locks, which do not reach across processes:

* a session revoked (every session of a user, of a tenant) while other processes keep
  rotating and refreshing it never comes back: a save that starts after the revocation
  is refused, and no row of the revoked sessions is left;
* staged issuer-key rotation from several processes: every staged key is activated at
  most once, one key is current, the schedule agrees with the keys;
* failure counters incremented from several processes lose no count, and the failure
  that reaches the threshold sets the lock exactly once per threshold;
* a factor's counter advanced, its secret swapped (compare-and-set) and pending factors
  confirmed in place of each other, by several processes at the same instant: exactly
  one process wins each round.

(Lockout reservations and the logout jti replay cache are raced across processes in
``test_lockout_race.py`` and ``test_federation_stores.py``.)
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.ports import AttemptKey, FactorConfig
from flask_authflow._core.session import (
    SessionRecord,
    new_guest_record,
    new_session_id,
    pass_factor,
    start_login,
)
from flask_authflow._outcomes import FactorKind
from flask_authflow.errors import RotationRefused
from flask_authflow.issuer._keys import LocalIdpSigningKey
from flask_authflow.storage._sql.backend import SqlAlchemyBackend, attempts_table
from flask_authflow.storage._sql.keystore import SqlAlchemyLocalIdpKeyStore
from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore, sessions_table
from tests.parts import child_processes

pytestmark = [pytest.mark.postgres, pytest.mark.multiprocess]

KEY = bytes(range(32))
WORKERS = 3
SPAWN = child_processes()


def _signed_in(user: str, tenant: str) -> SessionRecord:
    now = datetime.now(UTC)
    record = start_login(new_guest_record(now), tenant=tenant, user_id=user, factors=["password"], now=now)
    return replace(pass_factor(record, "password", now=now), fingerprint="fp")


def _expiry() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


# --- revocation against concurrent saves ---------------------------------------------------------


def _rotating_worker(
    worker: int, url: str, sids: list[str], rotations: Any, revoked: Any, stop: Any, out: Any
) -> None:
    """Keep every session of ``sids`` busy: rotate its id, then refresh it in place, until stopped.

    Reports (saves that succeeded, saves that succeeded although they started after the
    revocation was announced, the final id of each chain or None when it ended).
    """
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), create_tables=False, purge_every=None)
    chains: list[str | None] = list(sids)
    written = late = 0
    deadline = time.monotonic() + 30
    while not stop.is_set() and time.monotonic() < deadline and any(chains):
        for index, sid in enumerate(chains):
            if sid is None:
                continue
            record = store.load(sid)
            if record is None:
                chains[index] = None
                continue
            announced = revoked.is_set()  # read before the save starts
            if written % 2:
                ok = store.save(replace(record, custom={"n": written}), _expiry(), existing=True)
                new_sid = sid
            else:
                new_sid = new_session_id()
                ok = store.save(replace(record, sid=new_sid), _expiry(), replaces=[sid])
            if not ok:
                chains[index] = None
                continue
            chains[index] = new_sid
            written += 1
            late += announced
            rotations[worker] += 1  # only this process writes its slot
    store.engine.dispose()
    out.put((worker, (written, late, chains)))


@pytest.mark.parametrize("scope", ["tenant", "user"])
def test_a_revoked_session_never_comes_back_while_other_processes_save_it(
    postgres_server: Any, scope: str
) -> None:
    url = postgres_server.new_database()
    store = SqlAlchemySessionStore(url, crypto=SessionCrypto(KEY), purge_every=None)
    try:
        # Worker i rotates two sessions of user u<i> in tenant acme; globex is never revoked.
        records = {i: [_signed_in(f"u{i}", "acme") for _ in range(2)] for i in range(WORKERS)}
        control = _signed_in("u0", "globex")
        for record in [control, *(r for group in records.values() for r in group)]:
            store.save(record, _expiry())
        rotations = SPAWN.Array("i", WORKERS)
        revoked, stop, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
        processes = [
            SPAWN.Process(
                target=_rotating_worker,
                args=(i, url, [r.sid for r in records[i]], rotations, revoked, stop, out),
            )
            for i in range(WORKERS)
        ]
        for process in processes:
            process.start()
        deadline = time.monotonic() + 60
        while min(rotations[:]) < 20 and time.monotonic() < deadline:  # every worker is busy
            time.sleep(0.01)
        assert min(rotations[:]) >= 20, "the workers never got going"

        if scope == "tenant":  # in the middle of the workers' rotations
            revoked_count = store.delete_tenant_sessions("acme")
        else:
            revoked_count = store.delete_user_sessions("acme", "u0")
        revoked.set()
        time.sleep(0.5)  # the workers keep trying for a while
        stop.set()
        reports_by_worker = [out.get(timeout=60) for _ in processes]
        reports = [report for _worker, report in reports_by_worker]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0

        assert 1 <= revoked_count <= 2 * WORKERS
        assert all(written > 0 for written, _late, _chains in reports)
        # No save of a revoked session that started after the revocation succeeded (worker
        # 0 holds u0's sessions); the other users' sessions kept being saved.
        in_scope = range(WORKERS) if scope == "tenant" else range(1)
        by_worker = dict(reports_by_worker)
        assert [by_worker[i][1] for i in in_scope] == [0] * len(in_scope)
        if scope == "user":
            assert all(by_worker[i][1] > 0 for i in range(1, WORKERS))
        of_scope = sessions_table.c.tenant == "acme"
        if scope == "user":
            of_scope = of_scope & (sessions_table.c.user_id == "u0")
        with store.engine.connect() as conn:
            left = conn.execute(select(func.count()).select_from(sessions_table).where(of_scope)).scalar_one()
        assert left == 0
        finals = [sid for _written, _late, chains in reports for sid in chains if sid is not None]
        if scope == "tenant":
            assert finals == []
        else:  # the other users' sessions were rotating all along and are still there
            assert len(finals) == 2 * (WORKERS - 1)
            assert all(store.load(sid) is not None for sid in finals)
            assert store.list_user_sessions("acme", "u0") == []
        assert store.load(control.sid) == control
    finally:
        store.engine.dispose()


# --- staged key rotation -------------------------------------------------------------------------


def _rotator(url: str, rounds: int, start: Any, out: Any) -> None:
    store = SqlAlchemyLocalIdpKeyStore(url)
    staged: list[str] = []
    activated: list[str] = []
    start.wait(30)
    for _ in range(rounds):
        key = LocalIdpSigningKey.generate("ES256")
        try:
            store.stage(key, datetime.now(UTC))
            staged.append(key.kid)
        except RotationRefused:
            pass  # another process staged one first
        try:
            activated.append(store.activate(datetime.now(UTC)))
        except RotationRefused:
            pass  # another process activated it first
    store.dispose()
    out.put((staged, activated))


def test_staged_rotation_from_several_processes_stays_consistent(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    store = SqlAlchemyLocalIdpKeyStore(url)
    try:
        initial = store.ensure_current(lambda: LocalIdpSigningKey.generate("ES256")).current.kid
        start, out = SPAWN.Event(), SPAWN.Queue()
        processes = [SPAWN.Process(target=_rotator, args=(url, 8, start, out)) for _ in range(WORKERS)]
        for process in processes:
            process.start()
        time.sleep(1.5)  # let every process import and connect before the race
        start.set()
        reports = [out.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0

        staged = [kid for kids, _ in reports for kid in kids]
        activated = [kid for _, kids in reports for kid in kids]
        assert activated, "no activation happened"
        assert len(set(staged)) == len(staged)
        assert sorted(Counter(activated).values())[-1] == 1  # no staged key activated twice
        assert set(activated) <= set(staged)
        loaded = store.load_all()  # exactly one current key (load_all refuses anything else)
        state = store.rotation_state()
        waiting = set(staged) - set(activated)
        assert len(waiting) <= 1
        assert state.staged_kid == (next(iter(waiting)) if waiting else None)
        assert loaded.current.kid in activated
        assert sorted(loaded.kids()) == sorted([initial, *staged])
        # Every key that stopped signing was retired exactly once: the initial one and
        # every activated key but the current one.
        assert set(state.retired_at) == {initial, *activated} - {loaded.current.kid}
    finally:
        store.dispose()


# --- attempt counters ----------------------------------------------------------------------------

FAILURES_PER_WORKER = 12
THRESHOLD = 7
WINDOW = timedelta(hours=1)
LOCK = timedelta(minutes=15)
NO_LOCK = AttemptKey("acme", "mallory", "password")
LOCKING = AttemptKey("acme", "trudy", "password")


def _failing_worker(url: str, start: Any, out: Any) -> None:
    backend = SqlAlchemyBackend(url, create_tables=False)
    start.wait(30)
    counted: list[int] = []
    locks = 0
    for _ in range(FAILURES_PER_WORKER):
        counted.append(
            backend.register_failure(
                NO_LOCK, now=datetime.now(UTC), window=WINDOW, max_failures=10**6, lock_duration=LOCK
            ).failures
        )
        result = backend.register_failure(
            LOCKING, now=datetime.now(UTC), window=WINDOW, max_failures=THRESHOLD, lock_duration=LOCK
        )
        locks += result.locked_until is not None
    backend.close()
    out.put((counted, locks))


def test_failure_counters_from_several_processes_lose_no_count(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        start, out = SPAWN.Event(), SPAWN.Queue()
        processes = [SPAWN.Process(target=_failing_worker, args=(url, start, out)) for _ in range(WORKERS)]
        for process in processes:
            process.start()
        time.sleep(1.5)
        start.set()
        reports = [out.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(30)
            assert process.exitcode == 0

        total = WORKERS * FAILURES_PER_WORKER
        # Each increment saw the committed value of the one before: every count 1..N once.
        assert sorted(n for counted, _ in reports for n in counted) == list(range(1, total + 1))
        assert backend.failure_count(NO_LOCK) == total
        assert backend.attempt_count("acme", "mallory", success=False) == total
        # The failure reaching the threshold locks and restarts the count, once per threshold.
        assert sum(locks for _, locks in reports) == total // THRESHOLD
        assert backend.failure_count(LOCKING) == total % THRESHOLD
        with backend.engine.connect() as conn:
            rows = conn.execute(
                select(func.count()).select_from(attempts_table).where(attempts_table.c.subject == "trudy")
            ).scalar_one()
        assert rows == total
    finally:
        backend.close()


# --- factor records ------------------------------------------------------------------------------

ROUNDS = 10
RACING_PROCESSES = 4


def _factor(user_id: str, factor_id: str, *, confirmed: bool, secret: str = "v0") -> FactorConfig:
    return FactorConfig(
        user_id=user_id,
        kind=FactorKind.HOTP,
        created_at=datetime.now(UTC),
        secret=secret,
        factor_id=factor_id,
        confirmed=confirmed,
    )


def _factor_racer(url: str, op: str, worker: int, user_id: str, barrier: Any, out: Any) -> None:
    """Every round: wait for the other processes, then all at once ``op`` the same factor
    (advance its counter to the round's value, swap its secret expecting the round's
    counter) or confirm this worker's pending factor of the round (added before the round
    starts), replacing the kind. Reports the rounds this process won, or its error (the
    barrier is broken then, so the others stop at once too)."""
    backend = SqlAlchemyBackend(url, create_tables=False)
    won: list[int] = []
    try:
        for round_ in range(ROUNDS):
            if op == "confirm":
                backend.add_factor("acme", _factor(user_id, f"r{round_}-w{worker}", confirmed=False))
            barrier.wait(60)
            if op == "advance":
                ok = backend.advance_factor_counter(
                    "acme", user_id, "shared", round_ + 1, now=datetime.now(UTC)
                )
            elif op == "swap":
                ok = backend.swap_factor_secret(
                    "acme",
                    user_id,
                    "shared",
                    expected_counter=round_,
                    secret=f"v{round_ + 1}-by-{worker}",
                    now=datetime.now(UTC),
                )
            else:
                ok = backend.confirm_factor("acme", user_id, f"r{round_}-w{worker}", replace_kind=True)
                barrier.wait(60)  # the round is over before anyone adds the next round's factor
            if ok:
                won.append(round_)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        barrier.abort()
        out.put((worker, repr(exc)))
    else:
        out.put((worker, won))
    finally:
        backend.close()


def _race_factor(url: str, op: str, user_id: str) -> dict[int, list[int]]:
    barrier, out = SPAWN.Barrier(RACING_PROCESSES), SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_factor_racer, args=(url, op, worker, user_id, barrier, out))
        for worker in range(RACING_PROCESSES)
    ]
    for process in processes:
        process.start()
    reports = dict(out.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert all(isinstance(won, list) for won in reports.values()), reports
    return reports


def _winners(reports: dict[int, list[int]]) -> dict[int, list[int]]:
    """Round -> the workers that won it."""
    by_round: dict[int, list[int]] = {round_: [] for round_ in range(ROUNDS)}
    for worker, rounds in reports.items():
        for round_ in rounds:
            by_round[round_].append(worker)
    return by_round


def test_a_factor_counter_advanced_by_several_processes_moves_once_per_value(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = backend.create_user("acme", "alice")
        backend.add_factor("acme", _factor(user.user_id, "shared", confirmed=True))
        winners = _winners(_race_factor(url, "advance", user.user_id))
        # Every value was accepted exactly once: a replayed code is refused in every other process.
        assert [len(workers) for workers in winners.values()] == [1] * ROUNDS
        stored = backend.get_factor("acme", user.user_id, "shared")
        assert stored is not None and stored.counter == ROUNDS and stored.last_used_at is not None
    finally:
        backend.close()


def test_a_factor_secret_swapped_by_several_processes_has_one_winner_per_counter(
    postgres_server: Any,
) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = backend.create_user("acme", "alice")
        backend.add_factor("acme", _factor(user.user_id, "shared", confirmed=True))
        winners = _winners(_race_factor(url, "swap", user.user_id))
        assert [len(workers) for workers in winners.values()] == [1] * ROUNDS
        stored = backend.get_factor("acme", user.user_id, "shared")
        assert stored is not None
        # The secret is the last round's winner's, written with the counter it expected + 1.
        assert (stored.counter, stored.secret) == (ROUNDS, f"v{ROUNDS}-by-{winners[ROUNDS - 1][0]}")
    finally:
        backend.close()


def test_parallel_confirmations_in_several_processes_leave_one_factor(postgres_server: Any) -> None:
    url = postgres_server.new_database()
    backend = SqlAlchemyBackend(url)
    try:
        user = backend.create_user("acme", "alice")
        winners = _winners(_race_factor(url, "confirm", user.user_id))
        # The first confirmation of a round deletes the other pending factors of the round
        # (and the previous round's winner): one winner per round, one factor left.
        assert [len(workers) for workers in winners.values()] == [1] * ROUNDS
        left = backend.list_user_factors("acme", user.user_id, include_pending=True)
        last = f"r{ROUNDS - 1}-w{winners[ROUNDS - 1][0]}"
        assert [(c.factor_id, c.confirmed) for c in left] == [(last, True)]
    finally:
        backend.close()
