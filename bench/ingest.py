"""Ingest throughput: chunks/s end to end in local mode against the raw embedder on the same chunks.

End to end = `catalog.put_document` for every document (source blob written, event queued) until the local
worker has drained the queue (ingest function: extract, chunk, embed through the cache, write chunk texts and
vectors, status `indexed`). Raw = `embedder.embed(all chunk texts)` on the same embedder instance (its default
batch size, 8 for MiniLM), measured right before in the same repeat. Each repeat uses a fresh data dir so the
embedding cache starts empty."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import Figure, SyntheticCorpus, drain_worker, local_deployment, log, median

TENANT = "default"
CHUNK_CHARS = 1000
# Sized so one MiniLM repeat takes ~20-40 s on 2 cores: about 10 chunks of ~220 word pieces per document.
WORKLOADS = {
    "hash:384": {"documents": 200, "doc_chars": 6400, "repeats": 3},
    "local:all-MiniLM-L6-v2": {"documents": 16, "doc_chars": 6400, "repeats": 5},
}
SHORT = {"hash:384": "hash", "local:all-MiniLM-L6-v2": "minilm"}


def _documents(count: int, chars: int) -> list[tuple[str, str]]:
    corpus = SyntheticCorpus(seed=11)
    return [(f"doc-{i:05d}", corpus.document(chars)) for i in range(count)]


def _one_repeat(model: str, documents: list[tuple[str, str]], root: Path) -> dict:
    from kindex.domain.models import CollectionInput, DocumentInput
    from kindex.text.chunking import chunk_text

    texts = [c.text for _, content in documents
             for c in chunk_text(content, method="maxChars", max_size=CHUNK_CHARS, overlap=0)]
    with local_deployment(root, model) as services:
        embedder = services.embedder(model)
        started = time.perf_counter()
        embedder.embed(texts)
        raw_seconds = time.perf_counter() - started
        # Per document, as the pipeline calls it: isolates the cost of smaller calls from the pipeline's own.
        started = time.perf_counter()
        for _, content in documents:
            embedder.embed([c.text for c in chunk_text(content, method="maxChars", max_size=CHUNK_CHARS, overlap=0)])
        raw_per_document_seconds = time.perf_counter() - started

        services.catalog.put_collection(TENANT, "ingest", CollectionInput(
            allow_guests=True, embedding_model=model, chunking_max_size=CHUNK_CHARS, chunking_overlap_offset=0))
        started = time.perf_counter()
        for document_id, content in documents:
            services.catalog.put_document(TENANT, "ingest", document_id, DocumentInput(title=document_id,
                                                                                       content=content))
        drain_worker()
        e2e_seconds = time.perf_counter() - started
        indexed = [services.metadata.get_document(TENANT, "ingest", d) for d, _ in documents]
        chunks = sum(d.chunk_count or 0 for d in indexed)
        if any(d.status.value != "indexed" for d in indexed) or chunks != len(texts):
            raise RuntimeError(f"ingest benchmark: {chunks} chunks indexed, {len(texts)} expected")
    return {"chunks": len(texts), "raw_chunks_per_s": len(texts) / raw_seconds,
            "raw_per_document_chunks_per_s": len(texts) / raw_per_document_seconds,
            "e2e_chunks_per_s": len(texts) / e2e_seconds}


def run(models: tuple[str, ...] = tuple(WORKLOADS)) -> list[Figure]:
    import functions.ingest  # noqa: F401  (import cost is cold start, measured elsewhere, not throughput)

    figures: list[Figure] = []
    for model in models:
        spec = WORKLOADS[model]
        documents = _documents(spec["documents"], spec["doc_chars"])
        with tempfile.TemporaryDirectory(prefix="kindex-bench-ingest-") as tmp:
            with local_deployment(Path(tmp) / "warm", model) as services:
                services.embedder(model).embed(["warm up the model and its session"])  # loads the ONNX session
            repeats = [_one_repeat(model, documents, Path(tmp) / f"run{i}") for i in range(spec["repeats"])]
        raw = median([r["raw_chunks_per_s"] for r in repeats])
        raw_per_doc = median([r["raw_per_document_chunks_per_s"] for r in repeats])
        e2e = median([r["e2e_chunks_per_s"] for r in repeats])
        short = SHORT[model]
        notes = (f"{spec['documents']} synthetic documents, {repeats[0]['chunks']} chunks (maxChars {CHUNK_CHARS}), "
                 f"median of {spec['repeats']} repeats, fresh data dir each; raw = one embed() call on all chunk "
                 "texts, same embedder instance and batch size")
        paired = [r["e2e_chunks_per_s"] / r["raw_chunks_per_s"] for r in repeats]
        details = {"repeats": repeats, "paired_ratios": paired,
                   "raw_per_document_chunks_per_s": raw_per_doc}
        figures.append(Figure(f"ingest_chunks_per_s_{short}", e2e, "chunks/s", f"raw embedder {model}", raw,
                              section="ingest throughput", notes=notes, details=details))
        figures.append(Figure(f"ingest_ratio_{short}", e2e / raw, "ratio", "goal", 0.9 if short == "minilm" else None,
                              section="ingest throughput",
                              notes="end-to-end chunks/s / raw embedder chunks/s (medians); the goal applies to MiniLM;"
                                    f" paired per-repeat ratios {', '.join(f'{p:.3f}' for p in paired)}; raw embedder "
                                    f"called once per document as the pipeline does: {raw_per_doc:.1f} chunks/s"))
        log(f"ingest {model}: e2e {e2e:.1f} chunks/s, raw {raw:.1f} chunks/s (per document {raw_per_doc:.1f}), "
            f"ratio {e2e / raw:.3f}")
    return figures
