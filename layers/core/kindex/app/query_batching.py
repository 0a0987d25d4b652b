"""Query embeddings of concurrent requests in one embedder call: the next batch forms while the previous one runs.

A query whose key (tenant, model) has no batch running is embedded at once, alone, by its own thread: one client
waits for nothing. Queries that arrive while a batch of their key runs queue up; when that batch ends, the first of
them takes the whole queue (up to `max_batch`) and embeds it in one call, in its own thread, while later arrivals
form the batch after. No thread of its own, no timer: a batch is as large as the load made it during the previous
one, so batching adds no wait to a query beyond the one batch ahead of it.

Batches are per tenant as well as per model. The local int8 model quantises its activations with one scale per
tensor, so in a padded batch a query's vector depends, slightly, on the other queries of the batch (bge.py); were
batches shared, a tenant's scores would carry a trace of another tenant's query text, and its latency the length of
another tenant's batch. Within one tenant that dependence is within the embedder port's promise (cosine 0.99 or
more: a row does not depend on the other texts of a call up to the rounding of int8 activations). Queries are never
cached (EmbeddingService.embed_query), so no cache is shared either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kindex.app import cpu_slots

# One batch at most: the local server runs 32 requests at once, so a batch of 32 takes the whole queue.
MAX_BATCH = 32


@dataclass
class _Query:
    text: str
    done: threading.Event = field(default_factory=threading.Event)
    vector: np.ndarray | None = None
    error: BaseException | None = None
    batch: list[_Query] | None = None  # set when this query is handed the next batch to run


@dataclass
class _Key:
    running: bool = False
    queued: list[_Query] = field(default_factory=list)


class QueryBatcher:
    """Embeds the queries of concurrent callers of one key together (see the module docstring). Safe for any number
    of threads; `embed(key, text, run)` returns the query's vector or raises what `run` raised for its batch."""

    def __init__(self, max_batch: int = MAX_BATCH, on_queued: Callable[[Hashable, int], None] | None = None):
        """`on_queued(key, queued)` is told, under the batcher's lock, how many queries of `key` wait after one was
        queued (what a test synchronises on instead of sleeping)."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.max_batch = max_batch
        self.on_queued = on_queued
        self._lock = threading.Lock()
        self._keys: dict[Hashable, _Key] = {}

    def embed(
        self, key: Hashable, text: str, run: Callable[[Sequence[str]], np.ndarray], *, remote: bool = False
    ) -> np.ndarray:
        """The vector of `text`: `run(texts)` returns one row per text, in order, for a batch of this key's queries
        (this one alone when none of the key runs now). `remote`: `run` waits on the network, so a query waiting
        for its batch gives its CPU slot back (kindex.app.cpu_slots) meanwhile."""
        query = _Query(text)
        with self._lock:
            state = self._keys.setdefault(key, _Key())
            if state.running:
                state.queued.append(query)
                if self.on_queued is not None:
                    self.on_queued(key, len(state.queued))
            else:
                state.running = True
                query.batch = [query]
        if query.batch is None:
            if remote:
                with cpu_slots.away():
                    query.done.wait()
            else:
                query.done.wait()  # until the batch holding this query ended, or this query is to run the next one
        if query.batch is not None:
            self._run(key, query.batch, run)
        if query.error is not None:
            raise query.error
        return query.vector  # type: ignore[return-value]  # set with done, when error is not

    def _run(self, key: Hashable, batch: list[_Query], run: Callable[[Sequence[str]], np.ndarray]) -> None:
        try:
            vectors = run([query.text for query in batch])
            if len(vectors) != len(batch):
                raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(batch)} queries")
            for query, vector in zip(batch, vectors):
                query.vector = vector
        except BaseException as error:  # every query of the batch fails alike, and the next batch still runs
            for query in batch:
                query.error = error
        finally:
            with self._lock:
                state = self._keys[key]
                following, state.queued = state.queued[: self.max_batch], state.queued[self.max_batch :]
                if following:
                    following[0].batch = following
                else:
                    state.running = False
                    del self._keys[key]  # no state kept for a tenant that stopped querying
            for query in batch:
                query.done.set()
            if following:
                following[0].done.set()
