"""Embedding through the cache: a text is embedded at most once per tenant and model, across documents and
re-ingests.

The cache is the tenant's own (keyed by tenant, model and text hash). A cache shared by tenants would answer "has
anyone indexed this exact text?": by the vector an export returns, and by how fast a write that must embed comes
back (a hit answers in milliseconds, a provider call in tens or hundreds), so form letters could be guessed. Two
tenants that index the same text therefore each embed it once."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np

from kindex.app import cpu_slots
from kindex.app.query_batching import QueryBatcher
from kindex.domain.errors import DependencyFailed, EmbeddingFailed
from kindex.domain.metering import EMBEDDED_TEXTS, EMBEDDING_TOKENS
from kindex.domain.ports import Embedder, EmbeddingCache, MetricsRecorder, TokenCounter
from kindex.domain.quotas import estimated_tokens

logger = logging.getLogger(__name__)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def imported_vectors_key(model: str) -> str:
    """The embedding cache's "model" under which a tenant's imported vectors are kept in its own cache: no model
    name starts like this, and ingest never embeds from it, so a vector a tenant sent never stands in for an
    embedding of the model. Export reads it after the model's own entries, so a collection imported without
    embedding exports its vectors again (a chain of moves embeds nothing); a rewrite of a document's filter fields
    reads it the same way, to write again the vectors the index already holds."""
    return f"imported\x1f{model}"


class EmbeddingService:
    """Looks vectors up by (tenant, model, sha256(text)), embeds only the missing unique texts in one call, stores
    them under their tenant.

    Safe for concurrent threads (local mode's worker pool): a text another thread is embedding right now for the
    same tenant is not sent again; this thread waits for that vector instead (single flight per tenant, model and
    text)."""

    def __init__(
        self,
        cache: EmbeddingCache,
        embedder_for: Callable[[str], Embedder],
        metrics: MetricsRecorder | None = None,
        query_batches: QueryBatcher | None = None,
        on_embedded: Callable[[str, int], None] | None = None,
    ):
        """`query_batches`: concurrent queries of one tenant and model are embedded in one call (query_batching.py);
        None embeds each query alone (the reference the concurrency benchmark compares with). `on_embedded` is told
        (tenant, estimated tokens) for the texts each tenant had embedded, not those the cache had (usage)."""
        self.on_embedded = on_embedded
        self.cache = cache
        self.embedder_for = embedder_for
        self.metrics = metrics
        self.query_batches = query_batches
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[str, str, str], threading.Event] = {}

    def embed(
        self, tenant: str, model: str, texts: Sequence[str], riders: Sequence[tuple[str, str]] = ()
    ) -> np.ndarray:
        """The vectors of `texts` for `tenant`, in order. `riders` are (tenant, text) pairs of other documents,
        possibly other tenants', sent in the same provider call to save calls; each is cached for its own tenant
        only, and none is returned."""
        embedder = self.embedder_for(model)
        wanted = [(tenant, text_sha256(t), t) for t in texts] + [(o, text_sha256(t), t) for o, t in riders]
        known = self._read(model, [(o, h) for o, h, _ in wanted])
        missing = {(o, h): t for o, h, t in wanted if (o, h) not in known}
        mine, others = self._claim(model, missing)
        try:
            if mine:
                fresh = dict(zip(mine, embedder.embed(list(mine.values()))))
                for owner, hashes in _by_tenant(fresh).items():
                    self.cache.put_vectors(owner, model, {h: fresh[(owner, h)] for h in hashes})
                    if self.on_embedded is not None:
                        self.on_embedded(owner, sum(estimated_tokens(mine[(owner, h)]) for h in hashes))
                known.update(fresh)
                if self.metrics:
                    self.metrics.count("ChunksEmbedded", len(mine))
                    self._meter(embedder, _texts_by_tenant(mine))
        finally:
            self._release(model, mine)
        if others:
            # Waited for only after our own texts are done and released, so two threads never wait on each other.
            with cpu_slots.away():
                for event in others.values():
                    event.wait()
            known.update(self._read(model, list(others)))
            lost = [k for k in others if k not in known and k[0] == tenant]
            if lost:  # the other thread's call failed: embed them here (a rider's text is its own document's job)
                known.update(zip(lost, self.embed(tenant, model, [missing[k] for k in lost])))
        logger.info(
            "embedded",
            extra={
                "model": model,
                "texts": len(texts),
                "riders": len(riders),
                "cache_hits": len(wanted) - len(missing),
                "embedded": len(mine),
            },
        )
        rows = [known[(tenant, h)] for _, h, _ in wanted[: len(texts)]]
        if not rows:
            return np.zeros((0, embedder.dimensions), dtype=np.float32)
        return np.vstack(rows).astype(np.float32, copy=False)

    def _read(self, model: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        """The cached vectors among (tenant, text hash) keys: one cache read per tenant."""
        found: dict[tuple[str, str], np.ndarray] = {}
        for owner, hashes in _by_tenant(keys).items():
            found.update(((owner, h), v) for h, v in self.cache.get_vectors(owner, model, hashes).items())
        return found

    def _claim(self, model: str, missing: dict[tuple[str, str], str]):
        """Splits the missing texts into those this thread embeds (now marked in flight) and the events of those
        another thread is embedding already."""
        with self._lock:
            others = {
                k: self._in_flight[(k[0], model, k[1])] for k in missing if (k[0], model, k[1]) in self._in_flight
            }
            mine = {k: t for k, t in missing.items() if k not in others}
            for owner, digest in mine:
                self._in_flight[(owner, model, digest)] = threading.Event()
        return mine, others

    def _release(self, model: str, mine: dict[tuple[str, str], str]) -> None:
        with self._lock:
            for owner, digest in mine:
                self._in_flight.pop((owner, model, digest)).set()

    def cached(self, tenant: str, model: str, texts: Sequence[str]) -> np.ndarray | None:
        """The vectors when every text is in the tenant's cache already, else None (no provider call)."""
        hashes = [text_sha256(t) for t in texts]
        known = self.cache.get_vectors(tenant, model, hashes)
        if any(h not in known for h in hashes):
            return None
        if not hashes:
            return np.zeros((0, self.embedder_for(model).dimensions), dtype=np.float32)
        return np.vstack([known[h] for h in hashes]).astype(np.float32, copy=False)

    def known(self, tenant: str, model: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors the tenant already has for `texts` under `model`, by text hash: its cache, then its imported
        vectors (what an import wrote into the index); never a provider call. Texts with neither are absent."""
        hashes = list(dict.fromkeys(text_sha256(t) for t in texts))
        found = self.cache.get_vectors(tenant, model, hashes)
        missing = [h for h in hashes if h not in found]
        if missing:
            found.update(self.cache.get_vectors(tenant, imported_vectors_key(model), missing))
        return found

    def _meter(self, embedder: Embedder, texts_by_tenant: dict[str, list[str]]) -> None:
        """Each tenant's usage of one provider call: its own texts (riders are their own tenants' usage)."""
        if self.metrics is None:
            return
        for owner, texts in texts_by_tenant.items():
            self.metrics.meter(owner, EMBEDDED_TEXTS, len(texts))
            if isinstance(embedder, TokenCounter):
                self.metrics.meter(owner, EMBEDDING_TOKENS, embedder.count_tokens(texts))

    def embed_query(self, model: str, text: str, tenant: str | None = None) -> np.ndarray:
        """Queries skip the cache on write: they rarely repeat and would only grow the table. They are embedded as
        queries (an instruction model's query prefix), never looked up among the passages' cached vectors. With
        `query_batches`, a query of `tenant` waits for the batch of that tenant's queries running now, if any, and
        is then embedded with the others that arrived meanwhile. A provider that fails is a dependency failure of
        the query (HTTP 503), not an ingest failure."""
        embedder = self.embedder_for(model)
        try:
            if self.query_batches is None or tenant is None:
                vector = embedder.embed_queries([text])[0]
            else:
                # A remote model's batch waits on the network: its riders give their CPU slots back meanwhile. A
                # local model's batch computes here, and a rider keeps its slot, so no more requests start than
                # the slots allow (measured: releasing them let batches of ~13 form, each waiting ~110 ms).
                remote = model.startswith("openai:")
                vector = self.query_batches.embed((tenant, model), text, embedder.embed_queries, remote=remote)
        except EmbeddingFailed as error:
            raise DependencyFailed(f"the embedding model {model} is unavailable: {error.message}") from error
        if self.metrics and tenant is not None:
            self._meter(embedder, {tenant: [text]})
        return vector


def _texts_by_tenant(texts: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for (owner, _), text in texts.items():
        grouped.setdefault(owner, []).append(text)
    return grouped


def _by_tenant(pairs) -> dict[str, list[str]]:
    """Text hashes grouped by tenant, each once, in first-seen order."""
    grouped: dict[str, dict[str, None]] = {}
    for owner, digest in pairs:
        grouped.setdefault(owner, {})[digest] = None
    return {owner: list(hashes) for owner, hashes in grouped.items()}
