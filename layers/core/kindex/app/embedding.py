"""Embedding through the cache: a text is embedded at most once per model, across documents and re-ingests."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np

from kindex.domain.errors import DependencyFailed, EmbeddingFailed
from kindex.domain.ports import Embedder, EmbeddingCache, MetricsRecorder

logger = logging.getLogger(__name__)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingService:
    """Looks vectors up by (model, sha256(text)), embeds only the missing unique texts in one call, stores them.

    Safe for concurrent threads (local mode's worker pool): a text another thread is embedding right now is not
    sent again; this thread waits for that vector instead (single flight per model and text)."""

    def __init__(self, cache: EmbeddingCache, embedder_for: Callable[[str], Embedder],
                 metrics: MetricsRecorder | None = None):
        self.cache = cache
        self.embedder_for = embedder_for
        self.metrics = metrics
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[str, str], threading.Event] = {}

    def embed(self, model: str, texts: Sequence[str]) -> np.ndarray:
        embedder = self.embedder_for(model)
        if not texts:
            return np.zeros((0, embedder.dimensions), dtype=np.float32)
        hashes = [text_sha256(t) for t in texts]
        known = self.cache.get_vectors(model, hashes)
        missing = {h: t for h, t in zip(hashes, texts) if h not in known}
        with self._lock:
            others = {h: self._in_flight[(model, h)] for h in missing if (model, h) in self._in_flight}
            mine = {h: t for h, t in missing.items() if h not in others}
            for h in mine:
                self._in_flight[(model, h)] = threading.Event()
        try:
            if mine:
                fresh = embedder.embed(list(mine.values()))
                new_vectors = dict(zip(mine.keys(), fresh))
                self.cache.put_vectors(model, new_vectors)
                known.update(new_vectors)
                if self.metrics:
                    self.metrics.count("ChunksEmbedded", len(mine))
        finally:
            with self._lock:
                for h in mine:
                    self._in_flight.pop((model, h)).set()
        if others:
            # Waited for only after our own texts are done and released, so two threads never wait on each other.
            for event in others.values():
                event.wait()
            known.update(self.cache.get_vectors(model, list(others)))
            lost = [h for h in others if h not in known]
            if lost:  # the other thread's call failed: embed them here
                known.update(zip(lost, self.embed(model, [missing[h] for h in lost])))
        logger.info("embedded", extra={"model": model, "texts": len(texts), "cache_hits": len(texts) - len(missing),
                                       "embedded": len(mine)})
        return np.vstack([known[h] for h in hashes]).astype(np.float32, copy=False)

    def cached(self, model: str, texts: Sequence[str]) -> np.ndarray | None:
        """The vectors when every text is in the cache already, else None (no provider call)."""
        hashes = [text_sha256(t) for t in texts]
        known = self.cache.get_vectors(model, hashes)
        if any(h not in known for h in hashes):
            return None
        if not hashes:
            return np.zeros((0, self.embedder_for(model).dimensions), dtype=np.float32)
        return np.vstack([known[h] for h in hashes]).astype(np.float32, copy=False)

    def embed_query(self, model: str, text: str) -> np.ndarray:
        """Queries skip the cache on write: they rarely repeat and would only grow the table. A provider that fails
        is a dependency failure of the query (HTTP 503), not an ingest failure."""
        embedder = self.embedder_for(model)
        try:
            return embedder.embed([text])[0]
        except EmbeddingFailed as error:
            raise DependencyFailed(f"the embedding model {model} is unavailable: {error.message}") from error
