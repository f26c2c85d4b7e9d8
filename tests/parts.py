"""Real external parts the tests use (PostgreSQL, Redis, Node, Chromium).

On a developer's laptop a missing part skips the tests that need it with the
reason; when ``CI=true`` a missing part fails them, as the project promises.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import multiprocessing
import multiprocessing.context
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing_part(reason: str) -> None:
    """Skip (laptop) or fail (CI) because a real part is not available."""
    if IN_CI:
        pytest.fail(f"required test part missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


#: The test whose setup, call or teardown runs in this process (tests/conftest.py sets it):
#: what :func:`require_marker` checks. Empty outside a test (a benchmark, a helper script).
running_test: list[pytest.Item] = []


def require_marker(marker: str, part: str) -> None:
    """Fail the running test, loudly, when it uses ``part`` but is not marked ``marker``.

    The markers are what ``-m "not postgres"`` and ``--fast`` select on: a test that starts
    PostgreSQL, Redis, Chromium, Node or child processes without its marker would run (and
    be slow, or fail for want of the part) in a loop that promises to leave them out.
    """
    if running_test and running_test[-1].get_closest_marker(marker) is None:
        pytest.fail(
            f"{running_test[-1].nodeid} uses {part} but is not marked @pytest.mark.{marker}: "
            f"add the marker (or a module-level pytestmark), see docs/testing.rst",
            pytrace=False,
        )


#: What the forkserver of :func:`child_processes` imports once, before it forks any child.
CHILD_PRELOAD = [
    "flask_authflow",
    "flask_authflow.storage._sql.backend",
    "flask_authflow.storage._sql.session_store",
    "flask_authflow.storage._sql.migrations",
    "psycopg",
]


def child_processes() -> multiprocessing.context.BaseContext:
    """How the race tests start their processes: ``forkserver``. Each child is a separate
    process with its own connections, as under ``spawn``, forked from a clean server process
    that imported the package once, instead of an interpreter that imports it all again
    (a second or more per child on a busy machine)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(CHILD_PRELOAD)
    return context


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
    #: The databases this process created, oldest first (``drop_databases`` removes them).
    created: list[str] = field(default_factory=list)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://authflow@127.0.0.1:{self.port}/{dbname}"

    def new_database(self, *, migrated: bool = False) -> str:
        """A new, empty database; ``migrated``: with flask-authflow's schema at head, as
        ``flask authflow db upgrade`` leaves it (an app refuses a PostgreSQL database behind head).
        Its name holds this process's id, so the xdist workers sharing one server never collide."""
        self.counter += 1
        name = f"t{os.getpid()}_{self.counter}"
        self._execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        if migrated:
            from flask_authflow.storage._sql.migrations import upgrade

            upgrade(self.url(name))
        return self.url(name)

    def drop_databases(self, names: list[str]) -> None:
        """Drop these databases, closing what is still connected to them (a test is over)."""
        for name in names:
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self.created.remove(name)

    def _execute(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="authflow", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(statement)  # type: ignore[arg-type] - a name made here, quoted

    def accepts_connections(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        remove_tree(self.datadir.parent)

    def save(self) -> None:
        """Write how to reach and stop this server into its folder (``load`` reads it back)."""
        described = {"port": self.port, "datadir": str(self.datadir), "bindir": str(self.bindir)}
        (self.datadir.parent / "server.json").write_text(json.dumps({**described, "run_as": self.run_as}))

    @classmethod
    def load(cls, folder: Path) -> PostgresServer | None:
        try:
            described = json.loads((folder / "server.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(
            port=described["port"],
            datadir=Path(described["datadir"]),
            bindir=Path(described["bindir"]),
            run_as=described["run_as"],
        )


def _server_root() -> Path | None:
    """Where a shared server keeps its files: memory (/dev/shm) when there is some, so that
    creating and removing hundreds of small databases costs no disk writes."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2**30:
        return shm
    return None


def start_postgres(*settings: str, root: Path | None = None) -> PostgresServer:
    """A throwaway PostgreSQL server on a free loopback port; ``settings`` are extra
    ``name=value`` server settings (a benchmark sizes ``shared_buffers`` with them); its
    files go in a new folder under ``root`` (the temporary folder by default)."""
    require_marker("postgres", "a PostgreSQL server")
    bindir = find_pg_bin()
    if bindir is None:
        missing_part("PostgreSQL server binaries (initdb/pg_ctl) not found; install the 'postgresql' package")
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="authflow-pg-", dir=root))
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


# -- one PostgreSQL server for a whole run, shared by its xdist workers ----------------------------

#: In the run's shared folder: the folder of the run's server (``PostgresServer.save``).
SHARED_POINTER = "postgres-server"
#: In a shared server's folder: the ids of the processes using it, one a line.
USERS = "users"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: the kernel drops it when its holder dies, so a
    crashed worker leaves no stale lock behind."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _users(folder: Path, *, add: int | None = None, remove: int | None = None) -> set[int]:
    """Update the users of the server in ``folder`` (the dead ones drop out) and return them."""
    try:
        users = {int(line) for line in (folder / USERS).read_text().split()}
    except OSError:
        users = set()
    users = {pid for pid in users if pid != remove and _alive(pid)}
    if add is not None:
        users.add(add)
    (folder / USERS).write_text("".join(f"{pid}\n" for pid in sorted(users)))
    return users


def attach_shared_postgres(shared: Path) -> PostgresServer:
    """The run's PostgreSQL server: the first process to ask starts it; every process that
    asks is noted as a user. ``shared`` is a folder every process of the run sees (under
    xdist, the parent of the workers' base temporary folders)."""
    shared.mkdir(parents=True, exist_ok=True)
    with _locked(shared / "postgres.lock"):
        pointer = shared / SHARED_POINTER
        server = PostgresServer.load(Path(pointer.read_text())) if pointer.exists() else None
        if server is None or not server.accepts_connections():
            reap_orphaned_postgres()
            server = start_postgres("max_connections=400", root=_server_root())
            server.save()
            pointer.write_text(str(server.datadir.parent))
        _users(server.datadir.parent, add=os.getpid())
    return server


def detach_shared_postgres(shared: Path) -> None:
    """This process is done with the run's server: the last user stops it."""
    with _locked(shared / "postgres.lock"):
        pointer = shared / SHARED_POINTER
        server = PostgresServer.load(Path(pointer.read_text())) if pointer.exists() else None
        if server is None:
            return
        if not _users(server.datadir.parent, remove=os.getpid()):
            server.stop()
            pointer.unlink()


def reap_orphaned_postgres() -> list[Path]:
    """Stop the shared servers whose every user is dead (a run killed before its end) and
    remove their folders; returns those folders. A server without a users file (being set up,
    or not a shared one) is left alone."""
    reaped = []
    roots = {Path(tempfile.gettempdir()), *filter(None, [_server_root()])}
    for folder in sorted(path for root in roots for path in root.glob("authflow-pg-*")):
        if not (folder / USERS).exists():
            continue
        server = PostgresServer.load(folder)
        if server is None or _users(folder):
            continue
        server.stop()
        reaped.append(folder)
    return reaped


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
    require_marker("redis", "a redis-server")
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
