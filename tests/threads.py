"""Running test code in several threads at once (the thread-safety tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable

# How long a test waits for another thread before giving up: a guard against a deadlock,
# not a timing (a loaded machine may pause a thread for seconds).
HANG_GUARD = 120.0  # seconds


def all_at_once(work: Callable[[int], None], count: int = 8) -> None:
    """Run `work(0)` … `work(count - 1)`, each in a thread of its own, released together
    by a barrier (so that their first calls overlap), and wait for all of them. `work`
    collects its own results and errors: an exception in a thread is not re-raised."""
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
