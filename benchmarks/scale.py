"""Sessions stored vs lookup cost: ``load()`` of one session among 10³ … 10⁶ stored ones.

For each store (SQLite file, PostgreSQL, Redis) and each size N, a store of its own
(one SQLite file, one PostgreSQL database or one Redis database number per size) is
filled with N authenticated sessions, then ``load()`` of random existing session ids is
timed. The (store, size) pairs take turns in every round (interleaved, the order rotated
from round to round), so a slow phase of the machine hits every size alike. Prints the
fill time, µs per lookup (best round, median round, spread) and, per store, the cost of
each size against 10³: the ratio of the bests and the median of the per-round ratios.

Also printed: the minor page faults per lookup (first and last round). On SQLite the file
is memory-mapped per connection and a page is mapped on its first touch (a minor fault,
several µs on a virtual machine); a fresh connection on 10⁶ sessions faults on most
lookups at first, one that has read much of the file (as the fill's pooled connection
here) on few. A ratio that moves with the faults measures that warm-up, not the lookup.

Beside our SQLite store, a floor: the store's own statement alone (``SELECT data … WHERE
sid_hash = ? AND expires_at > ?``, the same text and bound parameters) on a plain sqlite3
connection to the same file, with the same PRAGMAs, and nothing else (no decryption, no
decoding). What it adds from 10³ to 10⁶ is SQLite's own B-tree walk; the line after the
SQLite rows prints the least ratio any store with our 10³ cost could reach on top of it.

Every size decrypts and decodes every record it loads.

How the stores are filled:

* SQL stores: direct bulk inserts (executemany, batches of 5,000) of the rows
  :meth:`SqlAlchemySessionStore.save` writes for a new session: same columns, and the
  ``data`` column sealed with the store's own crypto (:class:`SessionCrypto`, the same
  key) over :func:`serialize_record` of the record, keyed by :func:`sid_hash`. One row of
  every store is written by ``save()`` itself and compared with the bulk row made for the
  same record (every column, the envelope decrypted) before anything is timed, so the
  fill cannot drift from what the store writes. ``save()`` for 10⁶ rows costs one
  transaction each (minutes on SQLite); the bulk path is the same rows, faster.
* Redis: through the store's own ``save()`` (one round trip each over loopback).

The records are copies of one made by a real password login (state, factors, User-Agent
fingerprint, device), each with its own session id and user id; all expire in a day.
Before timing, sampled ids of every size are loaded and checked (the right record comes
back), and every timed ``load()`` must return a record.

    .venv/bin/python benchmarks/scale.py [--sizes 1000,10000,100000,1000000] [--rounds 5]
        [--lookups 2000] [--postgres auto|off|URL] [--redis auto|off|URL]

``--redis auto`` starts a throwaway redis-server through ``tests.parts.start_redis`` when
that exists; ``--redis URL`` uses a running server (its database numbers 0..len(sizes)-1
are flushed). Without either, Redis is left out and the reason is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import resource
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_authflow._clock import SystemClock
from flask_authflow._core.crypto import SessionCrypto
from flask_authflow._core.session import SessionRecord, record_federation_key, sid_hash
from flask_authflow.sessions._stores import serialize_record

BATCH = 5_000
SQLITE_FLOOR = "floor: SQLite, the statement alone"


# --- what is stored ------------------------------------------------------------------------------


def login_template() -> SessionRecord:
    """The record a real password login leaves in the store (memory store, test hasher)."""
    from flask import Flask

    from flask_authflow import AuthFlow, get_state
    from flask_authflow.login._password import PasswordHasher
    from flask_authflow.storage._memory import InMemoryBackend
    from flask_authflow.testing._pytest_plugin import login_test_client

    app = Flask("scale_template")
    app.config.update(
        TESTING=True,
        AUTHFLOW_SIGNING_KEY=secrets.token_bytes(32),
        AUTHFLOW_SESSION_STORE="memory",
        AUTHFLOW_DATABASE_URL="sqlite://",
    )
    hasher = PasswordHasher.fast_for_tests()
    AuthFlow(app, backend=InMemoryBackend(), hasher=hasher)
    login_test_client(app, "alice")
    state = get_state(app)
    user = state.backend.find_user("default", "alice")
    assert user is not None
    (record,) = state.session_store.list_user_sessions("default", user.user_id)
    return record


def record_for(template: SessionRecord, sid: str, index: int) -> SessionRecord:
    """The ``index``-th stored session: its own id and its own user (32 hex digits, as ours)."""
    return replace(template, sid=sid, user_id=f"{index:032x}")


def sql_row(
    crypto: SessionCrypto, record: SessionRecord, expires_at: datetime, now: datetime
) -> dict[str, Any]:
    """The row ``SqlAlchemySessionStore.save`` writes for a new session (checked by check_sql_row)."""
    key = sid_hash(record.sid)
    return {
        "sid_hash": key,
        "tenant": record.tenant,
        "user_id": record.user_id,
        "state": record.state.value,
        "expires_at": expires_at,
        "updated_at": now,
        "data": crypto.encrypt(key, serialize_record(record)),
        "federation_key": record_federation_key(record),
    }


# --- the stores ------------------------------------------------------------------------------------


@dataclass
class Target:
    """One store holding ``size`` sessions."""

    store_name: str
    size: int
    store: Any
    fill_seconds: float = 0.0
    per_round: list[float] = field(default_factory=list)  # µs per lookup, one per round
    faults: list[float] = field(default_factory=list)  # minor page faults per lookup, one per round


def check_sql_row(store: Any, crypto: SessionCrypto, record: SessionRecord, expires_at: datetime) -> None:
    """Write ``record`` through ``store.save`` and compare the row with :func:`sql_row`'s."""
    from sqlalchemy import select

    from flask_authflow.storage._sql.session_store import sessions_table

    assert store.save(record, expires_at)
    with store.engine.connect() as conn:
        saved = dict(
            conn.execute(select(sessions_table).where(sessions_table.c.sid_hash == sid_hash(record.sid)))
            .one()
            ._mapping
        )
    ours = sql_row(crypto, record, expires_at, saved["updated_at"])
    key = ours["sid_hash"]
    if crypto.decrypt(key, saved.pop("data")) != crypto.decrypt(key, ours.pop("data")):
        raise RuntimeError("the bulk rows' data differs from what save() writes")
    if saved != ours:
        raise RuntimeError(f"the bulk rows differ from what save() writes: {saved} != {ours}")


def fill_sql(
    store: Any, crypto: SessionCrypto, template: SessionRecord, sids: list[str], expires_at: datetime
) -> None:
    from sqlalchemy import insert

    from flask_authflow.storage._sql.session_store import sessions_table

    check_sql_row(store, crypto, record_for(template, sids[0], 0), expires_at)
    now = SystemClock().now()
    statement = insert(sessions_table)
    for start in range(1, len(sids), BATCH):
        rows = [
            sql_row(crypto, record_for(template, sids[i], i), expires_at, now)
            for i in range(start, min(start + BATCH, len(sids)))
        ]
        with store.engine.begin() as conn:
            conn.execute(statement, rows)
    if store.engine.dialect.name == "postgresql":
        # What autovacuum does after a bulk load: fresh planner statistics, a visibility map.
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE authflow_sessions")


def fill_by_save(store: Any, template: SessionRecord, sids: list[str], expires_at: datetime) -> None:
    for i, sid in enumerate(sids):
        if not store.save(record_for(template, sid, i), expires_at):
            raise RuntimeError("save() refused a new session")


def sql_store(url: str, crypto: SessionCrypto) -> Any:
    from flask_authflow.storage._sql.session_store import SqlAlchemySessionStore

    return SqlAlchemySessionStore(url, crypto=crypto)


def redis_store(url: str, crypto: SessionCrypto) -> Any:
    """Our Redis session store on ``url`` (one database number per size), emptied first."""
    from flask_authflow.storage._redis_sessions import RedisSessionStore

    store = RedisSessionStore(url, crypto=crypto)
    store.client.flushdb()  # each size starts from an empty database
    return store


def redis_db_url(url: str, number: int) -> str:
    """``url`` pointing at Redis database ``number`` (one database per size)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{number}"))


class SqliteQueryFloor:
    """The SQLite store's lookup statement alone, on a connection of its own to the store's
    file (opened on first use, after the fill), with the PRAGMAs our engines set. ``load``
    answers the sealed bytes (truthy) or None: nothing is decrypted or decoded."""

    def __init__(self, path: Path) -> None:
        from sqlalchemy.dialects import sqlite

        from flask_authflow.storage._sql.session_store import _LOAD_QUERY

        self.path = path
        self.connection: Any = None
        self.clock = SystemClock()
        # The statement as SQLAlchemy compiles it for pysqlite, its parameters in its order.
        compiled: Any = _LOAD_QUERY.compile(dialect=sqlite.dialect())
        self.sql = str(compiled)
        self.order: list[str] = list(compiled.positiontup)

    def load(self, sid: str) -> bytes | None:
        if self.connection is None:
            import sqlite3

            from flask_authflow.storage._sql.engine import _sqlite_pragmas

            self.connection = sqlite3.connect(self.path, check_same_thread=False)
            _sqlite_pragmas(self.connection, None)
        # SQLAlchemy's SQLite DATETIME text of the naive UTC time, as the store binds it.
        now = self.clock.now().astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
        values = {"key": sid_hash(sid), "now": now}
        rows = self.connection.execute(self.sql, tuple(values[name] for name in self.order)).fetchall()
        return bytes(rows[0][0]) if rows else None


def find_redis(arg: str) -> tuple[str | None, Callable[[], None] | None, str]:
    """(URL, stop, reason it is left out) for ``--redis``."""
    if arg == "off":
        return None, None, "--redis off"
    for module in ("redis", "flask_authflow.storage._redis_sessions"):
        if importlib.util.find_spec(module) is None:
            return None, None, f"{module} is not installed or not written yet"
    if arg != "auto":
        return arg, None, ""
    try:
        from tests.parts import start_redis
    except ImportError:
        return None, None, "tests.parts has no start_redis(); pass --redis redis://127.0.0.1:6379"
    try:
        server = start_redis()
    except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
        return None, None, f"redis-server did not start: {exc}"
    return server.url(0), server.stop, ""


# --- timing ----------------------------------------------------------------------------------------


def check(target: Target, sids: list[str], template: SessionRecord, rng: random.Random) -> None:
    """Sampled ids (the first, the last, 50 random ones) load the record stored under them."""
    picks = {0, len(sids) - 1, *(rng.randrange(len(sids)) for _ in range(50))}
    if isinstance(target.store, SqliteQueryFloor):  # sealed bytes of a row, not a record
        if not all(target.store.load(sids[i]) for i in picks):
            raise RuntimeError(f"{target.store_name} {target.size}: a stored id found no row")
        if target.store.load(secrets.token_urlsafe(32)) is not None:
            raise RuntimeError(f"{target.store_name} {target.size}: an unknown id found a row")
        return
    for i in picks:
        record = target.store.load(sids[i])
        expected = record_for(template, sids[i], i)
        if record is None or record.sid != sids[i] or record.user_id != expected.user_id:
            raise RuntimeError(f"{target.store_name} {target.size}: load() of a stored id answered {record}")
    if target.store.load(secrets.token_urlsafe(32)) is not None:
        raise RuntimeError(f"{target.store_name} {target.size}: an unknown id loaded a record")


def time_lookups(target: Target, picks: list[str]) -> tuple[float, float]:
    """(µs, minor page faults) per ``load()`` over ``picks``."""
    load = target.store.load
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    started = time.perf_counter()
    for sid in picks:
        if load(sid) is None:
            raise RuntimeError(f"{target.store_name} {target.size}: a stored session did not load")
    elapsed = time.perf_counter() - started
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return elapsed / len(picks) * 1e6, faults / len(picks)


def rotated(items: list[Target], by: int) -> Iterator[Target]:
    by %= len(items)
    yield from items[by:] + items[:by]


# --- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated session counts")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lookups", type=int, default=2000, help="load() calls per store and size per round")
    parser.add_argument("--postgres", default="auto", help="'auto' (throwaway server), 'off', or a URL")
    parser.add_argument("--redis", default="auto", help="'auto' (tests.parts.start_redis), 'off', or a URL")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = sorted({int(size) for size in args.sizes.split(",")})
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="authflow-scale-"))
    crypto = SessionCrypto(secrets.token_bytes(32))
    template = login_template()
    expires_at = SystemClock().now() + timedelta(days=1)
    started = time.perf_counter()
    all_sids = [secrets.token_urlsafe(32) for _ in range(max(sizes))]
    print(f"{max(sizes)} session ids drawn in {time.perf_counter() - started:.1f}s", flush=True)

    # name -> (make the store of the size at position i, fill it)
    stores: dict[str, tuple[Callable[[int, int], Any], Callable[[Any, list[str]], None]]] = {}

    def fill_sql_store(store: Any, sids: list[str]) -> None:
        fill_sql(store, crypto, template, sids, expires_at)

    stores["SQLite"] = (
        lambda i, size: sql_store(f"sqlite:///{workdir / f's{size}.db'}", crypto),
        fill_sql_store,
    )
    # Made after every SQLite size is filled (the stores are filled in this order): no fill.
    stores[SQLITE_FLOOR] = (
        lambda i, size: SqliteQueryFloor(workdir / f"s{size}.db"),
        lambda store, sids: None,
    )
    stops: list[Callable[[], None]] = []
    if args.postgres != "off":
        if args.postgres == "auto":
            from tests.parts import start_postgres

            try:
                # Sized as PostgreSQL's docs advise for a dedicated server (shared_buffers
                # around a quarter of RAM, capped here at 1 GB): the default 128 MB holds the
                # index and hot rows of 10^3 sessions but not of 10^6.
                server = start_postgres("shared_buffers=1GB", "effective_cache_size=4GB")
            except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
                print(f"(PostgreSQL left out: {exc})")
            else:
                stops.append(server.stop)
                stores["PostgreSQL"] = (
                    lambda i, size: sql_store(server.new_database(), crypto),
                    fill_sql_store,
                )
        else:
            print("(PostgreSQL at a given URL: every size shares its one database; use 'auto' for one each)")
            stores["PostgreSQL"] = (lambda i, size: sql_store(args.postgres, crypto), fill_sql_store)
    redis_url, redis_stop, reason = find_redis(args.redis)
    if redis_url is None:
        print(f"(Redis left out: {reason})")
    else:
        if redis_stop is not None:
            stops.append(redis_stop)

        def make_redis(i: int, size: int) -> Any:
            return redis_store(redis_db_url(redis_url, i), crypto)

        stores["Redis"] = (
            make_redis,
            lambda store, sids: fill_by_save(store, template, sids, expires_at),
        )

    targets: list[Target] = []
    try:
        for name, (make, fill) in stores.items():
            for i, size in enumerate(sizes):
                target = Target(name, size, make(i, size))
                begun = time.perf_counter()
                fill(target.store, all_sids[:size])
                target.fill_seconds = time.perf_counter() - begun
                print(f"filled {name:<10} {size:>9} sessions in {target.fill_seconds:7.1f}s", flush=True)
                check(target, all_sids[:size], template, rng)
                targets.append(target)

        for target in targets:  # warm up: connections opened, statements compiled
            time_lookups(target, rng.choices(all_sids[: target.size], k=args.lookups))
        for round_number in range(args.rounds):
            for target in rotated(targets, round_number):
                picks = rng.choices(all_sids[: target.size], k=args.lookups)
                micros, faults = time_lookups(target, picks)
                target.per_round.append(micros)
                target.faults.append(faults)
    finally:
        for stop in stops:
            stop()
        shutil.rmtree(workdir, ignore_errors=True)  # the SQLite files (about 1 GB at 10⁶)

    print(
        f"\n{args.rounds} interleaved rounds of {args.lookups} load() of random stored ids per store and size"
        "\n(µs per lookup: best round, median round, spread; cost vs 10³: ratio of bests, median of"
        " per-round ratios, their range; minor page faults per lookup, first and last round)"
    )
    for name in stores:
        rows = [t for t in targets if t.store_name == name]
        base = rows[0]
        print(f"{name}")
        for t in rows:
            ratios = sorted(a / b for a, b in zip(t.per_round, base.per_round, strict=True))
            spread = (max(t.per_round) - min(t.per_round)) / max(t.per_round) * 100  # as rates would say
            median = statistics.median(t.per_round)
            print(
                f"    {t.size:>9} sessions  {min(t.per_round):7.1f} µs  median {median:7.1f}"
                f"  ±{spread:3.0f}%   vs {base.size}: best {min(t.per_round) / min(base.per_round):5.2f}x"
                f"  median {statistics.median(ratios):5.2f}x  (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x)"
                f"   faults {t.faults[0]:.2f}-{t.faults[-1]:.2f}   fill {t.fill_seconds:.1f}s"
            )
    if SQLITE_FLOOR in stores:
        ours = [t for t in targets if t.store_name == "SQLite"]
        alone = [t for t in targets if t.store_name == SQLITE_FLOOR]
        base = min(ours[0].per_round)
        for t_ours, t_alone in zip(ours[1:], alone[1:], strict=True):
            added_ours = min(t_ours.per_round) - base
            added_alone = min(t_alone.per_round) - min(alone[0].per_round)
            print(
                f"SQLite {t_ours.size:>9} vs {ours[0].size}: our store adds {added_ours:5.1f} µs,"
                f" the statement alone {added_alone:5.1f} µs: a store that costs our {base:.1f} µs at"
                f" {ours[0].size} reaches {(base + added_alone) / base:4.2f}x at best"
            )


if __name__ == "__main__":
    main()
