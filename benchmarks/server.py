"""The reference app under gunicorn, beside bare Flask under the same server, over loopback.

Configurations (each its own gunicorn, all started before timing; sync workers):

* the reference app (``examples/reference/app.py`` ``create_app``, configured through
  ``FLASK_AUTHFLOW_*`` environment variables as a deployment would be: a signing key, the
  database URL, cookies without ``Secure`` for plain-HTTP loopback) on PostgreSQL (a
  throwaway server, one database per configuration) and on SQLite (one file each), with
  1 and with 2 workers;
* a bare Flask app serving the same kind of answer on ``GET /dashboard`` with no
  authentication, with 1 and with 2 workers;
* two floors: the reference app with its sessions in the worker's memory (no store read
  per request; 1 worker, as such sessions live in one process), and bare Flask that
  reads PostgreSQL once per request (``SELECT 1``), the least any app whose requests
  each need one database round trip can cost on this machine.

A separate load process drives them for a fixed number of ``GET /dashboard`` per window,
with the session cookie of one password login (made once per reference configuration, with
the same User-Agent as the GETs):

* ``--load ab`` (the default when it is installed): ApacheBench (``ab``, Debian's
  ``apache2-utils``), a single-threaded C client with ``--connections`` requests in flight.
  It costs the machine a fraction of what a Python client does, so the workers, not the
  load generator, are what the figures measure; on 2 cores a Python client took a quarter
  of the machine from the workers and capped bare Flask at 1.05x for 2 workers. ab counts
  failed and non-2xx answers (any is an error here) and checks that every body has the
  length of the first; the body itself is checked before and after each window.
* ``--load python``: a spawned Python process with a few threads, each with its own
  ``http.client`` connection (every answer checked: 200 and the dashboard text).

gunicorn's sync worker closes the connection after every answer (it has no keep-alive),
so both clients reconnect for each request, for every configuration alike. The
configurations take turns in every round (interleaved, the order rotated from round to
round). Prints req/s (best round, median, spread), p50 and p99 latency (the median over
the rounds of each window's percentile), and the load generator's CPU time as a share of
the machine's cores during its windows (it competes with the server for them).

Ratios printed: 2 workers / 1 worker per app and database, and the reference app / bare
Flask with the same number of workers (ratio of the bests, median of per-round ratios).

``--sessions N`` is the realistic case: each reference configuration on a database holds
N distinct logged-in sessions, requested round-robin (no cache sees the same cookie twice
in a row). One is a real password login over HTTP; the other N - 1 are copies of its
record under new session ids, saved in the configuration's database by this process
(N password hashes of the reference app's Argon2id would take an hour). ApacheBench sends
one ``Cookie`` header for a whole run, so with N > 1 the Python load process drives every
configuration (``--load python`` is implied): its threads take the cookies round-robin
from one shared counter. It costs the machine more than ab (its share is printed), the
same for every configuration. The memory-sessions floor keeps its one session (its store
lives inside the worker), and bare Flask gets no cookie, as with one session.

    .venv/bin/python benchmarks/server.py [--requests 2000] [--rounds 5] [--connections 4]
        [--postgres auto|off|URL] [--load auto|ab|python] [--sessions 10000]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import itertools
import json
import multiprocessing
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from flask_authflow.testing._users import add_user

ROOT = Path(__file__).resolve().parent.parent
UA = "flask-authflow-bench/1.0 (loopback load generator)"
USERNAME = "bench-user"
#: Issue 30: the reference app at least this share of bare Flask with as many workers.
SERVER_TARGET = 0.6
DASHBOARD_PREFIX = b"dashboard of user "


def create_bare_app() -> Any:
    """Bare Flask: the same kind of answer as the reference app's dashboard, no authentication."""
    from flask import Flask, Response

    app = Flask("bare")

    @app.get("/dashboard")
    def dashboard() -> Response:
        return Response("dashboard of user 0 in tenant default\n", mimetype="text/plain")

    return app


def create_bare_postgres_app() -> Any:
    """Bare Flask that reads PostgreSQL once per request (``SELECT 1`` on one psycopg
    connection per worker, in autocommit): the floor of any app whose requests each need
    one round trip to the database, as a session read does."""
    import psycopg
    from flask import Flask, Response

    app = Flask("bare_postgres")
    url = os.environ["BENCH_POSTGRES_URL"].replace("postgresql+psycopg://", "postgresql://", 1)
    connection: list[Any] = []

    @app.get("/dashboard")
    def dashboard() -> Response:
        if not connection:  # opened in the worker, after gunicorn's fork
            connection.append(psycopg.connect(url, autocommit=True))
        if connection[0].execute("SELECT 1").fetchone() != (1,):
            raise RuntimeError("SELECT 1 answered something else")
        return Response("dashboard of user 0 in tenant default\n", mimetype="text/plain")

    return app


# --- the load process ------------------------------------------------------------------------------


def _request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None = None,
) -> tuple[int, bytes, list[str]]:
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    return response.status, data, response.headers.get_all("Set-Cookie") or []


def _login(port: int, username: str, password: str) -> str:
    """One password login through POST /login; returns the Cookie header to replay."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"username": username, "password": password}).encode()
    status, data, cookies = _request(
        conn, "POST", "/login", {"User-Agent": UA, "Content-Type": "application/json"}, body
    )
    conn.close()
    if status != 200 or not data.startswith(b"authenticated"):
        raise RuntimeError(f"login on port {port} answered {status} {data[:80]!r}")
    return "; ".join(cookie.split(";", 1)[0] for cookie in cookies)


def _window(port: int, cookies: list[str], requests: int, connections: int) -> dict[str, Any]:
    """``requests`` GET /dashboard over ``connections`` threads, the ``cookies`` taken
    round-robin (none when empty); latencies, wall and CPU time."""
    every_headers = [
        {"User-Agent": UA, **({"Cookie": cookie} if cookie else {})} for cookie in cookies or [""]
    ]
    tickets = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(connections)]
    failures: list[str] = []

    def drive(mine: list[float]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while (ticket := next(tickets)) < requests:
                headers = every_headers[ticket % len(every_headers)]
                started = time.perf_counter()
                status, data, _ = _request(conn, "GET", "/dashboard", headers)
                mine.append(time.perf_counter() - started)
                if status != 200 or not data.startswith(DASHBOARD_PREFIX):
                    failures.append(f"{status} {data[:80]!r}")
                    return
        except OSError as exc:
            failures.append(repr(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=drive, args=(mine,)) for mine in latencies]
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - wall_started, time.process_time() - cpu_started
    every = sorted(value for mine in latencies for value in mine)
    if not failures and len(every) != requests:
        failures.append(f"{len(every)} answers of {requests}")
    return {
        "wall": wall,
        "cpu": cpu,
        "p50": percentile(every, 0.5) if every else 0.0,
        "p99": percentile(every, 0.99) if every else 0.0,
        "failures": failures,
    }


def load_process(pipe: Connection) -> None:
    """Serve commands from the benchmark: login, cookies, check, window, stop."""
    cookies_of: dict[int, list[str]] = {}  # port -> the Cookie headers its windows send
    while True:
        command = pipe.recv()
        try:
            if command["op"] == "stop":
                return
            if command["op"] == "login":
                pipe.send({"cookie": _login(command["port"], command["username"], command["password"])})
            elif command["op"] == "cookies":
                cookies_of[command["port"]] = command["cookies"]
                pipe.send({"count": len(command["cookies"])})
            elif command["op"] == "get":
                conn = http.client.HTTPConnection("127.0.0.1", command["port"], timeout=60)
                headers = {"User-Agent": UA, **({"Cookie": command["cookie"]} if command["cookie"] else {})}
                status, data, _ = _request(conn, "GET", "/dashboard", headers)
                conn.close()
                pipe.send({"status": status, "body": data})
            else:
                cookies = cookies_of.get(command["port"]) or [command["cookie"]]
                pipe.send(_window(command["port"], cookies, command["requests"], command["connections"]))
        except Exception as exc:  # noqa: BLE001 - reported to the benchmark, which stops
            pipe.send({"error": repr(exc)})


def ab_window(port: int, cookie: str, requests: int, connections: int) -> dict[str, Any]:
    """``requests`` GET /dashboard from ApacheBench with ``connections`` in flight.

    Its CPU time is the growth of this process's reaped-children usage across the run
    (nothing else is reaped meanwhile: the gunicorn servers run until the end).
    """
    import resource

    with tempfile.NamedTemporaryFile("r", suffix=".csv") as percentiles:
        command = ["ab", "-q", "-n", str(requests), "-c", str(connections), "-e", percentiles.name]
        command += ["-H", f"User-Agent: {UA}"] + (["-H", f"Cookie: {cookie}"] if cookie else [])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [*command, f"http://127.0.0.1:{port}/dashboard"], capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        served = {int(row[0]): float(row[1]) / 1000 for row in _csv_rows(percentiles.read())}
    report = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in done.stdout.splitlines())
    )
    failures = []
    if done.returncode != 0:
        failures.append(f"ab exited {done.returncode}: {done.stderr.strip()[-300:]}")
    elif report.get("Complete requests") != str(requests) or report.get("Failed requests") != "0":
        failures.append(f"complete {report.get('Complete requests')}, failed {report.get('Failed requests')}")
    elif "Non-2xx responses" in report:
        failures.append(f"{report['Non-2xx responses']} non-2xx answers")
    return {
        # ab's own clock (first connect to last answer), not the process start-up
        "wall": requests / float(report["Requests per second"].split()[0]) if not failures else wall,
        "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "p50": served.get(50, 0.0),
        "p99": served.get(99, 0.0),
        "failures": failures,
    }


def _csv_rows(text: str) -> list[list[str]]:
    import csv

    return [row for row in csv.reader(text.splitlines()[1:]) if len(row) == 2]


class Loader:
    """The benchmark's end of the load process."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=load_process, args=(child,), daemon=True)
        self.process.start()

    def ask(self, **command: Any) -> dict[str, Any]:
        self.pipe.send(command)
        answer: dict[str, Any] = self.pipe.recv()
        if "error" in answer:
            raise RuntimeError(f"load process: {answer['error']}")
        return answer

    def stop(self) -> None:
        self.pipe.send({"op": "stop"})
        self.process.join(10)


# --- the servers -----------------------------------------------------------------------------------


@dataclass
class Config:
    name: str
    app: str  # "reference" or "bare"
    workers: int
    database: str = ""  # "PostgreSQL", "SQLite" or "" (bare)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    cookie: str = ""
    sessions: int = 1  # distinct sessions its windows request round-robin
    rates: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn on port {port} exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"gunicorn on port {port} did not listen within {timeout}s")


def prepare_reference(
    database_url: str, instance: Path, signing_key: str, password: str
) -> tuple[dict[str, str], Any]:
    """Create the tables and the user once (before the workers start); the workers'
    environment, and the app built here on the same database (it copies sessions)."""
    env = {
        "FLASK_AUTHFLOW_SIGNING_KEY": signing_key,
        "FLASK_AUTHFLOW_DATABASE_URL": database_url,
        "FLASK_AUTHFLOW_COOKIE_SECURE": "false",
        "FLASK_AUTHFLOW_ALLOW_INSECURE_LOOPBACK": "true",
    }
    if importlib.util.find_spec("flask_authflow.storage._sql.migrations") is not None:
        # The deployment step of a versioned schema (PostgreSQL is not upgraded at start-up).
        flask = [sys.executable, "-m", "flask", "--app", "examples/reference/app.py"]
        subprocess.run(
            [*flask, "authflow", "db", "upgrade"],
            cwd=ROOT,
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
    from examples.reference.app import create_app
    from flask_authflow import get_state

    app = create_app(
        {
            "AUTHFLOW_SIGNING_KEY": signing_key,
            "AUTHFLOW_DATABASE_URL": database_url,
            "AUTHFLOW_COOKIE_SECURE": False,
            "AUTHFLOW_ALLOW_INSECURE_LOOPBACK": True,
        },
        instance_path=str(instance),
    )
    with app.app_context():
        add_user(get_state(app).backend, "default", USERNAME, password, hasher=get_state(app).hasher)
    return env, app


def session_cookies(app: Any, cookie_header: str, count: int) -> list[str]:
    """The ``Cookie`` headers of ``count`` sessions: the logged-in one of ``cookie_header``
    and copies of its record under new ids, saved in ``app``'s store (its database)."""
    from benchmarks.protected_request import copies_of_session

    name = app.session_interface.cookie_name
    pairs = dict(part.split("=", 1) for part in cookie_header.split("; ") if "=" in part)
    others = "".join(f"; {key}={value}" for key, value in pairs.items() if key != name)
    with app.app_context():
        values = copies_of_session(app, pairs[name], count)
    return [f"{name}={value}{others}" for value in values]


def start_gunicorn(config: Config, env: dict[str, str], instance: Path, logs: Path) -> None:
    config.port = _free_port()
    if config.app == "reference":
        target = f"examples.reference.app:create_app(instance_path={str(instance)!r})"
    elif config.app == "bare+select":
        target = "benchmarks.server:create_bare_postgres_app()"
    else:
        target = "benchmarks.server:create_bare_app()"
    log = logs / f"gunicorn-{config.port}.log"
    config.process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            str(config.workers),
            "--worker-class",
            "sync",
            "--bind",
            f"127.0.0.1:{config.port}",
            "--chdir",
            str(ROOT),
            "--error-logfile",
            str(log),
            "--log-level",
            "warning",
            target,
        ],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(config.port, config.process, log)


def stop_gunicorn(config: Config) -> None:
    if config.process is not None and config.process.poll() is None:
        config.process.terminate()
        try:
            config.process.wait(15)
        except subprocess.TimeoutExpired:
            config.process.kill()


# --- report ------------------------------------------------------------------------------------------


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def ratio(a: Config, b: Config) -> str:
    per_round = sorted(x / y for x, y in zip(a.rates, b.rates, strict=True))
    return (
        f"best {max(a.rates) / max(b.rates):5.2f}x  median {statistics.median(per_round):5.2f}x"
        f"  (rounds {per_round[0]:.2f}-{per_round[-1]:.2f}x)"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=2000, help="GET /dashboard per configuration per round"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--connections", type=int, default=4, help="concurrent connections of the load process"
    )
    parser.add_argument("--postgres", default="auto", help="'auto' (throwaway server), 'off', or a URL")
    parser.add_argument(
        "--load",
        choices=("auto", "ab", "python"),
        default="auto",
        help="load generator: ApacheBench (ab, from apache2-utils), a Python client, or ab when installed",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=1,
        help="distinct logged-in sessions per reference configuration, requested round-robin "
        "(10000: the realistic case; implies --load python)",
    )
    args = parser.parse_args()
    if args.sessions > 1:
        if args.load == "ab":
            sys.exit("ab sends one Cookie header for a whole run: --sessions needs --load python")
        args.load = "python"
    if args.load == "auto":
        args.load = "ab" if shutil.which("ab") else "python"
        if args.load == "python":
            print("(ab not found: the Python load process drives the servers; apt-get install apache2-utils)")
    elif args.load == "ab" and shutil.which("ab") is None:
        sys.exit("ab is not installed: apt-get install apache2-utils, or --load python")
    if shutil.which("gunicorn", path=str(Path(sys.executable).parent)) is None:
        sys.exit("gunicorn is not installed in this environment: pip install -e '.[dev]'")
    return args


def databases_of(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], Any]:
    """{database name: (configuration number -> URL)}, PostgreSQL first; and the throwaway
    PostgreSQL server to stop (or None)."""
    pg_server = None
    databases: dict[str, Any] = {"SQLite": lambda n: f"sqlite:///{workdir / f'ref{n}.db'}"}
    if args.postgres == "auto":
        from tests.parts import start_postgres

        try:
            pg_server = start_postgres()
            databases["PostgreSQL"] = lambda n: pg_server.new_database()
        except BaseException as exc:  # noqa: BLE001 - pytest's skip is a BaseException
            print(f"(PostgreSQL left out: {exc})")
    elif args.postgres != "off":
        print("(PostgreSQL at a given URL: the configurations share its one database)")
        databases["PostgreSQL"] = lambda n: args.postgres
    return dict(sorted(databases.items(), key=lambda item: item[0] != "PostgreSQL")), pg_server


def plan(databases: dict[str, Any]) -> list[Config]:
    configs: list[Config] = []
    for database in databases:
        for workers in (1, 2):
            configs.append(
                Config(f"reference app, {database}, {workers} worker(s)", "reference", workers, database)
            )
    for workers in (1, 2):
        configs.append(Config(f"bare Flask, {workers} worker(s)", "bare", workers))
    # Floors: the reference app with sessions kept in the worker's memory (no store read;
    # one worker, as memory sessions are per process), and bare Flask plus one
    # PostgreSQL round trip per request.
    configs.append(Config("reference app, memory sessions, 1 worker(s)", "reference", 1, "memory"))
    if "PostgreSQL" in databases:
        for workers in (1, 2):
            configs.append(
                Config(f"bare Flask + SELECT 1, {workers} worker(s)", "bare+select", workers, "PostgreSQL")
            )
    return configs


@dataclass
class Run:
    """What every configuration of one run shares."""

    args: argparse.Namespace
    loader: Loader
    workdir: Path
    databases: dict[str, Any]
    signing_key: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))


def start(run: Run, config: Config, number: int) -> None:
    """Prepare the database, start gunicorn, log in (and copy the session), check the answer."""
    env: dict[str, str] = {}
    reference: Any = None
    instance = run.workdir / f"instance{number}"
    instance.mkdir()
    if config.app == "reference":
        database = "SQLite" if config.database == "memory" else config.database
        env, reference = prepare_reference(
            run.databases[database](number), instance, run.signing_key, run.password
        )
        if config.database == "memory":
            env["FLASK_AUTHFLOW_SESSION_STORE"] = "memory"
    elif config.app == "bare+select":
        env = {"BENCH_POSTGRES_URL": run.databases["PostgreSQL"](number)}
    start_gunicorn(config, env, instance, run.workdir)
    loader = run.loader
    if config.app == "reference":
        refused = loader.ask(op="get", port=config.port, cookie="")
        if refused["status"] != 401:
            raise RuntimeError(f"{config.name}: GET /dashboard without a session answered {refused}")
        config.cookie = loader.ask(op="login", port=config.port, username=USERNAME, password=run.password)[
            "cookie"
        ]
        if run.args.sessions > 1 and config.database != "memory":
            cookies = session_cookies(reference, config.cookie, run.args.sessions)
            loader.ask(op="cookies", port=config.port, cookies=cookies)
            config.sessions = len(cookies)
    answer = loader.ask(op="get", port=config.port, cookie=config.cookie)
    if answer["status"] != 200 or not answer["body"].startswith(DASHBOARD_PREFIX):
        raise RuntimeError(f"{config.name}: GET /dashboard answered {answer}")
    print(f"started {config.name:<40} on port {config.port}: {answer['body'].decode().strip()}", flush=True)


def window(run: Run, config: Config, requests: int) -> dict[str, Any]:
    """One timed window of ``requests`` on ``config``, its answers checked before and after."""
    args = run.args
    if args.load == "ab":
        result = ab_window(config.port, config.cookie, requests, args.connections)
    else:
        result = run.loader.ask(
            op="window",
            port=config.port,
            cookie=config.cookie,
            requests=requests,
            connections=args.connections,
        )
    if result["failures"]:
        raise RuntimeError(f"{config.name}: {result['failures'][:3]}")
    checked = run.loader.ask(op="get", port=config.port, cookie=config.cookie)
    if checked["status"] != 200 or not checked["body"].startswith(DASHBOARD_PREFIX):
        raise RuntimeError(f"{config.name}: GET /dashboard after the window answered {checked}")
    return result


def measure(run: Run, configs: list[Config], cores: int) -> None:
    requests = run.args.requests
    for config in configs:  # warm up: every worker imported, connections to the database open
        window(run, config, max(50, requests // 10))
    for round_number in range(run.args.rounds):
        shift = round_number % len(configs)
        for config in configs[shift:] + configs[:shift]:
            result = window(run, config, requests)
            config.rates.append(requests / result["wall"])
            config.p50s.append(result["p50"])
            config.p99s.append(result["p99"])
            config.cpu_shares.append(result["cpu"] / (result["wall"] * cores))


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    cores = os.cpu_count() or 1
    workdir = Path(tempfile.mkdtemp(prefix="authflow-server-"))
    databases, pg_server = databases_of(args, workdir)
    configs = plan(databases)
    run = Run(args, Loader(), workdir, databases)
    try:
        for number, config in enumerate(configs):
            start(run, config, number)
        measure(run, configs, cores)
    finally:
        run.loader.stop()
        for config in configs:
            stop_gunicorn(config)
        if pg_server is not None:
            pg_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, configs, databases, cores)


def report(args: argparse.Namespace, configs: list[Config], databases: dict[str, Any], cores: int) -> None:
    load_name = "ApacheBench" if args.load == "ab" else "Python http.client threads"
    print(
        f"\n{args.rounds} interleaved rounds of {args.requests} GET /dashboard per configuration, "
        f"{args.connections} connections in flight from one load process ({load_name}), {cores} cores,"
        f" {args.sessions} distinct session(s) per reference configuration on a database"
        "\n(req/s: best round, median, spread; latency: median over the rounds of each window's"
        " percentile; load process CPU time / (wall time x cores))"
    )
    for config in configs:
        spread = (max(config.rates) - min(config.rates)) / max(config.rates) * 100
        print(
            f"{config.name:<38} {max(config.rates):7.0f} req/s  median {statistics.median(config.rates):7.0f}"
            f"  ±{spread:3.0f}%   p50 {statistics.median(config.p50s) * 1000:6.2f} ms"
            f"  p99 {statistics.median(config.p99s) * 1000:6.2f} ms"
            f"   load process {statistics.median(config.cpu_shares):4.0%} of the cores"
        )
    by_key = {(c.app, c.database, c.workers): c for c in configs}
    print()
    for database in databases:
        one, two = by_key[("reference", database, 1)], by_key[("reference", database, 2)]
        print(f"{f'reference app, {database}: 2 workers / 1 worker':<52} {ratio(two, one)}")
    bare_ratio = ratio(by_key[("bare", "", 2)], by_key[("bare", "", 1)])
    print(f"{'bare Flask: 2 workers / 1 worker':<52} {bare_ratio}")
    for database in databases:
        for workers in (1, 2):
            ours, bare = by_key[("reference", database, workers)], by_key[("bare", "", workers)]
            label = f"reference app, {database}, {workers} worker(s) / bare Flask"
            print(f"{label:<52} {ratio(ours, bare)}")
    print_floors_and_target(by_key, databases)


def print_floors_and_target(by_key: dict[tuple[str, str, int], Config], databases: dict[str, Any]) -> None:
    print("\nfloors (no session store read; one PostgreSQL round trip and nothing else):")
    memory, bare = by_key[("reference", "memory", 1)], by_key[("bare", "", 1)]
    print(f"{'reference app, memory sessions, 1 worker / bare Flask':<52} {ratio(memory, bare)}")
    if "PostgreSQL" in databases:
        for workers in (1, 2):
            floor, bare = by_key[("bare+select", "PostgreSQL", workers)], by_key[("bare", "", workers)]
            print(f"{f'bare Flask + SELECT 1, {workers} worker(s) / bare Flask':<52} {ratio(floor, bare)}")
    print("\nthe reference app (SQLite) / bare Flask (median of the per-round ratios):")
    for workers in (1, 2):
        ours, bare = by_key[("reference", "SQLite", workers)], by_key[("bare", "", workers)]
        median = statistics.median(x / y for x, y in zip(ours.rates, bare.rates, strict=True))
        verdict = "met" if median >= SERVER_TARGET else "MISSED"
        print(
            f"    {workers} worker(s): {median:.2f}x ({ours.sessions} sessions), "
            f"target >= {SERVER_TARGET}x: {verdict}"
        )


if __name__ == "__main__":
    main()
