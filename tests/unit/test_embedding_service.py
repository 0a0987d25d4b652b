"""The embedding service over its cache: each text is embedded once per model, also by concurrent threads."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kindex.adapters.embedders.hashing import HashEmbedder
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache
from kindex.app.embedding import EmbeddingService, text_sha256
from kindex.domain.errors import EmbeddingFailed

pytestmark = pytest.mark.unit


class GatedEmbedder:
    """The hash embedder behind a gate: calls wait until the test opens it, so threads truly overlap."""

    def __init__(self):
        self.inner = HashEmbedder(16)
        self.dimensions, self.model = self.inner.dimensions, self.inner.model
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.sent: list[str] = []
        self.fail_once = False
        self._lock = threading.Lock()

    def embed(self, texts):
        with self._lock:
            self.sent.extend(texts)
            fail, self.fail_once = self.fail_once, False
        self.started.release()
        self.gate.wait(5)
        if fail:
            raise EmbeddingFailed("provider unavailable (test)")
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        return self.inner.embed_queries(texts)


@pytest.fixture
def service_and_embedder(tmp_path):
    embedder = GatedEmbedder()
    cache = SqliteEmbeddingCache(SqliteDatabase(tmp_path / "cache.sqlite3"))
    return EmbeddingService(cache, lambda m: embedder), embedder


def test_a_text_another_thread_is_embedding_is_not_sent_twice(service_and_embedder):
    service, embedder = service_and_embedder
    with ThreadPoolExecutor(2) as pool:
        # Given one thread embedding "shared" and "a", held inside the provider call
        first = pool.submit(service.embed, "t", "hash:16", ["shared", "a"])
        assert embedder.started.acquire(timeout=5)
        # When a second thread asks for "shared" and "b" meanwhile
        second = pool.submit(service.embed, "t", "hash:16", ["b", "shared"])
        assert embedder.started.acquire(timeout=5)
        embedder.gate.set()
        vectors_first, vectors_second = first.result(5), second.result(5)
    # Then "shared" reached the provider once, and both threads got its vector
    assert sorted(embedder.sent) == ["a", "b", "shared"]
    assert np.allclose(vectors_first[0], vectors_second[1])
    assert np.allclose(vectors_second[1], embedder.inner.embed(["shared"])[0])


def test_when_the_other_threads_call_fails_the_waiting_thread_embeds_the_text_itself(service_and_embedder):
    service, embedder = service_and_embedder
    embedder.fail_once = True
    with ThreadPoolExecutor(2) as pool:
        # Given a first thread whose provider call for "shared" will fail
        first = pool.submit(service.embed, "t", "hash:16", ["shared"])
        assert embedder.started.acquire(timeout=5)
        # When a second thread waits for "shared" (and embeds its own "b")
        second = pool.submit(service.embed, "t", "hash:16", ["b", "shared"])
        assert embedder.started.acquire(timeout=5)
        embedder.gate.set()
        with pytest.raises(EmbeddingFailed):
            first.result(5)
        vectors = second.result(5)
    # Then the second thread still gets every vector, sending "shared" again only because the first call failed
    assert np.allclose(vectors, embedder.inner.embed(["b", "shared"]))
    assert sorted(embedder.sent) == ["b", "shared", "shared"]


class CountingEmbedder:
    def __init__(self):
        self.inner = HashEmbedder(16)
        self.dimensions, self.model = self.inner.dimensions, self.inner.model
        self.sent: list[str] = []

    def embed(self, texts):
        self.sent.extend(texts)
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        return self.inner.embed_queries(texts)


@pytest.fixture
def counted(tmp_path):
    embedder = CountingEmbedder()
    cache = SqliteEmbeddingCache(SqliteDatabase(tmp_path / "cache.sqlite3"))
    return EmbeddingService(cache, lambda m: embedder), embedder, cache


def test_the_same_text_is_embedded_once_per_tenant_and_never_served_across_tenants(counted):
    service, embedder, cache = counted
    # Given tenant acme embedded a text
    acme = service.embed("acme", "hash:16", ["the form letter"])
    # When tenant evil asks for the same text, twice
    evil = service.embed("evil", "hash:16", ["the form letter"])
    service.embed("evil", "hash:16", ["the form letter"])
    # Then the provider saw it once per tenant, and each tenant's cache holds only its own entry
    assert embedder.sent == ["the form letter", "the form letter"]
    assert np.array_equal(acme, evil)
    assert set(cache.get_vectors("acme", "hash:16", [text_sha256("the form letter")])) == {
        text_sha256("the form letter")
    }
    assert cache.get_vectors("other", "hash:16", [text_sha256("the form letter")]) == {}


def test_riders_are_cached_for_their_own_tenant_only(counted):
    service, embedder, cache = counted
    # Given acme's call that carries evil's small document's text along (one provider call for both)
    vectors = service.embed("acme", "hash:16", ["acme text"], riders=[("evil", "evil text"), ("evil", "acme text")])
    # Then acme gets only its own vectors, in one provider call with every distinct (tenant, text) once
    assert vectors.shape == (1, 16)
    assert embedder.sent == ["acme text", "evil text", "acme text"]
    # And each vector is cached for the tenant whose text it is
    assert cache.get_vectors("acme", "hash:16", [text_sha256("evil text")]) == {}
    assert set(cache.get_vectors("evil", "hash:16", [text_sha256("evil text"), text_sha256("acme text")])) == {
        text_sha256("evil text"),
        text_sha256("acme text"),
    }
    # So evil's own document later embeds nothing
    service.embed("evil", "hash:16", ["evil text"])
    assert len(embedder.sent) == 3
