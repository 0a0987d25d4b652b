"""The query batcher: the next batch of a key forms while the previous one runs, one caller alone waits for nothing,
keys (tenant, model) never share a batch. Threads are synchronised on events the batcher and the gated embedding
function signal, never on sleeps."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kindex.adapters.embedders.hashing import HashEmbedder
from kindex.app.embedding import EmbeddingService
from kindex.app.query_batching import QueryBatcher
from kindex.domain.errors import DependencyFailed, EmbeddingFailed

pytestmark = pytest.mark.unit

WAIT_S = 30.0  # only rules out a hang: every wait below ends on an event


class GatedRun:
    """An embedding function whose calls block until the test opens their gate; records each call's texts."""

    def __init__(self):
        self.inner = HashEmbedder(16)
        self.calls: list[list[str]] = []
        self.started = threading.Semaphore(0)
        self.gates: list[threading.Event] = []
        self.fail: set[int] = set()  # call numbers that raise
        self._lock = threading.Lock()

    def __call__(self, texts):
        with self._lock:
            number = len(self.calls)
            self.calls.append(list(texts))
            gate = threading.Event()
            self.gates.append(gate)
        self.started.release()
        assert gate.wait(WAIT_S), "the test never opened this call's gate"
        if number in self.fail:
            raise EmbeddingFailed("the provider is down")
        return self.inner.embed_queries(texts)

    def wait_started(self, calls: int = 1) -> None:
        for _ in range(calls):
            assert self.started.acquire(timeout=WAIT_S), "the embedding call never started"

    def open(self, call: int) -> None:
        self.gates[call].set()


class Queued:
    """The batcher's `on_queued` hook as events: `wait(key, n)` returns once n queries of key are queued."""

    def __init__(self):
        self.condition = threading.Condition()
        self.seen: dict = {}

    def __call__(self, key, queued: int) -> None:
        with self.condition:
            self.seen[key] = queued
            self.condition.notify_all()

    def wait(self, key, queued: int) -> None:
        with self.condition:
            assert self.condition.wait_for(lambda: self.seen.get(key) == queued, WAIT_S), self.seen


def expected(text: str) -> np.ndarray:
    return HashEmbedder(16).embed_queries([text])[0]


def test_a_query_alone_is_embedded_at_once_in_its_callers_thread():
    # Given a batcher and no query running
    batcher = QueryBatcher()
    threads = []

    def run(texts):
        threads.append(threading.current_thread())
        return HashEmbedder(16).embed_queries(texts)

    # When one query is embedded
    vector = batcher.embed(("t1", "hash:16"), "penguin", run)

    # Then it ran alone, in the caller's own thread, and got its own vector
    assert threads == [threading.current_thread()]
    np.testing.assert_array_equal(vector, expected("penguin"))


def test_queries_arriving_while_a_batch_runs_form_the_next_batch_together():
    # Given a first query of a key whose embedding call is running (held at its gate)
    queued, run = Queued(), GatedRun()
    batcher = QueryBatcher(on_queued=queued)
    key = ("t1", "hash:16")
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.embed, key, "first", run)
        run.wait_started()
        # When three more queries of the key arrive meanwhile
        later = {text: pool.submit(batcher.embed, key, text, run) for text in ("a", "b", "c")}
        queued.wait(key, 3)
        assert len(run.calls) == 1  # they wait: none runs beside the first batch
        run.open(0)
        # Then, once the first batch ended, they are embedded in one call, each getting its own vector
        run.wait_started()
        run.open(1)
        np.testing.assert_array_equal(first.result(WAIT_S), expected("first"))
        for text, future in later.items():
            np.testing.assert_array_equal(future.result(WAIT_S), expected(text))
    assert run.calls == [["first"], ["a", "b", "c"]]


def test_another_tenants_query_never_waits_for_a_batch_and_never_joins_it():
    # Given tenant t1's query embedding (held at its gate)
    run = GatedRun()
    batcher = QueryBatcher()
    with ThreadPoolExecutor(2) as pool:
        mine = pool.submit(batcher.embed, ("t1", "hash:16"), "same text", run)
        run.wait_started()
        # When tenant t2 asks for the same text with the same model
        theirs = pool.submit(batcher.embed, ("t2", "hash:16"), "same text", run)
        # Then t2's query runs at once in a call of its own, while t1's batch is still held
        run.wait_started()
        assert run.calls == [["same text"], ["same text"]]
        run.open(1)
        np.testing.assert_array_equal(theirs.result(WAIT_S), expected("same text"))
        assert not mine.done()
        run.open(0)
        np.testing.assert_array_equal(mine.result(WAIT_S), expected("same text"))


def test_a_failed_batch_fails_its_queries_only_and_the_next_batch_runs():
    # Given a running first batch, with two queries queued behind it, and a third queued behind those
    queued, run = Queued(), GatedRun()
    batcher = QueryBatcher(max_batch=2, on_queued=queued)
    key = ("t1", "hash:16")
    run.fail = {1}  # the second call (the two queued queries) fails
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.embed, key, "first", run)
        run.wait_started()
        failing = [pool.submit(batcher.embed, key, text, run) for text in ("a", "b")]
        queued.wait(key, 2)
        last = pool.submit(batcher.embed, key, "c", run)
        queued.wait(key, 3)
        # When the batches run one after the other and the second one's call fails
        run.open(0)
        run.wait_started()
        run.open(1)
        run.wait_started()
        run.open(2)
        # Then its two queries get the failure, the queries before and after it their vectors
        np.testing.assert_array_equal(first.result(WAIT_S), expected("first"))
        for future in failing:
            with pytest.raises(EmbeddingFailed):
                future.result(WAIT_S)
        np.testing.assert_array_equal(last.result(WAIT_S), expected("c"))
    # and max_batch cut the queue of three into batches of two and one
    assert run.calls == [["first"], ["a", "b"], ["c"]]


def test_a_key_that_went_quiet_keeps_no_state_and_runs_at_once_again():
    # Given a key whose queries all ended
    batcher = QueryBatcher()
    calls = []

    def run(texts):
        calls.append(list(texts))
        return HashEmbedder(16).embed_queries(texts)

    batcher.embed(("t1", "hash:16"), "one", run)
    # When a new query of it comes
    batcher.embed(("t1", "hash:16"), "two", run)
    # Then it runs at once, alone, and the batcher holds nothing for a key with no query running
    assert calls == [["one"], ["two"]]
    assert batcher._keys == {}


class _NoCache:
    def get_vectors(self, tenant, model, hashes):
        raise AssertionError("queries never read the embedding cache")

    def put_vectors(self, tenant, model, vectors):
        raise AssertionError("queries never write the embedding cache")


class _FailingEmbedder:
    model, dimensions = "hash:16", 16

    def embed_queries(self, texts):
        raise EmbeddingFailed("the provider is down")


def test_the_embedding_service_batches_a_tenants_queries_and_maps_a_failure_to_dependency_failed():
    # Given the service with a batcher over the hash embedder
    service = EmbeddingService(_NoCache(), lambda model: HashEmbedder(16), query_batches=QueryBatcher())
    # When a tenant's query is embedded through it
    vector = service.embed_query("hash:16", "penguin", tenant="t1")
    # Then it gets the query's own vector, with no cache read or write
    np.testing.assert_array_equal(vector, expected("penguin"))
    # and a provider failure inside a batch is the query's dependency failure (HTTP 503)
    failing = EmbeddingService(_NoCache(), lambda model: _FailingEmbedder(), query_batches=QueryBatcher())
    with pytest.raises(DependencyFailed):
        failing.embed_query("hash:16", "penguin", tenant="t1")


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        QueryBatcher(max_batch=0)
