"""Racing writers for concurrency tests: each call on its own thread, all released at once by one barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


def run_together(
    calls: Sequence[Callable[[], Any]], ready: Callable[[int], None] | None = None, timeout: float = 120
) -> list:
    """Run every call on its own thread, released together once each thread has run `ready(i)` (e.g. opened its
    connection); returns what each call returned, or the exception it raised (left to the test's assertions)."""
    barrier = threading.Barrier(len(calls))
    outcomes: list = [None] * len(calls)

    def run(i: int) -> None:
        if ready is not None:
            ready(i)
        barrier.wait()
        try:
            outcomes[i] = calls[i]()
        except Exception as error:  # reported by the assertions with the others' outcomes
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return outcomes
