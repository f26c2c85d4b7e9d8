"""Every measure of issue 30 in one run, one after the other, with their spreads.

0. the protected GET's stages, each timed on its own per store (``stages.py``);
1. the protected GET with ``--sessions`` distinct sessions per contender (memory, SQLite,
   PostgreSQL and Redis stores beside bare Flask, Flask-Login with the cookie session,
   Flask-Login + a SQLite user loader, Flask-Login + Flask-Session on Redis and on SQLite,
   Flask-Security-Too), with a touch round beside each store's read-only round and the
   targets (``protected_request.py``);
2. sign-ins per second beside Flask-Security-Too, fast Argon2id on both (``sign_in.py``);
3. ``authflow.authorize`` beside the bare ``cedarpy`` call on the same decision (``authz.py``);
4. the reference app under gunicorn with 1 and 2 workers beside bare Flask (``server.py``),
   when gunicorn is installed (it is in ``requirements/test.lock``).

Each part runs in a process of its own (no state carried from one to the next) and prints
its interleaved rounds, spreads and ratios; this script prints them in order under a
heading with the machine's load average at the start of each part, and at the end every
line that names a target, side by side. The machine's other
work moves absolute figures: read the ratios, and the spread beside them.

The parts' SQLite files go to a folder in ``/dev/shm`` (memory) when the machine has one,
for every contender alike (``--on-disk`` keeps them in the temporary folder): a read does
not sync the disk on any contender, but building 10,000 sessions does, once per peer login
and per stored session; on a disk shared with other work each sync took up to 30 ms, so
the build alone lasted over ten minutes. The contenders that write on every request
(Flask-Session's SQLAlchemy backend, our touch round) sync no disk either: the peer's
figure gains from it, ours not (a touch commits in WAL mode with ``synchronous=NORMAL``,
no sync; see ``README.rst``). The sign-in part stays on disk: there the sync is the measure.

``--touch`` runs the touch part only: our stores' read-only and touch rounds
(``protected_request.py --touch-only``).

    .venv/bin/python benchmarks/run_all.py [--sessions 10000] [--rounds 5] [--quick] [--on-disk] [--touch]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


#: Each part's lines that name a target, gathered for the summary at the end.
TARGET_LINES: list[tuple[str, str]] = []


def part(title: str, script: str, *args: str, env: dict[str, str] | None = None) -> int:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\n=== {title} ({script} {' '.join(args)}; load average {load}) ===", flush=True)
    started = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:  # shown as it comes; the target lines kept for the end
            print(line, end="", flush=True)
            if "target" in line and ("x" in line or "MISSED" in line):
                TARGET_LINES.append((title, line.strip()))
    code = process.returncode
    print(f"--- {script}: exit {code}, {time.perf_counter() - started:.0f}s", flush=True)
    return code


def print_summary() -> None:
    """Every part's targets side by side, after the run (each part printed its spreads)."""
    print("\n=== every target of this run (medians of per-round ratios; spreads above) ===")
    for title, line in TARGET_LINES:
        print(f"  [{title}] {line}")


def scratch_environment(*, on_disk: bool) -> dict[str, str] | None:
    """The parts' environment: ``TMPDIR`` in ``/dev/shm`` unless ``on_disk`` (or there is none)."""
    memory = Path("/dev/shm")
    if on_disk or not memory.is_dir():
        print("(SQLite files in the temporary folder, on disk)")
        return None
    print("(SQLite files in /dev/shm: no disk sync for any contender; --on-disk to keep them on disk)")
    return {**os.environ, "TMPDIR": str(memory)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="10000", help="distinct sessions per contender")
    parser.add_argument("--rounds", default="5", help="interleaved rounds of each part")
    parser.add_argument("--quick", action="store_true", help="small windows: a smoke test, not a measure")
    parser.add_argument("--on-disk", action="store_true", help="SQLite files in the temporary folder")
    parser.add_argument(
        "--touch", action="store_true", help="the touch part only (read-only and touch rounds)"
    )
    args = parser.parse_args()
    requests = "300" if args.quick else "2000"
    env = scratch_environment(on_disk=args.on_disk)
    if args.touch:
        return part(
            "the touch",
            "protected_request.py",
            "--touch-only",
            "--sessions",
            args.sessions,
            "--rounds",
            args.rounds,
            "--requests",
            requests,
            env=env,
        )
    codes = [
        part(
            "the protected GET's stages",
            "stages.py",
            "--repeat",
            args.rounds,
            "--number",
            "500" if args.quick else "5000",
        ),
        part(
            "protected GET",
            "protected_request.py",
            "--sessions",
            args.sessions,
            "--rounds",
            args.rounds,
            "--requests",
            requests,
            env=env,
        ),
        part(
            "sign-in throughput",
            "sign_in.py",
            "--rounds",
            args.rounds,
            "--logins",
            "50" if args.quick else "300",  # on disk: a sign-in's commit syncs it, as deployed
        ),
        part("Cedar", "authz.py", "--rounds", args.rounds, "--window", "0.1" if args.quick else "0.3"),
    ]
    if importlib.util.find_spec("gunicorn") is None:
        print("\n(gunicorn is not installed: the server part is left out)")
    else:
        codes.append(
            part(
                "reference app under gunicorn",
                "server.py",
                "--rounds",
                args.rounds,
                "--requests",
                requests,
                "--sessions",
                args.sessions,
                env=env,
            )
        )
    print_summary()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
