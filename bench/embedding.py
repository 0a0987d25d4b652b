"""Local embedding speed: today's tuned path against the previous one, sides alternated in the same run.

`python -m bench.embedding` (also `make bench`'s `embedding` section). For MiniLM the two sides are the same model
and chunk texts through the same code, differing only in how batches run:

- before: one length-sorted batch of 8 at a time over all cores (onnxruntime intra-op threads = cores), what
  kindex did up to this change;
- after: the default (`MiniLMEmbedder()`): length-sorted batches of 8, one single-threaded batch per core at once.

Each repeat measures both sides (raw `embed(all chunk texts)`, then end to end: `put_document` until `indexed`
through the local worker, fresh data dir), alternating which side goes first, so machine noise hits both.
multilingual-e5-small is measured the same way (end to end and raw) without a before side (it is new).
Figures: `ingest_chunks_per_s_<model>` (after, reference before), `embed_chunks_per_s_<model>` (raw), and the
paired per-repeat ratios with min / median / max in `details`.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import Figure, SyntheticCorpus, drain_worker, local_deployment, log, median

TENANT = "default"
CHUNK_CHARS = 1000
MINILM = "local:all-MiniLM-L6-v2"
E5 = "local:multilingual-e5-small"
DOCUMENTS = 16
DOC_CHARS = 6400
REPEATS = 3
E5_REPEATS = 1  # e5 is ~4x slower; one repeat keeps the section within minutes


def _documents() -> list[tuple[str, str]]:
    corpus = SyntheticCorpus(seed=23)
    return [(f"doc-{i:05d}", corpus.document(DOC_CHARS)) for i in range(DOCUMENTS)]


def _chunk_texts(documents: list[tuple[str, str]]) -> list[str]:
    from kindex.text.chunking import chunk_text

    return [c.text for _, content in documents
            for c in chunk_text(content, method="maxChars", max_size=CHUNK_CHARS, overlap=0)]


def _embedder(model: str, side: str):
    if model == E5:
        from kindex.adapters.embedders.e5 import E5SmallEmbedder

        return E5SmallEmbedder()
    from kindex.adapters.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(workers=1) if side == "before" else MiniLMEmbedder()


def _one_side(model: str, side: str, documents: list[tuple[str, str]], texts: list[str], root: Path) -> dict:
    from kindex.adapters.embedders import registry
    from kindex.domain.models import CollectionInput, DocumentInput

    embedder = _embedder(model, side)
    embedder.embed(["warm up the session and its threads"])
    started = time.perf_counter()
    embedder.embed(texts)
    raw = len(texts) / (time.perf_counter() - started)
    with local_deployment(root, model) as services:
        # The pipeline asks the registry for the model: give it this side's instance.
        with registry._cache_lock:
            registry._cache[(model, None, None)] = embedder
        services.catalog.put_collection(TENANT, "bench", CollectionInput(
            allow_guests=True, embedding_model=model, chunking_max_size=CHUNK_CHARS, chunking_overlap_offset=0))
        started = time.perf_counter()
        for document_id, content in documents:
            services.catalog.put_document(TENANT, "bench", document_id, DocumentInput(title=document_id,
                                                                                      content=content))
        drain_worker()
        seconds = time.perf_counter() - started
        indexed = [services.metadata.get_document(TENANT, "bench", d) for d, _ in documents]
    registry.clear_embedder_cache()
    chunks = sum(d.chunk_count or 0 for d in indexed)
    if any(d.status.value != "indexed" for d in indexed) or chunks != len(texts):
        raise RuntimeError(f"embedding benchmark: {chunks} chunks indexed, {len(texts)} expected")
    return {"side": side, "raw_chunks_per_s": raw, "e2e_chunks_per_s": chunks / seconds,
            "load_average": os.getloadavg()[0]}


def _spread(values: list[float]) -> dict:
    return {"min": min(values), "median": median(values), "max": max(values)}


def run(repeats: int = REPEATS) -> list[Figure]:
    import functions.ingest  # noqa: F401  (import cost is cold start, measured elsewhere)

    documents = _documents()
    texts = _chunk_texts(documents)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="kindex-bench-embedding-") as tmp:
        runs: list[dict] = []
        for repeat in range(repeats):
            sides = ("before", "after") if repeat % 2 == 0 else ("after", "before")
            for side in sides:
                runs.append(_one_side(MINILM, side, documents, texts, Path(tmp) / f"minilm-{repeat}-{side}"))
                log(f"embedding minilm {side}: {runs[-1]}")
        before = [r for r in runs if r["side"] == "before"]
        after = [r for r in runs if r["side"] == "after"]
        paired = [a["e2e_chunks_per_s"] / b["e2e_chunks_per_s"] for a, b in zip(after, before)]
        paired_raw = [a["raw_chunks_per_s"] / b["raw_chunks_per_s"] for a, b in zip(after, before)]
        notes = (f"{DOCUMENTS} synthetic documents, {len(texts)} chunks (maxChars {CHUNK_CHARS}); {repeats} repeats, "
                 "sides alternated; before = one batch of 8 over all cores, after = one single-threaded batch of 8 "
                 "per core; medians")
        details = {"runs": runs, "paired_e2e_ratios": _spread(paired), "paired_raw_ratios": _spread(paired_raw)}
        figures.append(Figure("ingest_chunks_per_s_minilm_tuned", median([r["e2e_chunks_per_s"] for r in after]),
                              "chunks/s", "before: one batch over all cores",
                              median([r["e2e_chunks_per_s"] for r in before]), section="embedding", notes=notes,
                              details=details))
        figures.append(Figure("embed_chunks_per_s_minilm_tuned", median([r["raw_chunks_per_s"] for r in after]),
                              "chunks/s", "before: one batch over all cores",
                              median([r["raw_chunks_per_s"] for r in before]), section="embedding", notes=notes))
        e5_runs = [_one_side(E5, "after", documents, texts, Path(tmp) / f"e5-{repeat}")
                   for repeat in range(E5_REPEATS)]
        log(f"embedding e5: {e5_runs}")
        figures.append(Figure("ingest_chunks_per_s_e5small", median([r["e2e_chunks_per_s"] for r in e5_runs]),
                              "chunks/s", "MiniLM, tuned, same run", median([r["e2e_chunks_per_s"] for r in after]),
                              section="embedding", details={"runs": e5_runs},
                              notes=f"{len(texts)} chunks; {E5_REPEATS} repeat(s), after the MiniLM pairs"))
        figures.append(Figure("embed_chunks_per_s_e5small", median([r["raw_chunks_per_s"] for r in e5_runs]),
                              "chunks/s", "MiniLM, tuned, same run", median([r["raw_chunks_per_s"] for r in after]),
                              section="embedding"))
    return figures


def main() -> int:
    for figure in run():
        ratio = f"{figure.ratio:.3f}" if figure.ratio is not None else "-"
        print(f"{figure.name:36} {figure.value:10.2f} {figure.unit:10} ratio {ratio}  ({figure.reference_name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
