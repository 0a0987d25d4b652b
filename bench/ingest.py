"""Ingest throughput: chunks/s end to end in local mode against the raw embedder on the same chunks.

End to end = `catalog.put_document` for every document (source blob written, event queued) until the local
worker has drained the queue (ingest function: extract, chunk, embed through the cache, write chunk texts and
vectors, status `indexed`), in a fresh data directory each round so the embedding cache starts empty. Raw =
`embedder.embed(all chunk texts)` on the same embedder instance (the registry's, shared with the pipeline). The two
sides alternate (raw, e2e, e2e, raw, ...: `bench.common.alternate`) until e2e has worked at least 20 s, in at least
3 rounds (the raw reference runs beside it every round without prolonging the section); the figure is the median
of the e2e rounds, the ratio the median of the per-round e2e/raw ratios. An ingest cannot be faster than its own
embedder: a paired ratio above 1.05 marks the figure invalid (the sides did not do the same work, or
the machine was busy during one of them)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import Figure, SyntheticCorpus, alternate, drain_worker, local_deployment, log, median, spread

TENANT = "default"
CHUNK_CHARS = 1000
MIN_SECONDS = 20.0
# About 10 chunks of ~220 word pieces per document; sized so one round does a few seconds of work on 2 cores.
WORKLOADS = {
    "hash:384": {"documents": 1500, "doc_chars": 6400},
    # ~290 chunks, ~7 s a round: three rounds reach 20 s a side.
    "local:all-MiniLM-L6-v2": {"documents": 28, "doc_chars": 6400},
    # The local default (int8 bge-small): ~250 chunks, ~5 s a round at ~50 chunks/s on 2 cores.
    "local:bge-small-en-v1.5-q": {"documents": 24, "doc_chars": 6400},
}
SHORT = {"hash:384": "hash", "local:all-MiniLM-L6-v2": "minilm", "local:bge-small-en-v1.5-q": "bge_small_q"}
# The ratio of ingest to raw embedding above which the figure cannot be right (the pipeline embeds the same texts).
IMPOSSIBLE_RATIO = 1.05


def _documents(count: int, chars: int) -> list[tuple[str, str]]:
    corpus = SyntheticCorpus(seed=11)
    return [(f"doc-{i:05d}", corpus.document(chars)) for i in range(count)]


def _texts(documents: list[tuple[str, str]]) -> list[str]:
    from kindex.text.chunking import chunk_text

    return [
        c.text
        for _, content in documents
        for c in chunk_text(content, method="maxChars", max_size=CHUNK_CHARS, overlap=0)
    ]


def _raw(model: str, texts: list[str]) -> dict:
    from kindex.adapters.embedders.registry import create_embedder

    embedder = create_embedder(model)
    started = time.perf_counter()
    embedder.embed(texts)
    return {"chunks_per_s": len(texts) / (time.perf_counter() - started)}


def _end_to_end(model: str, documents: list[tuple[str, str]], expected: int, root: Path, embedder=None) -> dict:
    """Chunks/s from the first `put_document` until the worker has indexed all `documents` (fresh data dir `root`).
    With `embedder`, the pipeline embeds with that very instance (checked), not the registry's own."""
    from kindex.adapters.embedders import registry
    from kindex.domain.models import CollectionInput, DocumentInput

    with local_deployment(root, model) as services:
        if embedder is not None:  # the pipeline asks the registry for the model: give it this instance
            with registry._cache_lock:
                registry._cache[(model, None, None)] = embedder
        try:
            services.catalog.put_collection(
                TENANT,
                "ingest",
                CollectionInput(
                    allow_guests=True, embedding_model=model, chunking_max_size=CHUNK_CHARS, chunking_overlap_offset=0
                ),
            )
            started = time.perf_counter()
            for document_id, content in documents:
                services.catalog.put_document(
                    TENANT, "ingest", document_id, DocumentInput(title=document_id, content=content)
                )
            drain_worker()
            seconds = time.perf_counter() - started
            indexed = [services.adapters.metadata.get_document(TENANT, "ingest", d) for d, _ in documents]
            if embedder is not None and registry._cache.get((model, None, None)) is not embedder:
                raise RuntimeError(f"ingest benchmark: the pipeline did not embed with the given {model} instance")
        finally:
            if embedder is not None:
                registry.clear_embedder_cache()
    chunks = sum(d.chunk_count or 0 for d in indexed)
    if any(d.status.value != "indexed" for d in indexed) or chunks != expected:
        raise RuntimeError(f"ingest benchmark: {chunks} chunks indexed, {expected} expected")
    return {"chunks_per_s": expected / seconds}


def measure(
    model: str, documents: list[tuple[str, str]], *, min_seconds: float = MIN_SECONDS, min_rounds: int = 3
) -> dict:
    texts = _texts(documents)
    _raw(model, texts[:8])  # loads the model and its session before any round
    with tempfile.TemporaryDirectory(prefix="kindex-bench-ingest-") as tmp:
        rounds = iter(range(1_000))
        runs = alternate(
            {
                "raw": lambda: _raw(model, texts),
                "e2e": lambda: _end_to_end(model, documents, len(texts), Path(tmp) / f"r{next(rounds)}"),
            },
            min_seconds=min_seconds,
            min_rounds=min_rounds,
            timed=("e2e",),
        )
    raw = [r["chunks_per_s"] for r in runs["raw"]]
    e2e = [r["chunks_per_s"] for r in runs["e2e"]]
    return {
        "chunks": len(texts),
        "raw": raw,
        "e2e": e2e,
        "paired": [e / r for e, r in zip(e2e, raw)],
        "seconds": {side: sum(r["seconds"] for r in runs[side]) for side in runs},
    }


def run(models: tuple[str, ...] = tuple(WORKLOADS), min_seconds: float = MIN_SECONDS) -> list[Figure]:
    import functions.ingest  # noqa: F401  (import cost is cold start, measured elsewhere, not throughput)

    figures: list[Figure] = []
    for model in models:
        spec = WORKLOADS[model]
        log(
            f"ingest {model}: raw and e2e alternated until e2e worked {min_seconds:.0f} s (about "
            f"{2 * min_seconds:.0f} s)"
        )
        found = measure(model, _documents(spec["documents"], spec["doc_chars"]), min_seconds=min_seconds)
        short = SHORT.get(model, model.split(":")[-1])
        paired, e2e, raw = found["paired"], median(found["e2e"]), median(found["raw"])
        ratio = median(paired)
        notes = (
            f"{spec['documents']} synthetic documents, {found['chunks']} chunks (maxChars {CHUNK_CHARS}) per "
            f"round, {len(paired)} rounds alternating with the raw embedder (e2e {found['seconds']['e2e']:.0f} s,"
            f" raw {found['seconds']['raw']:.0f} s in all), fresh data dir each round; raw = one embed() call on "
            "all chunk texts, same embedder instance"
        )
        impossible = f"an ingest cannot be faster than its own embedder (paired ratio above {IMPOSSIBLE_RATIO})"
        figures.append(
            Figure(
                f"ingest_chunks_per_s_{short}",
                e2e,
                "chunks/s",
                f"raw embedder {model}",
                raw,
                ratio=round(ratio, 4),
                section="ingest throughput",
                notes=notes,
                details=found,
                spread=spread(found["e2e"]),
                ratio_spread=spread(paired),
            ).invalid_unless(max(paired) <= IMPOSSIBLE_RATIO, impossible)
        )
        figures.append(
            Figure(
                f"ingest_ratio_{short}",
                ratio,
                "ratio",
                "goal",
                0.9 if short == "minilm" else None,
                section="ingest throughput",
                spread=spread(paired),
                notes="median of the per-round end-to-end / raw embedder ratios; the goal applies to MiniLM",
            ).invalid_unless(max(paired) <= IMPOSSIBLE_RATIO, impossible)
        )
        log(
            f"ingest {model}: e2e {e2e:.1f} chunks/s, raw {raw:.1f} chunks/s, paired ratios "
            f"{', '.join(f'{p:.3f}' for p in paired)}"
        )
    return figures
