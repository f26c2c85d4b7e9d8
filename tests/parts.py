"""Real external parts the tests use (PostgreSQL, Redis, Node, Chromium).

On a developer's laptop a missing part skips the tests that need it with the
reason; when ``CI=true`` a missing part fails them, as the project promises.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing_part(reason: str) -> None:
    """Skip (laptop) or fail (CI) because a real part is not available."""
    if IN_CI:
        pytest.fail(f"required test part missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def find_pg_bin() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def remove_tree(folder: Path) -> None:
    """Remove a server's folder once the server is gone. A server stopped a moment ago may
    still remove or write its socket, lock and log files while rmtree walks the folder,
    which then stays behind (empty): try again for up to two seconds."""
    for _ in range(40):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
        time.sleep(0.05)


@dataclass
class PostgresServer:
    port: int
    datadir: Path
    bindir: Path
    run_as: list[str]
    counter: int = 0

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://authflow@127.0.0.1:{self.port}/{dbname}"

    def new_database(self, *, migrated: bool = False) -> str:
        """A new, empty database; ``migrated``: with flask-authflow's schema at head, as
        ``flask authflow db upgrade`` leaves it (an app refuses a PostgreSQL database behind head)."""
        import psycopg

        self.counter += 1
        name = f"t{os.getpid()}_{self.counter}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="authflow", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if migrated:
            from flask_authflow.storage.sql.migrations import upgrade

            upgrade(self.url(name))
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        remove_tree(self.datadir.parent)


def start_postgres(*settings: str) -> PostgresServer:
    """A throwaway PostgreSQL server on a free loopback port; ``settings`` are extra
    ``name=value`` server settings (a benchmark sizes ``shared_buffers`` with them)."""
    bindir = find_pg_bin()
    if bindir is None:
        missing_part("PostgreSQL server binaries (initdb/pg_ctl) not found; install the 'postgresql' package")
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="authflow-pg-"))
    datadir = base / "data"
    run_as: list[str] = []
    if os.geteuid() == 0:
        # initdb refuses to run as root: run the server as the unprivileged postgres user.
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        os.chmod(base, 0o700)
    port = free_port()
    subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(datadir), "-U", "authflow", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *run_as,
            str(bindir / "pg_ctl"),
            "-D",
            str(datadir),
            "-l",
            str(base / "log"),
            "-w",
            "-o",
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
            + "".join(f" -c {setting}" for setting in settings),
            "start",
        ],
        check=True,
        capture_output=True,
    )
    return PostgresServer(port=port, datadir=datadir, bindir=bindir, run_as=run_as)


@dataclass
class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1 (no persistence), in a temporary folder."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes]

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        remove_tree(self.workdir)


def start_redis() -> RedisServer:
    """Start Debian's ``redis-server`` on a free loopback port (fails under CI when missing)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_part("redis-server not found; install the 'redis-server' package")
    assert binary is not None
    workdir = Path(tempfile.mkdtemp(prefix="authflow-redis-"))
    port = free_port()
    with (workdir / "log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                "--daemonize",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    server = RedisServer(port=port, workdir=workdir, process=process)
    try:
        wait_for_port(port)
    except TimeoutError:
        server.stop()
        raise
    return server
