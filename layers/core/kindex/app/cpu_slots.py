"""How many requests of the local server compute at once: a few slots, released while a request waits.

`kindex serve` runs its functions on a pool of 32 threads (their warm instances), but a 2-core machine computes
two things at a time, and sixteen request threads contending for the interpreter's lock cost more than they
overlap: measured on the concurrency benchmark (16 clients, hybrid, 10k chunks, quiet 2-core machine), letting
every request thread compute spent 15 ms of CPU a query against 10-11.5 with three at a time, and answered 86
queries/s with p99 430 ms against 115-139 with p99 173-239 (docs/decisions.md, 2026-12-02).

A request holds a slot while its function runs (`held`, the server's job) and gives it back whenever it waits for
something that is not this machine's CPU (`away`): the external rights check, a remote embedding model (its call, or
the batch of queries another request sends it), another thread's embedding of the same text, the OpenSearch node. So
a slow rights endpoint of one tenant never holds a slot while it is slow. A query waiting for a local model's batch
keeps its slot: that batch computes here, and giving slots back let batches of ~13 form, each query waiting ~110 ms.
Outside a held slot (AWS Lambda runs one request per instance; the worker threads; tests of the services) `away`
is a no-op.

A request that holds a slot computes in its own thread (`holding`): the two legs of a hybrid search on the embedded
index run one after the other there instead of on a second thread, which would compute outside the slot (QueryService).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

# The slots the calling thread holds one of (None: none): what `away` gives back.
_holding = threading.local()


class _Turns:
    """A counting semaphore that serves its waiters in arrival order: a slot given back goes straight to the thread
    that has waited longest, never to one that arrives meanwhile."""

    def __init__(self, value: int):
        self._lock = threading.Lock()
        self._free = value
        self._waiting: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        turn.acquire()  # released by the thread that hands this one its slot

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class CpuSlots:
    """At most `slots` threads inside `held` at once, not counting those `away`; the others wait their turn, served in
    the order they came (a plain semaphore let a late arrival take a freed slot before the threads already waiting:
    16 clients' p99 314-367 ms against 196-263 served in order, at the same queries/s)."""

    def __init__(self, slots: int):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self._free = _Turns(slots)

    @contextmanager
    def held(self) -> Iterator[None]:
        if getattr(_holding, "slots", None) is not None:  # re-entered by a thread that has its slot
            yield
            return
        self._free.acquire()
        _holding.slots = self
        try:
            yield
        finally:
            _holding.slots = None
            self._free.release()

    @property
    def waiting(self) -> int:
        """Threads waiting for a slot now."""
        return self._free.waiting

    def _away(self) -> None:
        _holding.slots = None
        self._free.release()

    def _back(self) -> None:
        self._free.acquire()
        _holding.slots = self


def holding() -> bool:
    """Whether the calling thread holds a CPU slot now."""
    return getattr(_holding, "slots", None) is not None


@contextmanager
def away() -> Iterator[None]:
    """Around a wait that is not this machine's computing: the calling thread's slot, if it holds one, is free
    meanwhile, and taken again (waiting for one if need be) before the caller goes on. Never around a wait inside a
    lock that a slot holder may wait for (a SQLite write transaction, an index's write lock): taking the slot back
    would wait for those holders while they wait for the lock. No caller does today: the rights calls, the remote
    model, the OpenSearch search and a delete's pause all run outside any such lock."""
    slots = getattr(_holding, "slots", None)
    if slots is None:
        yield
        return
    slots._away()
    try:
        yield
    finally:
        slots._back()
