"""Two checkouts of flask-authflow under gunicorn, timed interleaved: did a change pay off
end to end?

Each checkout's reference app is served by its own gunicorn (sync workers, ``--chdir``
into the checkout, so the workers import that checkout's package) on SQLite and on
PostgreSQL, with bare Flask beside them; the load is ``benchmarks/server.py``'s (the
Python load process, ``--sessions`` distinct sessions requested round-robin, every answer
checked). The configurations take turns in every round, so the machine's slow phases hit
both checkouts alike, and the ratio of the two is read from the same rounds.

    .venv/bin/python benchmarks/compare_trees.py --before /path/to/old/checkout
        [--after .] [--sessions 10000] [--requests 2000] [--rounds 5] [--workers 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import server  # importable once the path above is set


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, type=Path, help="the checkout to compare with")
    parser.add_argument("--after", default=server.ROOT, type=Path, help="the changed checkout (this one)")
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--postgres", default="auto", help="'auto' (throwaway server) or 'off'")
    args = parser.parse_args()
    args.load = "python"  # ab sends one Cookie header for a whole run
    return args


def main() -> None:
    args = parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    workdir = Path(tempfile.mkdtemp(prefix="authflow-trees-"))
    databases, pg_server = server.databases_of(args, workdir)
    configs: list[server.Config] = []
    root_of: dict[str, Path] = {}
    for database in databases:
        for label, root in trees.items():
            name = f"{label}: reference app, {database}"
            configs.append(server.Config(name, "reference", args.workers, database))
            root_of[name] = root
    bare = server.Config("bare Flask", "bare", args.workers)
    configs.append(bare)
    root_of[bare.name] = trees["after"]
    run = server.Run(args, server.Loader(), workdir, databases)
    try:
        for number, config in enumerate(configs):
            server.ROOT = root_of[config.name]  # gunicorn's --chdir: the checkout it serves
            server.start(run, config, number)
        server.measure(run, configs, os.cpu_count() or 1)
    finally:
        run.loader.stop()
        for config in configs:
            server.stop_gunicorn(config)
        if pg_server is not None:
            pg_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, configs, databases, trees)


def report(
    args: argparse.Namespace,
    configs: list[server.Config],
    databases: dict[str, object],
    trees: dict[str, Path],
) -> None:
    print(
        f"\n{args.rounds} interleaved rounds of {args.requests} GET /dashboard per configuration, "
        f"{args.workers} sync worker(s) each, {args.sessions} distinct sessions round-robin "
        f"(Python load process, {args.connections} connections)\n"
        f"before = {trees['before']}\nafter  = {trees['after']}"
    )
    for config in configs:
        spread = (max(config.rates) - min(config.rates)) / max(config.rates) * 100
        print(
            f"{config.name:<40} {max(config.rates):7.0f} req/s  median {statistics.median(config.rates):7.0f}"
            f"  ±{spread:3.0f}%   p50 {statistics.median(config.p50s) * 1000:6.2f} ms"
            f"  p99 {statistics.median(config.p99s) * 1000:6.2f} ms"
        )
    by_name = {config.name: config for config in configs}
    bare = by_name["bare Flask"]
    print()
    for database in databases:
        before, after = (by_name[f"{label}: reference app, {database}"] for label in ("before", "after"))
        print(f"{database + ': after / before':<40} {server.ratio(after, before)}")
        print(f"{database + ': before / bare Flask':<40} {server.ratio(before, bare)}")
        print(f"{database + ': after / bare Flask':<40} {server.ratio(after, bare)}")


if __name__ == "__main__":
    main()
