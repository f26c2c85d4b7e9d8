"""Running test workers in threads at the same moment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_together(workers: list[Callable[[], Any]]) -> list[Any]:
    """Run each worker in a thread of its own, all released at once by a barrier; return
    their results in order. An exception in any worker (a failed assert) fails the caller."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)
    errors: list[BaseException] = []

    def run(index: int, work: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    return results
