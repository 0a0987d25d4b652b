"""Query latency over HTTP against `kindex serve` (a subprocess) with the default local model, at 10k and 100k
chunks: every query is embedded by the server with that model, so its embedding time is in every figure.

- Both sizes are written straight into the data dir's stores before the server starts (chunk texts into the
  ChunkStore, vectors and text into the SearchIndex, `indexed` document records), because embedding 100k chunks
  through the pipeline would not fit the time budget. Chunks are drawn from a pool of real sentences; each chunk's
  vector is the normalised sum of its sentences' vectors from the same model, so only the pool is embedded.
- `ingest_http_chunks_per_s_hash`: 1,000 documents PUT over HTTP and indexed by the server's own worker (hash:384),
  the real ingest path over HTTP.

For each size: vector, keyword and hybrid mode, with the collection `public` and then with an `external`
rights check (a RightsServer on 127.0.0.1 with TCP_NODELAY, that verifies the HMAC signature and denies every
10th document, so the over-fetch path runs too). Each configuration: warm-up requests, then a fixed number of timed
requests from one client over a kept-alive connection; p50/p95/p99 of the wall time per request.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import (
    REPO,
    Figure,
    SyntheticCorpus,
    document_chunks,
    log,
    median,
    percentile,
    running_server,
    wait_indexed,
)
from kindex.settings import LOCAL_DEFAULT_MODEL

TENANT = "default"
COLLECTION = "bench"
MODEL = LOCAL_DEFAULT_MODEL  # the model a new local collection gets: its query embedding is part of every figure
INGEST_MODEL = "hash:384"  # the HTTP ingest figure measures the pipeline, not the model
SENTENCE_POOL = 4_000  # distinct real sentences embedded once with MODEL; chunks are drawn from them
MODES = ("vector", "keyword", "hybrid")
RIGHTS = ("public", "external")
CHUNK_CHARS = 1000
CHUNKS_PER_DOCUMENT = 10
# Timed requests per configuration; fewer at 100k, where each takes ~10x longer, to stay within the
# 15-minute budget of `make bench` on 2 cores (150 samples still put p99 between the two slowest).
REQUESTS = {"10k": 200, "100k": 150}
WARMUP = 15


def _queries(count: int) -> list[str]:
    corpus = SyntheticCorpus(seed=99)
    return [corpus.query() for _ in range(count)]


# -- building the data ------------------------------------------------------------------------------------------


def ingest_over_http(server, documents: int) -> dict:
    admin = server.session(server.admin_key)
    url = server.url(f"/v1/collections/{COLLECTION}")
    response = admin.put(
        url, json={"allow_guests": True, "chunking_max_size": CHUNK_CHARS, "chunking_overlap_offset": 0}
    )
    response.raise_for_status()
    corpus = SyntheticCorpus(seed=5)
    ids = [f"doc-{i:05d}" for i in range(documents)]
    started = time.perf_counter()
    for document_id in ids:
        # ~6.4k characters -> ~10 chunks of at most 1000 characters (cut at paragraph ends)
        admin.put(
            f"{url}/documents/{document_id}", json={"title": document_id, "content": corpus.document(6400)}
        ).raise_for_status()
    statuses = wait_indexed(admin, url, ids, timeout=900)
    seconds = time.perf_counter() - started
    chunks = sum(admin.get(f"{url}/documents/{d}").json()["chunk_count"] for d in ids)
    return {
        "documents": documents,
        "chunks": chunks,
        "failed": sum(s == "failed" for s in statuses.values()),
        "ingest_seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
    }


def write_directly(data_dir: Path, documents: int, model: str = MODEL, sentence_pool: int | None = None) -> dict:
    """Fill a data dir through the stores (not the pipeline); the server is started on it afterwards. Chunks are
    drawn from the first `sentence_pool` sentences (all by default), each embedded once with `model`."""
    from bench.common import local_deployment
    from kindex.adapters.embedders.registry import create_embedder
    from kindex.domain.models import CollectionInput, Document, DocumentStatus
    from kindex.domain.types import IndexRecord

    started = time.perf_counter()
    corpus = SyntheticCorpus(seed=6)
    sentences = corpus.sentences
    rng = np.random.default_rng(6)
    # Each chunk: consecutive picks of real sentences up to ~CHUNK_CHARS - 100 characters.
    plans: list[list[int]] = []
    for _ in range(documents * CHUNKS_PER_DOCUMENT):
        picked, size = [], 0
        while size < CHUNK_CHARS - 150:
            index = int(rng.integers(sentence_pool or len(sentences)))
            picked.append(index)
            size += len(sentences[index]) + 1
        plans.append(picked)
    used = sorted({i for plan in plans for i in plan})
    position = {sentence: row for row, sentence in enumerate(used)}
    sentence_vectors = np.asarray(create_embedder(model).embed([sentences[i] for i in used]), dtype=np.float32)
    with local_deployment(data_dir, model) as services:
        services.catalog.put_collection(
            TENANT,
            COLLECTION,
            CollectionInput(allow_guests=True, chunking_max_size=CHUNK_CHARS, chunking_overlap_offset=0),
        )
        pending: list[IndexRecord] = []
        for d in range(documents):
            document_id = f"doc-{d:06d}"
            rows = plans[d * CHUNKS_PER_DOCUMENT : (d + 1) * CHUNKS_PER_DOCUMENT]
            texts = [" ".join(sentences[i] for i in plan) for plan in rows]
            stored = document_chunks(TENANT, COLLECTION, document_id, texts)
            services.adapters.chunks.put_chunks(TENANT, stored)
            vectors = np.stack([sentence_vectors[[position[i] for i in plan]].sum(axis=0) for plan in rows])
            pending += [
                IndexRecord(
                    tenant=TENANT,
                    collection=COLLECTION,
                    document_id=document_id,
                    chunk_id=c.chunk_id,
                    vector=v,
                    text=c.text,
                )
                for c, v in zip(stored, vectors)
            ]
            if len(pending) >= 20_000 or d == documents - 1:
                services.adapters.search_index.upsert(model, pending)
                pending = []
            services.adapters.metadata.put_document(
                TENANT,
                Document(
                    id=document_id,
                    collection=COLLECTION,
                    title=f"Document {d}",
                    mimetype="text/plain",
                    status=DocumentStatus.INDEXED,
                    chunk_count=len(stored),
                    version=1,
                    indexed_version=1,
                    indexed_model=model,
                    indexed_config_version=1,
                ),
                create=True,
            )
    seconds = time.perf_counter() - started
    return {
        "documents": documents,
        "chunks": documents * CHUNKS_PER_DOCUMENT,
        "build_seconds": round(seconds, 1),
        "distinct_sentences_embedded": len(used),
    }


# -- measuring --------------------------------------------------------------------------------------------------


def measure(server, queries: list[str], rights_server, allowed: set[str], requests: int) -> dict:
    """{(rights, mode): {"ms": [...], "timing": {...}}} for every configuration."""
    admin = server.session(server.admin_key)
    url = server.url(f"/v1/collections/{COLLECTION}")
    results = {}
    for rights in RIGHTS:
        if rights == "external":
            secret = admin.post(server.url("/v1/rights-check-secret"))
            secret.raise_for_status()
            rights_server.secret = secret.json()["secret"].encode()
            rights_server.allowed = allowed
            admin.put(
                url,
                json={
                    "rights_check_method": "external",
                    "rights_check_method_configuration": {"url": rights_server.url, "timeout": 2},
                },
            ).raise_for_status()
        else:
            admin.put(url, json={"rights_check_method": "public"}).raise_for_status()
        for mode in MODES:
            session = server.session(server.admin_key)
            for query in queries[:WARMUP]:
                session.post(f"{url}/query", json={"query": query, "k": 10, "mode": mode, "user": "ann"})
            samples, parts, empty = [], {}, 0
            for query in queries[WARMUP : WARMUP + requests]:
                started = time.perf_counter()
                response = session.post(f"{url}/query", json={"query": query, "k": 10, "mode": mode, "user": "ann"})
                samples.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"query failed: {response.status_code} {response.text[:300]}")
                body = response.json()
                empty += not body["results"]
                for name, value in body["timing_ms"].items():
                    parts.setdefault(name, []).append(value)
            results[(rights, mode)] = {
                "ms": samples,
                "server_timing_ms_p50": {k: round(median(v), 2) for k, v in parts.items()},
                "empty_results": empty,
            }
            log(f"query {rights} {mode}: p50 {median(samples):.1f} ms, p99 {percentile(samples, 99):.1f} ms")
    if rights_server.bad_signatures:
        raise RuntimeError("the rights server saw bad signatures")
    return results


def _figures(size: str, results: dict, build: dict) -> list[Figure]:
    figures = []
    how = (
        f"written straight into the ChunkStore/SearchIndex (not through the pipeline; {MODEL} sentence-sum "
        f"vectors over {build['distinct_sentences_embedded']} real sentences)"
    )
    for (rights, mode), data in results.items():
        samples = data["ms"]
        suffix = f"{size}_{mode}" if rights == "public" else f"{size}_{mode}_external"
        notes = (
            f"{build['chunks']} chunks ({how}); {len(samples)} requests after {WARMUP} warm-up, one client, "
            f"keep-alive, k=10, queries embedded by the server with {MODEL}; rights {rights}"
            + ("; RightsServer denies every 10th document" if rights == "external" else "")
        )
        details = {"server_timing_ms_p50": data["server_timing_ms_p50"], "empty_results": data["empty_results"]}
        for q in (50, 95, 99):
            figures.append(
                Figure(
                    f"query_p{q}_ms_{suffix}",
                    percentile(samples, q),
                    "ms",
                    section="query latency",
                    notes=notes,
                    details=details if q == 50 else {},
                )
            )
    return figures


def run(sizes: dict[str, int] | None = None) -> tuple[list[Figure], dict]:
    """`sizes`: label -> documents of ~10 chunks (defaults: 10k = 1,000 documents, 100k = 10,000)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.support.rights_server import RightsServer

    sizes = sizes or {"10k": 1_000, "100k": 10_000}
    queries = _queries(WARMUP + max(REQUESTS.values()))
    figures: list[Figure] = []
    raw: dict = {}
    rights_server = RightsServer()
    # A tenant's endpoint answers headers and body without a 40 ms Nagle/delayed-ACK stall; the stdlib test
    # server would add one per kept-alive request, which would be measured as kindex's time.
    rights_server.httpd.RequestHandlerClass.disable_nagle_algorithm = True
    server_env = {"KINDEX_DEFAULT_EMBEDDING_MODEL": MODEL}
    try:
        with tempfile.TemporaryDirectory(prefix="kindex-bench-ingest-http-") as tmp:
            with running_server(Path(tmp) / "data", {"KINDEX_DEFAULT_EMBEDDING_MODEL": INGEST_MODEL}) as server:
                build = ingest_over_http(server, min(sizes.get("10k", 1_000), 1_000))
            log(f"ingest over HTTP: {build}")
            figures.append(
                Figure(
                    "ingest_http_chunks_per_s_hash",
                    build["chunks_per_s"],
                    "chunks/s",
                    section="ingest throughput",
                    notes=f"{build['documents']} documents, {build['chunks']} chunks PUT over "
                    f"HTTP into one collection until all indexed ({INGEST_MODEL})",
                )
            )
        for label, documents in sizes.items():
            with tempfile.TemporaryDirectory(prefix=f"kindex-bench-query-{label}-") as tmp:
                data_dir = Path(tmp) / "data"
                build = write_directly(data_dir, documents, sentence_pool=SENTENCE_POOL)
                log(f"query {label}: built {build}")
                with running_server(data_dir, server_env) as server:
                    allowed = {f"doc-{i:06d}" for i in range(documents) if i % 10}
                    results = measure(server, queries, rights_server, allowed, REQUESTS.get(label, 200))
                figures += _figures(label, results, build)
                raw[label] = {
                    "build": build,
                    "model": MODEL,
                    "samples_ms": {f"{r}/{m}": [round(x, 3) for x in v["ms"]] for (r, m), v in results.items()},
                }
    finally:
        rights_server.close()
    return figures, raw
